//go:build unix

package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/redis/go-redis/v9"
)

// lockURL is a lock service of the test's own: the --lock URL and the
// --prefix that keeps the test inside its share of a shared server.
type lockURL struct {
	url, prefix string
	args        []string // --lock URL --prefix P
}

func newLockURL(url, prefix string) lockURL {
	return lockURL{url: url, prefix: prefix, args: []string{"--lock", url, "--prefix", prefix}}
}

func redisURL(t *testing.T) lockURL {
	db := redisserver.Shared(t)
	return newLockURL("redis://"+db.Addr, db.Prefix)
}

func redlockURL(t *testing.T) lockURL {
	dbs := redisserver.SharedN(t, 3)
	addrs := make([]string, len(dbs))
	for i, db := range dbs {
		addrs[i] = db.Addr
	}
	return newLockURL("redlock://"+strings.Join(addrs, ","), dbs[0].Prefix)
}

func etcdURL(t *testing.T) lockURL {
	db := etcdserver.Shared(t)
	hosts := make([]string, len(db.Endpoints))
	for i, e := range db.Endpoints {
		hosts[i] = strings.TrimPrefix(strings.TrimPrefix(e, "http://"), "https://")
	}
	return newLockURL("etcd://"+strings.Join(hosts, ","), db.Prefix)
}

func zkURL(t *testing.T) lockURL {
	db := zkserver.Shared(t)
	return newLockURL("zk://"+strings.Join(db.Addrs, ","), db.Chroot+"/locks")
}

// backend names a lock service for subtests.
type backend struct {
	name string
	open func(*testing.T) lockURL
}

var (
	onRedis   = backend{"redis", redisURL}
	onRedlock = backend{"redlock", redlockURL}
	onEtcd    = backend{"etcd", etcdURL}
	onZK      = backend{"zk", zkURL}
)

// eachLockService runs f as a parallel subtest per backend.
func eachLockService(t *testing.T, f func(t *testing.T, ls lockURL), backends ...backend) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.open(t))
		})
	}
}

// quickExit is the environment that spares each run of a -race build the
// race detector's one-second pause at exit.
var quickExit = []string{"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}

// background is a fenceguard process the test started and has not waited for.
type background struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr *bytes.Buffer
	done           chan struct{}
	res            result
}

