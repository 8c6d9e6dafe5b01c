package redislock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// TestScriptCost measures the server's cost per call of the acquire and
// the release script on uncontended keys whose counters exist (the steady
// state of the many-keys benchmark): usec_per_call of EVALSHA from INFO
// commandstats, and the server process's CPU time. It runs on a Redis of
// its own: FENCEGUARD_PERF_ADDR's when that is set (it flushes it and
// resets its stats), else one the harness starts — there it checks that
// every script call succeeds and logs the costs. FENCEGUARD_PERF_ROUNDS
// sets the rounds (5; 1, over 2,000 keys instead of 20,000, on the harness's Redis), and
// FENCEGUARD_PERF_BSM a directory holding bsm/redislock's obtain.lua and
// release.lua, to run them interleaved as a reference. To compare two
// versions of the scripts, add the other as a variant.
//
//	FENCEGUARD_PERF_ADDR=127.0.0.1:6399 go test -run TestScriptCost -v .
func TestScriptCost(t *testing.T) {
	t.Parallel()
	addr, rounds, n := os.Getenv("FENCEGUARD_PERF_ADDR"), 5, 20000
	if addr == "" {
		addr, rounds, n = redisserver.New(t).Addr(), 1, 2000
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	defer c.Close()
	ctx := context.Background()
	const workers = 16
	k := make([]lockKeys, n)
	for i := range k {
		k[i] = keysFor("perf:", strconv.Itoa(i))
	}
	vals := make([]string, n)
	each := func(f func(i int) error) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					if err := f(i); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	type variant struct {
		name             string
		acquire, release *redis.Script
		acqKeys, relKeys func(k lockKeys) []string
	}
	all := func(k lockKeys) []string { return k.all }
	variants := []variant{{"fenceguard", acquireScript, releaseScript, all, all}}
	if dir := os.Getenv("FENCEGUARD_PERF_BSM"); dir != "" {
		ob, err := os.ReadFile(dir + "/obtain.lua")
		if err != nil {
			t.Fatal(err)
		}
		rl, err := os.ReadFile(dir + "/release.lua")
		if err != nil {
			t.Fatal(err)
		}
		one := func(k lockKeys) []string { return []string{"bsm:" + k.all[0]} }
		variants = append(variants, variant{"bsm", redis.NewScript(string(ob)), redis.NewScript(string(rl)), one, one})
	}
	var cur variant
	acquire := func(i int) error {
		if cur.name == "bsm" {
			vals[i] = "v" + strconv.Itoa(i) + "xxxxxxxxxxxxxxxxxxxxxx"
			return cur.acquire.Run(ctx, c, cur.acqKeys(k[i]), vals[i], 22, "10000").Err()
		}
		res, err := cur.acquire.Run(ctx, c, cur.acqKeys(k[i]), "id"+strconv.Itoa(i), 10000, 3600000).Slice()
		if err != nil {
			return err
		}
		if res[0].(int64) != 1 {
			return fmt.Errorf("not granted: %v", res)
		}
		vals[i] = "id" + strconv.Itoa(i) + "|" + res[1].(string)
		return nil
	}
	release := func(i int) error {
		if cur.name == "bsm" {
			return cur.release.Run(ctx, c, cur.relKeys(k[i]), vals[i]).Err()
		}
		n, err := cur.release.Run(ctx, c, cur.relKeys(k[i]), vals[i], k[i].channel, 3600000).Int()
		if err == nil && n != 1 {
			return fmt.Errorf("key %d not released", i)
		}
		return err
	}
	stat := func() float64 {
		s := c.Info(ctx, "commandstats").Val()
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "cmdstat_evalsha:") {
				i := strings.Index(l, "usec_per_call=")
				f := strings.SplitN(l[i+len("usec_per_call="):], ",", 2)[0]
				v, _ := strconv.ParseFloat(strings.TrimSpace(f), 64)
				return v
			}
		}
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(strings.SplitN(c.Info(ctx, "server").Val(), "process_id:", 2)[1], "\n", 2)[0]))
	cpu := func() float64 { // the server's CPU time in µs
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		u, _ := strconv.Atoi(f[11])
		s, _ := strconv.Atoi(f[12])
		return float64(u+s) * 1e6 / 100
	}
	c.FlushAll(ctx)
	for _, cur = range variants {
		for range 2 { // counters and offsets exist, as in the steady state
			each(acquire)
			each(release)
		}
	}
	if r, err := strconv.Atoi(os.Getenv("FENCEGUARD_PERF_ROUNDS")); err == nil {
		rounds = r
	}
	acq, rel, acqCPU, relCPU := make([]float64, len(variants)), make([]float64, len(variants)), make([]float64, len(variants)), make([]float64, len(variants))
	for r := range rounds * len(variants) {
		v := r % len(variants)
		cur = variants[v]
		c.ConfigResetStat(ctx)
		c0 := cpu()
		each(acquire)
		acqCPU[v] += cpu() - c0
		acq[v] += stat()
		c.ConfigResetStat(ctx)
		c0 = cpu()
		each(release)
		relCPU[v] += cpu() - c0
		rel[v] += stat()
	}
	r, nf := float64(rounds), float64(n)
	for v, x := range variants {
		t.Logf("%s: usec_per_call: acquire %.2f, release %.2f, cycle %.2f; server CPU µs per call: acquire %.2f, release %.2f, cycle %.2f",
			x.name, acq[v]/r, rel[v]/r, (acq[v]+rel[v])/r, acqCPU[v]/r/nf, relCPU[v]/r/nf, (acqCPU[v]+relCPU[v])/r/nf)
	}
}

// BenchmarkCycle is one uncontended Acquire and Release after another, on
// keys whose counters exist: the client's allocations per cycle
// (-benchmem). FENCEGUARD_PERF_ADDR as for TestScriptCost.
func BenchmarkCycle(b *testing.B) {
	addr := os.Getenv("FENCEGUARD_PERF_ADDR")
	if addr == "" {
		b.Skip("FENCEGUARD_PERF_ADDR not set")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	l, err := New(c, Options{Prefix: "perfb:"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	names := make([]string, 1000)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s, err := l.Acquire(ctx, names[i%len(names)], 10e9)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
