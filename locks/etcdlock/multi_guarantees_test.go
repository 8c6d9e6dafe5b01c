package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

// exclusionLog checks, for each key, that no two grants hold it at once
// and that each grant's token is above every earlier grant's of that key.
type exclusionLog struct {
	mu     sync.Mutex
	inUse  map[string]*atomic.Int32
	last   map[string]token.Token
	grants atomic.Int64
}

func newExclusionLog(keys []string) *exclusionLog {
	x := &exclusionLog{inUse: map[string]*atomic.Int32{}, last: map[string]token.Token{}}
	for _, k := range keys {
		x.inUse[k] = new(atomic.Int32)
	}
	return x
}

func (x *exclusionLog) enter(t *testing.T, leases []locks.Lease) {
	for _, l := range leases {
		if n := x.inUse[l.Key()].Add(1); n != 1 {
			t.Errorf("key %q held by %d grants at once", l.Key(), n)
		}
		x.mu.Lock()
		if prev := x.last[l.Key()]; l.Token() <= prev {
			t.Errorf("key %q granted token %d after token %d", l.Key(), l.Token(), prev)
		}
		x.last[l.Key()] = l.Token()
		x.mu.Unlock()
	}
	x.grants.Add(1)
}

func (x *exclusionLog) leave(leases []locks.Lease) {
	for _, l := range leases {
		x.inUse[l.Key()].Add(-1)
	}
}

// Sets taken in one transaction and single keys taken by Acquire, on the
// same keys and at the same time, never hold a key twice, and every key's
// tokens grow across both paths.
func TestTryAcquireAllExcludesSingleGrants(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	keys := []string{"a", "b", "c", "d"}
	x := newExclusionLog(keys)
	const ttl = 10 * time.Second
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for w := range 6 {
		l := newLocker(t, newClient(t, db.Endpoints), db.Prefix)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stop) && !t.Failed() {
				var held []locks.Lease
				if w%3 != 2 {
					set := []string{}
					for _, k := range keys {
						if r.IntN(2) == 0 {
							set = append(set, k)
						}
					}
					if len(set) < 2 {
						set = keys[1:3]
					}
					ls, err := l.TryAcquireAll(ctx, set, ttl)
					if errors.Is(err, locks.ErrNotObtained) {
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
						continue
					}
					if err != nil {
						t.Errorf("TryAcquireAll %q: %v", set, err)
						return
					}
					if len(ls) != len(set) {
						t.Errorf("TryAcquireAll %q granted %d leases", set, len(ls))
						return
					}
					held = ls
				} else {
					k := keys[r.IntN(len(keys))]
					actx, cancel := context.WithTimeout(ctx, 10*time.Second)
					ll, err := l.Acquire(actx, k, ttl)
					cancel()
					if err != nil {
						t.Errorf("Acquire %q: %v", k, err)
						return
					}
					held = []locks.Lease{ll}
				}
				x.enter(t, held)
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				x.leave(held)
				for _, ll := range held {
					if err := ll.Release(ctx); err != nil {
						t.Errorf("release %q: %v", ll.Key(), err)
					}
				}
			}
		})
	}
	wg.Wait()
	if x.grants.Load() < 20 {
		t.Fatalf("only %d grants in 2s", x.grants.Load())
	}
	t.Logf("%d grants", x.grants.Load())
}

// keysIn lists every key under prefix with its create revision and lease.
func keysIn(t *testing.T, ctx context.Context, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range resp.Kvs {
		m[string(kv.Key)] = fmt.Sprintf("rev %d lease %x", kv.CreateRevision, kv.Lease)
	}
	return m
}