// start starts the program with args; the test ends it (SIGKILL) if it is
// still running when the test ends.
func start(t *testing.T, args ...string) *background {
	t.Helper()
	r := &background{t: t, cmd: exec.Command(bin, args...), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	r.cmd.Env = append(os.Environ(), quickExit...)
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("starting fenceguard: %v", err)
	}
	go func() {
		defer close(r.done)
		err := r.cmd.Wait()
		r.res = result{stdout: r.stdout.String(), stderr: r.stderr.String()}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			r.res.code = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.res.code = 128 + int(ws.Signal())
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// wait waits up to a minute for the program to end.
func (r *background) wait() result {
	r.t.Helper()
	select {
	case <-r.done:
		return r.res
	case <-time.After(time.Minute):
		r.t.Fatalf("fenceguard %s: still background after a minute; stderr: %s", strings.Join(r.cmd.Args[1:], " "), r.stderr.String())
		return result{}
	}
}

func (r *background) signal(sig syscall.Signal) {
	r.t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitForFile waits until path exists (a job tells the test it started).
func waitForFile(t *testing.T, path string) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, func() error {
		_, err := os.Stat(path)
		return err
	})
}

// holdUntilDone is a job (sh -c, its directory as $0) that creates
// "started" in its directory and ends once the test creates "done" there
// (see done): it holds its lock for as long as the test needs, however
// slowly the machine runs the programs the test starts meanwhile.
const holdUntilDone = `touch "$0/started"; while [ ! -e "$0/done" ]; do sleep 0.05; done`

// done ends a holdUntilDone job in dir.
func done(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkOwnLine checks that stderr is one line that starts with "fenceguard: ".
func checkOwnLine(t *testing.T, what string, r result) {
	t.Helper()
	if !strings.HasPrefix(r.stderr, "fenceguard: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("%s: stderr %q, want one line that starts with \"fenceguard: \"", what, r.stderr)
	}
}

func run(args ...string) []string { return append([]string{"run"}, args...) }

func join(a []string, b ...string) []string {
	return append(append([]string{}, a...), b...)
}

// gone reports whether process pid has ended (a zombie not yet reaped by its
// new parent counts as ended).
func gone(pid int) error {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i:]), ") Z") {
			return nil
		}
	}
	return errors.New("process " + strconv.Itoa(pid) + " still runs")
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// TestRunSuccessiveHoldersNeverOverlapAndGetIncreasingTokens starts several
// contenders for one key at once, each waiting its turn: their commands run
// one at a time, and each later one sees a larger FENCING_TOKEN.
func TestRunSuccessiveHoldersNeverOverlapAndGetIncreasingTokens(t *testing.T) {
	t.Parallel()
	eachLockService(t, func(t *testing.T, ls lockURL) {
		log := filepath.Join(t.TempDir(), "history")
		const contenders = 5
		job := `echo "S $FENCING_TOKEN" >> "$HISTORY"; sleep 0.05; echo "E $FENCING_TOKEN" >> "$HISTORY"`
		var rs []*background
		for i := 0; i < contenders; i++ {
			rs = append(rs, start(t, join(run(ls.args...), "--key", "queue", "--ttl", "5s", "--wait", "50s", "--", "env", "HISTORY="+log, "sh", "-c", job)...))
		}
		for i, r := range rs {
			if res := r.wait(); res.code != 0 {
				t.Fatalf("contender %d: exit %d, stderr %q", i, res.code, res.stderr)
			}
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2*contenders {
			t.Fatalf("history has %d lines, want %d:\n%s", len(lines), 2*contenders, b)
		}
		var last uint64
		for i := 0; i < len(lines); i += 2 {
			s, e := strings.Fields(lines[i]), strings.Fields(lines[i+1])
			if len(s) != 2 || len(e) != 2 || s[0] != "S" || e[0] != "E" || s[1] != e[1] {
				t.Fatalf("commands overlapped or interleaved:\n%s", b)
			}
			tok, err := strconv.ParseUint(s[1], 10, 64)
			if err != nil || tok <= last {
				t.Fatalf("token %q after %d: not strictly larger:\n%s", s[1], last, b)
			}
			last = tok
		}
	}, onRedis, onRedlock, onEtcd, onZK)
}

// TestRunStopsTheWholeGroupWhenTheLeaseIsLost takes the lock away from a
// background command: the command's group gets SIGTERM, a process that ignores
// it gets SIGKILL after --grace, and run exits 77 even when the command
// itself exits 0 on SIGTERM.
func TestRunStopsTheWholeGroupWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, job string
		grace     time.Duration
	}{
		{"command exits 0 on SIGTERM", `trap 'exit 0' TERM; touch "$DIR/started"; while :; do sleep 0.1; done`, 20 * time.Second},
		{"command ignores SIGTERM", `trap '' TERM; touch "$DIR/started"; while :; do sleep 0.1; done`, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := redisserver.Shared(t)
			dir := t.TempDir()
			// A grandchild in the command's group that ignores SIGTERM.
			job := `exec 2>/dev/null; (trap '' TERM; while :; do sleep 0.1; done) & echo $! > "$DIR/grandchild"; ` + tc.job
			r := start(t, "run", "--lock", "redis://"+db.Addr, "--prefix", db.Prefix, "--key", "lost",
				"--ttl", "10s", "--grace", tc.grace.String(), "--", "env", "DIR="+dir, "sh", "-c", job)
			waitForFile(t, filepath.Join(dir, "started"))
			rdb := redis.NewClient(&redis.Options{Addr: db.Addr})
			defer rdb.Close()
			// The lock's key is <prefix>{<name>} (locks/redislock).
			n, err := rdb.Del(context.Background(), db.Prefix+"{lost}").Result()
			if err != nil || n != 1 {
				t.Fatalf("deleting the lock's key: %d, %v", n, err)
			}
			lostAt := time.Now()
			res := r.wait()
			if res.code != 77 {
				t.Fatalf("exit %d, want 77; stderr %q", res.code, res.stderr)
			}
			checkOwnLine(t, "lost lease", res)
			if tc.grace < 10*time.Second {
				if d := time.Since(lostAt); d < tc.grace {
					t.Errorf("run ended %v after the loss, before --grace %v: SIGKILL came early", d, tc.grace)
				}
			}
			gc := readPID(t, filepath.Join(dir, "grandchild"))
			harness.Eventually(t, 5*time.Second, func() error { return gone(gc) })
		})
	}
}

