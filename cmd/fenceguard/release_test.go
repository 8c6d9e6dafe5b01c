//go:build unix

package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// A job's background process would act after the release, beside the next
// holder: run ends what the job left in its group before it releases.
func TestRunEndsWhatTheJobLeftRunningBeforeTheRelease(t *testing.T) {
	t.Parallel()
	ls := redisURL(t)
	dir := t.TempDir()
	r := fenceguard(t, nil, join(run(ls.args...), "--key", "bg", "--grace", "1s", "--",
		"sh", "-c", `(trap '' TERM; sleep 30) & echo $! > "$0/bg.pid"; exit 0`, dir)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	pid := readPID(t, filepath.Join(dir, "bg.pid"))
	if err := gone(pid); err != nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the job's background process outlived the job and the release: %v", err)
	}
}

// A lost lease with a lock-delay: the next holder starts at the lease's
// deadline plus the delay, so a job that ignores SIGTERM is killed by then,
// even when that comes before --grace is over (here, after a freeze that
// used up most of the delay).
func TestRunKillsTheJobByTheEndOfTheLockDelay(t *testing.T) {
	t.Parallel()
	ls := redisURL(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	a := start(t, join(run(ls.args...), "--key", "delay-kill", "--ttl", "1s", "--lock-delay", "4s", "--grace", "3900ms", "--",
		"env", "LOG="+log, "DIR="+dir, "sh", "-c",
		`echo $$ > "$DIR/job.pid"; trap '' TERM; while :; do echo A >> "$LOG"; sleep 0.05; done`)...)
	var job int
	harness.Eventually(t, 30*time.Second, func() error { // the file exists before the shell wrote to it
		b, err := os.ReadFile(filepath.Join(dir, "job.pid"))
		if err == nil {
			job, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err
	})
	b := start(t, join(run(ls.args...), "--key", "delay-kill", "--ttl", "5s", "--wait", "50s", "--",
		"env", "LOG="+log, "sh", "-c", `echo B >> "$LOG"`)...)
	// Freeze run and its job together for 2 s: past the 1 s lease, within
	// the lease plus the 4 s delay. Once thawed, run has 2.5 to 3 s before
	// the next holder may start: less than --grace.
	a.signal(syscall.SIGSTOP)
	syscall.Kill(-job, syscall.SIGSTOP)
	time.Sleep(2 * time.Second)
	syscall.Kill(-job, syscall.SIGCONT)
	a.signal(syscall.SIGCONT)
	if res := b.wait(); res.code != 0 {
		t.Fatalf("next holder: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := a.wait(); res.code != 77 {
		t.Fatalf("frozen holder: exit %d, want 77; stderr %q", res.code, res.stderr)
	}
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if i := strings.Index(s, "B"); i < 0 || strings.Contains(s[i:], "A") {
		t.Fatalf("the old job wrote after the next holder started:\n%s", s)
	}
}

// A lock service that stops answering while run waits in its queue is an
// outage (69), not a lock held by another (75), and run ends near its
// --wait, not whenever the client gives up.
func TestRunWaitingOnAFrozenServiceExits69(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	url := "redis://" + srv.Addr()
	dir := t.TempDir()
	holder := start(t, "run", "--lock", url, "--key", "frozen", "--ttl", "30s", "--",
		"sh", "-c", `touch "$0/started"; sleep 30`, dir)
	waitForFile(t, filepath.Join(dir, "started"))
	waiter := start(t, "run", "--lock", url, "--key", "frozen", "--wait", "2s", "--connect-timeout", "1s", "--", "true")
	time.Sleep(500 * time.Millisecond)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res := waiter.wait()
	took := time.Since(began)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if res.code != 69 {
		t.Fatalf("exit %d, want 69; stderr %q", res.code, res.stderr)
	}
	checkOwnLine(t, "exit 69", res)
	// The wait's rest, the 1 s question, the bounded close, and slack for a
	// loaded machine.
	if took > 10*time.Second {
		t.Errorf("run ended %v after the freeze, for --wait 2s --connect-timeout 1s", took)
	}
	holder.signal(syscall.SIGTERM)
	holder.wait()
}

// The first attempt is made whatever --wait is: a free lock is taken even
// with a wait shorter than a round trip.
func TestRunTakesAFreeLockWhateverTheWait(t *testing.T) {
	t.Parallel()
	ls := redisURL(t)
	for _, wait := range []string{"1ns", "1ms"} {
		if r := fenceguard(t, nil, join(run(ls.args...), "--key", "free-"+wait, "--wait", wait, "--", "true")...); r.code != 0 {
			t.Errorf("--wait %s on a free lock: exit %d, stderr %q", wait, r.code, r.stderr)
		}
	}
}

// A password may hold "/", "?" or "#" unescaped (base64 does): errors show
// it masked, and a value that is not a URL is not echoed at all.
func TestErrorsNeverShowAPasswordWithURLCharacters(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, u := range []string{
		"redis://u:S3c/ret@" + addr,
		"redis://:ab/S3cret+x==@" + addr + "/0",
		"etcd://u:S3c?ret@" + addr,
		"zk://u:S3c#ret@" + addr,
		"S3cret-not-a-url",
	} {
		for _, args := range [][]string{
			{"run", "--lock", u, "--key", "k", "--connect-timeout", "500ms", "--", "true"},
			{"fence", "get", "--store", u, "--connect-timeout", "500ms", "r"},
		} {
			r := fenceguard(t, nil, args...)
			if r.code == 0 || strings.Contains(r.stderr+r.stdout, "S3c") {
				t.Errorf("%s: exit %d, output %q%q: shows the password", strings.Join(args, " "), r.code, r.stdout, r.stderr)
			}
		}
	}
}
