package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// holdProxy forwards TCP connections to upstream and can hold back
// everything the server sends (hold) until release: a pub/sub connection
// whose messages are delayed for exactly as long as the test says.
type holdProxy struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu     sync.Mutex
	cond   *sync.Cond // signalled when held or closed change
	held   bool       // guarded by mu
	closed bool       // guarded by mu
	conns  []net.Conn // guarded by mu
}

func newHoldProxy(t testing.TB, upstream string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, upstream: upstream}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

func (p *holdProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			down.Close()
			up.Close()
			return
		}
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(up, down); up.Close() }()
		go func() { defer p.wg.Done(); p.downstream(down, up); down.Close() }()
	}
}

// downstream copies the server's bytes to the client, each chunk only once
// the proxy is not holding.
func (p *holdProxy) downstream(down, up net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.held && !p.closed {
				p.cond.Wait()
			}
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if _, err := down.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *holdProxy) hold() { p.set(true) }

func (p *holdProxy) release() { p.set(false) }

func (p *holdProxy) set(held bool) {
	p.mu.Lock()
	p.held = held
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *holdProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// pausable is a waiter's client, as a paused process would see Redis: its
// scripts run on the server directly, but while it is frozen each call
// waits (not sent) until thawed; its pub/sub goes through another client
// (a delaying proxy). It counts the calls that reached the server.
type pausable struct {
	*redis.Client               // scripts
	sub           *redis.Client // Subscribe

	calls   atomic.Int64 // script calls answered
	blocked atomic.Int64 // calls that waited at the gate

	mu   sync.Mutex
	thaw chan struct{} // guarded by mu; non-nil while frozen
}

func (c *pausable) freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.thaw == nil {
		c.thaw = make(chan struct{})
	}
}

func (c *pausable) unfreeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.thaw != nil {
		close(c.thaw)
		c.thaw = nil
	}
}

func (c *pausable) gate(ctx context.Context) {
	c.mu.Lock()
	thaw := c.thaw
	c.mu.Unlock()
	if thaw == nil {
		return
	}
	c.blocked.Add(1)
	select {
	case <-thaw:
	case <-ctx.Done():
	}
}

func (c *pausable) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.gate(ctx)
	defer c.calls.Add(1)
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

func (c *pausable) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.gate(ctx)
	defer c.calls.Add(1)
	return c.Client.Eval(ctx, script, keys, args...)
}

func (c *pausable) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	if c.sub == nil {
		return c.Client.Subscribe(ctx, channels...)
	}
	return c.sub.Subscribe(ctx, channels...)
}

type acquired struct {
	lease locks.Lease
	err   error
}