// TestRunWithLockDelayStartsTheNextHolderOnlyAfterTheJobIsGone cuts a
// holder off from Redis while its command ignores SIGTERM: the command is
// killed after --grace, and the next holder, waiting on the lock, starts only
// after the old command wrote its last line.
func TestRunWithLockDelayStartsTheNextHolderOnlyAfterTheJobIsGone(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	proxy := harness.NewProxy(t, db.Addr)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	a := start(t, "run", "--lock", "redis://"+proxy.Addr(), "--prefix", db.Prefix, "--key", "delayed",
		"--ttl", "1s", "--lock-delay", "3s", "--grace", "1s", "--",
		"env", "LOG="+log, "DIR="+dir, "sh", "-c", `trap '' TERM; touch "$DIR/started"; while :; do echo A >> "$LOG"; sleep 0.05; done`)
	waitForFile(t, filepath.Join(dir, "started"))
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	b := start(t, "run", "--lock", "redis://"+db.Addr, "--prefix", db.Prefix, "--key", "delayed",
		"--ttl", "5s", "--wait", "50s", "--", "env", "LOG="+log, "sh", "-c", `echo B >> "$LOG"`)
	if res := b.wait(); res.code != 0 {
		t.Fatalf("next holder: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := a.wait(); res.code != 77 {
		t.Fatalf("cut-off holder: exit %d, want 77; stderr %q", res.code, res.stderr)
	}
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	i := strings.Index(s, "B")
	if i < 0 || strings.Contains(s[i:], "A") {
		t.Fatalf("the old command wrote after the next holder started:\n%s", s)
	}
}

// TestRunInterruptedWhileWaitingLeavesNothingBehind signals a run that waits
// in the lock's queue: it exits 143, and once the holder is done the lock is
// free at once, with no queue entry or grant of the interrupted run in the
// way.
func TestRunInterruptedWhileWaitingLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	eachLockService(t, func(t *testing.T, ls lockURL) {
		dir := t.TempDir()
		a := start(t, join(run(ls.args...), "--key", "q", "--ttl", "20s", "--", "sh", "-c", holdUntilDone, dir)...)
		waitForFile(t, filepath.Join(dir, "started"))
		b := start(t, join(run(ls.args...), "--key", "q", "--ttl", "20s", "--wait", "50s", "--", "touch", filepath.Join(dir, "b-ran"))...)
		// Time for b to start, connect and queue: a signal that comes
		// before run handles signals ends it silently.
		time.Sleep(2 * time.Second)
		b.signal(syscall.SIGTERM)
		res := b.wait()
		if res.code != 128+int(syscall.SIGTERM) {
			t.Fatalf("interrupted waiter: exit %d, want 143; stderr %q", res.code, res.stderr)
		}
		checkOwnLine(t, "interrupted waiter", res)
		done(t, dir)
		if res := a.wait(); res.code != 0 {
			t.Fatalf("holder: exit %d, stderr %q", res.code, res.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "b-ran")); err == nil {
			t.Fatal("the interrupted waiter ran its command")
		}
		if res := fenceguard(t, quickExit, join(run(ls.args...), "--key", "q", "--ttl", "20s", "--", "true")...); res.code != 0 {
			t.Fatalf("next run after the holder: exit %d, want 0; stderr %q", res.code, res.stderr)
		}
	}, onRedis, onEtcd, onZK)
}

// TestRunPassesSignalsToTheCommandAndReleases sends run the signals it
// passes on: the command ends by the signal, run exits 128+N, and the lock
// is free at once.
func TestRunPassesSignalsToTheCommandAndReleases(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			ls := redisURL(t)
			dir := t.TempDir()
			r := start(t, join(run(ls.args...), "--key", "sig", "--ttl", "20s", "--", "sh", "-c", `touch "$0/started"; exec sleep 30`, dir)...)
			waitForFile(t, filepath.Join(dir, "started"))
			r.signal(sig)
			if res := r.wait(); res.code != 128+int(sig) {
				t.Fatalf("exit %d, want %d; stderr %q", res.code, 128+int(sig), res.stderr)
			}
			if res := fenceguard(t, quickExit, join(run(ls.args...), "--key", "sig", "--", "true")...); res.code != 0 {
				t.Fatalf("next run: exit %d, want 0 (lock released); stderr %q", res.code, res.stderr)
			}
		})
	}
}

