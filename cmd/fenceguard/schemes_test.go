package main_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
)

// lockSpec is a lock service as the program's flags name it: --lock and
// --prefix.
type lockSpec struct {
	url, prefix string
}

// flags are the flags that name the lock service and key.
func (l lockSpec) flags(key string) []string {
	return []string{"--lock", l.url, "--prefix", l.prefix, "--key", key}
}

// run is the command line of `fenceguard run` on key with the options opts,
// running the shell script with the arguments args ($1, $2, …).
func (l lockSpec) run(key string, opts []string, script string, args ...string) []string {
	a := append([]string{"run"}, l.flags(key)...)
	a = append(a, opts...)
	a = append(a, "--", "sh", "-c", script, "sh")
	return append(a, args...)
}

// token is the command line of `fenceguard token` on key.
func (l lockSpec) token(key string) []string {
	return append([]string{"token"}, l.flags(key)...)
}

// redisLock is the test's share of the package's shared Redis server.
func redisLock(t *testing.T) lockSpec {
	db := redisserver.Shared(t)
	return lockSpec{url: "redis://" + db.Addr, prefix: db.Prefix}
}

func redlockLock(t *testing.T) lockSpec {
	dbs := redisserver.SharedN(t, 3)
	addrs := make([]string, len(dbs))
	for i, db := range dbs {
		addrs[i] = db.Addr
	}
	return lockSpec{url: "redlock://" + strings.Join(addrs, ","), prefix: dbs[0].Prefix}
}

func sentinelLock(t *testing.T) lockSpec {
	s := redisserver.NewSentinel(t)
	return lockSpec{
		url:    "redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/" + s.MasterName(),
		prefix: "fg-cli:" + harness.UniqueID() + ":",
	}
}

func clusterLock(t *testing.T) lockSpec {
	c := redisserver.NewCluster(t, 3, 0)
	return lockSpec{
		url:    "redis+cluster://" + strings.Join(c.Addrs(), ","),
		prefix: "fg-cli:" + harness.UniqueID() + ":", // no braces: keys are <prefix>{<key>}…
	}
}

func etcdLock(t *testing.T) lockSpec {
	db := etcdserver.Shared(t)
	eps := make([]string, len(db.Endpoints))
	for i, e := range db.Endpoints {
		_, hostport, ok := strings.Cut(e, "://")
		if !ok {
			hostport = e
		}
		eps[i] = hostport
	}
	return lockSpec{url: "etcd://" + strings.Join(eps, ","), prefix: db.Prefix}
}

func zkLock(t *testing.T) lockSpec {
	db := zkserver.Shared(t)
	return lockSpec{url: "zk://" + strings.Join(db.Addrs, ","), prefix: db.Chroot + "/locks"}
}

// holdScript is a job that writes its pid to $JOB/$1.pid and its token to
// $JOB/$1.token, then holds the lock until $JOB/$1.release exists.
const holdScript = `echo $$ > "$JOB/$1.pid"; echo "$FENCING_TOKEN" > "$JOB/$1.token"
while [ ! -e "$JOB/$1.release" ]; do sleep 0.05; done`

// parseToken parses what the program or a job printed as a token: a decimal
// number above 0 on one line, nothing else.
func parseToken(t *testing.T, what, s string) uint64 {
	t.Helper()
	line, ok := strings.CutSuffix(s, "\n")
	n, err := strconv.ParseUint(line, 10, 64)
	if !ok || err != nil || n == 0 || strconv.FormatUint(n, 10) != line {
		t.Fatalf("%s printed %q, not a token (a decimal number > 0 on a line of its own)", what, s)
	}
	return n
}

// TestRunAndTokenOnEveryScheme runs a job under a lock of every URL scheme:
// the job gets a token, `fenceguard token` reads it back (exactly while the
// lock is held), a second invocation cannot take the lock while the first
// holds it, and a lease lost to a pause ends the job with exit 77.
func TestRunAndTokenOnEveryScheme(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct {
		name string
		lock func(*testing.T) lockSpec
	}{
		{"redis", redisLock},
		{"redis+sentinel", sentinelLock},
		{"redis+cluster", clusterLock},
		{"redlock", redlockLock},
		{"etcd", etcdLock},
		{"zk", zkLock},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			lock := sc.lock(t)
			jd := newJobDir(t)
			const key = "reports/nightly"

			r := fenceguard(t, jd.env(), lock.run(key, []string{"--ttl", "2s"}, `echo "$FENCING_TOKEN"`)...)
			if r.code != 0 {
				t.Fatalf("run: exit %d, want 0; stderr: %s", r.code, r.stderr)
			}
			first := parseToken(t, "the job", r.stdout)

			// Free, the lock's Sequencer answers the last grant's token or a
			// bound at least that and below every later grant.
			r = fenceguard(t, nil, lock.token(key)...)
			if r.code != 0 {
				t.Fatalf("token after the run: exit %d, want 0; stderr: %s", r.code, r.stderr)
			}
			free := parseToken(t, "token", r.stdout)
			if free < first {
				t.Errorf("token after the run printed %d, below the run's token %d", free, first)
			}

			holder := startFenceguard(t, jd.env(), lock.run(key, []string{"--ttl", "2s"}, holdScript, "a")...)
			held := jd.number(t, "a.token", 30*time.Second)
			if held <= free {
				t.Errorf("second grant got token %d, not above the first's %d and what token printed after it, %d", held, first, free)
			}

			r = fenceguard(t, jd.env(), lock.run(key, []string{"--wait", "0"}, holdScript, "b")...)
			if r.code != 75 {
				t.Errorf("run while held, --wait 0: exit %d, want 75; stderr: %s", r.code, r.stderr)
			}
			if s := jd.read(t, "b.pid"); s != "" {
				t.Errorf("the job of the run that did not get the lock ran (pid %s)", strings.TrimSpace(s))
			}

			r = fenceguard(t, nil, lock.token(key)...)
			if r.code != 0 {
				t.Fatalf("token while held: exit %d, want 0; stderr: %s", r.code, r.stderr)
			}
			if got := parseToken(t, "token", r.stdout); got != held {
				t.Errorf("token while held printed %d, want the holder's token %d", got, held)
			}

			jd.touch(t, "a.release")
			if r := finish(t, holder, 30*time.Second); r.code != 0 {
				t.Errorf("holding run: exit %d, want 0; stderr: %s", r.code, r.stderr)
			}

			checkLostToAPause(t, lock, "reports/hourly")
		})
	}
}

