package redisserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
)

// EnvAddrs is a comma-separated list of host:port of independent Redis
// servers for the shared helpers ([SharedN] with n servers needs n of them).
const EnvAddrs = "FENCEGUARD_REDIS_ADDRS"

const pollEvery = 25 * time.Millisecond

// DB is a test's share of a Redis server: use only keys that start with
// Prefix. The keys are deleted when the test ends.
type DB struct {
	Addr   string          // host:port
	Prefix string          // e.g. "fg:1a2b3c-7-TestLock:"; unique per test and process
	Server *harness.Server // the process when the harness started it, else nil; no faults: it is shared
}

// Shared returns the package's shared Redis server (started on first use)
// with a key prefix for the calling test.
func Shared(t testing.TB) *DB {
	t.Helper()
	return SharedN(t, 1)[0]
}

// SharedN returns n independent shared Redis servers (for Redlock), all
// with the same key prefix for the calling test. With FENCEGUARD_REDIS_ADDRS
// the first n listed servers are used; it must list at least n.
func SharedN(t testing.TB, n int) []*DB {
	t.Helper()
	harness.RequireMain(t)
	addrs, srvs := shared.get(t, n)
	prefix := "fg:" + harness.Namespace(t) + ":"
	out := make([]*DB, n)
	for i := range out {
		out[i] = &DB{Addr: addrs[i], Prefix: prefix, Server: srvs[i]}
	}
	t.Cleanup(func() {
		for _, a := range addrs {
			if err := deletePrefix(a, prefix); err != nil {
				t.Logf("redisserver: deleting %s* on %s: %v", prefix, a, err)
			}
		}
	})
	return out
}

// ExamplesNeed declares that the package's Example functions use the shared
// Redis server ([Example]); call it from TestMain before harness.Main.
func ExamplesNeed() {
	harness.ExamplesNeed("Redis", func() (string, error) {
		_, _, skip, err := shared.load(1)
		return skip, err
	})
}

// Example returns the package's shared Redis server with a key prefix of
// the calling Example function's own. The keys stay until the server goes
// at the end of the package (a server from the environment keeps them).
func Example() *DB {
	addrs, srvs, skip, err := shared.load(1)
	if skip != "" || err != nil {
		harness.ExampleUnavailable("Redis", skip, err)
	}
	return &DB{Addr: addrs[0], Prefix: "fg:" + harness.ExampleID() + ":", Server: srvs[0]}
}

// shared grows on demand: SharedN(t, 5) after Shared(t) starts four more.
var shared pool

type pool struct {
	mu       sync.Mutex
	resolved bool
	fromEnv  bool
	local    bool
	addrs    []string          // usable servers, in order
	srvs     []*harness.Server // parallel to addrs; nil entries for servers from the environment
	err      error             // a local start failed: later tests fail fast too
}

