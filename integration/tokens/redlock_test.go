package tokens

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/token"
)

// rl is a test's five Redis nodes and its redlock prefix.
type rl struct {
	t      *testing.T
	cs     []*redis.Client
	dead   *redis.Client // a node that never answers
	prefix string
}

func newRL(t *testing.T) *rl {
	t.Helper()
	dbs := redisserver.SharedN(t, 5)
	r := &rl{t: t, prefix: dbs[0].Prefix + "rl:"}
	for _, db := range dbs {
		c := redis.NewClient(&redis.Options{Addr: db.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		r.cs = append(r.cs, c)
	}
	r.dead = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { r.dead.Close() })
	return r
}

// locker returns a Locker over the five nodes, those not in up replaced by
// a dead one (nil: all up).
func (r *rl) locker(o redlock.Options, up ...int) *redlock.Locker {
	r.t.Helper()
	o.Prefix = r.prefix
	nodes := make([]redlock.Client, 5)
	for i := range nodes {
		nodes[i] = r.dead
	}
	if len(up) == 0 {
		up = []int{0, 1, 2, 3, 4}
	}
	for _, i := range up {
		nodes[i] = r.cs[i]
	}
	l, err := redlock.New(nodes, o)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { l.Close() })
	return l
}

func (r *rl) counterKey(key string) string { return r.prefix + "{" + key + "}:tok" }

