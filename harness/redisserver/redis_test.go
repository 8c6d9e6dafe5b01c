package redisserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

func TestRedisSharedNamespaces(t *testing.T) {
	t.Parallel()
	var got []*DB
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			db := Shared(t)
			c := redisConn(t, db.Addr)
			ctx, cancel := ctxFor(5 * time.Second)
			defer cancel()
			if _, err := c.Do(ctx, "SET", db.Prefix+"k", name); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Do(ctx, "SET", db.Prefix+"k2", name); err != nil {
				t.Fatal(err)
			}
			if v, _, err := c.String(ctx, "GET", db.Prefix+"k"); err != nil || v != name {
				t.Fatalf("GET = %q, %v; want %q", v, err, name)
			}
			got = append(got, db)
		})
	}
	if len(got) != 2 {
		t.Fatal("subtests failed")
	}
	if got[0].Prefix == got[1].Prefix || !strings.HasPrefix(got[0].Prefix, "fg:") {
		t.Fatalf("prefixes %q and %q: want distinct fg:… prefixes", got[0].Prefix, got[1].Prefix)
	}
	if got[0].Addr != got[1].Addr {
		t.Fatalf("shared server at %s and %s: want one", got[0].Addr, got[1].Addr)
	}
	// Each subtest's keys are gone once it ended.
	c := redisConn(t, got[0].Addr)
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	for _, db := range got {
		if n, err := c.Int(ctx, "EXISTS", db.Prefix+"k", db.Prefix+"k2"); err != nil || n != 0 {
			t.Fatalf("EXISTS %sk… = %d, %v after the test ended; want 0", db.Prefix, n, err)
		}
	}
}

// The cleanup deletes the test's keys only: a key of another prefix that
// starts the same way, or that holds glob characters, stays.
func TestRedisDeletePrefixIsExact(t *testing.T) {
	t.Parallel()
	db := Shared(t)
	c := redisConn(t, db.Addr)
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	mine := db.Prefix + "glob*[x]?"
	other := strings.TrimSuffix(db.Prefix, ":") + "-other:k"
	for _, k := range []string{mine, db.Prefix + "globZZ", other} {
		if _, err := c.Do(ctx, "SET", k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { deletePrefix(db.Addr, other) })
	if err := deletePrefix(db.Addr, db.Prefix+"glob*"); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]int64{mine: 0, db.Prefix + "globZZ": 1, other: 1} {
		if n, err := c.Int(ctx, "EXISTS", k); err != nil || n != want {
			t.Errorf("EXISTS %s = %d, %v; want %d", k, n, err, want)
		}
	}
}

func TestRedisSharedN(t *testing.T) {
	t.Parallel()
	dbs := SharedN(t, 3)
	seen := map[string]bool{}
	for _, db := range dbs {
		if seen[db.Addr] {
			t.Fatalf("RedisN gave %s twice", db.Addr)
		}
		seen[db.Addr] = true
		if _, err := redisDo(db.Addr, 5*time.Second, "PING"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNewN(t *testing.T) {
	t.Parallel()
	start := time.Now()
	srvs := NewN(t, 5)
	t.Logf("5 redis-server processes up in %v", time.Since(start))
	seen := map[string]bool{}
	for _, s := range srvs {
		if seen[s.Addr()] || s.PID() == 0 {
			t.Fatalf("server %s: duplicate address or no pid", s.Name())
		}
		seen[s.Addr()] = true
		if _, err := redisDo(s.Addr(), 5*time.Second, "PING"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRedisFaults(t *testing.T) {
	t.Parallel()
	s := New(t)
	c := redisConn(t, s.Addr())
	get := func() (any, error) { return redisDo(s.Addr(), 500*time.Millisecond, "GET", "k") }
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	if _, err := c.Do(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}

	// Pause: an open connection gets no answer; Resume: it does again.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := ctxFor(300 * time.Millisecond)
	_, err := c.Do(pctx, "GET", "k")
	pcancel()
	if err == nil {
		t.Fatal("GET answered while the server was paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "GET after Resume", func() error { _, err := get(); return err })

	// Kill: calls fail; Start(false) on the same port keeps the data (AOF).
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(); err == nil {
		t.Fatal("GET answered after Kill")
	}
	if err := s.Kill(); !errors.Is(err, harness.ErrNotRunning) {
		t.Fatalf("second Kill = %v, want harness.ErrNotRunning", err)
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Fatalf("pid after restart = %d (was %d)", s.PID(), pid)
	}
	if err := s.Start(false); !errors.Is(err, harness.ErrRunning) {
		t.Fatalf("Start of a running server = %v, want harness.ErrRunning", err)
	}
	eventually(t, 5*time.Second, "GET after restart", func() error {
		v, err := get()
		if err == nil && v != "v" {
			t.Fatalf("after Kill+Start(false) GET k = %v, want v", v)
		}
		return err
	})

	// Stop + Start(true): the data is gone.
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "GET after wipe", func() error {
		v, err := get()
		if err == nil && v != nil {
			t.Fatalf("key survived Start(true): %v", v)
		}
		return err
	})
}
