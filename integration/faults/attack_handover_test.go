package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// handover/<locker>: a waiter — a process of its own — queues behind a
// holder H and is frozen (SIGSTOP); H releases, and the lock service hands
// the lock to the frozen waiter (grant T1, seen at the service: the
// sequencer answers T1); the waiter's lease runs out while it is frozen and
// X acquires (T2 > T1); the waiter is continued, with the news of its
// hand-over waiting in its socket (a pub/sub message, a watch event) and
// so delivered late. Fenced: the waiter's Acquire must not return while X
// holds the lock, nor ever a token not above X's, and a write with the
// stale grant's T1 through a fence (MemoryFence with the sequencer check)
// after X claimed is refused; once X releases, the waiter's grant is above
// X's and its write is accepted. The control shows the nemesis bit — T1
// was handed to the frozen waiter while X went on to hold the lock with a
// higher token — and that the write the waiter would then make with T1
// (what Acquire returned before the fix) lands in an unfenced store after
// X's: a lost update.
//
// Backends that hand the lock over directly: redislock, etcdlock, zklock
// and memlock. memlock's lock service lives in its waiter's own process,
// so that a waiter cannot be frozen without freezing the service with it,
// and no public API pauses one goroutine between hand-over and wake-up
// (its package test, locks/memlock TestGrantExpiredBeforeTakenIsNotReturned,
// parks it with an internal hook); redlock hands nothing over (a release
// wakes everyone, each retries from scratch: see "Waiters" in its doc).

func init() {
	for _, kind := range []string{redisLock, etcdLock, zkLock} {
		registerAttack(attack{
			Name: "handover/" + kind,
			About: "a waiter process SIGSTOPped while the lock is handed to it, resumed after its lease ran out and X acquired, its wake-up delivered late; " +
				"control: the stale grant was delivered below X's token, and its write lands over X's in an unfenced store",
			Rounds: 3,
			Short:  1,
			Run:    func(t *testing.T, s *attackStats) { runHandover(t, s, kind) },
		})
	}
}

// waiterTTL is the frozen waiter's lease: the shortest each service keeps.
var waiterTTL = map[string]time.Duration{
	redisLock: time.Second,
	etcdLock:  2 * time.Second, // etcd's minimum lease
	zkLock:    time.Second,     // the servers' minSessionTimeout
}

// waiterMain queues for cfg.Key, says "lease <token>" (or "error: …") when
// Acquire returns, and releases on a line from stdin.
func waiterMain(cfg attackChildConfig) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, closeLock, err := openLocker(ctx, cfg.Lock, log)
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	defer closeLock()
	fmt.Println("acquiring")
	lease, err := l.Acquire(ctx, cfg.Key, cfg.TTL)
	if err != nil {
		fmt.Println("error:", strings.ReplaceAll(err.Error(), "\n", " "))
		return 0
	}
	fmt.Println("lease", lease.Token())
	var line string
	fmt.Scanln(&line)
	_ = lease.Release(ctx)
	return 0
}

// queueLen returns how many grants and waiters the service has for key.
type queueLen func(ctx context.Context, key string) (int, error)

