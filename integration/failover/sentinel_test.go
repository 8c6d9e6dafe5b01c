package failover

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

func sentinelClient(t *testing.T, s *redisserver.Sentinel) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName(),
		SentinelAddrs: s.SentinelAddrs(),
		MaxRetries:    -1,
		DialTimeout:   time.Second,
		ReadTimeout:   2 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newLocker(t *testing.T, c redislock.Client) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, redislock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// acquireRetry acquires key, retrying through the errors of a failover.
func acquireRetry(ctx context.Context, t *testing.T, l locks.Locker, key string, ttl time.Duration) locks.Lease {
	t.Helper()
	var last error
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		le, err := l.Acquire(actx, key, ttl)
		cancel()
		if err == nil {
			return le
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("acquire %q: %v", key, last)
	return nil
}

// TestSentinelHealedTokenGrowsAcrossFailover: a Sentinel failover that loses
// a grant ("a grant the replica had not received ... is granted again"),
// after the counter was healed above the server clock the way the package
// says to heal it (to a resource's StaleError.Current). A heal records an
// offset d (healed value − clock) and tokens are max(counter + 1, clock + d),
// growing with the clock: the new primary's later clock takes the next token
// past the lost one, so a fence refuses the first holder once the second
// wrote.
func TestSentinelHealedTokenGrowsAcrossFailover(t *testing.T) {
	runHealedFailover(t, false)
}

// TestSentinelFailoverTokenGrows: across a Sentinel failover that loses the
// last grant, the next grant of a key gets a larger token, and a fence
// refuses the first holder once the second wrote — for a key whose counter
// follows the clock and for a key healed above the clock (the heal offset).
// The control is a third key of the same run healed without the offset (the
// counter raised by hand): its tokens come from counter + 1, the token
// repeats across the failover and the fence admits both holders.
func TestSentinelFailoverTokenGrows(t *testing.T) {
	runHealedFailover(t, true)
}

// runHealedFailover runs the failover; control adds the check of the key
// healed without the offset.
func runHealedFailover(t *testing.T, control bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := redisserver.NewSentinel(t)
	ca := sentinelClient(t, s)
	la := newLocker(t, ca)
	const ttl = 20 * time.Second // long: the lost grant stays "live" for its holder

	// A resource fenced in memory with the default clock bound; a forger
	// raises its mark one minute ahead of the clock (within DefaultSkew).
	fence := &token.MemoryFence{}
	forged := token.Token(time.Now().Add(time.Minute).UnixMicro())
	if err := fence.Claim(ctx, "res", forged); err != nil {
		t.Fatalf("forged claim within the skew: %v", err)
	}
	// An honest holder is refused and heals, as the package says.
	var se *token.StaleError
	for _, key := range []string{"healed", "legacy"} {
		h0 := acquireRetry(ctx, t, la, key, ttl)
		err := fence.Claim(ctx, "res", h0.Token())
		if !errors.As(err, &se) {
			t.Fatalf("honest claim after the forged mark: %v, want a StaleError", err)
		}
		if _, err := la.Heal(ctx, key, se.Current); err != nil {
			t.Fatal(err)
		}
		if err := h0.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The control key: healed without the offset.
	// (the offset stripped from the counter's key, "counter:offset")
	lk := redislock.DefaultPrefix + "{legacy}:tok"
	lv, _, _ := strings.Cut(ca.Get(ctx, lk).Val(), ":")
	if err := ca.Set(ctx, lk, lv, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}

	// Replication stalls; A is granted the locks on the primary only.
	if err := s.StallReplication(ctx); err != nil {
		t.Fatal(err)
	}
	a := acquireRetry(ctx, t, la, "healed", ttl)
	a2 := acquireRetry(ctx, t, la, "plain", ttl)
	a3 := acquireRetry(ctx, t, la, "legacy", ttl)
	if err := fence.Claim(ctx, "res", a.Token()); err != nil {
		t.Fatalf("A's first claim: %v", err)
	}
	mf2 := &token.MemoryFence{}
	if err := mf2.Claim(ctx, "res2", a2.Token()); err != nil {
		t.Fatalf("A's claim on res2: %v", err)
	}
	mf3 := &token.MemoryFence{}
	if err := mf3.Claim(ctx, "res3", a3.Token()); err != nil {
		t.Fatalf("A's claim on res3: %v", err)
	}
	if _, _, err := s.KillPrimary(ctx); err != nil {
		t.Fatal(err)
	}

	// B, another process, on the new primary.
	cb := sentinelClient(t, s)
	lb := newLocker(t, cb)
	b := acquireRetry(ctx, t, lb, "healed", ttl)
	b2 := acquireRetry(ctx, t, lb, "plain", ttl)
	b3 := acquireRetry(ctx, t, lb, "legacy", ttl)
	t.Logf("healed key: A token %d (before the failover), B token %d (after)", a.Token(), b.Token())
	t.Logf("plain key:  A token %d, B token %d", a2.Token(), b2.Token())
	t.Logf("legacy key (healed without offset, the control): A token %d, B token %d", a3.Token(), b3.Token())
	defer func() {
		_ = b.Release(ctx)
		_ = b2.Release(ctx)
		_ = b3.Release(ctx)
	}()

	// Without a heal, B's token is larger and A is refused.
	if b2.Token() <= a2.Token() {
		t.Errorf("plain key: B's token %d is not above A's %d", b2.Token(), a2.Token())
	}
	if err := mf2.Claim(ctx, "res2", b2.Token()); err != nil {
		t.Errorf("plain key: B's claim: %v", err)
	}
	if err := mf2.Claim(ctx, "res2", a2.Token()); !errors.As(err, &se) {
		t.Errorf("plain key: A's claim after B's: %v, want StaleError", err)
	}
	// Healed: the same, through the offset.
	if b.Token() <= a.Token() {
		t.Errorf("healed key: the grant after the failover got token %d, the lost grant had %d: not larger", b.Token(), a.Token())
	}
	if err := fence.Claim(ctx, "res", b.Token()); err != nil {
		t.Errorf("healed key: B's claim: %v", err)
	}
	if err := fence.Claim(ctx, "res", a.Token()); err == nil {
		t.Errorf("healed key: the fence admitted the stale holder A (token %d) after B (token %d) had written: two holders admitted at once", a.Token(), b.Token())
	}
	if !control {
		return
	}
	// The control: without the offset the token repeats and the fence
	// admits both holders.
	if b3.Token() != a3.Token() {
		t.Errorf("control: the legacy key's token changed (%d → %d); the control no longer shows the repeat", a3.Token(), b3.Token())
	}
	if err := mf3.Claim(ctx, "res3", b3.Token()); err != nil {
		t.Errorf("control: B's claim: %v", err)
	}
	if err := mf3.Claim(ctx, "res3", a3.Token()); err != nil {
		t.Errorf("control: A's claim after B's was refused (%v); the control no longer shows both admitted", err)
	} else {
		t.Logf("control (healed without offset): token after the failover %d, lost grant's %d: repeated, both holders admitted", b3.Token(), a3.Token())
	}
}

// TestSentinelSequencerOnReplicaRefuses: a Sequencer on a plain client on
// the replica (as read scaling does), replication lagging. The replica would
// see the lock free and answer its clock, far above the holder's token, so a
// forged token in between would pass SequencerCheck and lock the holder out
// ("a forger can at most act as the current holder"). The Sequencer's script
// is refused on a read-only replica (READONLY, redislock.ErrReplica), so the
// check through the replica refuses every claim. Control: the same check on
// the primary refuses the forgery and admits the holder.
func TestSentinelSequencerOnReplicaRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s := redisserver.NewSentinel(t)
	cp := sentinelClient(t, s)
	l := newLocker(t, cp)
	rep, err := s.Replica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cr := redis.NewClient(&redis.Options{Addr: rep.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = cr.Close() })

	if err := s.StallReplication(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := l.TryAcquire(ctx, "sku", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release(context.Background())
	time.Sleep(1100 * time.Millisecond) // the clocks move past the forgery
	forged := h.Token() + 1_000_000     // one second after the grant

	onPrimary := &token.MemoryFence{Check: token.All(token.ClockBound{},
		token.SequencerCheck(redislock.NewSequencer(cp, ""), token.SequencerOptions{}))}
	onReplica := &token.MemoryFence{Check: token.All(token.ClockBound{},
		token.SequencerCheck(redislock.NewSequencer(cr, ""), token.SequencerOptions{}))}

	pc, _ := redislock.NewSequencer(cp, "").Current(ctx, "sku")
	rc, rerr := redislock.NewSequencer(cr, "").Current(ctx, "sku")
	t.Logf("holder's token %d; Sequencer.Current on the primary %d, on the replica %d (err %v); forged %d", h.Token(), pc, rc, rerr, forged)

	// Control: on the primary the forgery is refused and the holder admitted.
	var fe *token.ForgedError
	if err := onPrimary.Claim(ctx, "sku", forged); !errors.As(err, &fe) {
		t.Errorf("control: the primary's Sequencer let forged token %d through: %v", forged, err)
	}
	if err := onPrimary.Claim(ctx, "sku", h.Token()); err != nil {
		t.Errorf("control: holder refused on the primary's check: %v", err)
	}

	err = onReplica.Claim(ctx, "sku", forged)
	if err == nil {
		if herr := onReplica.Claim(ctx, "sku", h.Token()); herr != nil {
			t.Errorf("through the replica's Sequencer the forged token %d (holder's %d) was admitted and the honest holder is now refused: %v", forged, h.Token(), herr)
		} else {
			t.Errorf("through the replica's Sequencer the forged token %d was admitted", forged)
		}
	}
}
