package main_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// fenceStore is a store of marks as the command names it (--store and
// its options) and as the library reaches it.
type fenceStore struct {
	name      string
	args      []string // --store URL and the options that select the marks
	claim     func(ctx context.Context, resource string, t token.Token) error
	highWater func(ctx context.Context, resource string) (token.Token, error)
}

// fenceStores returns every store the command serves, each with marks of
// the test's own, in order: the high-water table, a high-water table of
// another name, column mode, Redis, etcd, ZooKeeper.
func fenceStores(t *testing.T) []fenceStore {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	pgURL, pool := pgDB(t)
	marks := postgres.NewFence(pool)
	other, err := postgres.NewTokens(postgres.TokensOptions{Name: pgx.Identifier{"public", "job_marks"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	items := itemsTable(t, pool, "items", "fence_token")
	column := func(ctx context.Context, key string, tok token.Token) error {
		return items.Upsert(ctx, pool, key, tok)
	}

	rdb, redisURL, rc := redisDB(t)
	rf := redislock.NewFence(rc, redislock.FenceOptions{Prefix: rdb.Prefix + "fence:"})
	edb, etcdURL, ec := etcdDB(t)
	ef := etcdlock.NewFence(ec, etcdlock.FenceOptions{Prefix: edb.Prefix + "fence/"})
	zdb, zkURL, zc := zkDB(t)
	zf := zklock.NewFence(zc, zklock.FenceOptions{Prefix: zdb.Chroot + "/fence"})

	return []fenceStore{
		{"postgres", []string{"--store", pgURL}, marks.Claim, marks.HighWater},
		{"postgres-tokens-table", []string{"--store", pgURL, "--tokens-table", "public.job_marks"}, other.Fence(pool).Claim, other.Fence(pool).HighWater},
		{"postgres-column", []string{"--store", pgURL, "--table", "items", "--key-column", "id"}, column,
			func(ctx context.Context, key string) (token.Token, error) { return items.HighWater(ctx, pool, key) }},
		{"redis", []string{"--store", redisURL, "--prefix", rdb.Prefix + "fence:"}, rf.Claim, rf.HighWater},
		{"etcd", []string{"--store", etcdURL, "--prefix", edb.Prefix + "fence/"}, ef.Claim, ef.HighWater},
		{"zk", []string{"--store", zkURL, "--prefix", zdb.Chroot + "/fence"}, zf.Claim, zf.HighWater},
	}
}

// itemsTable creates the table name (id text primary key, stock int) with
// the token column col, and returns the Table over it.
func itemsTable(t *testing.T, pool *pgxpool.Pool, name, col string) *postgres.Table {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (id text PRIMARY KEY, stock int NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	tb, err := postgres.NewTable(postgres.TableOptions{Name: pgx.Identifier{name}, Key: "id", Token: col})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.AddTokenColumn(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return tb
}

// cmd is the command line of a subcommand on s: args, then s's options.
func (s fenceStore) cmd(args ...string) []string {
	return append(append(append([]string(nil), args[:len(args)-1]...), s.args...), args[len(args)-1])
}

// mark fails the test unless the library reads resource's mark as want.
func (s fenceStore) mark(t *testing.T, ctx context.Context, resource string, want token.Token) {
	t.Helper()
	got, err := s.highWater(ctx, resource)
	if err != nil || got != want {
		t.Fatalf("%s: the library reads %s's mark as %d, %v; want %d", s.name, resource, got, err, want)
	}
}

// Every store prints the mark the library set, 0 for a resource without
// one, and the same as JSON with the store, the resource and the token.
func TestFenceGetPrintsTheMark(t *testing.T) {
	t.Parallel()
	for _, s := range fenceStores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, time.Minute)
			if err := s.claim(ctx, "sku-1", 42); err != nil {
				t.Fatal(err)
			}
			want(t, fenceguard(t, nil, s.cmd("fence", "get", "sku-1")...), 0, "42\n")
			m := jsonOut(t, fenceguard(t, nil, s.cmd("fence", "get", "--json", "sku-1")...))
			field(t, m, "resource", "sku-1")
			field(t, m, "token", 42)
			if st, ok := m["store"].(string); !ok || st == "" {
				t.Fatalf("JSON %v: no store", m)
			}
			if s.name == "postgres-column" {
				return // a key without a row: TestFenceGetColumnMode
			}
			want(t, fenceguard(t, nil, s.cmd("fence", "get", "sku-none")...), 0, "0\n")
			field(t, jsonOut(t, fenceguard(t, nil, s.cmd("fence", "get", "--json", "sku-none")...)), "token", 0)
		})
	}
}

// Column mode shows what a holder must reach to act on the row: its token
// column, its tombstone once deleted, the higher of both when the
// tombstone was claimed above the row. --column names another token
// column.
func TestFenceGetColumnMode(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	pgURL, pool := pgDB(t)
	items := itemsTable(t, pool, "items", "fence_token")
	get := func(key string) result {
		return fenceguard(t, nil, "fence", "get", "--store", pgURL, "--table", "items", "--key-column", "id", key)
	}
	for _, step := range []error{
		items.Upsert(ctx, pool, "row", 7),
		items.Upsert(ctx, pool, "gone", 5),
		items.Delete(ctx, pool, "gone", 9),
		items.Upsert(ctx, pool, "both", 11),
		postgres.NewFence(pool).Claim(ctx, "items/both", 30), // the tombstone's resource
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	want(t, get("row"), 0, "7\n")
	want(t, get("gone"), 0, "9\n")
	want(t, get("both"), 0, "30\n")

	marked := itemsTable(t, pool, "marked", "mark")
	if err := marked.Upsert(ctx, pool, "row", 13); err != nil {
		t.Fatal(err)
	}
	want(t, fenceguard(t, nil, "fence", "get", "--store", pgURL, "--table", "marked", "--key-column", "id", "--column", "mark", "row"), 0, "13\n")
}

// A store that refuses (a missing table) is a failure of its own, 70.
func TestFenceGetMissingTable(t *testing.T) {
	t.Parallel()
	pgURL, _ := pgDB(t)
	oneError(t, fenceguard(t, nil, "fence", "get", "--store", pgURL, "--tokens-table", "no_such_marks", "sku-1"), 70)
	oneError(t, fenceguard(t, nil, "fence", "get", "--store", pgURL, "--table", "no_such_items", "--key-column", "id", "sku-1"), 70)
}

// A reset sets the mark, says from what to what, and leaves the audit
// record on stderr; afterwards a holder between the new and the old mark
// is accepted, one below the new mark refused.
func TestFenceResetSetsTheMark(t *testing.T) {
	t.Parallel()
	for _, s := range fenceStores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, time.Minute)
			if err := s.claim(ctx, "sku-1", 1000); err != nil {
				t.Fatal(err)
			}
			r := fenceguard(t, nil, s.cmd("fence", "reset", "--to", "500", "--yes", "sku-1")...)
			want(t, r, 0, "sku-1: 1000 -> 500\n")
			audit(t, r.stderr, "sku-1", 1000, 500)
			s.mark(t, ctx, "sku-1", 500)
			want(t, fenceguard(t, nil, s.cmd("fence", "get", "sku-1")...), 0, "500\n")
			if err := s.claim(ctx, "sku-1", 700); err != nil {
				t.Fatalf("a holder at 700 after the reset to 500: %v", err)
			}
			if err := s.claim(ctx, "sku-1", 600); !errors.Is(err, token.ErrStale) {
				t.Fatalf("a holder at 600 after one at 700: %v, want stale", err)
			}
			s.mark(t, ctx, "sku-1", 700)

			if err := s.claim(ctx, "sku-2", 900); err != nil {
				t.Fatal(err)
			}
			m := jsonOut(t, fenceguard(t, nil, s.cmd("fence", "reset", "--to", "300", "--yes", "--json", "sku-2")...))
			field(t, m, "resource", "sku-2")
			field(t, m, "previous", 900)
			field(t, m, "token", 300)
			s.mark(t, ctx, "sku-2", 300)
		})
	}
}