func newQueueLen(t *testing.T, a *attackLocks) queueLen {
	t.Helper()
	switch a.lc.Kind {
	case redisLock:
		cli := redis.NewClient(redisOptions(a.lc.Addrs[0]))
		t.Cleanup(func() { cli.Close() })
		return func(ctx context.Context, key string) (int, error) {
			base := a.lc.Prefix + "{" + key + "}"
			n, err := cli.ZCard(ctx, base+":q").Result()
			held, _ := cli.Exists(ctx, base).Result()
			return int(n + held), err
		}
	case etcdLock:
		cli, err := clientv3.New(etcdConfig(a.lc.Addrs))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return func(ctx context.Context, key string) (int, error) {
			r, err := cli.Get(ctx, a.lc.Prefix+key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(r.Count), nil
		}
	case zkLock:
		conn, _, err := zk.Connect(a.lc.Addrs, 10*time.Second, zk.WithLogger(zkLogger{quietLog}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return func(ctx context.Context, key string) (int, error) {
			ch, _, err := conn.Children(a.lc.Prefix + "/" + key)
			if errors.Is(err, zk.ErrNoNode) {
				return 0, nil
			}
			return len(ch), err
		}
	}
	t.Fatalf("no queue for %s", a.lc.Kind)
	return nil
}

// waitUntil polls cond every 10ms for at most d.
func waitUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func runHandover(t *testing.T, s *attackStats, kind string) {
	if procSupported != "" {
		t.Skip(procSupported)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newAttackLocks(t, kind)
	queued := newQueueLen(t, a)
	hl, xl := a.open(t, ctx), a.open(t, ctx)
	for round := range s.Rounds() {
		handoverRound(t, ctx, s, a, queued, hl, xl, fmt.Sprintf("h-%d", round))
		s.Add(func(s *attackStats) { s.Runs++ })
	}
}

func handoverRound(t *testing.T, ctx context.Context, s *attackStats, a *attackLocks, queued queueLen, hl, xl locks.Locker, key string) {
	t.Helper()
	fence := &token.MemoryFence{Check: token.All(token.DefaultCheck(), token.SequencerCheck(a.seq, token.SequencerOptions{})), Logger: quietLog}
	var unfenced string // the control's store: the last write wins
	write := func(who string, tok token.Token) error {
		err := fence.Claim(ctx, key, tok)
		if err != nil && !errors.Is(err, token.ErrStale) && !errors.Is(err, token.ErrForged) {
			t.Errorf("%s: claim %d: %v", key, tok, err)
		}
		return err
	}
	honest := func(who string, tok token.Token) {
		if err := write(who, tok); err != nil {
			t.Errorf("%s: %s's write with token %d refused: %v", key, who, tok, err)
			s.Add(func(s *attackStats) { s.Lockouts++ })
		}
	}

	h, err := hl.Acquire(ctx, key, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	honest("H", h.Token())
	unfenced = "H"
	child := startAttackChild(t, attackChildConfig{Mode: "waiter", Lock: a.lc, Key: key, TTL: waiterTTL[a.lc.Kind]})
	if l, _ := child.line(time.Minute); l != "acquiring" {
		t.Fatalf("%s: the waiter said %q; stderr:\n%s", key, l, child.stderr)
	}
	if !waitUntil(30*time.Second, func() bool { n, err := queued(ctx, key); return err == nil && n >= 2 }) {
		t.Fatalf("%s: the waiter did not queue; stderr:\n%s", key, child.stderr)
	}
	time.Sleep(300 * time.Millisecond) // its watch or subscription in place
	child.freeze(t)
	s.Add(func(s *attackStats) { s.Faults++ })

	// H releases: the lock goes to the frozen waiter.
	if err := h.Release(ctx); err != nil {
		t.Fatalf("%s: H's release: %v", key, err)
	}
	// Seen at the service: the lock is held (X cannot have it) and the
	// sequencer answers the holder's token, above H's.
	var (
		t1        token.Token
		delivered bool
		x         locks.Lease
	)
	if !waitUntil(30*time.Second, func() bool {
		cur, cerr := a.seq.Current(ctx, key)
		x, err = xl.TryAcquire(ctx, key, 30*time.Second)
		if err != nil && !errors.Is(err, locks.ErrNotObtained) {
			t.Errorf("%s: X: %v", key, err)
		}
		if errors.Is(err, locks.ErrNotObtained) && !delivered && cerr == nil && cur > h.Token() {
			if again, cerr := a.seq.Current(ctx, key); cerr == nil && again == cur {
				t1, delivered = cur, true
			}
		}
		return err == nil
	}) {
		t.Fatalf("%s: X never got the lock the frozen waiter was handed", key)
	}
	t2 := x.Token()
	honest("X", t2)
	unfenced = "X"
	bit := delivered && t1 < t2
	// The write the waiter would make with the grant it was handed.
	staleErr := write("waiter (stale grant)", t1)
	lost := false
	if bit { // the old Acquire returned t1: the waiter writes, unfenced, over X's
		lost = unfenced == "X"
		unfenced = "waiter"
	}
	s.Add(func(s *attackStats) {
		if lost {
			s.Control++
		}
		if delivered {
			s.Attempts++
			if staleErr != nil {
				s.Refused++
			} else {
				s.Accepted++
			}
		}
	})
	if delivered && staleErr == nil {
		t.Errorf("%s: the fence accepted the stale grant %d after X claimed %d", key, t1, t2)
	}

	// The waiter resumes: it must wait for X.
	child.thaw(t)
	if l, ok := child.line(1500 * time.Millisecond); ok {
		tok := leaseToken(l)
		if tok == 0 {
			// Not a grant: safe, though the waiter gave up instead of
			// queueing again (seen with zklock, whose connection the
			// server closed while the waiter was frozen).
			t.Logf("%s: the resumed waiter gave up while X holds the lock: %q", key, l)
			child.wait(t)
			if err := x.Release(ctx); err != nil {
				t.Errorf("%s: X's release: %v", key, err)
			}
			return
		}
		t.Errorf("%s: the resumed waiter said %q while X holds the lock with %d (handed %d)", key, l, t2, t1)
		err := write("waiter (while X holds)", tok)
		s.Add(func(s *attackStats) {
			s.Attempts++
			if err != nil {
				s.Refused++
			} else {
				s.Accepted++
			}
		})
		child.wait(t)
		_ = x.Release(ctx)
		return
	}
	honest("X", t2) // X's second access
	if err := x.Release(ctx); err != nil {
		t.Errorf("%s: X's release: %v", key, err)
	}
	l, _ := child.line(30 * time.Second)
	t3 := leaseToken(l)
	switch {
	case t3 == 0:
		t.Errorf("%s: the waiter, after X released: %q; stderr:\n%s", key, l, child.stderr)
	case t3 <= t2:
		t.Errorf("%s: the waiter was granted %d, not above X's %d", key, t3, t2)
		err := write("waiter", t3)
		s.Add(func(s *attackStats) {
			s.Attempts++
			if err != nil {
				s.Refused++
			} else {
				s.Accepted++
			}
		})
	default:
		honest("waiter", t3)
	}
	child.say("release")
	child.wait(t)
	t.Logf("%s: H %d, handed to the frozen waiter %d (seen: %v), X %d, the waiter's own grant after X %d; stale write refused: %v",
		key, h.Token(), t1, delivered, t2, t3, staleErr)
}

// leaseToken is the token of a waiter's "lease <token>" line, 0 for any
// other line.
func leaseToken(l string) token.Token {
	f, ok := strings.CutPrefix(l, "lease ")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(f, 10, 64)
	if err != nil {
		return 0
	}
	return token.Token(n)
}