// A refused TryAcquireAll writes nothing, whichever key of the set is
// held or only queued for: no key of the set appears, the store's revision
// does not move.
func TestTryAcquireAllRefusalLeavesEtcdUntouched(t *testing.T) {
	// Not parallel: the store's revision must not move meanwhile.
	db := etcdserver.Shared(t)
	c := newClient(t, db.Endpoints)
	ctx := ctxFor(t, 30*time.Second)
	l := newLocker(t, c, db.Prefix)
	other := newLocker(t, newClient(t, db.Endpoints), db.Prefix)
	keys := []string{"a", "b/x", "c"}
	for i, held := range keys {
		h, err := l.TryAcquire(ctx, held, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			_, err := other.Acquire(wctx, held, 10*time.Second)
			waited <- err
		}()
		until := time.Now().Add(5 * time.Second)
		for len(keysIn(t, ctx, c, db.Prefix)) != 2 {
			if time.Now().After(until) {
				t.Fatal("waiter not queued")
			}
			time.Sleep(5 * time.Millisecond)
		}
		before := keysIn(t, ctx, c, db.Prefix)
		rev0, err := c.Get(ctx, "/none")
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.TryAcquireAll(ctx, keys, 10*time.Second)
		if !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("round %d: TryAcquireAll with %q held: %v, want ErrNotObtained", i, held, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", held)) {
			t.Errorf("round %d: the refusal %q does not name %q", i, err, held)
		}
		rev1, err := c.Get(ctx, "/none")
		if err != nil {
			t.Fatal(err)
		}
		if rev1.Header.Revision != rev0.Header.Revision {
			t.Errorf("round %d: the refusal moved the revision %d -> %d", i, rev0.Header.Revision, rev1.Header.Revision)
		}
		if after := keysIn(t, ctx, c, db.Prefix); fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("round %d: the refusal changed etcd:\nbefore %v\nafter  %v", i, before, after)
		}
		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// With a lock-delay, a key whose grant expired unreleased is refused to a
// set until the grant's Deadline plus the delay; a waiter queued before
// the expiry waits as long.
func TestTryAcquireAllHonoursLockDelay(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	ctx := ctxFor(t, 30*time.Second)
	const delay = 1500 * time.Millisecond
	newDelayed := func() *etcdlock.Locker {
		l, err := etcdlock.New(newClient(t, db.Endpoints), etcdlock.Options{Prefix: db.Prefix, LockDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	l, waiter := newDelayed(), newDelayed()
	vanished, err := l.TryAcquire(ctx, "b", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	free := vanished.Deadline().Add(delay)
	queued := make(chan time.Time, 1)
	go func() {
		ls, err := waiter.Acquire(ctx, "b", 5*time.Second)
		at := time.Now()
		queued <- at
		if err != nil {
			t.Errorf("waiter: %v", err)
			return
		}
		_ = ls.Release(ctx)
	}()
	tries := 0
	for {
		tries++
		ls, err := l.TryAcquireAll(ctx, []string{"a", "b", "c"}, 5*time.Second)
		at := time.Now()
		if errors.Is(err, locks.ErrNotObtained) {
			if at.After(free.Add(5 * time.Second)) {
				t.Fatalf("still refused %v after the delay", at.Sub(free))
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(free) {
			t.Errorf("set granted %v before the expired grant's Deadline + delay", free.Sub(at))
		}
		if ls[1].Token() <= vanished.Token() {
			t.Errorf("token %d after the vanished grant's %d", ls[1].Token(), vanished.Token())
		}
		for _, s := range ls {
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		break
	}
	if at := <-queued; at.Before(free) {
		t.Errorf("waiter queued before the expiry granted %v before Deadline + delay", free.Sub(at))
	}
	t.Logf("%d tries", tries)
}

// AcquireAll cut short at any point leaves no key of the set held or
// queued once its clean-ups are done.
func TestAcquireAllCancelledLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	c := newClient(t, db.Endpoints)
	ctx := ctxFor(t, 2*time.Minute)
	l := newLocker(t, newClient(t, db.Endpoints), db.Prefix)
	g, err := guard.New(l, guard.Options{TTL: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	other := newLocker(t, newClient(t, db.Endpoints), db.Prefix)
	keys := []string{"a", "b", "c", "d"}
	r := rand.New(rand.NewPCG(1, 2))
	const rounds = 60
	cancelled := 0
	for round := range rounds {
		busy := keys[r.IntN(len(keys))]
		h, err := other.TryAcquire(ctx, busy, 5*time.Second)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		hold := time.Duration(r.IntN(15000)) * time.Microsecond
		go func() {
			time.Sleep(hold)
			_ = h.Release(context.WithoutCancel(ctx))
		}()
		actx, cancel := context.WithTimeout(ctx, time.Duration(r.IntN(20000))*time.Microsecond)
		set := append([]string(nil), keys...)
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		s, err := g.AcquireAll(actx, set...)
		cancel()
		if err == nil {
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			cancelled++
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			left := keysIn(t, ctx, c, db.Prefix)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d (err %v): %v left 5s later", round, err, left)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("%d of %d cut short", cancelled, rounds)
}

// A key of a set deleted behind its back cancels the set's context with a
// cause naming that key, and leaves the other keys' leases alone.
func TestLeasesContextNamesTheKeyLost(t *testing.T) {
	t.Parallel()
	db := etcdserver.Shared(t)
	c := newClient(t, db.Endpoints)
	ctx := ctxFor(t, 30*time.Second)
	l := newLocker(t, newClient(t, db.Endpoints), db.Prefix)
	g, err := guard.New(l, guard.Options{TTL: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := g.AcquireAll(ctx, "c", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, db.Prefix+"b/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("set context not cancelled 3s after b's key was deleted")
	}
	cause := context.Cause(s.Context())
	if !errors.Is(cause, guard.ErrLost) {
		t.Errorf("cause %v, want ErrLost", cause)
	}
	if !strings.Contains(cause.Error(), `"b"`) {
		t.Errorf("cause %q does not name b", cause)
	}
	if err := s.Lease("a").Context().Err(); err != nil {
		t.Errorf("a's lease ended with b's: %v", context.Cause(s.Lease("a").Context()))
	}
	if err := s.Release(ctx); !errors.Is(err, guard.ErrLost) {
		t.Errorf("Release: %v, want ErrLost", err)
	}
	if left := keysIn(t, ctx, c, db.Prefix); len(left) != 0 {
		t.Errorf("left after Release: %v", left)
	}
}