// The reproduction: a waiter is handed the lock (T1) while it is
// paused; the grant runs out; X acquires (T2); the waiter resumes and joins
// the queue again; only then does the old "id|T1" wake-up arrive (its
// pub/sub connection was slow). The waiter must not take it: not while X
// holds the lock (that would be two holders), and never with T1 < T2. When
// X releases, the waiter gets the lock with a token above T2.
//
// Before the fix, Acquire returned T1 while X held the lock, in every round.
func TestStaleWakeUpIsNotAGrant(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	direct := newClient(t, db.Addr)
	proxy := newHoldProxy(t, db.Addr)
	others := newLocker(t, direct, redislock.Options{Prefix: db.Prefix})
	const ttl = 600 * time.Millisecond // the waiter's lease; WaiterTTL 3s: heartbeats every 200ms
	for round := range 3 {
		key := fmt.Sprint("k", round)
		lockKey, queue, counter := db.Prefix+"{"+key+"}", db.Prefix+"{"+key+"}:q", db.Prefix+"{"+key+"}:tok"
		pc := &pausable{Client: direct, sub: newClient(t, proxy.addr())}
		w := newLocker(t, pc, redislock.Options{Prefix: db.Prefix})

		h, err := others.Acquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan acquired, 1)
		go func() {
			l, err := w.Acquire(ctx, key, ttl)
			got <- acquired{l, err}
		}()
		waitFor(t, func() bool { return direct.ZCard(ctx, queue).Val() == 1 })

		// Pause the waiter: its next heartbeat waits, unsent.
		pc.freeze()
		blocked := pc.blocked.Load()
		waitFor(t, func() bool { return pc.blocked.Load() > blocked })
		// Its notifications are slow: the hand-over's news waits.
		proxy.hold()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		t1, err := direct.Get(ctx, counter).Uint64()
		if err != nil || direct.Exists(ctx, lockKey).Val() != 1 {
			t.Fatalf("round %d: the release did not hand the lock over (counter %d, %v)", round, t1, err)
		}
		// The waiter's grant runs out; X acquires.
		waitFor(t, func() bool { return direct.Exists(ctx, lockKey).Val() == 0 })
		x, err := others.Acquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(x.Token()) <= t1 {
			t.Fatalf("round %d: X's token %d is not above the waiter's lost grant %d", round, x.Token(), t1)
		}
		// The waiter resumes, queues again, heartbeats once more; then the
		// old wake-up arrives.
		pc.unfreeze()
		waitFor(t, func() bool { return direct.ZCard(ctx, queue).Val() == 1 })
		calls := pc.calls.Load()
		waitFor(t, func() bool { return pc.calls.Load() > calls })
		proxy.release()
		// The wake-up is processed at once; give the waiter two more
		// requests' time (it makes one when it checks a wake-up, and one
		// per heartbeat) before looking.
		calls = pc.calls.Load()
		waitFor(t, func() bool { return pc.calls.Load() >= calls+2 || len(got) > 0 })
		select {
		case a := <-got:
			if a.err != nil {
				t.Fatalf("round %d: Acquire failed on a stale wake-up: %v", round, a.err)
			}
			t.Fatalf("round %d: Acquire returned token %d while X holds the lock with %d (the waiter's lost grant was %d)",
				round, a.lease.Token(), x.Token(), t1)
		default:
		}
		// X releases: now the waiter gets the lock, above X.
		if err := x.Release(ctx); err != nil {
			t.Fatalf("round %d: X's release: %v", round, err)
		}
		a := <-got
		if a.err != nil {
			t.Fatalf("round %d: Acquire after X released: %v", round, a.err)
		}
		if a.lease.Token() <= x.Token() {
			t.Fatalf("round %d: the waiter got token %d, not above X's %d", round, a.lease.Token(), x.Token())
		}
		deadline := a.lease.Deadline()
		err = a.lease.Renew(ctx)
		if errors.Is(err, locks.ErrNotHeld) && time.Now().Before(deadline) {
			t.Fatalf("round %d: the waiter's lease (token %d) is not held before its deadline", round, a.lease.Token())
		} else if err != nil && !errors.Is(err, locks.ErrNotHeld) {
			t.Fatal(err)
		}
		_ = a.lease.Release(ctx)
		t.Logf("round %d: lost grant %d, X %d, waiter %d", round, t1, x.Token(), a.lease.Token())
	}
}

// A waiter handed the lock takes it on the wake-up alone, with no further
// request, and an uncontended acquire is one request: the check of stale
// wake-ups costs nothing on the normal paths.
func TestHandOverRoundTrips(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	direct := newClient(t, db.Addr)
	other := newLocker(t, direct, redislock.Options{Prefix: db.Prefix})
	pc := &pausable{Client: direct}
	// Long TTLs: no heartbeat, no timer fires while the test runs.
	w := newLocker(t, pc, redislock.Options{Prefix: db.Prefix, WaiterTTL: time.Minute})
	// Load the scripts (a first run per server costs EVALSHA and EVAL):
	// one contended round on another key.
	handOver(t, ctx, other, w, direct, db.Prefix, "warm")

	n := pc.calls.Load()
	lease, err := w.Acquire(ctx, "u", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := pc.calls.Load() - n; got != 1 {
		t.Errorf("uncontended Acquire: %d requests, want 1", got)
	}
	_ = lease.Release(ctx)

	h, err := other.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	n = pc.calls.Load()
	got := make(chan acquired, 1)
	go func() {
		l, err := w.Acquire(ctx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	waitFor(t, func() bool { return direct.ZCard(ctx, db.Prefix+"{k}:q").Val() == 1 })
	// The server queued the waiter before its client read the reply, which
	// the count follows.
	waitFor(t, func() bool { return pc.calls.Load()-n >= 2 })
	before := pc.calls.Load() - n // try, then queue
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if after := pc.calls.Load() - n; after != before || before != 2 {
		t.Errorf("handed-over Acquire: %d requests before the release, %d in all; want 2 and 2", before, after)
	}
	if a.lease.Token() <= h.Token() {
		t.Errorf("handed over token %d, not above %d", a.lease.Token(), h.Token())
	}
	if err := a.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// handOver has from hold key while to queues for it, releases, and waits
// for to's grant, which it releases.
func handOver(t *testing.T, ctx context.Context, from, to *redislock.Locker, c *redis.Client, prefix, key string) {
	t.Helper()
	h, err := from.Acquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := to.Acquire(ctx, key, time.Minute)
		got <- acquired{l, err}
	}()
	waitFor(t, func() bool { return c.ZCard(ctx, prefix+"{"+key+"}:q").Val() == 1 })
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	if err := a.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
