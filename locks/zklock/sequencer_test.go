package zklock_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// queue is a holder H of key with waiters W1 and W2 queued behind it,
// each on a locker (a session) of its own, and the tokens the waiters will
// get: their znodes' Czxids, fixed when they queued.
type queue struct {
	h            locks.Lease
	w1, w2       <-chan locks.Lease
	w1Tok, w2Tok token.Token
	issuer       *zklock.Locker
}

func newQueue(t *testing.T, ctx context.Context, z *zkserver.DB, prefix, key string) *queue {
	t.Helper()
	c := inspect(t, z.Addrs)
	dir := prefix + "/" + url.PathEscape(key) // the Locker's escape, for these keys
	q := &queue{issuer: newLocker(t, z.Addrs, prefix)}
	var err error
	if q.h, err = q.issuer.Acquire(ctx, key, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	wait := func(n int) <-chan locks.Lease {
		got := make(chan locks.Lease, 1)
		l := newLocker(t, z.Addrs, prefix)
		go func() {
			lease, err := l.Acquire(ctx, key, 10*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", n, err)
				close(got)
				return
			}
			got <- lease
		}()
		eventually(t, 10*time.Second, "waiter queued", func() bool { return len(childrenOf(t, c, dir)) == n+1 })
		return got
	}
	q.w1 = wait(1)
	q.w2 = wait(2)
	var czxids []token.Token
	for _, name := range childrenOf(t, c, dir) {
		_, st, err := c.Get(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		czxids = append(czxids, token.Token(st.Czxid))
	}
	slices.Sort(czxids)
	if czxids[0] != q.h.Token() {
		t.Fatalf("queue %v: the holder's token is %d", czxids, q.h.Token())
	}
	q.w1Tok, q.w2Tok = czxids[1], czxids[2]
	return q
}

func childrenOf(t *testing.T, c *zk.Conn, dir string) []string {
	t.Helper()
	ch, _, err := c.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func receive(t *testing.T, ch <-chan locks.Lease, who string) locks.Lease {
	t.Helper()
	select {
	case lease, ok := <-ch:
		if !ok {
			t.Fatalf("%s: no lease", who)
		}
		return lease
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not granted", who)
	}
	return nil
}

func forged(t *testing.T, err error, what string) {
	t.Helper()
	var fe *token.ForgedError
	if !errors.As(err, &fe) || !errors.Is(err, token.ErrForged) {
		t.Fatalf("%s: %v, want a ForgedError", what, err)
	}
}

// The sequencer answers the current holder's token, whatever is queued
// behind it: the check refuses every waiter's token and Issued (the
// highest token handed out), accepts the holder's, and lets each waiter
// through once its turn came.
func TestSequencerCheckBoundsByTheHolder(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	ctx := ctxFor(t, time.Minute)
	const key = "sku/42" // escaped like the Locker does: one znode, %2F
	q := newQueue(t, ctx, z, prefix, key)
	seq := zklock.NewSequencer(inspect(t, z.Addrs), prefix)
	check := token.SequencerCheck(seq, token.SequencerOptions{})
	issued, err := q.issuer.Issued(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if issued < q.w2Tok {
		t.Fatalf("Issued %d below W2's token %d", issued, q.w2Tok)
	}
	var answers []token.Token
	current := func() token.Token {
		t.Helper()
		cur, err := seq.Current(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, cur)
		return cur
	}
	if cur := current(); cur != q.h.Token() {
		t.Fatalf("Current = %d with H (%d) holding, W1 %d and W2 %d queued", cur, q.h.Token(), q.w1Tok, q.w2Tok)
	}
	if err := check.Check(ctx, key, q.h.Token()); err != nil {
		t.Fatalf("H's token refused: %v", err)
	}
	for _, tok := range []token.Token{q.w1Tok, q.w2Tok, issued, q.h.Token() + 1} {
		forged(t, check.Check(ctx, key, tok), "a token above H's while H holds")
	}

	if err := q.h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w1 := receive(t, q.w1, "W1")
	if w1.Token() != q.w1Tok {
		t.Fatalf("W1 granted %d, queued with Czxid %d", w1.Token(), q.w1Tok)
	}
	if cur := current(); cur != q.w1Tok {
		t.Fatalf("Current = %d with W1 (%d) holding", cur, q.w1Tok)
	}
	if err := check.Check(ctx, key, w1.Token()); err != nil {
		t.Fatalf("W1's token refused while W1 holds: %v", err)
	}
	forged(t, check.Check(ctx, key, q.w2Tok), "W2's token while W1 holds")

	if err := w1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2 := receive(t, q.w2, "W2")
	if err := check.Check(ctx, key, w2.Token()); err != nil {
		t.Fatalf("W2's token refused while W2 holds: %v", err)
	}
	if err := w2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Free: a bound at least the last grant's token, below the next one's.
	idle := current()
	if idle < w2.Token() {
		t.Fatalf("Current = %d with the lock free after granting %d", idle, w2.Token())
	}
	next, err := q.issuer.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= idle {
		t.Fatalf("next grant %d not above the idle bound %d", next.Token(), idle)
	}
	if cur := current(); cur != next.Token() {
		t.Fatalf("Current = %d with %d holding", cur, next.Token())
	}
	_ = next.Release(ctx)
	if !slices.IsSorted(answers) {
		t.Fatalf("Current went back: %v", answers)
	}
}

// Issue 15 §3, second bullet, end to end with a MemoryFence as the
// resource: holder H, waiters W1 and W2 queued, a forger presents
// Issued() — the highest token handed out, W2's or above. With the
// sequencer check the forger is refused and both waiters get through in
// turn. The control: with Issued as the bound (the check that existed
// before), the forger is accepted and both waiters are then refused.
func TestSequencerCheckStopsTheForger(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	// Two forgers present Issued(): while H holds (the newest waiter's
	// token then) and just after H released (its deletion's zxid, above
	// every waiter's).
	type outcome struct{ forgers, w1, w2 error }
	run := func(t *testing.T, key string, check func(issuer *zklock.Locker) token.Check) outcome {
		ctx := ctxFor(t, time.Minute)
		q := newQueue(t, ctx, z, prefix, key)
		resource := &token.MemoryFence{Check: check(q.issuer), Logger: discardLog}
		if err := resource.Claim(ctx, key, q.h.Token()); err != nil {
			t.Fatalf("H's claim: %v", err)
		}
		forge := func() error {
			issued, err := q.issuer.Issued(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			return resource.Claim(ctx, key, issued)
		}
		var o outcome
		f1 := forge()
		if err := q.h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		f2 := forge()
		o.forgers = errors.Join(f1, f2)
		if (f1 == nil) != (f2 == nil) {
			t.Fatalf("one forger in, one out: %v, %v", f1, f2)
		}
		w1 := receive(t, q.w1, "W1")
		o.w1 = resource.Claim(ctx, key, w1.Token())
		if err := w1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w2 := receive(t, q.w2, "W2")
		o.w2 = resource.Claim(ctx, key, w2.Token())
		_ = w2.Release(ctx)
		return o
	}

	t.Run("Sequencer", func(t *testing.T) {
		seq := zklock.NewSequencer(inspect(t, z.Addrs), prefix)
		o := run(t, "seq", func(*zklock.Locker) token.Check {
			return token.All(token.ClockBound{}, token.SequencerCheck(seq, token.SequencerOptions{}))
		})
		forged(t, o.forgers, "the forgers' Issued() tokens")
		if o.w1 != nil || o.w2 != nil {
			t.Fatalf("waiters refused after the forgers: W1 %v, W2 %v", o.w1, o.w2)
		}
	})
	t.Run("IssuedBoundControl", func(t *testing.T) {
		o := run(t, "issued", func(l *zklock.Locker) token.Check {
			return token.CheckFunc(func(ctx context.Context, r string, tok token.Token) error {
				bound, err := l.Issued(ctx, r)
				if err != nil {
					return err
				}
				if tok > bound {
					return &token.ForgedError{Resource: r, Presented: tok, Bound: bound, By: "issued"}
				}
				return nil
			})
		})
		// What the sequencer is for: the bound that does not bound.
		if o.forgers != nil || !errors.Is(o.w1, token.ErrStale) || !errors.Is(o.w2, token.ErrStale) {
			t.Fatalf("with the Issued bound: forgers %v, W1 %v, W2 %v; want the forgers in and both waiters refused as stale", o.forgers, o.w1, o.w2)
		}
	})
}

// With no children the key's znode's Pzxid stands in; with the key's
// znode gone (ZooKeeper removes an idle container), the prefix's; with
// nothing ever locked under the prefix, 0. Each is at least the last
// grant's token and below the next.
func TestSequencerIdleKey(t *testing.T) {
	t.Parallel()
	z := zkserver.Shared(t)
	prefix := z.Chroot + "/locks"
	c := inspect(t, z.Addrs)
	ctx := ctxFor(t, time.Minute)
	seq := zklock.NewSequencer(c, prefix)
	if cur, err := seq.Current(ctx, "k"); err != nil || cur != 0 {
		t.Fatalf("Current before any lock = %d, %v; want 0", cur, err)
	}
	if _, err := seq.Current(ctx, ""); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Fatalf("Current of the empty key: %v, want ErrInvalidArgument", err)
	}
	l := newLocker(t, z.Addrs, prefix)
	lease, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	idle, err := seq.Current(ctx, "k")
	if err != nil || idle < lease.Token() {
		t.Fatalf("Current of the idle key = %d, %v; want at least %d", idle, err, lease.Token())
	}
	// What the container manager does a minute later, done now.
	if err := c.Delete(prefix+"/k", -1); err != nil {
		t.Fatal(err)
	}
	gone, err := seq.Current(ctx, "k")
	if err != nil || gone < idle {
		t.Fatalf("Current with the key's znode gone = %d, %v; want at least %d", gone, err, idle)
	}
	never, err := seq.Current(ctx, "never")
	if err != nil || never == 0 {
		t.Fatalf("Current of a key never locked, under a used prefix = %d, %v; want the prefix's Pzxid", never, err)
	}
	again, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	if again.Token() <= gone {
		t.Fatalf("the grant after re-creating the key's znode has token %d, not above the bound %d", again.Token(), gone)
	}
	if cur, err := seq.Current(ctx, "k"); err != nil || cur != again.Token() {
		t.Fatalf("Current = %d, %v with %d holding", cur, err, again.Token())
	}
}
