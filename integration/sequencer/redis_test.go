package sequencer

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// TestRedisSequencerForger: with the sequencer check on redislock, a forger
// cannot raise a mark above the current holder's token (Issued, holder+1,
// the clock, the clock bound: each refused as forged); the queued waiter then
// gets through.
func TestRedisSequencerForger(t *testing.T) {
	ctx := context.Background()
	db := redisserver.Shared(t)
	c := rdb(t, db.Addr)
	l, _ := redislock.New(c, redislock.Options{Prefix: db.Prefix})
	defer l.Close()
	check := token.All(token.ClockBound{}, token.SequencerCheck(redislock.NewSequencer(c, db.Prefix), token.SequencerOptions{}))
	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:", Check: check})
	h, err := l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "sku:1", h.Token()); err != nil {
		t.Fatal(err)
	}
	wch := make(chan locks.Lease, 1)
	go func() {
		w, err := l.Acquire(ctx, "sku:1", 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		wch <- w
	}()
	time.Sleep(200 * time.Millisecond)
	iss, _ := l.Issued(ctx, "sku:1")
	refused := 0
	for _, f := range []token.Token{h.Token() + 1, iss, iss + 1, token.Token(time.Now().UnixMicro()), token.ClockBound{}.Bound()} {
		if err := fence.Claim(ctx, "sku:1", f); errors.Is(err, token.ErrForged) {
			refused++
		} else {
			t.Errorf("forged %d (holder %d): %v", f, h.Token(), err)
		}
	}
	_ = h.Release(ctx)
	w := <-wch
	if err := fence.Claim(ctx, "sku:1", w.Token()); err != nil {
		t.Errorf("waiter %d after the forger: %v", w.Token(), err)
	}
	_ = w.Release(ctx)
	t.Logf("forged tokens refused: %d of 5", refused)
}

// TestSequencerCacheAfterCounterRecovery: SequencerCheck caches the highest
// answer per lock and admits every token at or below it without asking. The
// documented way out of a counter healed high (delete the counter key, reset
// the marks to the new holder's token, drop the cached answer with
// SequencerChecker.Forget) makes the answers decrease; after Forget a forged
// token above the new holder's is refused, not admitted from the cache.
func TestSequencerCacheAfterCounterRecovery(t *testing.T) {
	ctx := context.Background()
	db := redisserver.Shared(t)
	c := rdb(t, db.Addr)
	l, _ := redislock.New(c, redislock.Options{Prefix: db.Prefix})
	defer l.Close()
	check := token.SequencerCheck(redislock.NewSequencer(c, db.Prefix), token.SequencerOptions{})
	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:", Check: check})
	const high = token.Token(1 << 60) // a poisoned mark healed into the counter
	if _, err := l.Heal(ctx, "sku:1", high); err != nil {
		t.Fatal(err)
	}
	le, err := l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "sku:1", le.Token()); err != nil { // caches high+1
		t.Fatal(err)
	}
	_ = le.Release(ctx)
	// The operator's recovery: delete the counter (and its heal offset, in
	// the same key), take the new grant's token, reset the mark to it.
	if err := c.Del(ctx, db.Prefix+"{sku:1}:tok").Err(); err != nil {
		t.Fatal(err)
	}
	le, err = l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(ctx)
	if _, err := fence.Reset(ctx, "sku:1", le.Token()); err != nil {
		t.Fatal(err)
	}
	check.Forget("sku:1") // the documented last step: drop the cached answer
	cur, _ := redislock.NewSequencer(c, db.Prefix).Current(ctx, "sku:1")
	forged := le.Token() + 1_000_000_000
	err = fence.Claim(ctx, "sku:1", forged)
	honest := fence.Claim(ctx, "sku:1", le.Token())
	t.Logf("after recovery: holder %d, Sequencer.Current %d; forged %d → %v; holder then → %v", le.Token(), cur, forged, err, honest)
	if err == nil {
		t.Errorf("forged token %d above Sequencer.Current %d admitted from the check's cache; the honest holder is locked out again: %v", forged, cur, honest)
	}
}