// TestRunTellsAnUnreachableServiceFromAHeldLock: nothing listening is 69,
// with or without --wait; a lock held by another is 75 (or
// --conflict-exit-code), with or without --wait; the command never runs.
func TestRunTellsAnUnreachableServiceFromAHeldLock(t *testing.T) {
	t.Parallel()
	closed := closedAddr(t)
	for _, url := range []string{"redis://" + closed, "redlock://" + closed + "," + closed + "," + closed, "etcd://" + closed, "zk://" + closed} {
		t.Run(strings.SplitN(url, ":", 2)[0]+" unreachable", func(t *testing.T) {
			t.Parallel()
			marker := filepath.Join(t.TempDir(), "ran")
			for _, wait := range []string{"0", "1s"} {
				res := fenceguard(t, quickExit, "run", "--lock", url, "--key", "k", "--connect-timeout", "1s", "--wait", wait, "--", "touch", marker)
				if res.code != 69 {
					t.Errorf("%s --wait %s: exit %d, want 69; stderr %q", url, wait, res.code, res.stderr)
				}
				checkOwnLine(t, url, res)
			}
			if res := fenceguard(t, quickExit, "token", "--lock", url, "--key", "k", "--connect-timeout", "1s"); res.code != 69 {
				t.Errorf("token %s: exit %d, want 69; stderr %q", url, res.code, res.stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("a command ran without the lock")
			}
		})
	}
	t.Run("held", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		marker := filepath.Join(dir, "ran")
		ls := redisURL(t)
		holder := start(t, join(run(ls.args...), "--key", "held", "--ttl", "20s", "--", "sh", "-c", holdUntilDone, dir)...)
		waitForFile(t, filepath.Join(dir, "started"))
		for _, tc := range []struct {
			args []string
			code int
		}{
			{[]string{"--wait", "0"}, 75},
			{[]string{"--wait", "300ms"}, 75},
			{[]string{"--conflict-exit-code", "0"}, 0},
			{[]string{"--conflict-exit-code", "3", "--wait", "300ms"}, 3},
		} {
			res := fenceguard(t, quickExit, join(run(ls.args...), append(append([]string{"--key", "held"}, tc.args...), "--", "touch", marker)...)...)
			if res.code != tc.code {
				t.Errorf("held lock, %v: exit %d, want %d; stderr %q", tc.args, res.code, tc.code, res.stderr)
			}
			if tc.code != 0 {
				checkOwnLine(t, "held lock", res)
			}
		}
		done(t, dir)
		if res := holder.wait(); res.code != 0 {
			t.Errorf("holder: exit %d; stderr %q", res.code, res.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("a command ran without the lock")
		}
	})
}

// TestRunWaitingOnAServiceThatDiesExits69 kills the Redis server while one
// run holds the lock and another waits for it: the waiter exits 69, not 75,
// and the holder 77.
func TestRunWaitingOnAServiceThatDiesExits69(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	dir := t.TempDir()
	lock := "redis://" + srv.Addr()
	holder := start(t, "run", "--lock", lock, "--key", "k", "--ttl", "2s", "--grace", "1s", "--", "sh", "-c", `touch "$0/started"; sleep 30`, dir)
	waitForFile(t, filepath.Join(dir, "started"))
	waiter := start(t, "run", "--lock", lock, "--key", "k", "--wait", "5s", "--", "touch", filepath.Join(dir, "ran"))
	time.Sleep(500 * time.Millisecond)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	res := waiter.wait()
	if res.code != 69 {
		t.Errorf("waiter: exit %d, want 69; stderr %q", res.code, res.stderr)
	}
	checkOwnLine(t, "waiter", res)
	if res := holder.wait(); res.code != 77 {
		t.Errorf("holder: exit %d, want 77; stderr %q", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the waiter ran its command")
	}
}

// TestTokenCheckConfirmsTheHolderOwnToken: inside the command, token --check
// "$FENCING_TOKEN" exits 0, and a token one above it exits 65.
func TestTokenCheckConfirmsTheHolderOwnToken(t *testing.T) {
	t.Parallel()
	eachLockService(t, func(t *testing.T, ls lockURL) {
		job := `"$0" token --lock "$1" --prefix "$2" --key "$FENCING_KEY" --check "$FENCING_TOKEN" || exit 10
"$0" token --lock "$1" --prefix "$2" --key "$FENCING_KEY" --check "$((FENCING_TOKEN + 1))" 2>/dev/null; [ $? -eq 65 ] || exit 11
[ "$("$0" token --lock "$1" --prefix "$2" --key "$FENCING_KEY")" = "$FENCING_TOKEN" ] || exit 12`
		res := fenceguard(t, quickExit, "run", "--lock", ls.url, "--prefix", ls.prefix, "--key", "check", "--", "sh", "-c", job, bin, ls.url, ls.prefix)
		if res.code != 0 {
			t.Fatalf("exit %d (10: own token refused, 11: a higher one accepted, 12: token printed another); stderr %q", res.code, res.stderr)
		}
	}, onRedis, onRedlock, onEtcd, onZK)
}