// audit fails the test unless stderr holds the reset's Warn record
// naming resource and both marks.
func audit(t *testing.T, stderr, resource string, from, to token.Token) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, resource) &&
			strings.Contains(line, fmt.Sprintf("from=%d", from)) && strings.Contains(line, fmt.Sprintf("to=%d", to)) {
			return
		}
	}
	t.Fatalf("stderr %q has no Warn record of %s from %d to %d", stderr, resource, from, to)
}

// A reset without --yes on a stdin that is not a terminal, to 0, or of
// two resources is a usage error and changes nothing.
func TestFenceResetRefused(t *testing.T) {
	t.Parallel()
	for _, s := range fenceStores(t) {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t, time.Minute)
			if err := s.claim(ctx, "sku-1", 1000); err != nil {
				t.Fatal(err)
			}
			oneError(t, fenceguard(t, nil, s.cmd("fence", "reset", "--to", "500", "sku-1")...), 64)
			oneError(t, fenceguard(t, nil, s.cmd("fence", "reset", "--to", "0", "--yes", "sku-1")...), 64)
			oneError(t, fenceguard(t, nil, append(s.cmd("fence", "reset", "--to", "500", "--yes", "sku-1"), "sku-2")...), 64)
			s.mark(t, ctx, "sku-1", 1000)
		})
	}
}

