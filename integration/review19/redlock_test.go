package review19

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/internal/servers"
	"github.com/fenceguard/fenceguard/locks/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// The redislock heal defect, on redlock (found while fixing it there; not
// fixed in redlock). redlock's token is max over the nodes won of max(counter,
// node clock) + 1, written back to a majority. Its doc: when the node shared
// by two majorities loses its counter (a restart without persistence), "the
// clock floor takes over ... Only a lost intersection together with a clock
// behind ... can make a token go back" — and then the resource refuses the
// lower token. After Heal the counters are above every clock, so the lost
// intersection alone suffices, and the token does not go back: it repeats.
// Grant A wins nodes 0, 1, 2 (3 and 4 cut off: its write-back reaches 0–2
// only); node 2 restarts without persistence (simulated: its keys of the
// lock deleted); B wins 2, 3, 4 while A still holds 0 and 1 — the double
// grant restarts allow — and reads the healed counter on 3 and 4: its token
// is A's, and a fence admits both. Control: the same without the heal — node
// 2's clock floor gives B a larger token, and the fence refuses A.
func TestDefectRedlockHealedCounterRepeatsTokenAfterNodeRestart(t *testing.T) {
	defect(t, "redlock: after Heal (counters above the clocks) a node restart in the intersection of two majorities re-issues the same token to a second holder; every fence admits both")
	runRedlockRestart(t, true)
}

// Held: the control of the redlock defect — without a heal, the same node
// restart gives the second holder a larger token (the clock floor).
func TestHeldRedlockNodeRestartTokenGrows(t *testing.T) {
	runRedlockRestart(t, false)
}

func runRedlockRestart(t *testing.T, heal bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbs := servers.RedisN(t, 5)
	var raw []*redis.Client
	var nodes []redlock.Client
	for _, d := range dbs {
		c := redis.NewClient(&redis.Options{Addr: d.Addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		raw, nodes = append(raw, c), append(nodes, c)
	}
	prefix := dbs[0].Prefix
	l, err := redlock.New(nodes, redlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	const key = "k"
	lockKey, counter := prefix+"{"+key+"}", prefix+"{"+key+"}:tok"
	if heal {
		if err := l.Heal(ctx, key, token.Token(time.Now().Add(time.Minute).UnixMicro())); err != nil {
			t.Fatal(err)
		}
	}
	// What nodes 3 and 4 have before A's grant.
	before := map[int]string{}
	for _, i := range []int{3, 4} {
		before[i] = raw[i].Get(ctx, counter).Val()
	}
	a, err := l.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A's grant as it is when 3 and 4 were cut off: not there at all.
	for _, i := range []int{3, 4} {
		raw[i].Del(ctx, lockKey, counter)
		if before[i] != "" {
			raw[i].Set(ctx, counter, before[i], time.Hour)
		}
	}
	// Node 2 restarts without persistence.
	raw[2].Del(ctx, lockKey, counter)
	fence := &token.MemoryFence{Check: token.NoCheck()}
	if err := fence.Claim(ctx, "res", a.Token()); err != nil {
		t.Fatal(err)
	}
	b, err := l.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatalf("B, on nodes 2–4: %v", err)
	}
	defer b.Release(ctx)
	bErr := fence.Claim(ctx, "res", b.Token())
	aErr := fence.Claim(ctx, "res", a.Token())
	t.Logf("healed %v: A's token %d, B's %d; B's claim %v, A's claim after it %v", heal, a.Token(), b.Token(), bErr, aErr)
	if b.Token() <= a.Token() {
		t.Errorf("B (nodes 2–4, while A holds 0 and 1) got token %d, not above A's %d", b.Token(), a.Token())
	}
	if aErr == nil {
		t.Errorf("the fence admitted A (token %d) after B (token %d) claimed: two holders admitted", a.Token(), b.Token())
	}
}
