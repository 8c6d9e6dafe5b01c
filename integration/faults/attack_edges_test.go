package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// The number range: tokens where doubles stop being exact (2^53), at the
// signed 64-bit ceiling every locker and PostgreSQL stop at (2^63−1), and at
// the top of uint64 (2^64−1). Lua numbers and float64 are exact only below
// 2^53: above it, 2^53+1 rounds to 2^53 — a counter incremented there
// repeats a token, and a fence comparing there accepts a stale one.

func init() {
	registerAttack(attack{
		Name: "edges/lockers",
		About: "redislock (acquire and hand-over; tokens the server clock plus the heal offset) and redlock (5 nodes; tokens the nodes' clocks plus their offsets) healed to 2^53−3 and just below the ceiling 2^63−1: every grant's token exact, " +
			"and the previous holder's token presented after the next grant's (attempts; also acquires and heals past the ceiling, which must fail with a RangeError). " +
			"memlock has no heal: its counter cannot get there. Control: the old Lua double scripts (redislock's %.0f mint, redlock's tonumber write-back) on the same nodes repeat tokens",
		Rounds: 2,
		Short:  1,
		Run:    attackEdgesLockers,
	})
	registerAttack(attack{
		Name: "edges/enforcers",
		About: "MemoryFence, the Redis, etcd and ZooKeeper Fences, PostgreSQL's Fence, Tx and Table, httpmw on PostgreSQL's Fence (no check): claims climbing 2^53−2 … 2^53+2, 2^63−2, 2^63−1, 2^64−2, 2^64−1, " +
			"each followed by the one before (attempts), and tokens beyond a store's range (PostgreSQL: 2^63 and up, a RangeError; httpmw: 400). Control: fences comparing as float64 (Go) and as Lua numbers (on the same Redis)",
		Rounds: 2,
		Short:  1,
		Run:    attackEdgesEnforcers,
	})
}

const (
	edge53 token.Token = 1 << 53
	edge63 token.Token = math.MaxInt64
	edge64 token.Token = math.MaxUint64
)

func edgeCtx(t *testing.T) context.Context { return lagCtx(t, 2*time.Minute) }

// edgeGrants feeds grants, in order, to a MemoryFence as their holders
// would: each new holder claims its token, then the previous holder
// presents its own. It counts into s (the control's violations into
// Control when control is set).
type edgeGrants struct {
	fence   token.MemoryFence
	key     string
	prev    token.Token
	control bool
}

func newEdgeGrants(key string, control bool) *edgeGrants {
	g := &edgeGrants{key: key, control: control}
	g.fence.Check = token.NoCheck()
	return g
}

func (g *edgeGrants) grant(ctx context.Context, s *attackStats, tok token.Token) {
	honest := g.fence.Claim(ctx, g.key, tok)
	var stale error = errEdgeNoAttempt
	if g.prev != 0 {
		stale = g.fence.Claim(ctx, g.key, g.prev)
	}
	g.prev = tok
	s.Add(func(s *attackStats) {
		if g.control {
			if stale == nil {
				s.Control++
			}
			return
		}
		s.Faults++
		if honest != nil {
			s.Lockouts++
		}
		if stale != errEdgeNoAttempt {
			s.Attempts++
			if stale == nil {
				s.Accepted++
			} else {
				s.Refused++
			}
		}
	})
}

var errEdgeNoAttempt = errors.New("no previous holder")

// edgeRangeRefusal counts an operation past a ceiling, which must fail with
// a *token.RangeError (and change nothing).
func edgeRangeRefusal(t *testing.T, s *attackStats, what string, err error) {
	t.Helper()
	var re *token.RangeError
	ok := errors.As(err, &re) && errors.Is(err, token.ErrRange)
	if err != nil && !ok {
		t.Errorf("%s: %v, want a *token.RangeError", what, err)
	}
	s.Add(func(s *attackStats) {
		s.Attempts++
		if err == nil {
			s.Accepted++
		} else {
			s.Refused++
		}
	})
}

// ---- edges/lockers ----