// An unreachable store is 69, one line, for every kind of store. (The
// clients of etcd and ZooKeeper try until the connect timeout, 5s by
// default: the cases run in parallel.)
func TestFenceUnreachableStore(t *testing.T) {
	t.Parallel()
	for _, store := range []string{
		"postgres://postgres@" + closedAddr(t) + "/postgres?sslmode=disable",
		"redis://" + closedAddr(t),
		"etcd://" + closedAddr(t),
		"zk://" + closedAddr(t),
	} {
		scheme, _, _ := strings.Cut(store, ":")
		for _, args := range [][]string{
			{"fence", "get", "--store", store, "sku-1"},
			{"fence", "reset", "--store", store, "--to", "5", "--yes", "sku-1"},
		} {
			t.Run(scheme+" "+args[1], func(t *testing.T) {
				t.Parallel()
				oneError(t, fenceguard(t, nil, args...), 69)
			})
		}
	}
}

// A store URL the command cannot use, or a missing store or resource, is
// a usage error.
func TestFenceBadUsage(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"--store", "mysql://" + addr + "/db"},
		{"--store", "redis://"},
		{"--store", "etcd://" + addr + "/path"},
		{"--store", "zk://" + addr + "/chroot"},
		{},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			oneError(t, fenceguard(t, nil, append(append([]string{"fence", "get"}, args...), "sku-1")...), 64)
		})
	}
	oneError(t, fenceguard(t, nil, "fence", "get", "--store", "redis://"+addr), 64)
}

// FENCEGUARD_STORE is the default of --store.
func TestFenceStoreFromEnvironment(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	rdb, redisURL, rc := redisDB(t)
	f := redislock.NewFence(rc, redislock.FenceOptions{Prefix: rdb.Prefix + "fence:"})
	if err := f.Claim(ctx, "sku-1", 17); err != nil {
		t.Fatal(err)
	}
	want(t, fenceguard(t, []string{"FENCEGUARD_STORE=" + redisURL}, "fence", "get", "--prefix", rdb.Prefix+"fence:", "sku-1"), 0, "17\n")
	want(t, fenceguard(t, []string{"FENCEGUARD_STORE=redis://" + closedAddr(t)}, "fence", "get", "--store", redisURL, "--prefix", rdb.Prefix+"fence:", "sku-1"), 0, "17\n")
}

// Without --prefix, Redis marks are the library's Fence's default keys.
func TestFenceRedisDefaultPrefix(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	rdb, redisURL, rc := redisDB(t)
	resource := rdb.Prefix + "sku-1" // a key of the test's own under the default prefix
	t.Cleanup(func() { rc.Del(context.Background(), "fenceguard:fence:{"+resource+"}") })
	if err := redislock.NewFence(rc, redislock.FenceOptions{}).Claim(ctx, resource, 23); err != nil {
		t.Fatal(err)
	}
	want(t, fenceguard(t, nil, "fence", "get", "--store", redisURL, resource), 0, "23\n")
}

// The store's password appears nowhere in what the command prints, the
// JSON's store field included.
func TestFenceHidesThePassword(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	pgURL, pool := pgDB(t)
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	secret, ok := u.User.Password()
	if !ok { // trust authentication: any password is accepted
		secret = "s3cret-" + strconv.Itoa(os.Getpid())
		u.User = url.UserPassword(u.User.Username(), secret)
	}
	if err := postgres.NewFence(pool).Claim(ctx, "sku-1", 5); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"fence", "get", "--store", u.String(), "--json", "sku-1"},
		{"fence", "reset", "--store", u.String(), "--to", "3", "--yes", "--json", "sku-1"},
		{"fence", "get", "--store", u.String(), "--tokens-table", "no_such_marks", "sku-1"},
	} {
		r := fenceguard(t, nil, args...)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%s: the password is in stdout %q or stderr %q", args[1], r.stdout, r.stderr)
		}
	}
}
