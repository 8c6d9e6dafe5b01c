package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

// queueLen counts the keys queueing for lock key k of a locker on prefix.
func queueLen(ctx context.Context, t *testing.T, c *clientv3.Client, prefix, k string) int64 {
	t.Helper()
	resp, err := c.Get(ctx, prefix+url.PathEscape(k)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// awaitQueue waits until n keys queue for k (the waiters' transactions are
// on their way; each is one round trip).
func awaitQueue(ctx context.Context, t *testing.T, c *clientv3.Client, prefix, k string, n int64) {
	t.Helper()
	for queueLen(ctx, t, c, prefix, k) != n {
		select {
		case <-ctx.Done():
			t.Fatalf("%d keys never queued for %q", n, k)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

type granted struct {
	lease locks.Lease
	err   error
}

// forgery is the scenario of issue 15 §3: the holder claims, two waiters
// queue, other keys are written, a forger presents Issued() — the
// cluster's revision, above both waiters' tokens — and then the tokens just above the holder's and the
// waiters' own; then the holder and the waiters release in turn, each
// claiming with its token. fence must run check before each claim. It
// returns what went wrong: a forged token accepted, an honest holder
// refused.
func forgery(t *testing.T, d *etcdserver.DB, c *clientv3.Client, fence func(token.Check) token.Fence, check func(l *etcdlock.Locker) token.Check) []string {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	const key = "sku:42"
	l := newLocker(t, c, d.Prefix)
	f := fence(check(l))
	var problems []string
	honest := func(who string, tok token.Token) {
		if err := f.Claim(ctx, key, tok); err != nil {
			problems = append(problems, fmt.Sprintf("%s's token %d refused: %v", who, tok, err))
		}
	}
	forged := func(what string, tok token.Token) {
		err := f.Claim(ctx, key, tok)
		switch {
		case err == nil:
			problems = append(problems, fmt.Sprintf("forged %s %d accepted", what, tok))
		case !errors.Is(err, token.ErrForged):
			problems = append(problems, fmt.Sprintf("forged %s %d: %v, want ErrForged", what, tok, err))
		}
	}

	holder, err := l.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	honest("holder", holder.Token())
	var waiters [2]chan granted
	for i := range waiters {
		waiters[i] = make(chan granted, 1)
		wl := newLocker(t, c, d.Prefix)
		go func() {
			lease, err := wl.Acquire(ctx, key, 10*time.Second)
			waiters[i] <- granted{lease, err}
		}()
		awaitQueue(ctx, t, c, d.Prefix, key, int64(i+2)) // in this order
	}
	resp, err := c.Get(ctx, d.Prefix+url.PathEscape(key)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 3 {
		t.Fatalf("queue: %v, %v", resp, err)
	}
	w3, w4 := token.Token(resp.Kvs[1].CreateRevision), token.Token(resp.Kvs[2].CreateRevision)
	// The cluster's revision moves on with other keys' writes, as it does
	// in any cluster that serves more than this one lock.
	if _, err := c.Put(ctx, d.Prefix+"elsewhere", "x"); err != nil {
		t.Fatal(err)
	}
	issued, err := l.Issued(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("holder %d, waiters %d and %d queued, Issued() = %d", holder.Token(), w3, w4, issued)
	forged("Issued()", issued)
	forged("holder+1", holder.Token()+1)
	forged("first waiter's token, before its turn", w3)
	forged("second waiter's token, before its turn", w4)
	honest("holder", holder.Token()) // at worst, a forger acts as the holder

	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, w := range waiters {
		g := <-w
		if g.err != nil {
			t.Fatalf("waiter %d: %v", i, g.err)
		}
		if want := []token.Token{w3, w4}[i]; g.lease.Token() != want {
			t.Fatalf("waiter %d granted token %d, want %d", i, g.lease.Token(), want)
		}
		honest(fmt.Sprintf("waiter %d", i), g.lease.Token())
		if err := g.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return problems
}

func issuedCheck(l *etcdlock.Locker) token.Check {
	return token.CheckFunc(func(ctx context.Context, r string, t token.Token) error {
		b, err := l.Issued(ctx, r)
		if err != nil {
			return err
		}
		if t > b {
			return &token.ForgedError{Resource: r, Presented: t, Bound: b, By: "issued"}
		}
		return nil
	})
}

func forgeryFences(t *testing.T, d *etcdserver.DB, c *clientv3.Client) map[string]func(token.Check) token.Fence {
	return map[string]func(token.Check) token.Fence{
		"MemoryFence": func(ch token.Check) token.Fence { return &token.MemoryFence{Check: ch} },
		"etcdFence": func(ch token.Check) token.Fence {
			return etcdlock.NewFence(c, etcdlock.FenceOptions{Prefix: d.Prefix + "fence/", Check: ch, Logger: slog.New(slog.DiscardHandler)})
		},
	}
}

// Issue 15 §3 with the sequencer check: the forger's Issued() token and
// every token above the holder's are refused; the holder and then both
// waiters, in turn, get through.
func TestSequencerRefusesForgeriesAboveHolder(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	for name, fence := range forgeryFences(t, d, c) {
		t.Run(name, func(t *testing.T) {
			for _, p := range forgery(t, d, c, fence, func(*etcdlock.Locker) token.Check {
				return token.SequencerCheck(etcdlock.NewSequencer(c, d.Prefix), token.SequencerOptions{})
			}) {
				t.Error(p)
			}
		})
	}
}

// The control: with Issued as the bound, as before, the same scenario lets
// the forger in and locks both queued waiters out — the test above would
// fail with it.
func TestIssuedIsNoBoundForForgeries(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	for name, fence := range forgeryFences(t, d, c) {
		t.Run(name, func(t *testing.T) {
			problems := forgery(t, d, c, fence, issuedCheck)
			refused := 0
			for _, p := range problems {
				t.Log(p)
				if strings.HasPrefix(p, "waiter") {
					refused++
				}
			}
			if refused != 2 {
				t.Errorf("with Issued as the bound, %d waiters were locked out; the scenario should show both", refused)
			}
		})
	}
}

// Current is the holder's token while the lock is held, and the revision
// of the read when it is free: at least every earlier grant, below every
// later one. It never decreases.
func TestSequencerCurrent(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	l := newLocker(t, c, d.Prefix)
	seq := etcdlock.NewSequencer(c, d.Prefix)
	ctx := ctxFor(t, time.Minute)
	var last token.Token
	current := func(key string) token.Token {
		t.Helper()
		cur, err := seq.Current(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if key == "k" {
			if cur < last {
				t.Fatalf("Current went back from %d to %d", last, cur)
			}
			last = cur
		}
		return cur
	}
	free := current("k")
	first, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if first.Token() <= free {
		t.Fatalf("grant %d not above the free lock's Current %d", first.Token(), free)
	}
	if got := current("k"); got != first.Token() {
		t.Fatalf("held: Current = %d, want the holder's token %d", got, first.Token())
	}
	waiter := make(chan granted, 1)
	wl := newLocker(t, c, d.Prefix)
	go func() {
		lease, err := wl.Acquire(ctx, "k", 10*time.Second)
		waiter <- granted{lease, err}
	}()
	awaitQueue(ctx, t, c, d.Prefix, "k", 2)
	if got := current("k"); got != first.Token() {
		t.Fatalf("held with a waiter: Current = %d, want the holder's %d", got, first.Token())
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-waiter
	if g.err != nil {
		t.Fatal(g.err)
	}
	if got := current("k"); got != g.lease.Token() {
		t.Fatalf("handed over: Current = %d, want the new holder's %d", got, g.lease.Token())
	}
	if err := g.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := current("k")
	if released < g.lease.Token() {
		t.Fatalf("free again: Current = %d, below the last grant %d", released, g.lease.Token())
	}
	next, err := l.TryAcquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= released {
		t.Fatalf("grant %d not above the free lock's Current %d", next.Token(), released)
	}
	current("k")

	// Keys are escaped as the locker escapes them: "a" and "a/b" are two
	// queues, and neither sees the other's holder.
	a, err := l.Acquire(ctx, "a", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	ab, err := l.Acquire(ctx, "a/b", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ab.Release(ctx)
	if got := current("a"); got != a.Token() {
		t.Errorf(`Current("a") = %d, want %d`, got, a.Token())
	}
	if got := current("a/b"); got != ab.Token() {
		t.Errorf(`Current("a/b") = %d, want %d`, got, ab.Token())
	}
	if _, err := seq.Current(ctx, ""); !errors.Is(err, locks.ErrInvalidArgument) {
		t.Errorf(`Current("") = %v, want ErrInvalidArgument`, err)
	}
}
