package servers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/resp"
)

// RedisDB is a test's share of a Redis server: use only keys that start with
// Prefix. The keys are deleted when the test ends.
type RedisDB struct {
	Addr   string  // host:port
	Prefix string  // e.g. "fg:1a2b3c-7-TestLock:"; unique per test and process
	Server *Server // the process when the harness started it, else nil; no faults: it is shared
}

// Redis returns the package's shared Redis server (started on first use) with
// a key prefix for the calling test.
func Redis(t testing.TB) *RedisDB {
	t.Helper()
	return RedisN(t, 1)[0]
}

// RedisN returns n independent shared Redis servers (for Redlock), all with
// the same key prefix for the calling test. With FENCEGUARD_REDIS_ADDRS the
// first n listed servers are used; it must list at least n.
func RedisN(t testing.TB, n int) []*RedisDB {
	t.Helper()
	requireMain(t)
	addrs, srvs := sharedRedis.get(t, n)
	prefix := "fg:" + namespace(t) + ":"
	out := make([]*RedisDB, n)
	for i := range out {
		out[i] = &RedisDB{Addr: addrs[i], Prefix: prefix, Server: srvs[i]}
	}
	t.Cleanup(func() {
		for _, a := range addrs {
			if err := redisDeletePrefix(a, prefix); err != nil {
				t.Logf("servers: deleting %s* on %s: %v", prefix, a, err)
			}
		}
	})
	return out
}

// sharedRedis grows on demand: RedisN(t, 5) after Redis(t) starts four more.
var sharedRedis redisPool

type redisPool struct {
	mu       sync.Mutex
	resolved bool
	src      source
	addrs    []string  // usable servers, in order
	srvs     []*Server // parallel to addrs; nil entries for servers from the environment
	err      error     // a local start failed: later tests fail fast too
}

func (p *redisPool) get(t testing.TB, n int) ([]string, []*Server) {
	t.Helper()
	addrs, srvs, skip, err := p.load(n)
	if skip != "" {
		unavailable(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	return addrs, srvs
}

// load is get without a test: skip says why no server is available, err
// that starting one failed.
func (p *redisPool) load(n int) (addrs []string, srvs []*Server, skip string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.resolved {
		p.resolved = true
		switch {
		case len(envList(EnvRedisAddrs)) > 0:
			p.src, p.addrs = srcEnv, envList(EnvRedisAddrs)
			p.srvs = make([]*Server, len(p.addrs))
		case redisBinary() != "":
			p.src = srcLocal
		}
	}
	switch p.src {
	case srcNone:
		return nil, nil, noServerMsg("Redis", EnvRedisAddrs, "redis-server"), nil
	case srcEnv:
		if len(p.addrs) < n {
			return nil, nil, fmt.Sprintf("servers: test needs %d Redis servers, %s lists %d", n, EnvRedisAddrs, len(p.addrs)), nil
		}
	case srcLocal:
		if p.err == nil && len(p.addrs) < n {
			srvs, err := launchRedis(n - len(p.addrs))
			p.err = err
			for _, s := range srvs {
				p.addrs, p.srvs = append(p.addrs, s.Addr()), append(p.srvs, s)
			}
		}
	}
	if p.err != nil {
		return nil, nil, "", p.err
	}
	return p.addrs[:n], p.srvs[:n], "", nil
}

// NewRedis starts a Redis server for the calling test alone, to inject faults
// into; it is torn down when the test ends. It persists to an append-only file,
// so Start(false) after Stop or Kill keeps the data and Start(true) loses it.
func NewRedis(t testing.TB) *Server {
	t.Helper()
	return NewRedisN(t, 1)[0]
}

// NewRedisN starts n independent Redis servers for the calling test alone.
func NewRedisN(t testing.TB, n int) []*Server {
	t.Helper()
	requireMain(t)
	if redisBinary() == "" {
		unavailable(t, noBinaryMsg("NewRedis", "redis-server", "redis-server"))
	}
	srvs, err := launchRedis(n)
	for _, s := range srvs {
		dedicated(t, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	return srvs
}

// launchRedis starts n servers at once; on error it returns those that came up.
func launchRedis(n int) ([]*Server, error) {
	k := redisKind{bin: redisBinary()}
	srvs := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = launch(k, "redis", 1)
		}()
	}
	wg.Wait()
	var up []*Server
	var first error
	for i := range n {
		if errs[i] != nil && first == nil {
			first = errs[i]
		}
		if srvs[i] != nil {
			up = append(up, srvs[i])
		}
	}
	return up, first
}

func redisBinary() string { return findBinary("redis-server", "/usr/bin/redis-server") }

type redisKind struct{ bin string }

func (redisKind) prepare(ctx context.Context, s *Server) error {
	return os.MkdirAll(s.dataDir(), 0o755)
}

func (k redisKind) command(s *Server) (*exec.Cmd, error) {
	cmd := exec.Command(k.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dataDir(),
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "yes",
		"--appendfsync", "everysec",
		// A master waits 5 s for more replicas before a diskless full sync
		// (Redis 7's default); a test's replica should not.
		"--repl-diskless-sync-delay", "0",
	)
	cmd.Dir = s.dir
	return cmd, nil
}

// probe: PING alone is not enough: when another process holds the port, that
// one answers. INFO must report the pid we started.
func (redisKind) probe(s *Server, pid int) (func(context.Context) error, func()) {
	return func(ctx context.Context) error { return redisProbe(ctx, s.Addr(), pid) }, func() {}
}

func redisProbe(ctx context.Context, addr string, pid int) error {
	c, err := resp.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	pong, _, err := c.String(ctx, "PING")
	if err != nil { // LOADING while it reads its append-only file
		return err
	}
	if pong != "PONG" {
		return fmt.Errorf("PING: %q", pong)
	}
	info, err := c.Info(ctx, "server")
	if err != nil {
		return err
	}
	if got := info["process_id"]; got != strconv.Itoa(pid) {
		return fmt.Errorf("%w: INFO says process_id %s, we started %d", errPortTaken, got, pid)
	}
	return nil
}

func (redisKind) stopSignal() syscall.Signal { return syscall.SIGTERM }
func (redisKind) gracefulTeardown() bool     { return false }
func (redisKind) canWipe(*Server) error      { return nil }

// redisDeletePrefix deletes every key that starts with prefix (SCAN, DEL).
func redisDeletePrefix(addr, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := resp.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	cursor := "0"
	for {
		keys, next, err := c.Scan(ctx, cursor, resp.EscapeGlob(prefix)+"*", 500)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if _, err := c.Int(ctx, append([]string{"DEL"}, keys...)...); err != nil {
				return err
			}
		}
		if cursor = next; cursor == "0" {
			return nil
		}
	}
}
