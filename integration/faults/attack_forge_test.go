package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// forge/<locker>: honest holders — three, each with its own locker —
// take the lock in turn and access the resource twice per grant (a read,
// then a write) through three enforcers: a token.MemoryFence, a
// storage/postgres Fence (table mode) and a storage/postgres Table
// (column mode). Meanwhile an adversary, a client of the resource that
// never takes the lock, presents made-up tokens to the same enforcers:
// 2^62 (far above anything), the current grant's token plus one (it asks
// the lock service, as anyone may) and the last claimed token minus one
// (below the mark). Fenced, the enforcers check token.All(DefaultCheck,
// SequencerCheck(<locker's sequencer>)): no forged token above the current
// grant and no stale one may be accepted, and no honest access refused.
// The control is the same on the clock bound alone (DefaultCheck): a token
// just above the current holder's passes it, raises the marks, and the
// holder's next access is refused — an honest holder locked out.
//
// The design's trust model ("Forged tokens" in docs/design.md): a forger
// presenting a token up to the current grant's may act as that holder; only
// tokens above the current grant and below the mark must be refused, and
// only those are counted as attempts. A token above the grant counts only
// when it is above what the sequencer answers after the attempt (answers
// never decrease, so it was above the grant throughout); one that a newer
// grant overtook meanwhile proves nothing either way and is not counted.

func init() {
	for _, kind := range []string{memLock, redisLock, redLock, etcdLock, zkLock} {
		registerAttack(attack{
			Name: "forge/" + kind,
			About: "tokens 2^62, grant + 1 and mark − 1 forged while 3 honest holders cycle (MemoryFence, pg Fence, pg Table; sequencer check); " +
				"control: clock bound only, grant + 1 gets in and locks the holder out",
			Rounds: 3,
			Short:  1,
			Run:    func(t *testing.T, s *attackStats) { runForge(t, s, kind) },
		})
	}
}

// attackLocks is one lock service for an attack, on the package's shared
// servers: where it is, and the in-process memlock when it is that.
type attackLocks struct {
	lc  lockConfig
	mem *memlock.Locker
	seq token.Sequencer
}