func (p *pool) get(t testing.TB, n int) ([]string, []*harness.Server) {
	t.Helper()
	addrs, srvs, skip, err := p.load(n)
	if skip != "" {
		harness.SkipOrFail(t, skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	return addrs, srvs
}

// load is get without a test: skip says why no server is available, err
// that starting one failed.
func (p *pool) load(n int) (addrs []string, srvs []*harness.Server, skip string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.resolved {
		p.resolved = true
		switch {
		case len(harness.EnvList(EnvAddrs)) > 0:
			p.fromEnv, p.addrs = true, harness.EnvList(EnvAddrs)
			p.srvs = make([]*harness.Server, len(p.addrs))
		case binary() != "":
			p.local = true
		}
	}
	switch {
	case p.fromEnv:
		if len(p.addrs) < n {
			return nil, nil, fmt.Sprintf("redisserver: test needs %d Redis servers, %s lists %d", n, EnvAddrs, len(p.addrs)), nil
		}
	case p.local:
		if p.err == nil && len(p.addrs) < n {
			srvs, err := launchN(n - len(p.addrs))
			p.err = err
			for _, s := range srvs {
				p.addrs, p.srvs = append(p.addrs, s.Addr()), append(p.srvs, s)
			}
		}
	default:
		return nil, nil, harness.NoServerMessage("Redis", EnvAddrs, "redis-server"), nil
	}
	if p.err != nil {
		return nil, nil, "", p.err
	}
	return p.addrs[:n], p.srvs[:n], "", nil
}

// New starts a Redis server for the calling test alone, to inject faults
// into; it is torn down when the test ends. It persists to an append-only
// file, so Start(false) after Stop or Kill keeps the data and Start(true)
// loses it.
func New(t testing.TB) *harness.Server {
	t.Helper()
	return NewN(t, 1)[0]
}

// NewN starts n independent Redis servers for the calling test alone.
func NewN(t testing.TB, n int) []*harness.Server {
	t.Helper()
	harness.RequireMain(t)
	if binary() == "" {
		harness.SkipOrFail(t, harness.NoBinaryMessage("redisserver.New", "redis-server", "redis-server"))
	}
	srvs, err := launchN(n)
	for _, s := range srvs {
		harness.Cleanup(t, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	return srvs
}

// launchN starts n servers at once; on error it returns those that came up.
func launchN(n int) ([]*harness.Server, error) {
	k := kind{bin: binary()}
	srvs := make([]*harness.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = harness.Launch(k, "redis", 1)
		}()
	}
	wg.Wait()
	var up []*harness.Server
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

func binary() string { return harness.FindBinary("redis-server", "/usr/bin/redis-server") }

// kind is a plain Redis server.
type kind struct{ bin string }

func (kind) Prepare(ctx context.Context, s *harness.Server) error {
	return os.MkdirAll(s.DataDir(), 0o755)
}

func (k kind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd := exec.Command(k.bin,
		"--port", strconv.Itoa(s.Port()),
		"--bind", "127.0.0.1",
		"--dir", s.DataDir(),
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "yes",
		"--appendfsync", "everysec",
		// A master waits 5 s for more replicas before a diskless full sync
		// (Redis 7's default); a test's replica should not.
		"--repl-diskless-sync-delay", "0",
	)
	cmd.Dir = s.Dir()
	return cmd, nil
}

// Ready: PING alone is not enough: when another process holds the port,
// that one answers. INFO must report the pid we started.
func (kind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	return probe(ctx, s.Addr(), pid)
}

func (kind) StopSignal() syscall.Signal    { return syscall.SIGTERM }
func (kind) GracefulTeardown() bool        { return false }
func (kind) CanWipe(*harness.Server) error { return nil }

func probe(ctx context.Context, addr string, pid int) error {
	c := client(addr)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil { // LOADING while it reads its append-only file
		return err
	}
	s, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	if got := parseInfo(s)["process_id"]; got != strconv.Itoa(pid) {
		return fmt.Errorf("%w: INFO says process_id %s, we started %d", harness.ErrPortTaken, got, pid)
	}
	return nil
}

// client returns a client of one connection, without retries, for the
// harness's own calls.
func client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		Protocol:              2,
		MaxRetries:            -1,
		PoolSize:              1,
		DialTimeout:           2 * time.Second,
		ContextTimeoutEnabled: true,
	})
}

// do sends one command on a connection of its own.
func do(ctx context.Context, addr string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := client(addr)
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// parseInfo parses an INFO reply into its fields.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

func redisInfo(ctx context.Context, addr, section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := client(addr)
	defer c.Close()
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

func redisInfoField(ctx context.Context, addr, section, field string) (string, error) {
	m, err := redisInfo(ctx, addr, section)
	if err != nil {
		return "", err
	}
	v, ok := m[field]
	if !ok {
		return "", fmt.Errorf("INFO %s has no %s", section, field)
	}
	return v, nil
}

// deletePrefix deletes every key that starts with prefix (SCAN, DEL).
func deletePrefix(addr, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := client(addr)
	defer c.Close()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// escapeGlob escapes the characters special in a Redis glob pattern.
func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
