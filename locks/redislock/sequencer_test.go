package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// Current answers the holder's token while the lock is held, and while it
// is free a bound at least every token granted and at most the next; its
// answers never go down — across hand-overs, expiry, FLUSHALL, a restart
// without persistence, and a heal below the clock.
func TestSequencerNeverDecreases(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	c := newClient(t, srv.Addr())
	l := newLocker(t, c, redislock.Options{})
	w := newLocker(t, newClient(t, srv.Addr()), redislock.Options{})
	seq := redislock.NewSequencer(newClient(t, srv.Addr()), "")
	ctx := ctxFor(t, time.Minute)
	var last, granted token.Token // the last answer; the highest token granted
	answer := func(what string, held locks.Lease) token.Token {
		t.Helper()
		var cur token.Token
		var err error
		for range 50 { // the client reconnects after a restart
			if cur, err = seq.Current(ctx, "k"); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: Current: %v", what, err)
		}
		if cur < last {
			t.Fatalf("%s: Current went down from %d to %d", what, last, cur)
		}
		if cur < granted {
			t.Fatalf("%s: Current %d is below the granted %d", what, cur, granted)
		}
		if held != nil && cur != held.Token() {
			t.Fatalf("%s: Current %d while the holder has %d", what, cur, held.Token())
		}
		if lc, err := l.Current(ctx, "k"); err != nil || lc < cur {
			t.Fatalf("%s: Locker.Current = %d, %v after the Sequencer's %d", what, lc, err, cur)
		}
		last = cur
		return cur
	}
	grant := func(what string, lease locks.Lease) {
		t.Helper()
		if lease.Token() <= last {
			t.Fatalf("%s: granted %d, not above the last answer %d", what, lease.Token(), last)
		}
		granted = lease.Token()
		answer(what, lease)
	}
	acquire := func(what string, ttl time.Duration) locks.Lease {
		t.Helper()
		var lease locks.Lease
		var err error
		for range 50 {
			if lease, err = l.Acquire(ctx, "k", ttl); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		grant(what, lease)
		return lease
	}

	answer("never locked", nil)
	a := acquire("first grant", time.Minute)
	// Hand-overs, twice.
	for range 2 {
		got := make(chan acquired, 1)
		go func() {
			lease, err := w.Acquire(ctx, "k", time.Minute)
			got <- acquired{lease, err}
		}()
		waitFor(t, func() bool { return c.ZCard(ctx, "fenceguard:lock:{k}:q").Val() == 1 })
		answer("a waiter queued", a)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h := <-got
		if h.err != nil {
			t.Fatal(h.err)
		}
		grant("handed over", h.lease)
		a = h.lease
		w, l = l, w
	}
	_ = a.Release(ctx)
	answer("released", nil)

	// Expiry.
	acquire("short lease", 20*time.Millisecond)
	waitFor(t, func() bool { return c.Exists(ctx, "fenceguard:lock:{k}").Val() == 0 })
	answer("expired", nil)
	acquire("after expiry", time.Minute)

	// FLUSHALL while held: lock and counter gone.
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	answer("after FLUSHALL", nil)
	acquire("after FLUSHALL", time.Minute)

	// A restart without persistence while held.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(true); err != nil {
		t.Fatal(err)
	}
	answer("after a restart without persistence", nil)
	held := acquire("after the restart", time.Minute)
	_ = held.Release(ctx)

	// A heal below the clock, with no counter: the counter alone would
	// answer 5.
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Heal(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	answer("healed below the clock", nil)
	held = acquire("after the low heal", time.Minute)

	// A heal far above while held: the holder's token still, then, once
	// free, the healed clock floor (the healed counter, moved on with the
	// clock since the heal), then the next grant above it.
	up := last + 1e12
	if _, err := l.Heal(ctx, "k", up); err != nil {
		t.Fatal(err)
	}
	answer("held, the counter healed above", held)
	_ = held.Release(ctx)
	if cur := answer("released, the counter healed above", nil); cur < up || cur > up+token.Token(time.Minute.Microseconds()) {
		t.Fatalf("Current %d when free, want the healed counter %d plus the µs since the heal", cur, up)
	}
	acquire("after the high heal", time.Minute)
}

// The forgery scenario of the issue (there on etcd), on Redis: holder H,
// waiters W1 and W2 queued. A resource checking tokens with
// SequencerCheck(NewSequencer(...)) refuses H's token + 1 and anything
// higher, accepts H's own; after the hand-over W1's token passes, then
// W2's: nobody honest is locked out. The bound the package had before,
// Issued, admits tokens above H's (it is the clock), so a forger could lock
// H out.
func TestSequencerCheckRefusesForgery(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	c := newClient(t, db.Addr)
	ctx := ctxFor(t, time.Minute)
	lockers := make([]*redislock.Locker, 3)
	for i := range lockers {
		lockers[i] = newLocker(t, newClient(t, db.Addr), redislock.Options{Prefix: db.Prefix + "lock:"})
	}
	h, err := lockers[0].Acquire(ctx, "sku:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiters := make([]chan acquired, 2)
	for i := range waiters {
		waiters[i] = make(chan acquired, 1)
		go func() {
			lease, err := lockers[i+1].Acquire(ctx, "sku:42", time.Minute)
			waiters[i] <- acquired{lease, err}
		}()
		waitFor(t, func() bool { return c.ZCard(ctx, db.Prefix+"lock:{sku:42}:q").Val() == int64(i+1) })
	}

	check := token.SequencerCheck(redislock.NewSequencer(c, db.Prefix+"lock:"), token.SequencerOptions{})
	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:",
		Check: token.All(token.ClockBound{}, check)})
	forged := func(holder locks.Lease) {
		t.Helper()
		for _, tok := range []token.Token{holder.Token() + 1, holder.Token() + 1e6, token.MaxInt64, 1<<64 - 1} {
			var fe *token.ForgedError
			if err := check.Check(ctx, "sku:42", tok); !errors.As(err, &fe) || fe.Bound != holder.Token() {
				t.Fatalf("SequencerCheck(%d) with the holder at %d = %v, want a ForgedError bound at the holder's token", tok, holder.Token(), err)
			}
			if err := fence.Claim(ctx, "sku:42", tok); !errors.Is(err, token.ErrForged) {
				t.Fatalf("Claim(%d) with the holder at %d = %v, want ErrForged", tok, holder.Token(), err)
			}
		}
		if err := fence.Claim(ctx, "sku:42", holder.Token()); err != nil {
			t.Fatalf("the holder's own Claim(%d) = %v", holder.Token(), err)
		}
		if hw, err := fence.HighWater(ctx, "sku:42"); err != nil || hw != holder.Token() {
			t.Fatalf("mark %d, %v; want the holder's %d", hw, err, holder.Token())
		}
	}
	// The control: Issued bounds nothing the forger needs.
	if is, err := lockers[0].Issued(ctx, "sku:42"); err != nil || is <= h.Token() {
		t.Fatalf("Issued = %d, %v with the holder at %d", is, err, h.Token())
	}
	forged(h)
	for i, holder := 0, h; i < len(waiters); i++ {
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next := <-waiters[i]
		if next.err != nil {
			t.Fatal(next.err)
		}
		if next.lease.Token() <= holder.Token() {
			t.Fatalf("W%d's token %d is not above %d", i+1, next.lease.Token(), holder.Token())
		}
		forged(next.lease)
		holder = next.lease
		if i == len(waiters)-1 {
			_ = holder.Release(ctx)
		}
	}
}