// newAttackLocks sets up the lock service kind for t, with its sequencer.
func newAttackLocks(t *testing.T, kind string) *attackLocks {
	t.Helper()
	a := &attackLocks{lc: lockConfig{Kind: kind}}
	switch kind {
	case memLock:
		a.mem = memlock.New()
		a.seq = a.mem
	case redisLock:
		db := redisserver.Shared(t)
		a.lc.Addrs, a.lc.Prefix = []string{db.Addr}, db.Prefix+"lock:"
		cli := redis.NewClient(redisOptions(db.Addr))
		t.Cleanup(func() { cli.Close() })
		a.seq = redislock.NewSequencer(cli, a.lc.Prefix)
	case redLock:
		dbs := redisserver.SharedN(t, 3)
		var nodes []redlock.Client
		for _, db := range dbs {
			a.lc.Addrs = append(a.lc.Addrs, db.Addr)
			cli := redis.NewClient(redisOptions(db.Addr))
			t.Cleanup(func() { cli.Close() })
			nodes = append(nodes, cli)
		}
		a.lc.Prefix = dbs[0].Prefix + "redlock:"
		a.seq = redlock.NewSequencer(nodes, a.lc.Prefix)
	case etcdLock:
		db := etcdserver.Shared(t)
		a.lc.Addrs, a.lc.Prefix = db.Endpoints, db.Prefix+"lock/"
		cli, err := clientv3.New(etcdConfig(db.Endpoints))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		a.seq = etcdlock.NewSequencer(cli, a.lc.Prefix)
	case zkLock:
		z := zkserver.Shared(t)
		a.lc.Addrs, a.lc.Prefix = z.Addrs, z.Chroot+"/lock"
		conn, _, err := zk.Connect(z.Addrs, 10*time.Second, zk.WithLogger(zkLogger{quietLog}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		a.seq = zklock.NewSequencer(conn, a.lc.Prefix)
	default:
		t.Fatalf("no lock service %q", kind)
	}
	return a
}

// open returns a locker of its own (memlock: the shared one), closed when
// the test ends.
func (a *attackLocks) open(t *testing.T, ctx context.Context) locks.Locker {
	t.Helper()
	if a.mem != nil {
		return a.mem
	}
	l, closeLock, err := openLocker(ctx, a.lc, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeLock() })
	return l
}

// attackPG returns a pool on a fresh, migrated database of t's own.
func attackPG(t *testing.T, ctx context.Context) (*pgxpool.Pool, *pgserver.DB) {
	t.Helper()
	pg := pgserver.Shared(t)
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool, pg
}

// enforcer is one fenced access to the resource of a forge round.
type enforcer struct {
	name  string
	claim func(ctx context.Context, t token.Token) error
}

const (
	forgeHolders = 3
	forgeCycles  = 4
	forgeTTL     = 10 * time.Second
	forgeHold    = 15 * time.Millisecond // between a holder's two accesses
)

func runForge(t *testing.T, s *attackStats, kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := newAttackLocks(t, kind)
	pool, _ := attackPG(t, ctx)
	if _, err := pool.Exec(ctx, `CREATE TABLE forge_items (id bigint PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence_token bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	lockers := make([]locks.Locker, forgeHolders)
	for i := range lockers {
		lockers[i] = a.open(t, ctx)
	}
	id := int64(0)
	for round := range s.Rounds() {
		for _, control := range []bool{false, true} {
			id++
			r := forgeRound(t, ctx, a, pool, lockers, id, control)
			s.Add(func(s *attackStats) {
				s.Faults += r.sent
				if control {
					s.Control += r.lockouts + r.accepted
					return
				}
				s.Attempts += r.attempts
				s.Refused += r.refused
				s.Accepted += r.accepted
				s.Lockouts += r.lockouts
			})
			t.Logf("round %d, %s: %d forged tokens sent, %d counted (%d refused, %d accepted), %d honest accesses, %d refused (%s)",
				round, map[bool]string{false: "fenced", true: "control"}[control], r.sent, r.attempts, r.refused, r.accepted, r.honest, r.lockouts, r.firstLockout)
		}
		s.Add(func(s *attackStats) { s.Runs++ })
	}
}

type forgeResult struct {
	sent, attempts, refused, accepted int
	honest, lockouts                  int
	firstLockout                      string
}

// forgeRound is one phase on the fresh resource id: the holders cycle, the
// adversary forges until they are done.
func forgeRound(t *testing.T, ctx context.Context, a *attackLocks, pool *pgxpool.Pool, lockers []locks.Locker, id int64, control bool) forgeResult {
	t.Helper()
	lockKey := fmt.Sprintf("item:%d", id)
	tableRes := fmt.Sprintf("forge_items/%d", id)
	check := token.DefaultCheck()
	if !control {
		check = token.All(token.DefaultCheck(), token.SequencerCheck(a.seq, token.SequencerOptions{
			LockKey: func(r string) string {
				if r == tableRes {
					return lockKey
				}
				return r
			},
		}))
	}
	if _, err := pool.Exec(ctx, `INSERT INTO forge_items (id) VALUES ($1)`, id); err != nil {
		t.Fatal(err)
	}
	tokens, err := postgres.NewTokens(postgres.TokensOptions{Check: check, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	table, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{"forge_items"}, Key: "id", Tokens: tokens, Check: check, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	mem := &token.MemoryFence{Check: check, Logger: quietLog}
	pgFence := tokens.Fence(pool)
	enfs := []enforcer{
		{"memory", func(ctx context.Context, tok token.Token) error { return mem.Claim(ctx, lockKey, tok) }},
		{"pg-fence", func(ctx context.Context, tok token.Token) error { return pgFence.Claim(ctx, lockKey, tok) }},
		{"pg-table", func(ctx context.Context, tok token.Token) error {
			return table.Update(ctx, pool, id, tok, postgres.Set("v", int64(tok)))
		}},
	}

	var (
		mu      sync.Mutex
		res     forgeResult
		claimed atomic.Uint64 // the largest token whose holder has claimed every enforcer
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for h, l := range lockers {
		wg.Go(func() {
			for c := range forgeCycles {
				lease, err := l.Acquire(ctx, lockKey, forgeTTL)
				if err != nil {
					t.Errorf("holder %d, cycle %d: acquire: %v", h, c, err)
					return
				}
				tok := lease.Token()
				for access := range 2 {
					if access == 1 {
						time.Sleep(forgeHold)
					}
					for _, e := range enfs {
						err := e.claim(ctx, tok)
						mu.Lock()
						res.honest++
						if err != nil {
							res.lockouts++
							if res.firstLockout == "" {
								res.firstLockout = fmt.Sprintf("%s refused holder %d's token %d: %v", e.name, h, tok, err)
							}
						}
						mu.Unlock()
						if err != nil && !errors.Is(err, token.ErrStale) && !errors.Is(err, token.ErrForged) {
							t.Errorf("holder %d: %s: %v", h, e.name, err)
						}
					}
				}
				for {
					prev := claimed.Load()
					if uint64(tok) <= prev || claimed.CompareAndSwap(prev, uint64(tok)) {
						break
					}
				}
				if err := lease.Release(ctx); err != nil && !errors.Is(err, locks.ErrNotHeld) {
					t.Errorf("holder %d: release: %v", h, err)
				}
			}
		})
	}
	var adv sync.WaitGroup
	adv.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			cur, err := a.seq.Current(ctx, lockKey)
			if err != nil {
				t.Errorf("adversary: current: %v", err)
				return
			}
			type forged struct {
				t     token.Token
				above bool // else below the mark
			}
			fs := []forged{{1 << 62, true}, {cur + 1, true}}
			if cl := token.Token(claimed.Load()); cl > 1 {
				fs = append(fs, forged{cl - 1, false})
			}
			for _, f := range fs {
				for _, e := range enfs {
					floor := token.Token(claimed.Load())
					err := e.claim(ctx, f.t)
					if err != nil && !errors.Is(err, token.ErrStale) && !errors.Is(err, token.ErrForged) {
						t.Errorf("adversary: %s: %v", e.name, err)
					}
					counted := false
					if f.above {
						after, cerr := a.seq.Current(ctx, lockKey)
						counted = cerr == nil && f.t > after
					} else {
						counted = f.t < floor
					}
					mu.Lock()
					res.sent++
					if counted {
						res.attempts++
						if err != nil {
							res.refused++
						} else {
							res.accepted++
							if !control {
								t.Errorf("%s accepted the forged token %d (current grant %d, claimed %d)", e.name, f.t, cur, floor)
							}
						}
					}
					mu.Unlock()
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()
	close(done)
	adv.Wait()
	if !control && res.lockouts > 0 {
		t.Errorf("fenced: %d of %d honest accesses refused; first: %s", res.lockouts, res.honest, res.firstLockout)
	}
	return res
}