// restart simulates node i restarting without persistence: its keys of
// key are gone.
func (r *rl) restart(ctx context.Context, i int, key string) {
	r.t.Helper()
	if err := r.cs[i].Del(ctx, r.prefix+"{"+key+"}", r.counterKey(key)).Err(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rl) set(ctx context.Context, i int, key, v string) {
	r.t.Helper()
	if err := r.cs[i].Set(ctx, r.counterKey(key), v, time.Hour).Err(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rl) get(ctx context.Context, i int, key string) string {
	v, _ := r.cs[i].Get(ctx, r.counterKey(key)).Result()
	return v
}

func (r *rl) now(ctx context.Context) token.Token {
	r.t.Helper()
	tm, err := r.cs[0].Time(ctx).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return token.Token(tm.UnixMicro())
}

// TestRedlockIssuedAtLeastHealedTokenAfterIdle: Issued is "an upper bound of
// every token granted for key". After a Heal above the clocks, a holder whose
// lease outlives Options.CounterIdle (neither Acquire's lock nor Renew
// refreshes the counter key) sees its counters and offsets idle out on every
// node; Issued still answers at least the token held (it reads the held
// grant's token too), not the bare clock below it.
func TestRedlockIssuedAtLeastHealedTokenAfterIdle(t *testing.T) {
	r := newRL(t)
	ctx := itest.Ctx(t, 20*time.Second)
	l := r.locker(redlock.Options{CounterIdle: time.Second})
	if err := l.Heal(ctx, "k", r.now(ctx)+token.Token(time.Hour.Microseconds())); err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(ctx, "k", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	time.Sleep(1500 * time.Millisecond)
	if err := ls.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	iss, err := l.Issued(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if iss < ls.Token() {
		t.Fatalf("Issued %d below the token %d still held (counters idled out after CounterIdle)", iss, ls.Token())
	}
}

// TestRedlockHealToMaxHealRefusesGrants: Heal raises the offset to the
// target's lead over the clock, so a µs after Heal(MaxHeal) the floor is past
// the ceiling: the next grant is refused with a RangeError and nothing is
// held, as MaxHeal's doc says.
func TestRedlockHealToMaxHealRefusesGrants(t *testing.T) {
	r := newRL(t)
	ctx := itest.Ctx(t, 10*time.Second)
	l := r.locker(redlock.Options{})
	if err := l.Heal(ctx, "k", token.MaxInt64-1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	ls, err := l.TryAcquire(ctx, "k", time.Second)
	if err == nil {
		_ = ls.Release(ctx)
		t.Fatalf("a grant after Heal(MaxHeal), token %d; the doc says past the ceiling", ls.Token())
	}
	if !errors.Is(err, token.ErrRange) {
		t.Fatalf("after Heal(MaxHeal): %v; want a RangeError", err)
	}
}

// TestRedlockOneNodeCeilingOffsetBlocksQuorum: one node of five holds a
// counter value that parses ("1:9223372036854775807": counter 1, offset at the
// ceiling) but no grant wrote. Its floor is the ceiling, and the mint fails
// the whole attempt with a RangeError although the four healthy nodes are a
// quorum: a malformed value costs one node (CounterError), a valid-looking
// absurd offset costs the lock until CounterIdle or a manual delete (Heal
// only raises offsets). It fails closed. Known defect.
func TestRedlockOneNodeCeilingOffsetBlocksQuorum(t *testing.T) {
	itest.KnownDefect(t, "one node planted with an offset at the ceiling fails every grant closed (RangeError) until CounterIdle or a delete; not fixed")
	r := newRL(t)
	ctx := itest.Ctx(t, 10*time.Second)
	l := r.locker(redlock.Options{})
	r.set(ctx, 0, "k", "1:9223372036854775807")
	if err := l.Heal(ctx, "k", r.now(ctx)+1000); err != nil {
		t.Fatal(err)
	}
	ls, err := l.TryAcquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("four healthy nodes of five, one with a ceiling offset, healed: %v (ErrRange %v)", err, errors.Is(err, token.ErrRange))
	}
	_ = ls.Release(ctx)
}

// TestRedlockGarbageCounterTyped: malformed combined values on every
// node fail Acquire, TryAcquire and Issued with a *redlock.CounterError
// that errors.Is token.ErrInvalid, grant nothing (no lock key written),
// and Heal replaces them; the next token is above the heal target. On a
// single node, the other four still grant.
func TestRedlockGarbageCounterTyped(t *testing.T) {
	r := newRL(t)
	ctx := itest.Ctx(t, 25*time.Second)
	l := r.locker(redlock.Options{})
	bad := []string{"5:", ":5", "5:6:7", "05", "5:06", "", ":", "5:99999999999999999999",
		"99999999999999999999", "-1", "5:-1", "1e3", " 5", "5 ", "5:9223372036854775808", "9223372036854775808",
		"0x10", "5:5:", "+5"}
	for n, v := range bad {
		key := fmt.Sprint("k", n)
		for i := range 5 {
			r.set(ctx, i, key, v)
		}
		_, err := l.TryAcquire(ctx, key, time.Second)
		var ce *redlock.CounterError
		if !errors.As(err, &ce) || !errors.Is(err, token.ErrInvalid) {
			t.Errorf("%q: TryAcquire %v", v, err)
		}
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = l.Acquire(actx, key, time.Second)
		cancel()
		if !errors.As(err, &ce) || !errors.Is(err, token.ErrInvalid) {
			t.Errorf("%q: Acquire %v", v, err)
		}
		if _, err := l.Issued(ctx, key); !errors.As(err, &ce) || !errors.Is(err, token.ErrInvalid) {
			t.Errorf("%q: Issued %v", v, err)
		}
		for i := range 5 {
			if ex, _ := r.cs[i].Exists(ctx, r.prefix+"{"+key+"}").Result(); ex != 0 {
				t.Errorf("%q: node %d lock taken", v, i)
			}
		}
		target := r.now(ctx) + 5_000_000
		if err := l.Heal(ctx, key, target); err != nil {
			t.Errorf("%q: heal %v", v, err)
			continue
		}
		ls, err := l.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Errorf("%q: after heal %v", v, err)
			continue
		}
		if ls.Token() <= target {
			t.Errorf("%q: token %d not above heal target %d", v, ls.Token(), target)
		}
		_ = ls.Release(ctx)
	}
	// One node's garbage costs that node only.
	r.set(ctx, 2, "one", "5:")
	ls, err := l.TryAcquire(ctx, "one", time.Second)
	if err != nil {
		t.Fatalf("four good nodes: %v", err)
	}
	_ = ls.Release(ctx)
}

// TestRedlockNumericEdges: heals at 2^53 ± 1 and near 2^63 − 1 give exact
// tokens above the target, strictly increasing, within the ceiling, and
// Issued bounds each; targets 0 and above MaxHeal are refused as
// ErrInvalid (with a RangeError) before touching a node; at the ceiling a
// grant is refused with ErrRange, never repeated.
func TestRedlockNumericEdges(t *testing.T) {
	r := newRL(t)
	ctx := itest.Ctx(t, 20*time.Second)
	l := r.locker(redlock.Options{})
	for _, target := range []token.Token{1<<53 - 1, 1 << 53, 1<<53 + 1, token.MaxInt64 - 3_000_000} {
		key := fmt.Sprint("k", target)
		if err := l.Heal(ctx, key, target); err != nil {
			t.Fatal(err)
		}
		var last token.Token = target
		for range 5 {
			ls, err := l.TryAcquire(ctx, key, time.Second)
			if err != nil {
				t.Fatalf("target %d: %v", target, err)
			}
			if ls.Token() <= last || ls.Token() > token.MaxInt64 {
				t.Fatalf("target %d: token %d after %d", target, ls.Token(), last)
			}
			iss, err := l.Issued(ctx, key)
			if err != nil || iss < ls.Token() {
				t.Fatalf("target %d: Issued %d < token %d (%v)", target, iss, ls.Token(), err)
			}
			last = ls.Token()
			_ = ls.Release(ctx)
		}
		if last-target > token.Token(time.Minute.Microseconds()) { // exact lead: tokens follow target + elapsed
			t.Fatalf("target %d: token %d far ahead", target, last)
		}
	}
	for _, bad := range []token.Token{0, token.MaxInt64, token.MaxInt64 + 1, ^token.Token(0)} {
		if err := l.Heal(ctx, "x", bad); !errors.Is(err, locks.ErrInvalidArgument) {
			t.Fatalf("Heal(%d): %v", bad, err)
		}
	}
	if v := r.get(ctx, 0, "x"); v != "" {
		t.Fatalf("refused heal wrote %q", v)
	}
	// At the ceiling: counter MaxInt64 on a majority.
	for i := range 3 {
		r.set(ctx, i, "ceil", strconv.FormatUint(uint64(token.MaxInt64), 10))
	}
	if _, err := l.TryAcquire(ctx, "ceil", time.Second); !errors.Is(err, token.ErrRange) {
		t.Fatalf("at the ceiling: %v", err)
	}
}

// restartScenario: grant A on nodes 0–2 (3 and 4 cut off), still held;
// node 2 restarts without persistence; B wins nodes 2–4 (0 and 1 cut off
// from its locker). prep runs first (heals, fast offsets). It returns both
// tokens.
func restartScenario(t *testing.T, r *rl, key string, prep func(ctx context.Context)) (a, b token.Token) {
	ctx := itest.Ctx(t, 10*time.Second)
	prep(ctx)
	la := r.locker(redlock.Options{}, 0, 1, 2)
	lb := r.locker(redlock.Options{}, 2, 3, 4)
	A, err := la.Acquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.restart(ctx, 2, key)
	time.Sleep(2 * time.Millisecond)
	B, err := lb.Acquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return A.Token(), B.Token()
}

// TestRedlockRestartInIntersectionNoEqualTokens: a node in the intersection
// of two majorities restarting without persistence (two live holders —
// Redlock's known restart hole) never gives them EQUAL tokens, with no
// heal, with a heal that reached every node, with a heal that reached only
// the first majority, and with a fast node (a large offset on node 0). The
// second holder's token is below the first's in the last two cases: a
// fence that saw A refuses B (fails closed), one that saw B first admits A
// after it — the same as any two Redlock holders after a restart, ordered
// by token; no fence admits both indefinitely.
func TestRedlockRestartInIntersectionNoEqualTokens(t *testing.T) {
	r := newRL(t)
	hour := token.Token(time.Hour.Microseconds())
	cases := []struct {
		name string
		prep func(ctx context.Context, key string)
	}{
		{"no heal", func(ctx context.Context, key string) {}},
		{"heal all nodes", func(ctx context.Context, key string) {
			if err := r.locker(redlock.Options{}).Heal(ctx, key, r.now(ctx)+hour); err != nil {
				t.Fatal(err)
			}
		}},
		{"heal first majority", func(ctx context.Context, key string) {
			if err := r.locker(redlock.Options{}, 0, 1, 2).Heal(ctx, key, r.now(ctx)+hour); err != nil {
				t.Fatal(err)
			}
		}},
		{"fast node 0", func(ctx context.Context, key string) {
			r.set(ctx, 0, key, "1:"+strconv.FormatInt(10*time.Second.Microseconds(), 10))
		}},
	}
	for _, c := range cases {
		key := strings.ReplaceAll(c.name, " ", "-")
		a, b := restartScenario(t, r, key, func(ctx context.Context) { c.prep(ctx, key) })
		t.Logf("%s: A %d, B %d (B-A %d µs)", c.name, a, b, int64(b)-int64(a))
		if a == b {
			t.Errorf("%s: equal tokens %d", c.name, a)
		}
		f := &token.MemoryFence{Check: token.NoCheck()}
		if err := f.Claim(context.Background(), "r", a); err != nil {
			t.Fatal(err)
		}
		if b <= a && f.Claim(context.Background(), "r", b) == nil {
			t.Errorf("%s: fence admitted lower B %d after A %d", c.name, b, a)
		}
	}
}

// TestRedlockNoTokenCreep: concurrent acquirers with TTLs short enough that
// attempts fail between acquire and write-back (partial write-backs),
// TryAcquires that lose, and one fast node (an offset of 2 s on node 0):
// no token is ever more than the fast node's lead ahead of the clock, and
// no node's offset grows past that lead. Without a fast node tokens never
// run ahead of the clock at all.
func TestRedlockNoTokenCreep(t *testing.T) {
	r := newRL(t)
	ctx := itest.Ctx(t, 30*time.Second)
	const lead = 2_000_000
	for _, fast := range []bool{false, true} {
		key := fmt.Sprint("k", fast)
		var allow token.Token = 1
		if fast {
			r.set(ctx, 0, key, "1:"+strconv.Itoa(lead))
			allow = lead + 1
		}
		ls := []*redlock.Locker{r.locker(redlock.Options{}), r.locker(redlock.Options{})}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var top token.Token
		var grants, errs int
		end := time.Now().Add(4 * time.Second)
		for g := range 6 {
			wg.Go(func() {
				for time.Now().Before(end) {
					ttl := []time.Duration{10 * time.Millisecond, 12 * time.Millisecond, 200 * time.Millisecond}[g%3]
					actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					var lease locks.Lease
					var err error
					if g%2 == 0 {
						lease, err = ls[g%2].TryAcquire(actx, key, ttl)
					} else {
						lease, err = ls[g%2].Acquire(actx, key, ttl)
					}
					cancel()
					if err != nil {
						mu.Lock()
						errs++
						mu.Unlock()
						continue
					}
					now := r.now(ctx)
					mu.Lock()
					grants++
					top = max(top, lease.Token())
					if lease.Token() > now+allow {
						t.Errorf("token %d ahead of clock %d by %d µs (allowed %d)", lease.Token(), now, lease.Token()-now, allow)
					}
					mu.Unlock()
					time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond))))
					_ = lease.Release(ctx)
				}
			})
		}
		wg.Wait()
		t.Logf("fast %v: %d grants, %d failed, top token %d", fast, grants, errs, top)
		for i := range 5 {
			v := r.get(ctx, i, key)
			_, d, ok := strings.Cut(v, ":")
			if !ok {
				continue
			}
			dv, _ := strconv.ParseInt(d, 10, 64)
			if !fast || dv > lead {
				t.Errorf("node %d offset %d (value %q): crept", i, dv, v)
			}
		}
	}
}
