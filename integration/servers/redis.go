package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
	srvs     []*Server // parallel to addrs; nil entries for env and containers
	err      error     // a local start failed: later tests fail fast too
}

func (p *redisPool) get(t testing.TB, n int) ([]string, []*Server) {
	t.Helper()
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
		case dockerAvailable():
			p.src = srcDocker
		}
	}
	switch p.src {
	case srcNone:
		unavailable(t, noServerMsg("Redis", EnvRedisAddrs, "redis-server"))
	case srcEnv:
		if len(p.addrs) < n {
			unavailable(t, fmt.Sprintf("servers: test needs %d Redis servers, %s lists %d", n, EnvRedisAddrs, len(p.addrs)))
		}
	case srcLocal:
		if p.err == nil && len(p.addrs) < n {
			srvs, err := launchRedis(n - len(p.addrs))
			p.err = err
			for _, s := range srvs {
				p.addrs, p.srvs = append(p.addrs, s.Addr()), append(p.srvs, s)
			}
		}
	case srcDocker:
		for p.err == nil && len(p.addrs) < n {
			var addr string
			addr, p.err = redisContainer()
			if p.err == nil {
				p.addrs, p.srvs = append(p.addrs, addr), append(p.srvs, nil)
			}
		}
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.addrs[:n], p.srvs[:n]
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
		wg.Go(func() { srvs[i], errs[i] = launch(k, "redis", 1) })
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
	)
	cmd.Dir = s.dir
	return cmd, nil
}

// probe: PING alone is not enough: when another process holds the port, that
// one answers. INFO must report the pid we started. It speaks RESP inline
// commands itself: a client library would log every refused dial.
func (redisKind) probe(s *Server, pid int) (func(context.Context) error, func()) {
	return func(ctx context.Context) error {
		info, err := redisInline(ctx, s.Addr(), "PING\r\nINFO server\r\n")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(info, "+PONG\r\n") {
			return fmt.Errorf("PING: %q", info)
		}
		if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
			return fmt.Errorf("%w: INFO says process_id %s, we started %d", errPortTaken, got, pid)
		}
		return nil
	}, func() {}
}

// redisInline sends inline commands and reads until the last reply (INFO's
// bulk string, which ends in a blank line) is complete.
func redisInline(ctx context.Context, addr, cmds string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // unblock reads when ctx ends
	defer stop()
	if _, err := io.WriteString(conn, cmds); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(b.String(), "process_id:") || !strings.HasSuffix(b.String(), "\r\n\r\n") {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), err
		}
		if strings.HasPrefix(b.String(), "-") { // an error reply (e.g. LOADING)
			return "", errors.New(strings.TrimSpace(b.String()))
		}
	}
	return b.String(), nil
}

func (redisKind) stopSignal() syscall.Signal { return syscall.SIGTERM }
func (redisKind) gracefulTeardown() bool     { return false }
func (redisKind) canWipe(*Server) error      { return nil }

func infoField(info, key string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// newRedisClient is the harness's own quiet, single-connection client.
func newRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              time.Second,
		ReadTimeout:              time.Second,
		WriteTimeout:             time.Second,
		MaxRetries:               -1,
		PoolSize:                 1,
	})
}

func redisDeletePrefix(addr, prefix string) error {
	c := newRedisClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, escapeGlob(prefix)+"*", 500).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}
