package redlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/token"
)

// Faults are injected by wrapping each node's real client: a rule on one
// script can fail its calls without sending them, freeze them before they
// are sent or freeze their replies, and report the calls it sees.

// rule applies to the calls of one script on one node.
type rule struct {
	fail      bool          // answer with an error; nothing is sent
	wait      chan struct{} // wait until closed, then send (a slow client)
	hold      chan struct{} // the same, reported to frozen (a client frozen before the call left)
	holdReply chan struct{} // send, then wait until closed to return the reply (frozen after it arrived)
	seen      chan<- call   // told of every call once it returns (dropped when full)
	frozen    chan<- int    // told the node when a call freezes at hold or holdReply
}

type call struct {
	node  int
	args  []any
	reply any
	err   error
}

// refusal reports whether c is an acquire call that found the lock held.
func (c call) refusal() bool {
	r, _ := c.reply.([]any)
	return c.err == nil && len(r) > 0 && r[0] == int64(0)
}

type faultyNode struct {
	Client
	node int

	mu    sync.Mutex
	rules map[string]*rule // guarded by mu; script hash → rule
}

func (f *faultyNode) set(s *redis.Script, r *rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil {
		f.rules = map[string]*rule{}
	}
	if r == nil {
		delete(f.rules, s.Hash())
	} else {
		f.rules[s.Hash()] = r
	}
}

func (f *faultyNode) apply(ctx context.Context, sha string, args []any, run func(context.Context) *redis.Cmd) *redis.Cmd {
	f.mu.Lock()
	r := f.rules[sha]
	f.mu.Unlock()
	if r == nil {
		return run(ctx)
	}
	if r.fail {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errors.New("injected: call failed"))
		return cmd
	}
	if r.wait != nil || r.hold != nil {
		if r.wait != nil {
			<-r.wait
		}
		if r.hold != nil {
			r.froze(f.node)
			<-r.hold
		}
		// The call leaves late, as if the process had been frozen: its own
		// deadline does not stop it.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		ctx = c
	}
	cmd := run(ctx)
	if r.holdReply != nil {
		r.froze(f.node)
		<-r.holdReply
	}
	if r.seen != nil {
		c := call{node: f.node, args: args, reply: cmd.Val(), err: cmd.Err()}
		select {
		case r.seen <- c:
		default:
		}
	}
	return cmd
}

func (r *rule) froze(node int) {
	if r.frozen != nil {
		select {
		case r.frozen <- node:
		default:
		}
	}
}

func (f *faultyNode) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return f.apply(ctx, sha, args, func(ctx context.Context) *redis.Cmd { return f.Client.EvalSha(ctx, sha, keys, args...) })
}

func (f *faultyNode) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	h := sha1.Sum([]byte(script))
	return f.apply(ctx, hex.EncodeToString(h[:]), args, func(ctx context.Context) *redis.Cmd { return f.Client.Eval(ctx, script, keys, args...) })
}

type testNodes struct {
	plain  []Client
	faulty []*faultyNode
	raw    []*redis.Client
	prefix string
}

func (n testNodes) wrapped() []Client {
	var cs []Client
	for _, f := range n.faulty {
		cs = append(cs, f)
	}
	return cs
}

// setAll puts r (one rule per node, from mk) on script s of every node in
// idx (all when empty).
func (n testNodes) set(s *redis.Script, mk func(node int) *rule, idx ...int) {
	if len(idx) == 0 {
		for i := range n.faulty {
			idx = append(idx, i)
		}
	}
	for _, i := range idx {
		n.faulty[i].set(s, mk(i))
	}
}

func nodesFor(t *testing.T) testNodes {
	t.Helper()
	var n testNodes
	for i, db := range redisserver.SharedN(t, 5) {
		c := redis.NewClient(OneDial(redis.Options{Addr: db.Addr, MaxRetries: -1, DialTimeout: time.Second}))
		t.Cleanup(func() { _ = c.Close() })
		n.plain, n.raw, n.prefix = append(n.plain, c), append(n.raw, c), db.Prefix
		n.faulty = append(n.faulty, &faultyNode{Client: c, node: i})
	}
	return n
}