// closedPorts returns n loopback addresses nothing listens on.
func closedPorts(t *testing.T, n int) []string {
	ports, err := harness.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, n)
	for i, p := range ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

// checkUnreachable runs a job under lock, which cannot be reached, with
// --connect-timeout 1s: the program must exit 69 within about that, with one
// line naming one of endpoints, and not run the job.
func checkUnreachable(t *testing.T, lock lockSpec, endpoints []string) {
	t.Helper()
	jd := newJobDir(t)
	lat := harness.StartLateness(t)
	start := time.Now()
	const timeout = time.Second
	r := fenceguard(t, jd.env(), lock.run("k", []string{"--connect-timeout", timeout.String(), "--wait", "10s"}, holdScript, "a")...)
	took := time.Since(start)
	if r.code != 69 {
		t.Fatalf("exit %d, want 69; stderr: %s", r.code, r.stderr)
	}
	// The program built with -race takes a while to start on a loaded machine.
	if deadline := start.Add(timeout); took > timeout+lat.Allowance(3*time.Second, deadline) {
		t.Errorf("exit 69 after %v, want within about --connect-timeout %v", took.Round(time.Millisecond), timeout)
	}
	own := ownLines(r.stderr)
	if len(own) != 1 {
		t.Errorf("stderr has %d lines starting %q, want 1: %q", len(own), "fenceguard: ", r.stderr)
	} else if !containsAny(own[0], endpoints) {
		t.Errorf("the error line names none of the endpoints %v: %q", endpoints, own[0])
	}
	if s := jd.read(t, "a.pid"); s != "" {
		t.Errorf("the job ran without the lock (pid %s)", strings.TrimSpace(s))
	}
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestRunExitsUnavailableWhenTheLockServiceIsUnreachable points every scheme
// at ports nothing listens on, and at proxies that accept connections but
// never answer (so only --connect-timeout ends the attempt).
func TestRunExitsUnavailableWhenTheLockServiceIsUnreachable(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct {
		scheme, path string
		nodes        int
	}{
		{"redis", "", 1},
		{"redis+sentinel", "/mymaster", 3},
		{"redis+cluster", "", 3},
		{"redlock", "", 3},
		{"etcd", "", 1},
		{"zk", "", 1},
	} {
		t.Run("closed port/"+sc.scheme, func(t *testing.T) {
			t.Parallel()
			addrs := closedPorts(t, sc.nodes)
			lock := lockSpec{url: sc.scheme + "://" + strings.Join(addrs, ",") + sc.path, prefix: "/fg-cli/unreachable"}
			if strings.HasPrefix(sc.scheme, "redis") || sc.scheme == "redlock" {
				lock.prefix = "fg-cli:unreachable:"
			}
			checkUnreachable(t, lock, addrs)
		})
	}
	for _, sc := range []struct {
		scheme, path string
		nodes        int
		lock         func(*testing.T) lockSpec // a server of the kind, for the proxies' upstream
	}{
		{"redis", "", 1, redisLock},
		{"redis+sentinel", "/mymaster", 3, redisLock},
		{"redis+cluster", "", 3, redisLock},
		{"redlock", "", 3, redisLock},
		{"etcd", "", 1, etcdLock},
		{"zk", "", 1, zkLock},
	} {
		t.Run("no answer/"+sc.scheme, func(t *testing.T) {
			t.Parallel()
			lock := sc.lock(t)
			_, hostport, _ := strings.Cut(lock.url, "://")
			upstream, _, _ := strings.Cut(hostport, ",")
			addrs := make([]string, sc.nodes)
			for i := range addrs {
				p := harness.NewProxy(t, upstream)
				if err := p.Blackhole(); err != nil {
					t.Fatal(err)
				}
				addrs[i] = p.Addr()
			}
			lock.url = sc.scheme + "://" + strings.Join(addrs, ",") + sc.path
			checkUnreachable(t, lock, addrs)
		})
	}
}
