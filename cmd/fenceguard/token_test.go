package main_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/redislock/redlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// lockService is a lock service as the command names it (--lock URL and
// --prefix) and a locker of the library on it.
type lockService struct {
	name   string
	args   []string
	locker locks.Locker
}

// lockServices returns a locker on every lock service the tests reach,
// each with a prefix of the test's own.
func lockServices(t *testing.T) []lockService {
	t.Helper()
	nodes := redisserver.SharedN(t, 3)
	clients := make([]redlock.Client, len(nodes))
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		clients[i], addrs[i] = redisClient(t, n.Addr), n.Addr
	}
	ql, err := redlock.New(clients, redlock.Options{Prefix: nodes[0].Prefix + "lock:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ql.Close() })

	edb, etcdURL, ec := etcdDB(t)
	el, err := etcdlock.New(ec, etcdlock.Options{Prefix: edb.Prefix + "lock/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = el.Close() })

	zdb, zkURL, _ := zkDB(t)
	zl, err := zklock.New(zdb.Addrs, zklock.Options{Prefix: zdb.Chroot + "/lock", Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zl.Close() })

	return []lockService{
		redisService(t),
		{"redlock", []string{"--lock", "redlock://" + strings.Join(addrs, ","), "--prefix", nodes[0].Prefix + "lock:"}, ql},
		{"etcd", []string{"--lock", etcdURL, "--prefix", edb.Prefix + "lock/"}, el},
		{"zk", []string{"--lock", zkURL, "--prefix", zdb.Chroot + "/lock"}, zl},
	}
}

// redisService returns a locker on one Redis server.
func redisService(t *testing.T) lockService {
	t.Helper()
	rdb, redisURL, rc := redisDB(t)
	rl, err := redislock.New(rc, redislock.Options{Prefix: rdb.Prefix + "lock:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rl.Close() })
	return lockService{"redis", []string{"--lock", redisURL, "--prefix", rdb.Prefix + "lock:"}, rl}
}

// token runs "fenceguard token" on l's lock key with more arguments.
func (l lockService) token(t *testing.T, key string, more ...string) result {
	t.Helper()
	return fenceguard(t, nil, append(append(append([]string{"token"}, l.args...), "--key", key), more...)...)
}

// acquire takes key's lock through the library and releases it when the
// test ends.
func (l lockService) acquire(t *testing.T, ctx context.Context, key string) locks.Lease {
	t.Helper()
	lease, err := l.locker.Acquire(ctx, key, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	return lease
}

func dec(t token.Token) string { return strconv.FormatUint(uint64(t), 10) }

// token prints the current grant's token, as text and as JSON; --check
// admits exactly it: a token of an earlier grant and one never granted
// are 65.
func TestTokenPrintsTheCurrentGrant(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	for _, l := range lockServices(t) {
		t.Run(l.name, func(t *testing.T) {
			const key = "job/nightly"
			first := l.acquire(t, ctx, key)
			t1 := first.Token()
			want(t, l.token(t, key), 0, dec(t1)+"\n")
			m := jsonOut(t, l.token(t, key, "--json"))
			field(t, m, "key", key)
			field(t, m, "token", t1)
			want(t, l.token(t, key, "--check", dec(t1)), 0, "")

			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			t2 := l.acquire(t, ctx, key).Token()
			if t2 <= t1 {
				t.Fatalf("the second grant's token %d is not above the first's %d", t2, t1)
			}
			want(t, l.token(t, key), 0, dec(t2)+"\n")
			want(t, l.token(t, key, "--check", dec(t2)), 0, "")
			r := l.token(t, key, "--check", dec(t1))
			oneError(t, r, 65)
			if !strings.Contains(r.stderr, dec(t1)) || !strings.Contains(r.stderr, dec(t2)) {
				t.Fatalf("stderr %q does not say the current token %d and the one checked %d", r.stderr, t2, t1)
			}
			oneError(t, l.token(t, key, "--check", dec(t2+1000)), 65)
		})
	}
}

// An unreachable lock service is 69, one line, for every scheme (in
// parallel: see TestFenceUnreachableStore).
func TestTokenUnreachableLock(t *testing.T) {
	t.Parallel()
	for _, lock := range []string{
		"redis://" + closedAddr(t),
		"redlock://" + closedAddr(t) + "," + closedAddr(t) + "," + closedAddr(t),
		"etcd://" + closedAddr(t),
		"zk://" + closedAddr(t),
	} {
		scheme, _, _ := strings.Cut(lock, ":")
		for _, more := range [][]string{nil, {"--check", "5"}} {
			t.Run(strings.Join(append([]string{scheme}, more...), " "), func(t *testing.T) {
				t.Parallel()
				oneError(t, fenceguard(t, nil, append([]string{"token", "--lock", lock, "--key", "k"}, more...)...), 69)
			})
		}
	}
}

// A lock URL the command cannot use, a missing lock or key, or a --check
// that is not a token, is a usage error.
func TestTokenBadUsage(t *testing.T) {
	t.Parallel()
	a, b, c := closedAddr(t), closedAddr(t), closedAddr(t)
	for _, args := range [][]string{
		{"--lock", "memcached://" + a, "--key", "k"},
		{"--lock", "redis://", "--key", "k"},
		{"--lock", "redlock://" + a + "," + b, "--key", "k"},
		{"--lock", "redis://" + a + "?dial_timeout=1s", "--key", "k"},
		{"--lock", "etcd://" + a + "/path", "--key", "k"},
		{"--lock", "zk://" + a + "/chroot", "--key", "k"},
		{"--lock", "redlock://" + a + "," + b + "," + c},
		{"--key", "k"},
		{"--lock", "redis://" + a, "--key", "k", "--check", "abc"},
		{"--lock", "redis://" + a, "--key", "k", "--no-such-flag"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			oneError(t, fenceguard(t, nil, append([]string{"token"}, args...)...), 64)
		})
	}
}

// FENCEGUARD_LOCK is the default of --lock; --lock wins over it.
func TestTokenLockFromEnvironment(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	l := redisService(t)
	tok := l.acquire(t, ctx, "k").Token()
	lockURL, prefix := l.args[1], l.args[3]
	want(t, fenceguard(t, []string{"FENCEGUARD_LOCK=" + lockURL}, "token", "--prefix", prefix, "--key", "k"), 0, dec(tok)+"\n")
	want(t, fenceguard(t, []string{"FENCEGUARD_LOCK=redis://" + closedAddr(t)}, "token", "--lock", lockURL, "--prefix", prefix, "--key", "k"), 0, dec(tok)+"\n")
}
