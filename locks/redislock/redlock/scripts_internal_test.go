package redlock

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// The scripts' decimal helpers, run by a real Redis, agree with Go's
// uint64 comparison where doubles do not: around 2^53, at digit-count
// changes, and at the ceiling; canon accepts exactly the canonical
// decimals in 1..MaxInt64.
func TestScriptDecimals(t *testing.T) {
	db := redisserver.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: db.Addr})
	defer c.Close()
	ctx := context.Background()
	var nums []uint64
	for _, base := range []uint64{1, 9, 10, 999_999_999, 1_000_000_000, 9_999_999_999, 10_000_000_000, 1 << 53, 1_796_135_955_236_292, math.MaxInt64 - 2} {
		for d := range uint64(5) {
			nums = append(nums, base+d)
		}
	}
	nums = append(nums, 1<<53+1<<30, 1<<53-1<<30)
	lt := redis.NewScript(source("decimal") + `return lt(ARGV[2], ARGV[1]) and 1 or 0`)
	for _, a := range nums {
		for _, b := range nums {
			got, err := lt.Run(ctx, c, nil, strconv.FormatUint(a, 10), strconv.FormatUint(b, 10)).Int()
			if err != nil {
				t.Fatal(err)
			}
			if want := a > b; (got == 1) != want {
				t.Errorf("lt(%d, %d) = %d, want %v", b, a, got, want)
			}
		}
	}
	canon := redis.NewScript(source("decimal") + `return canon(ARGV[1], MAX) and 1 or 0`)
	for s, want := range map[string]bool{
		"0": false, "1": true, "9007199254740993": true, "9223372036854775807": true,
		"9223372036854775808": false, "18446744073709551615": false, "99999999999999999999": false,
		"": false, "01": false, "-1": false, "+1": false, "1.0": false, "1e3": false, " 1": false, "1 ": false, "abc": false,
	} {
		got, err := canon.Run(ctx, c, nil, s).Int()
		if err != nil {
			t.Fatal(err)
		}
		if (got == 1) != want {
			t.Errorf("canon(%q) = %d, want %v", s, got, want)
		}
	}
}

// lead(v, now), digit by digit in Lua, agrees with uint64 arithmetic: v −
// 1 − now when v > now + 1, else 0, across digit-count changes, 2^53 and
// the ceiling.
func TestScriptLead(t *testing.T) {
	db := redisserver.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: db.Addr})
	defer c.Close()
	ctx := context.Background()
	var nums []uint64
	for _, base := range []uint64{0, 1, 9, 10, 99, 100, 999_999_999, 1_000_000_000, 1 << 53, 1_796_135_955_236_292, math.MaxInt64 - 2} {
		for d := range uint64(3) {
			nums = append(nums, base+d)
		}
	}
	lead := redis.NewScript(source("decimal", "counter") + `return lead(ARGV[1], ARGV[2])`)
	for _, v := range nums {
		for _, now := range nums {
			got, err := lead.Run(ctx, c, nil, strconv.FormatUint(v, 10), strconv.FormatUint(now, 10)).Text()
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(0)
			if v > now+1 {
				want = v - 1 - now
			}
			if got != strconv.FormatUint(want, 10) {
				t.Errorf("lead(%d, %d) = %s, want %d", v, now, got, want)
			}
		}
	}
}