func TestSequencerBadInput(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	if _, err := redislock.NewSequencer(newClient(t, db.Addr), db.Prefix).Current(ctx, ""); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("Current of the empty key = %v, want ErrInvalidArgument", err)
	}
	if _, err := redislock.NewSequencer(nil, "").Current(ctx, "k"); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf("Current on a nil client = %v, want ErrInvalidArgument", err)
	}
	if _, err := redislock.NewSequencer(newClient(t, "127.0.0.1:1"), "").Current(ctx, "k"); err == nil {
		t.Error("Current with no server answered")
	}
}

// A Sequencer never answers from a replica: its script is refused there
// (READONLY, reported as ErrReplica), so a resource whose Sequencer client
// points at a replica refuses claims instead of checking them against the
// replica's lagging copy. Control: the same script without the shebang runs
// on the replica and, replication stalled, answers the replica's clock
// (the lock looks free there), above the holder's token — a forged token
// in between would pass token.SequencerCheck and lock the holder out.
func TestSequencerRefusesReplica(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	rep := redisserver.NewReplica(t, srv)
	ctx := ctxFor(t, 30*time.Second)
	cm := newClient(t, srv.Addr())
	cr := newClient(t, rep.Replica.Addr())
	l := newLocker(t, cm, redislock.Options{})
	if err := rep.Link.Blackhole(); err != nil {
		t.Fatal(err)
	}
	h, err := l.TryAcquire(ctx, "sku", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	time.Sleep(5 * time.Millisecond) // the replica's clock moves past the grant

	// Control: the flagless script answers from the replica's copy.
	s, err := redislock.CurrentWithoutShebang(ctx, cr, "", "sku")
	if err != nil {
		t.Fatalf("control: the script without the shebang on the replica: %v", err)
	}
	stale, err := token.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if stale <= h.Token() {
		t.Fatalf("control: the replica answered %d, not above the holder's token %d: the control no longer shows the stale answer", stale, h.Token())
	}
	t.Logf("control: without the shebang the replica answers %d, the holder's token is %d", stale, h.Token())

	// The Sequencer on the replica refuses; on the master it answers the holder.
	if _, err := redislock.NewSequencer(cr, "").Current(ctx, "sku"); !errors.Is(err, redislock.ErrReplica) {
		t.Errorf("Sequencer on the replica: %v, want ErrReplica", err)
	}
	if got, err := redislock.NewSequencer(cm, "").Current(ctx, "sku"); err != nil || got != h.Token() {
		t.Errorf("Sequencer on the master: %d, %v; want the holder's %d", got, err, h.Token())
	}
	// At a resource: the forgery between the holder's token and the stale
	// answer is refused, and nothing is admitted through the replica.
	forged := h.Token() + (stale-h.Token())/2 + 1
	f := &token.MemoryFence{Check: token.SequencerCheck(redislock.NewSequencer(cr, ""), token.SequencerOptions{})}
	if err := f.Claim(ctx, "sku", forged); err == nil {
		t.Errorf("a fence checking with the replica's Sequencer admitted the forged token %d (holder's %d)", forged, h.Token())
	}
	good := &token.MemoryFence{Check: token.SequencerCheck(redislock.NewSequencer(cm, ""), token.SequencerOptions{})}
	if err := good.Claim(ctx, "sku", forged); err == nil {
		t.Errorf("the master's Sequencer admitted the forged token %d", forged)
	}
	if err := good.Claim(ctx, "sku", h.Token()); err != nil {
		t.Errorf("the master's Sequencer refused the holder: %v", err)
	}
}
