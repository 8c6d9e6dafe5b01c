package redlock_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// Without heals or skew (the five nodes share this host's clock) the
// offsets stay at 0 and every token is at most the clock + 1: the
// write-back's lead is taken from the clock at the write-back, after every
// node answered, so the spread of the acquire's answers is not added to
// the offsets at each grant (taken from each node's own acquire reading,
// it was: after 300 grants the tokens ran milliseconds ahead of the
// clocks, and a resource's ClockBound would end up refusing them).
func TestOffsetsDoNotCreep(t *testing.T) {
	cs, raws, prefix := sharedNodes(t)
	l := newLocker(t, cs, redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	const key = "creep"
	toks := grants(t, ctx, l, key, 300)
	tm, err := raws[0].Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if last, now := toks[len(toks)-1], token.Token(tm.UnixMicro()); last > now+1 {
		t.Errorf("after %d grants the last token %d is %d µs ahead of the clock", len(toks), last, last-now)
	}
	for i, raw := range raws {
		if v := raw.Get(ctx, prefix+"{"+key+"}:tok").Val(); strings.Contains(v, ":") {
			t.Errorf("node %d: counter %q after %d grants on one clock, want no offset", i, v, len(toks))
		}
	}
}

// A node whose clock runs ahead (simulated: an offset of an hour on node
// 0) mints grant 0's token t0, written back to all five; the write-back
// carries node 0's lead to the others' offsets. Then node 0 restarts
// without persistence; while it is down grant A reads t0 on nodes 1–4 and writes back
// t0 + 1 to 1–3 only (4 cut off: its keys put back as they were);
// node 2, in the intersection, restarts too; B wins 0, 2 and 4 while A
// holds 1 and 3. Node 4 floors t0 by its clock + the carried lead, and
// B's token is above A's. Control: the same with the offsets deleted after
// grant 0 (no carry) — node 4 reports t0, B's token is t0 + 1 again, and a
// fence would admit both holders.
func TestOffsetCarriesFastClock(t *testing.T) {
	for _, carry := range []bool{true, false} {
		t.Run(fmt.Sprint("carry=", carry), func(t *testing.T) {
			cs, raws, prefix := sharedNodes(t)
			l := newLocker(t, cs, redlock.Options{Prefix: prefix})
			ctx := ctxFor(t, time.Minute)
			key := fmt.Sprint("fast-", carry)
			const hour = token.Token(3600_000_000)
			lockKey, counter := prefix+"{"+key+"}", prefix+"{"+key+"}:tok"
			if err := raws[0].Set(ctx, counter, "1:"+hour.String(), time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			t0 := grants(t, ctx, l, key, 1)[0]
			for i, raw := range raws[1:] {
				v := raw.Get(ctx, counter).Val()
				c, d, _ := strings.Cut(v, ":")
				n, err := strconv.ParseUint(d, 10, 64)
				if err != nil || c != t0.String() || token.Token(n) > hour || token.Token(n) < hour-token.Token(time.Second.Microseconds()) {
					t.Errorf("node %d: counter %q (%v) after token %d from a clock an hour ahead", i+1, v, err, t0)
				}
			}
			if !carry {
				for _, raw := range raws {
					raw.Set(ctx, counter, t0.String(), time.Hour)
				}
			}
			// Node 0 restarts without persistence, and while it is down
			// (simulated: its lock held by another grant) A wins 1–4.
			raws[0].Del(ctx, counter)
			raws[0].Set(ctx, lockKey, "down", 20*time.Second)
			before := raws[4].Get(ctx, counter).Val()
			a, err := l.TryAcquire(ctx, key, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Release(ctx)
			raws[4].Del(ctx, lockKey)                    // A's write-back never reached node 4:
			raws[4].Set(ctx, counter, before, time.Hour) // its counter as before A
			raws[0].Del(ctx, lockKey)                    // node 0 is back, empty
			raws[2].Del(ctx, lockKey, counter)           // node 2 restarts
			b, err := l.TryAcquire(ctx, key, 20*time.Second)
			if err != nil {
				t.Fatalf("B, on nodes 0, 2, 4: %v", err)
			}
			defer b.Release(ctx)
			t.Logf("t0 %d, A %d, B %d", t0, a.Token(), b.Token())
			if carry && b.Token() <= a.Token() {
				t.Fatalf("B's token %d while A holds %d", b.Token(), a.Token())
			}
			if !carry && b.Token() != a.Token() {
				t.Fatalf("control, no carry: B's token %d, A's %d; want them equal (the hole the carry closes)", b.Token(), a.Token())
			}
		})
	}
}

// A malformed offset (in the counter's key, after its ':') fails its node
// like a malformed counter: a CounterError with the whole value, nothing
// taken there; on a majority the acquire fails and Heal repairs it.
func TestMalformedOffset(t *testing.T) {
	cs, raws, prefix := sharedNodes(t)
	l := newLocker(t, cs, redlock.Options{Prefix: prefix})
	ctx := ctxFor(t, time.Minute)
	for _, bad := range []string{"0", "abc", "007", "-5", "1.5", "9223372036854775808", "", "1:2"} {
		key := "malformed-offset-" + bad
		counter := prefix + "{" + key + "}:tok"
		first := grants(t, ctx, l, key, 1)[0]
		bad := first.String() + ":" + bad
		for _, raw := range raws[:3] {
			if err := raw.Set(ctx, counter, bad, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		_, err := l.Acquire(ctx, key, 5*time.Second)
		var qe *redlock.QuorumError
		var ce *redlock.CounterError
		if !errors.As(err, &qe) || !errors.As(err, &ce) || ce.Value != bad || ce.Key != counter {
			t.Fatalf("counter %q on three nodes: %v; want a QuorumError with a CounterError for %s", bad, err, counter)
		}
		if _, err := l.Issued(ctx, key); !errors.As(err, &ce) {
			t.Fatalf("Issued with offset %q on three nodes: %v", bad, err)
		}
		for i, raw := range raws {
			if n, _ := raw.Exists(ctx, prefix+"{"+key+"}").Result(); n != 0 {
				t.Fatalf("offset %q: node %d holds a lock after the failed acquire", bad, i)
			}
		}
		if err := l.Heal(ctx, key, first); err != nil {
			t.Fatalf("Heal over offset %q: %v", bad, err)
		}
		if next := grants(t, ctx, l, key, 1)[0]; next <= first {
			t.Fatalf("after Heal over offset %q: token %d after %d", bad, next, first)
		}
	}
}

// A lease renewed past CounterIdle keeps its key's counter on the nodes:
// after a heal above the clock, the grant that follows it is minted above
// it. Control: the same lease not renewed (its TTL covers the wait) loses
// the counters with their idle expiry, and the next grant falls back to the
// bare clock, below the healed token — refused as stale by a fence (fails
// closed) until healed again.
func TestRenewKeepsCounter(t *testing.T) {
	for _, renew := range []bool{true, false} {
		t.Run(fmt.Sprint("renew=", renew), func(t *testing.T) {
			cs, raws, prefix := sharedNodes(t)
			l := newLocker(t, cs, redlock.Options{Prefix: prefix, CounterIdle: time.Second})
			ctx := ctxFor(t, time.Minute)
			key := fmt.Sprint("renewed-", renew)
			tm, err := raws[0].Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Heal(ctx, key, token.Token(tm.Add(time.Hour).UnixMicro())); err != nil {
				t.Fatal(err)
			}
			a, err := l.Acquire(ctx, key, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for range 8 { // 2 s: twice CounterIdle
				time.Sleep(250 * time.Millisecond)
				if renew {
					if err := a.Renew(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			kept := 0
			for _, raw := range raws {
				if n, _ := raw.Exists(ctx, prefix+"{"+key+"}:tok").Result(); n == 1 {
					kept++
				}
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b := grants(t, ctx, l, key, 1)[0]
			t.Logf("renew %v: counters kept on %d of 5 nodes; A %d, next %d", renew, kept, a.Token(), b)
			if renew && (kept != 5 || b <= a.Token()) {
				t.Errorf("renewed past CounterIdle: counters on %d of 5 nodes, next token %d after %d", kept, b, a.Token())
			}
			if !renew && (kept != 0 || b >= a.Token()) {
				t.Errorf("control, not renewed: counters on %d of 5 nodes, next token %d after %d; want them gone and the token below", kept, b, a.Token())
			}
		})
	}
}