// edgeOldMint is redislock's acquire arithmetic before the fix: the
// counter read as a Lua number, incremented, formatted with %.0f.
var edgeOldMint = redis.NewScript(`
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowstr = t[1] .. string.format('%06d', tonumber(t[2]))
local prev = redis.call('SET', KEYS[1], nowstr, 'PX', 60000, 'GET')
if prev and tonumber(prev) >= nowus then
  local s = string.format('%.0f', tonumber(prev) + 1)
  redis.call('SET', KEYS[1], s, 'PX', 60000)
  return s
end
return nowstr
`)

// edgeOldRedlockRead and edgeOldRedlockWriteBack are redlock's counter
// scripts before the fix (without the lock key): a node's counter read as
// a Lua number, and written back only when below the token — compared as
// Lua numbers. The token is the largest counter + 1, in Go.
var (
	edgeOldRedlockRead = redis.NewScript(`
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < nowus then c = nowus end
return string.format('%.0f', c)
`)
	edgeOldRedlockWriteBack = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
end
return 1
`)
)

func attackEdgesLockers(t *testing.T, s *attackStats) {
	ctx := edgeCtx(t)
	db := redisserver.Shared(t)
	newClient := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
		t.Cleanup(func() { c.Close() })
		return c
	}
	rc := newClient(db.Addr)
	newLocker := func() *redislock.Locker {
		l, err := redislock.New(newClient(db.Addr), redislock.Options{Prefix: db.Prefix + "lock:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	ra, rb := newLocker(), newLocker()
	nodes := redisserver.SharedN(t, 5)
	var rl []redlock.Client
	var rlRaw []*redis.Client
	for _, n := range nodes {
		c := newClient(n.Addr)
		rl, rlRaw = append(rl, c), append(rlRaw, c)
	}
	red, err := redlock.New(rl, redlock.Options{Prefix: nodes[0].Prefix + "redlock:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { red.Close() })
	const ttl = 10 * time.Second
	const start = edge53 - 3 // grants 2^53−2 … 2^53+3

	for round := 0; round < s.Rounds(); round++ {
		key := fmt.Sprint("edge", round)

		// redislock: plain acquires and hand-overs to a queued waiter.
		// Healed tokens are the server clock plus the heal offset d
		// (target − the clock at the heal): exact means each token minus
		// d is a reading of the server clock during the grants.
		before := edgeServerMicros(ctx, t, rc)
		if got, err := ra.Heal(ctx, key, start); err != nil || got != start {
			t.Fatalf("redislock: Heal(2^53−3) = %d, %v", got, err)
		}
		d := edgeOffset(ctx, t, rc, db.Prefix+"lock:{"+key+"}:tok", start, before)
		var toks []token.Token
		g := newEdgeGrants("redislock/"+key, false)
		queue := db.Prefix + "lock:{" + key + "}:q"
		for i := 0; i < 6; i += 2 {
			h, err := ra.Acquire(ctx, key, ttl)
			if err != nil {
				t.Fatalf("redislock: grant %d: %v", i, err)
			}
			toks = append(toks, h.Token())
			g.grant(ctx, s, h.Token())
			type acquired struct {
				tok token.Token
				rel func(context.Context) error
				err error
			}
			got := make(chan acquired, 1)
			go func() {
				l, err := rb.Acquire(ctx, key, ttl)
				if err != nil {
					got <- acquired{err: err}
					return
				}
				got <- acquired{tok: l.Token(), rel: l.Release}
			}()
			for rc.ZCard(ctx, queue).Val() != 1 {
				time.Sleep(2 * time.Millisecond)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w := <-got
			if w.err != nil {
				t.Fatalf("redislock: hand-over %d: %v", i+1, w.err)
			}
			toks = append(toks, w.tok)
			g.grant(ctx, s, w.tok)
			if is, err := ra.Issued(ctx, key); err != nil || is < w.tok {
				t.Errorf("redislock: Issued = %d, %v after granting %d", is, err, w.tok)
			}
			if err := w.rel(ctx); err != nil {
				t.Fatal(err)
			}
		}
		edgeHealed(t, "redislock past 2^53 (acquires, hand-overs)", toks, start, d, before, edgeServerMicros(ctx, t, rc))
		// The ceiling: healed to 2^63−3 − 1s, grants below 2^63−1 for a
		// second of clock; then, healed to 2^63−2, nothing (the floor is
		// past the ceiling a µs after); heals to the ceiling and past it
		// refused.
		top := key + "-top"
		const topTarget = edge63 - 2 - 1_000_000
		before = edgeServerMicros(ctx, t, rc)
		if _, err := ra.Heal(ctx, top, topTarget); err != nil {
			t.Fatalf("redislock: Heal(2^63−3 − 1s): %v", err)
		}
		d = edgeOffset(ctx, t, rc, db.Prefix+"lock:{"+top+"}:tok", topTarget, before)
		toks = toks[:0]
		gt := newEdgeGrants("redislock/"+top, false)
		for i := range 2 {
			h, err := ra.Acquire(ctx, top, ttl)
			if err != nil {
				t.Fatalf("redislock: grant %d below the ceiling: %v", i, err)
			}
			toks = append(toks, h.Token())
			gt.grant(ctx, s, h.Token())
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		edgeHealed(t, "redislock below the ceiling", toks, topTarget, d, before, edgeServerMicros(ctx, t, rc))
		if _, err := ra.Heal(ctx, top, redislock.MaxToken-1); err != nil {
			t.Fatalf("redislock: Heal(2^63−2): %v", err)
		}
		time.Sleep(2 * time.Millisecond)
		l, err := ra.Acquire(ctx, top, ttl)
		if err == nil {
			l.Release(ctx)
		}
		edgeRangeRefusal(t, s, "redislock: Acquire past the ceiling", err)
		for _, to := range []token.Token{edge63, edge64} {
			_, err := ra.Heal(ctx, key, to)
			edgeRangeRefusal(t, s, fmt.Sprintf("redislock: Heal(%d)", to), err)
		}

		// redlock, 5 nodes. Healed tokens are the nodes' clocks plus their
		// offsets (the target's lead over each node's clock at the heal),
		// + 1: strictly increasing from above the target, and within the
		// clock time the grants took of it.
		before = edgeServerMicros(ctx, t, rlRaw[0])
		if err := red.Heal(ctx, key, start); err != nil {
			t.Fatalf("redlock: Heal(2^53−3): %v", err)
		}
		g = newEdgeGrants("redlock/"+key, false)
		toks = toks[:0]
		for i := range 6 {
			l, err := red.Acquire(ctx, key, ttl)
			if err != nil {
				t.Fatalf("redlock: grant %d: %v", i, err)
			}
			toks = append(toks, l.Token())
			g.grant(ctx, s, l.Token())
			if is, err := red.Issued(ctx, key); err != nil || is < l.Token() {
				t.Errorf("redlock: Issued = %d, %v while %d is held", is, err, l.Token())
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		edgeWithin(t, "redlock past 2^53", toks, start, before, edgeServerMicros(ctx, t, rlRaw[0]))
		// The ceiling, as for redislock: healed to 2^63−3 − 1s, grants
		// below the ceiling for a second of clock; then nothing.
		before = edgeServerMicros(ctx, t, rlRaw[0])
		if err := red.Heal(ctx, top, topTarget); err != nil {
			t.Fatalf("redlock: Heal(2^63−3 − 1s): %v", err)
		}
		gt = newEdgeGrants("redlock/"+top, false)
		toks = toks[:0]
		for i := range 2 {
			l, err := red.Acquire(ctx, top, ttl)
			if err != nil {
				t.Fatalf("redlock: grant %d below the ceiling: %v", i, err)
			}
			toks = append(toks, l.Token())
			gt.grant(ctx, s, l.Token())
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		edgeWithin(t, "redlock below the ceiling", toks, topTarget, before, edgeServerMicros(ctx, t, rlRaw[0]))
		if err := red.Heal(ctx, top, token.MaxInt64-1); err != nil {
			t.Fatalf("redlock: Heal(2^63−2): %v", err)
		}
		time.Sleep(2 * time.Millisecond)
		l, err = red.Acquire(ctx, top, ttl)
		if err == nil {
			l.Release(ctx)
		}
		edgeRangeRefusal(t, s, "redlock: Acquire past the ceiling", err)
		for _, to := range []token.Token{edge63, edge64} {
			err := red.Heal(ctx, key, to)
			edgeRangeRefusal(t, s, fmt.Sprintf("redlock: Heal(%d)", to), err)
		}

		// The controls, on the same servers, from the same heal target.
		counter := db.Prefix + "old:{" + key + "}:tok"
		if err := rc.Set(ctx, counter, start.String(), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		g = newEdgeGrants("old-redislock/"+key, true)
		for i := range 6 {
			v, err := edgeOldMint.Run(ctx, rc, []string{counter}).Text()
			if err != nil {
				t.Fatalf("the old mint, grant %d: %v", i, err)
			}
			g.grant(ctx, s, edgeParse(t, v))
		}
		okey := nodes[0].Prefix + "old:{" + key + "}:tok"
		for _, c := range rlRaw {
			if err := c.Set(ctx, okey, start.String(), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		g = newEdgeGrants("old-redlock/"+key, true)
		for i := range 6 {
			var top token.Token
			for _, c := range rlRaw {
				v, err := edgeOldRedlockRead.Run(ctx, c, []string{okey}).Text()
				if err != nil {
					t.Fatalf("the old redlock read, grant %d: %v", i, err)
				}
				top = max(top, edgeParse(t, v))
			}
			tok := top + 1
			for _, c := range rlRaw {
				if err := edgeOldRedlockWriteBack.Run(ctx, c, []string{okey}, tok.String()).Err(); err != nil {
					t.Fatalf("the old redlock write-back, grant %d: %v", i, err)
				}
			}
			g.grant(ctx, s, tok)
		}
		s.Add(func(s *attackStats) { s.Runs++ })
	}
}

// edgeServerMicros reads the server clock in µs.
func edgeServerMicros(ctx context.Context, t *testing.T, c *redis.Client) token.Token {
	t.Helper()
	tm, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return token.Token(tm.UnixMicro())
}

// edgeOffset reads redislock's heal offset, in the counter's key
// ("counter:offset"), for a key healed to target at a server time after
// before: target − the clock at the heal.
func edgeOffset(ctx context.Context, t *testing.T, c *redis.Client, key string, target, before token.Token) token.Token {
	t.Helper()
	_, ds, _ := strings.Cut(c.Get(ctx, key).Val(), ":")
	d := edgeParse(t, ds)
	if d == 0 || d >= target || target-d < before {
		t.Fatalf("redislock: heal offset %d for target %d healed after server time %d", d, target, before)
	}
	return d
}

// edgeHealed checks redislock's tokens after a heal to target with offset
// d: strictly increasing above target, each exactly a server clock reading
// in [before, after] plus d.
func edgeHealed(t *testing.T, what string, toks []token.Token, target, d, before, after token.Token) {
	t.Helper()
	for i, tok := range toks {
		if tok <= target || (i > 0 && tok <= toks[i-1]) || tok > edge63 {
			t.Errorf("%s: tokens %v, want strictly increasing in (%d, 2^63−1]", what, toks, target)
			return
		}
		if at := tok - d; at < before || at > after {
			t.Errorf("%s: token %d − offset %d = %d, not a server clock reading in [%d, %d]", what, tok, d, at, before, after)
		}
	}
}

// edgeWithin checks redlock's tokens after a heal to target between the
// server times before and after: strictly increasing in (target, target
// + (after − before) + 1] — each node's offset is at most target −
// before, its clock at most after.
func edgeWithin(t *testing.T, what string, toks []token.Token, target, before, after token.Token) {
	t.Helper()
	for i, tok := range toks {
		if tok <= target || (i > 0 && tok <= toks[i-1]) || tok > target+(after-before)+1 || tok > edge63 {
			t.Errorf("%s: tokens %v, want strictly increasing in (%d, %d]", what, toks, target, target+(after-before)+1)
			return
		}
	}
}

func edgeParse(t *testing.T, v string) token.Token {
	t.Helper()
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("a token %q: %v", v, err)
	}
	return token.Token(n)
}

// ---- edges/enforcers ----

// edgeEnforcer is one enforcer, as a claim; max is the largest token its
// store holds.
type edgeEnforcer struct {
	name  string
	claim func(ctx context.Context, resource string, t token.Token) error
	max   token.Token
}

// edgeFloatFence is a fence that compares as float64: the Go control.
type edgeFloatFence struct{ marks map[string]float64 }

func (f *edgeFloatFence) Claim(_ context.Context, r string, t token.Token) error {
	if cur, ok := f.marks[r]; ok && float64(t) < cur {
		return &token.StaleError{Resource: r, Presented: t}
	}
	f.marks[r] = float64(t)
	return nil
}

// edgeLuaFence is a Redis fence that compares as Lua numbers: the Lua
// control, on the same Redis as the real one.
var edgeLuaFence = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) > tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

// edgeHTTPError is an httpmw refusal other than 409.
type edgeHTTPError struct{ code int }

func (e *edgeHTTPError) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

func attackEdgesEnforcers(t *testing.T, s *attackStats) {
	ctx := edgeCtx(t)
	var es []edgeEnforcer

	mem := &token.MemoryFence{Check: token.NoCheck(), Logger: quietLog}
	es = append(es, edgeEnforcer{"memory", mem.Claim, edge64})

	rdb := redisserver.Shared(t)
	rc := redis.NewClient(&redis.Options{Addr: rdb.Addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { rc.Close() })
	rf := redislock.NewFence(rc, redislock.FenceOptions{Prefix: rdb.Prefix + "fence:", Check: token.NoCheck(), Logger: quietLog})
	es = append(es, edgeEnforcer{"redis", rf.Claim, edge64})

	edb := etcdserver.Shared(t)
	cli, err := clientv3.New(etcdConfig(edb.Endpoints))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ef := etcdlock.NewFence(cli, etcdlock.FenceOptions{Prefix: edb.Prefix + "fence/", Check: token.NoCheck(), Logger: quietLog})
	es = append(es, edgeEnforcer{"etcd", ef.Claim, edge64})

	z := zkserver.Shared(t)
	zf := zklock.NewFence(lagZKConnect(t, z.Addrs[0]), zklock.FenceOptions{Prefix: z.Chroot + "/fence", Check: token.NoCheck(), Logger: quietLog})
	es = append(es, edgeEnforcer{"zk", zf.Claim, edge64})

	pg := pgserver.Shared(t)
	pcfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	tokens, err := postgres.NewTokens(postgres.TokensOptions{Check: token.NoCheck(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE edge_rows (id text PRIMARY KEY, n int NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	tbl, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"edge_rows"}, Key: "id", Tokens: tokens, Check: token.NoCheck(), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	pgFence := tokens.Fence(pool)
	es = append(es,
		edgeEnforcer{"pg-fence", pgFence.Claim, edge63},
		edgeEnforcer{"pg-tx", func(ctx context.Context, r string, t token.Token) error {
			return tokens.Tx(ctx, pool, "tx/"+r, t, func(pgx.Tx) error { return nil })
		}, edge63},
		edgeEnforcer{"pg-table", func(ctx context.Context, r string, t token.Token) error {
			if _, err := pool.Exec(ctx, `INSERT INTO edge_rows (id) VALUES ($1) ON CONFLICT DO NOTHING`, r); err != nil {
				return err
			}
			return tbl.Update(ctx, pool, r, t, postgres.Set("n", 1))
		}, edge63},
	)

	mw, err := httpmw.New(httpmw.Options{Resource: httpmw.PathValue("id"), Fence: tokens.Fence(pool), Check: token.NoCheck()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /item/{id}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	put := func(ctx context.Context, r, header string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/item/"+r, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set(token.Header, header)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	es = append(es, edgeEnforcer{"httpmw+pg", func(ctx context.Context, r string, t token.Token) error {
		code, err := put(ctx, r, t.String())
		switch {
		case err != nil:
			return err
		case code == http.StatusOK:
			return nil
		case code == http.StatusConflict:
			return &token.StaleError{Resource: r, Presented: t}
		}
		return &edgeHTTPError{code}
	}, edge63})

	climb := []token.Token{edge53 - 2, edge53 - 1, edge53, edge53 + 1, edge53 + 2, edge63 - 1, edge63, edge64 - 1, edge64}
	for round := 0; round < s.Rounds(); round++ {
		for _, e := range es {
			r := fmt.Sprintf("edge%d-%s", round, e.name)
			var prev token.Token
			for _, tok := range climb {
				if tok > e.max {
					// Beyond the store: refused as out of range, nothing moved.
					err := e.claim(ctx, r, tok)
					var he *edgeHTTPError
					if e.name == "httpmw+pg" {
						if err != nil && !(errors.As(err, &he) && he.code == http.StatusBadRequest) {
							t.Errorf("%s: token %d: %v, want HTTP 400", e.name, tok, err)
						}
						s.Add(func(s *attackStats) {
							s.Faults++
							s.Attempts++
							if err == nil {
								s.Accepted++
							} else {
								s.Refused++
							}
						})
					} else {
						s.Add(func(s *attackStats) { s.Faults++ })
						edgeRangeRefusal(t, s, fmt.Sprintf("%s: token %d", e.name, tok), err)
					}
					continue
				}
				honest := e.claim(ctx, r, tok)
				again := e.claim(ctx, r, tok) // the same holder's next access
				var stale error = errEdgeNoAttempt
				if prev != 0 {
					stale = e.claim(ctx, r, prev)
					if stale != nil && !errors.Is(stale, token.ErrStale) {
						t.Errorf("%s: the stale %d after %d: %v, want a StaleError", e.name, prev, tok, stale)
					}
				}
				for _, err := range []error{honest, again} {
					if err != nil && !errors.Is(err, token.ErrStale) {
						t.Errorf("%s: claim %d: %v", e.name, tok, err)
					}
				}
				prev = tok
				s.Add(func(s *attackStats) {
					s.Faults++
					if honest != nil || again != nil {
						s.Lockouts++
					}
					if stale != errEdgeNoAttempt {
						s.Attempts++
						if stale == nil {
							s.Accepted++
						} else {
							s.Refused++
						}
					}
				})
			}
			if e.max == edge63 && e.name != "httpmw+pg" {
				// The exact bigint mark is still 2^63−1.
				if err := e.claim(ctx, r, edge63-1); !errors.Is(err, token.ErrStale) {
					t.Errorf("%s: 2^63−2 after the out-of-range tokens: %v, want stale", e.name, err)
				}
			}
		}
		// httpmw's header parsing beyond uint64: 400 whatever the fence.
		for _, h := range []string{"18446744073709551616", "99999999999999999999", "184467440737095516150"} {
			code, err := put(ctx, fmt.Sprintf("edge%d-parse", round), h)
			if err != nil {
				t.Fatal(err)
			}
			if code != http.StatusBadRequest {
				t.Errorf("httpmw: header %s: HTTP %d, want 400", h, code)
			}
			s.Add(func(s *attackStats) {
				s.Faults++
				s.Attempts++
				if code/100 == 4 {
					s.Refused++
				} else {
					s.Accepted++
				}
			})
		}

		// The controls: the same climb through fences comparing as
		// doubles.
		float := &edgeFloatFence{marks: map[string]float64{}}
		lua := func(ctx context.Context, r string, t token.Token) error {
			ok, err := edgeLuaFence.Run(ctx, rc, []string{rdb.Prefix + "luafence:{" + r + "}"}, t.String()).Int()
			if err != nil {
				return err
			}
			if ok == 0 {
				return &token.StaleError{Resource: r, Presented: t}
			}
			return nil
		}
		for _, c := range []func(context.Context, string, token.Token) error{float.Claim, lua} {
			r := fmt.Sprint("edge", round)
			var prev token.Token
			for _, tok := range climb {
				if err := c(ctx, r, tok); err != nil && !errors.Is(err, token.ErrStale) {
					t.Fatalf("control: claim %d: %v", tok, err)
				}
				if prev != 0 {
					err := c(ctx, r, prev)
					if err != nil && !errors.Is(err, token.ErrStale) {
						t.Fatalf("control: claim %d: %v", prev, err)
					}
					if err == nil {
						s.Add(func(s *attackStats) { s.Control++ })
					}
				}
				prev = tok
			}
		}
		s.Add(func(s *attackStats) { s.Runs++ })
	}
}