func lockerOn(t *testing.T, cs []Client, prefix string) *Locker {
	t.Helper()
	l, err := New(cs, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// result is what a waiter's Acquire returned.
type result struct {
	lease     *lockLease
	err       error
	xReleased bool // the other client had released when the waiter returned
}

func (r result) String() string {
	if r.lease == nil {
		return fmt.Sprintf("error %v", r.err)
	}
	return fmt.Sprintf("a lease with token %d", r.lease.Token())
}

// Failed attempts whose write-back reached only a minority leave their
// tokens there, above the last grant; one of them also leaves its lock
// there. Their tokens come from nodes whose clock floor runs an hour ahead
// (an offset of an hour on nodes 0 and 1, as a fast clock would leave),
// so the next holder, minting from the other nodes, gets a token below
// theirs. Current is not fooled: it answers the last grant's token, then
// the next holder's, and never goes down. The largest counter would have
// answered the failed attempts' token, above the holder's, and let a
// forger presenting it lock the holder out.
func TestSequencerOutvotesFailedAttempts(t *testing.T) {
	n := nodesFor(t)
	ctx := testCtx(t)
	const key = "outvoted"
	l := lockerOn(t, n.plain, n.prefix)
	lf := lockerOn(t, n.wrapped(), n.prefix)
	seq := NewSequencer(n.plain, n.prefix)
	var answers []token.Token
	current := func(what string) token.Token {
		t.Helper()
		cur, err := seq.Current(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if k := len(answers); k > 0 && cur < answers[k-1] {
			t.Fatalf("%s: Current %d after %d (answers %v)", what, cur, answers[k-1], answers)
		}
		answers = append(answers, cur)
		return cur
	}

	a, err := l.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := current("holder A"); got != a.Token() {
		t.Fatalf("holder A %d: Current %d", a.Token(), got)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Two attempts whose write-back fails on nodes 2, 3, 4: each reaches
	// nodes 0 and 1 only, and the second one's give-back fails there too.
	const hour = 3600_000_000 // µs
	for _, raw := range n.raw[:2] {
		c, _, _ := strings.Cut(raw.Get(ctx, n.prefix+"{"+key+"}:tok").Val(), ":")
		if err := raw.Set(ctx, n.prefix+"{"+key+"}:tok", c+":"+strconv.FormatInt(hour, 10), time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n.set(writeBackScript, func(int) *rule { return &rule{fail: true} }, 2, 3, 4)
	for i := range 2 {
		if i == 1 {
			n.set(releaseScript, func(int) *rule { return &rule{fail: true} }, 0, 1)
		}
		var qe *QuorumError
		if _, err := lf.TryAcquire(ctx, key, 10*time.Second); !errors.As(err, &qe) {
			t.Fatalf("failed attempt %d: %v", i, err)
		}
	}
	n.set(writeBackScript, func(int) *rule { return nil })
	n.set(releaseScript, func(int) *rule { return nil })
	var partial []string
	for _, raw := range n.raw[:2] {
		c, _ := raw.Get(ctx, n.prefix+"{"+key+"}:tok").Result()
		v, _ := raw.Get(ctx, n.prefix+"{"+key+"}").Result()
		partial = append(partial, c+" lock "+v)
	}
	t.Logf("left on nodes 0, 1: %v", partial)
	c0, err := n.raw[0].Get(ctx, n.prefix+"{"+key+"}:tok").Result()
	if err != nil {
		t.Fatal(err)
	}
	c0, _, _ = strings.Cut(c0, ":")
	failed, err := token.Parse(c0)
	if err != nil {
		t.Fatal(err)
	}
	if got := current("after the failed attempts"); got != a.Token() {
		t.Fatalf("after failed attempts left %v: Current %d, want the last grant's %d", partial, got, a.Token())
	}

	// The next holder cannot take nodes 0 and 1 (the leftover lock): it
	// mints from nodes 2, 3, 4.
	b, err := l.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := current("holder B"); got != b.Token() || b.Token() <= a.Token() || b.Token() >= failed {
		t.Fatalf("holder B %d (A %d, the failed attempts %d): Current %d", b.Token(), a.Token(), failed, got)
	}
	check := token.SequencerCheck(seq, token.SequencerOptions{})
	if err := check.Check(ctx, key, failed); !errors.Is(err, token.ErrForged) {
		t.Fatalf("the failed attempts' token %d while B holds %d: %v; want it refused", failed, b.Token(), err)
	}
	if err := check.Check(ctx, key, b.Token()); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := current("after B"); got != b.Token() {
		t.Fatalf("after B released: Current %d, want %d", got, b.Token())
	}
	t.Logf("answers %v", answers)
}

// A waiter woken by a release and frozen — with its write-back not yet
// sent, or with its acquire replies not yet read — resumes after its node
// locks expired and another client X acquired. It must not come back with
// a lease while X holds the lock, nor with a token below X's: its
// write-back finds the nodes X's and fails, the attempt is given up, and
// it waits for X like any waiter.
func TestFrozenWaiterResumesAfterAnotherAcquired(t *testing.T) {
	for _, freeze := range []string{"before the write-back", "with the acquire replies"} {
		t.Run(freeze, func(t *testing.T) {
			n := nodesFor(t)
			ctx := testCtx(t)
			const key = "frozen"
			lx := lockerOn(t, n.plain, n.prefix)
			lw := lockerOn(t, n.wrapped(), n.prefix)

			h, err := lx.Acquire(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			acquires := make(chan call, 100)
			n.set(acquireScript, func(int) *rule { return &rule{seen: acquires} }, 0)
			var xReleased atomic.Bool
			done := make(chan result, 1)
			go func() {
				lease, err := lw.Acquire(ctx, key, 300*time.Millisecond)
				l, _ := lease.(*lockLease)
				done <- result{l, err, xReleased.Load()}
			}()
			refused := func(what string) {
				t.Helper()
				for {
					select {
					case c := <-acquires:
						if c.refusal() {
							return
						}
					case r := <-done:
						t.Fatalf("%s: the waiter returned %s", what, r)
					case <-ctx.Done():
						t.Fatalf("%s: %v", what, ctx.Err())
					}
				}
			}
			// The waiter's first attempt and the one after it subscribed
			// are refused: it waits.
			refused("waiting for H")
			refused("waiting for H, subscribed")

			// The waiter, trying in order, asks node 0 alone, then the
			// others. Its calls to those wait until H's release is done on
			// every node (a wake-up comes with the first node's release),
			// so that its attempt takes all five.
			released := make(chan struct{})
			gate := make(chan struct{})
			writeBacks := make(chan call, 20)
			frozen := make(chan int, 20)
			calls := 5
			if freeze == "before the write-back" {
				n.set(acquireScript, func(int) *rule { return &rule{wait: released} }, 1, 2, 3, 4)
				n.set(writeBackScript, func(int) *rule { return &rule{hold: gate, seen: writeBacks, frozen: frozen} })
			} else {
				calls = 4
				// Nodes 1 to 4 take the lock for the waiter, but their
				// replies wait.
				n.set(acquireScript, func(int) *rule { return &rule{wait: released, holdReply: gate, frozen: frozen} }, 1, 2, 3, 4)
				n.set(writeBackScript, func(int) *rule { return &rule{seen: writeBacks} })
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			close(released)
			// Woken, the waiter takes every node and freezes.
			for range calls {
				select {
				case <-frozen:
				case r := <-done:
					t.Fatalf("the waiter returned %s instead of freezing", r)
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
			// X waits until the frozen waiter's node locks expire, then
			// takes the lock.
			x, err := lx.Acquire(ctx, key, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			close(gate)
			// The resumed attempt's write-backs fail where the nodes are
			// X's: X holds a majority, so at most a minority can still
			// hold the waiter's expiring lock (a node whose lock was set
			// last, on a busy machine) and accept its write-back.
			var minted any
			ours := 0
			for range 5 {
				c := <-writeBacks
				if c.err != nil {
					t.Errorf("write-back on node %d after X acquired: %v", c.node, c.err)
				}
				if c.reply != int64(0) {
					ours++
				}
				minted = c.args[1]
			}
			if ours >= 3 {
				t.Errorf("%d of 5 write-backs succeeded after X acquired: a majority", ours)
			}
			n.set(writeBackScript, func(int) *rule { return nil })
			n.set(acquireScript, func(int) *rule { return nil }, 1, 2, 3, 4)
			// It tries again and is refused: X holds the lock.
			refused("after resuming, while X holds the lock")
			select {
			case r := <-done:
				t.Fatalf("the resumed waiter returned %s while X (token %d) holds the lock", r, x.Token())
			default:
			}
			xReleased.Store(true)
			if err := x.Release(ctx); err != nil {
				t.Fatalf("X lost the lock: %v", err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.lease.Release(ctx)
			if !r.xReleased || r.lease.Token() <= x.Token() {
				t.Fatalf("waiter's token %d, X's %d (X had released: %v)", r.lease.Token(), x.Token(), r.xReleased)
			}
			t.Logf("H %d, frozen attempt minted %v (refused), X %d, waiter %d", h.Token(), minted, x.Token(), r.lease.Token())
		})
	}
}
