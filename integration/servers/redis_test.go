package servers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestRedisSharedNamespaces(t *testing.T) {
	t.Parallel()
	var got []*RedisDB
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			db := Redis(t)
			c := redisClient(t, db.Addr)
			ctx, cancel := ctxFor(5 * time.Second)
			defer cancel()
			if err := c.Set(ctx, db.Prefix+"k", name, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, db.Prefix+"k").Result(); err != nil || v != name {
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
	c := redisClient(t, got[0].Addr)
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	for _, db := range got {
		if n, err := c.Exists(ctx, db.Prefix+"k").Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS %sk = %d, %v after the test ended; want 0", db.Prefix, n, err)
		}
	}
}

func TestRedisSharedN(t *testing.T) {
	t.Parallel()
	dbs := RedisN(t, 3)
	seen := map[string]bool{}
	for _, db := range dbs {
		if seen[db.Addr] {
			t.Fatalf("RedisN gave %s twice", db.Addr)
		}
		seen[db.Addr] = true
		ctx, cancel := ctxFor(5 * time.Second)
		if err := redisClient(t, db.Addr).Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

func TestNewRedisN(t *testing.T) {
	t.Parallel()
	start := time.Now()
	srvs := NewRedisN(t, 5)
	t.Logf("5 redis-server processes up in %v", time.Since(start))
	seen := map[string]bool{}
	for _, s := range srvs {
		if seen[s.Addr()] || s.PID() == 0 {
			t.Fatalf("server %s: duplicate address or no pid", s.Name())
		}
		seen[s.Addr()] = true
		ctx, cancel := ctxFor(5 * time.Second)
		if err := redisClient(t, s.Addr()).Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

func TestRedisFaults(t *testing.T) {
	t.Parallel()
	s := NewRedis(t)
	c := redisClient(t, s.Addr())
	get := func() (string, error) {
		ctx, cancel := ctxFor(500 * time.Millisecond)
		defer cancel()
		return c.Get(ctx, "k").Result()
	}
	ctx, cancel := ctxFor(5 * time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// Pause: connected clients get no answer; Resume: they do again.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(); err == nil {
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
	if err := s.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second Kill = %v, want ErrNotRunning", err)
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	if s.PID() == pid || s.PID() == 0 {
		t.Fatalf("pid after restart = %d (was %d)", s.PID(), pid)
	}
	if err := s.Start(false); !errors.Is(err, ErrRunning) {
		t.Fatalf("Start of a running server = %v, want ErrRunning", err)
	}
	eventually(t, 5*time.Second, "GET after restart", func() error {
		v, err := get()
		if err == nil && v != "v" {
			t.Fatalf("after Kill+Start(false) GET k = %q, want v", v)
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
		_, err := get()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		if err == nil {
			t.Fatal("key survived Start(true)")
		}
		return err
	})
}