// TestRedisFenceThroughReplica: a redislock Fence pointed at a replica
// accepts nothing.
func TestRedisFenceThroughReplica(t *testing.T) {
	ctx := context.Background()
	m := redisserver.New(t)
	rep := redisserver.NewReplica(t, m)
	if err := rep.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	mc := rdb(t, m.Addr())
	rc := rdb(t, rep.Replica.Addr())
	mf := redislock.NewFence(mc, redislock.FenceOptions{Check: token.NoCheck()})
	rf := redislock.NewFence(rc, redislock.FenceOptions{Check: token.NoCheck()})
	if err := mf.Claim(ctx, "r", 10); err != nil {
		t.Fatal(err)
	}
	if err := rep.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for _, tk := range []token.Token{10, 11, math.MaxUint64} {
		if err := rf.Claim(ctx, "r", tk); err == nil {
			accepted++
			t.Errorf("claim %d through the replica accepted", tk)
		}
	}
	if err := rf.Claim(ctx, "r", 9); !errors.Is(err, token.ErrStale) {
		t.Errorf("stale 9 through the replica: %v", err)
	}
}

// heldSequencer asks the real Sequencer and, for the first lookup after
// hold, keeps its answer back until released.
type heldSequencer struct {
	token.Sequencer
	once    sync.Once
	asked   chan struct{} // closed when the held lookup has its answer
	release chan struct{}
}

func hold(s token.Sequencer) *heldSequencer {
	return &heldSequencer{Sequencer: s, asked: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldSequencer) Current(ctx context.Context, key string) (token.Token, error) {
	t, err := h.Sequencer.Current(ctx, key)
	h.once.Do(func() {
		close(h.asked)
		<-h.release
	})
	return t, err
}

// TestSequencerForgetDuringLookup: a forger's claim whose sequencer lookup
// reads the counter before the operator's recovery (delete the healed
// counter, reset the mark to the new holder's token, Forget) and returns
// after it. The old, higher answer is neither used nor cached: the claim
// in flight and a later one with the same token are refused as forged,
// the mark stays at the new holder's token and the holder gets through.
func TestSequencerForgetDuringLookup(t *testing.T) {
	ctx := context.Background()
	db := redisserver.Shared(t)
	c := rdb(t, db.Addr)
	l, _ := redislock.New(c, redislock.Options{Prefix: db.Prefix})
	defer l.Close()
	seq := hold(redislock.NewSequencer(c, db.Prefix))
	check := token.SequencerCheck(seq, token.SequencerOptions{CacheTTL: time.Hour})
	fence := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix + "fence:", Check: check})
	const high = token.Token(1 << 60) // a poisoned mark healed into the counter
	if _, err := l.Heal(ctx, "sku:1", high); err != nil {
		t.Fatal(err)
	}
	le, err := l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = le.Release(ctx)
	// Between the recovered counter (the clock) and the healed one.
	forged := token.Token(time.Now().UnixMicro()) + 1_000_000_000_000
	inFlight := make(chan error, 1)
	go func() { inFlight <- fence.Claim(ctx, "sku:1", forged) }()
	<-seq.asked // the forger's lookup has read the healed counter
	if err := c.Del(ctx, db.Prefix+"{sku:1}:tok").Err(); err != nil {
		t.Fatal(err)
	}
	le, err = l.Acquire(ctx, "sku:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(ctx)
	if _, err := fence.Reset(ctx, "sku:1", le.Token()); err != nil {
		t.Fatal(err)
	}
	check.Forget("sku:1")
	close(seq.release)
	errInFlight := <-inFlight
	errLater := fence.Claim(ctx, "sku:1", forged)
	honest := fence.Claim(ctx, "sku:1", le.Token())
	t.Logf("holder %d, forged %d: claim in flight across Forget → %v; later → %v; holder → %v", le.Token(), forged, errInFlight, errLater, honest)
	if !errors.Is(errInFlight, token.ErrForged) {
		t.Errorf("the claim whose lookup was in flight across Forget: %v, want forged", errInFlight)
	}
	if !errors.Is(errLater, token.ErrForged) {
		t.Errorf("a later claim of %d: %v, want forged (the answer from before Forget was cached)", forged, errLater)
	}
	if honest != nil {
		t.Errorf("the new holder %d is locked out: %v", le.Token(), honest)
	}
}
