package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
)

// The race detector's runtime sleeps a second before a program built with
// it exits (GORACE atexit_sleep_ms, default 1000), which every run of the
// program under test would pay; runs that find a race still exit 66.
func init() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

// ctxFor returns a context that ends with the test or after d.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pgDB returns the test's own migrated PostgreSQL database: its URL for
// --store and a pool for the library.
func pgDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	db := pgserver.Shared(t)
	if !strings.HasPrefix(db.DSN, "postgres://") && !strings.HasPrefix(db.DSN, "postgresql://") {
		harness.SkipOrFail(t, "the PostgreSQL DSN is not a URL: "+db.DSN)
	}
	pool, err := pgxpool.New(context.Background(), db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return db.DSN, pool
}

// redisDB returns the test's share of a Redis server, its URL and a client.
func redisDB(t *testing.T) (*redisserver.DB, string, *redis.Client) {
	t.Helper()
	db := redisserver.Shared(t)
	return db, "redis://" + db.Addr, redisClient(t, db.Addr)
}

func redisClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// etcdDB returns the test's share of an etcd cluster, its URL and a client.
func etcdDB(t *testing.T) (*etcdserver.DB, string, *clientv3.Client) {
	t.Helper()
	db := etcdserver.Shared(t)
	hosts := make([]string, len(db.Endpoints))
	for i, e := range db.Endpoints {
		if u, err := url.Parse(e); err == nil && u.Host != "" {
			e = u.Host
		}
		hosts[i] = e
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return db, "etcd://" + strings.Join(hosts, ","), c
}

// zkDB returns the test's share of a ZooKeeper ensemble, its URL and a
// connection.
func zkDB(t *testing.T) (*zkserver.DB, string, *zk.Conn) {
	t.Helper()
	db := zkserver.Shared(t)
	c, _, err := zk.Connect(db.Addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return db, "zk://" + strings.Join(db.Addrs, ","), c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	p, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p[0])
}

// want fails the test unless r ended with code and, when stdout is not
// "-", printed exactly stdout.
func want(t *testing.T, r result, code int, stdout string) {
	t.Helper()
	if r.code != code || (stdout != "-" && r.stdout != stdout) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q", r.code, r.stdout, r.stderr, code, stdout)
	}
}

// oneError fails the test unless r ended with code, printed nothing on
// stdout and exactly one line on stderr, prefixed "fenceguard: ".
func oneError(t *testing.T, r result, code int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != code || r.stdout != "" || len(lines) != 1 || !strings.HasPrefix(lines[0], "fenceguard: ") || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and one line \"fenceguard: …\" on stderr", r.code, r.stdout, r.stderr, code)
	}
}

// jsonOut decodes r's stdout, one JSON object on one line, into a map of
// its fields; numbers stay exact (json.Number).
func jsonOut(t *testing.T, r result) map[string]any {
	t.Helper()
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.HasSuffix(r.stdout, "\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 0 and one line of JSON", r.code, r.stdout, r.stderr)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	return m
}

// field fails the test unless m[name] is want: a string, or, for a token
// (any other type), the string of its decimal digits (JSON numbers lose
// digits above 2^53 in most readers).
func field(t *testing.T, m map[string]any, name string, want any) {
	t.Helper()
	got, ok := m[name]
	if !ok {
		t.Fatalf("JSON %v has no %q", m, name)
	}
	switch w := want.(type) {
	case string:
		if s, ok := got.(string); !ok || s != w {
			t.Fatalf("JSON %v: %q is %#v, want the string %q", m, name, got, w)
		}
	default:
		if s, ok := got.(string); !ok || s != fmt.Sprint(w) {
			t.Fatalf("JSON %v: %q is %#v, want the token as the string %q", m, name, got, fmt.Sprint(w))
		}
	}
}
