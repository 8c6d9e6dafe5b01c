package tokens

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// TestRedlockHealedTokenGrowsAfterNodeRestart: redlock after a Heal above
// every node's clock, and a restart without persistence of the node two
// majorities share. Grant A wins nodes 0, 1, 2 (3 and 4 cut off: its
// write-back reaches 0–2 only); node 2 restarts (its keys of the lock
// deleted); B wins 2, 3, 4 while A still holds 0 and 1 — the double grant
// restarts allow — and reads the healed counter on 3 and 4. Heal records the
// target's lead over each node's clock (the clock offset), so 3 and 4 floor
// the counter by clock + lead, which has grown since A: B's token is larger
// than A's, and a fence that saw B refuses A.
func TestRedlockHealedTokenGrowsAfterNodeRestart(t *testing.T) {
	runRedlockRestart(t, healed)
}

// TestRedlockHealWithoutOffsetRepeatsToken is the control of the test above:
// with the offsets deleted after the heal, the heal's counters above the
// clock make B's token repeat A's, and a fence admits both.
func TestRedlockHealWithoutOffsetRepeatsToken(t *testing.T) {
	runRedlockRestart(t, healedNoOffset)
}

// TestRedlockNodeRestartTokenGrows: without a heal, the same node restart
// gives the second holder a larger token (the clock floor).
func TestRedlockNodeRestartTokenGrows(t *testing.T) {
	runRedlockRestart(t, notHealed)
}

type healMode int

const (
	notHealed healMode = iota
	healed
	healedNoOffset // healed, then the offsets deleted
)

func runRedlockRestart(t *testing.T, heal healMode) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbs := redisserver.SharedN(t, 5)
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
	lockKey, counter := prefix+"{"+key+"}", prefix+"{"+key+"}:tok" // counter: "c" or "c:offset"
	// healTook bounds how far apart the nodes read their clocks for the
	// heal's offsets (target − clock): B must come at least that long
	// after A for the clock + offset of nodes 3 and 4 to have grown past
	// A's, as it has when a node really restarts.
	var healTook time.Duration
	if heal != notHealed {
		start := time.Now()
		if err := l.Heal(ctx, key, token.Token(time.Now().Add(time.Minute).UnixMicro())); err != nil {
			t.Fatal(err)
		}
		healTook = time.Since(start)
	}
	if heal == healedNoOffset {
		for _, c := range raw {
			v, _, _ := strings.Cut(c.Get(ctx, counter).Val(), ":")
			c.Set(ctx, counter, v, time.Hour)
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
	time.Sleep(healTook + time.Millisecond)
	b, err := l.TryAcquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatalf("B, on nodes 2–4: %v", err)
	}
	defer b.Release(ctx)
	bErr := fence.Claim(ctx, "res", b.Token())
	aErr := fence.Claim(ctx, "res", a.Token())
	t.Logf("heal mode %d: A's token %d, B's %d; B's claim %v, A's claim after it %v", heal, a.Token(), b.Token(), bErr, aErr)
	if heal == healedNoOffset {
		// The control: the defence removed, the token repeats and the
		// fence admits both holders.
		if b.Token() != a.Token() || aErr != nil {
			t.Errorf("without the offsets: A's token %d, B's %d, A's claim after B's %v; want the token repeated and both admitted", a.Token(), b.Token(), aErr)
		}
		return
	}
	if b.Token() <= a.Token() {
		t.Errorf("B (nodes 2–4, while A holds 0 and 1) got token %d, not above A's %d", b.Token(), a.Token())
	}
	if aErr == nil {
		t.Errorf("the fence admitted A (token %d) after B (token %d) claimed: two holders admitted", a.Token(), b.Token())
	}
}
