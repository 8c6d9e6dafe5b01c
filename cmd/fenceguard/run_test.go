package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// checkOwnError checks that a run that ended with a code of the program's own
// wrote exactly one line of its own to stderr.
func checkOwnError(t *testing.T, what string, r result) {
	t.Helper()
	if own := ownLines(r.stderr); len(own) != 1 {
		t.Errorf("%s: stderr has %d lines starting %q, want 1: %q", what, len(own), "fenceguard: ", r.stderr)
	}
}

func TestRunExitsWithTheJobsStatus(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	for _, c := range []struct {
		name, script string
		want         int
	}{
		{"exit 0", "exit 0", 0},
		{"exit 3", "exit 3", 3},
		{"exit 255", "exit 255", 255},
		{"killed by SIGKILL", "kill -KILL $$", 128 + 9},
		{"killed by SIGTERM", "kill -TERM $$", 128 + 15},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := fenceguard(t, nil, lock.run("job", nil, c.script)...)
			if r.code != c.want {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, c.want, r.stderr)
			}
			if c.want == 0 {
				if own := ownLines(r.stderr); len(own) != 0 {
					t.Errorf("a successful run wrote errors: %q", own)
				}
			}
		})
	}
}

func TestRunRefusesBadUsage(t *testing.T) {
	t.Parallel()
	db := redisLock(t)
	_, addr, _ := strings.Cut(db.url, "://")
	jd := newJobDir(t)
	job := []string{"--", "sh", "-c", `echo ran >> "$JOB/ran"`}
	withJob := func(args ...string) []string { return append(args, job...) }
	lockKey := []string{"--lock", db.url, "--prefix", db.prefix, "--key", "k"}
	cases := []struct {
		name string
		args []string
	}{
		{"missing --key", withJob("run", "--lock", db.url)},
		{"missing CMD", append([]string{"run"}, lockKey...)},
		{"missing CMD after --", append(append([]string{"run"}, lockKey...), "--")},
		{"unknown flag", withJob(append([]string{"run", "--frobnicate"}, lockKey...)...)},
		{"unknown scheme", withJob("run", "--lock", "mysql://"+addr, "--key", "k")},
		{"URL without host", withJob("run", "--lock", "redis://", "--key", "k")},
		{"redlock with 2 nodes", withJob("run", "--lock", "redlock://"+addr+","+closedPorts(t, 1)[0], "--key", "k")},
		{"undocumented query parameter", withJob("run", "--lock", db.url+"?frobnicate=1", "--key", "k")},
		{"zk URL with a path", withJob("run", "--lock", "zk://127.0.0.1:2181/chroot", "--key", "k")},
		{"etcd URL with a path", withJob("run", "--lock", "etcd://127.0.0.1:2379/x", "--key", "k")},
		{"redis+cluster URL with a path", withJob("run", "--lock", "redis+cluster://"+addr+"/0", "--key", "k")},
		{"redis+sentinel URL without a master", withJob("run", "--lock", "redis+sentinel://127.0.0.1:26379", "--key", "k")},
		{"redis URL with a path not a database", withJob("run", "--lock", db.url+"/reports", "--key", "k")},
		{"store URL as lock", withJob("run", "--lock", "postgres://127.0.0.1:5432/db", "--key", "k")},
		{"bad duration", withJob(append(append([]string{"run"}, lockKey...), "--ttl", "soon")...)},
		{"--ttl below 1s", withJob(append(append([]string{"run"}, lockKey...), "--ttl", "500ms")...)},
		{"grace equal to lock-delay", withJob(append(append([]string{"run"}, lockKey...), "--lock-delay", "3s", "--grace", "3s")...)},
		{"grace above lock-delay", withJob(append(append([]string{"run"}, lockKey...), "--lock-delay", "3s", "--grace", "5s")...)},
		{"default grace 10s above lock-delay", withJob(append(append([]string{"run"}, lockKey...), "--lock-delay", "3s")...)},
	}
	if os.Getenv("FENCEGUARD_LOCK") == "" {
		cases = append(cases, struct {
			name string
			args []string
		}{"missing --lock", withJob("run", "--key", "k")})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := fenceguard(t, jd.env(), c.args...)
			if r.code != 64 {
				t.Fatalf("exit %d, want 64; stderr: %s", r.code, r.stderr)
			}
			// Nothing else: no usage text, no logs.
			if !strings.HasPrefix(r.stderr, "fenceguard: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
				t.Errorf("stderr is not one line starting %q: %q", "fenceguard: ", r.stderr)
			}
		})
	}
	if s := jd.read(t, "ran"); s != "" {
		t.Errorf("a job ran despite bad usage %d times", strings.Count(s, "\n"))
	}
}

// TestRunGivesTheJobItsTokenAndKey checks the environment of the job, over
// successive runs on one key.
func TestRunGivesTheJobItsTokenAndKey(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	const key = "billing/close-month"
	script := `printf '%s|%s|%s|%s\n' "$FENCING_TOKEN" "$FENCING_KEY" "$FENCING_HEADER" "$FROM_TEST" >> "$JOB/env"`
	for range 3 {
		r := fenceguard(t, append(jd.env(), "FROM_TEST=kept"), lock.run(key, nil, script)...)
		if r.code != 0 {
			t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
		}
	}
	var prev uint64
	lines := jd.lines(t, "env")
	if len(lines) != 3 {
		t.Fatalf("the jobs wrote %q, want 3 lines", lines)
	}
	for i, l := range lines {
		f := strings.Split(l, "|")
		tok := parseToken(t, "FENCING_TOKEN", f[0]+"\n")
		if f[1] != key || f[2] != "X-Fencing-Token" || f[3] != "kept" {
			t.Errorf("run %d: FENCING_KEY=%q FENCING_HEADER=%q FROM_TEST=%q, want %q, %q, %q",
				i, f[1], f[2], f[3], key, "X-Fencing-Token", "kept")
		}
		if tok <= prev {
			t.Errorf("run %d got token %d, not above the previous run's %d", i, tok, prev)
		}
		prev = tok
	}
}

func TestRunPassesTheJobItsStdio(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	cmd := exec.Command(bin, lock.run("k", nil, `read -r line; echo "stdout $line"; echo "stderr $line" >&2`)...)
	cmd.Stdin = strings.NewReader("from-test\n")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v; stderr: %s", err, stderr.String())
	}
	if got := stdout.String(); got != "stdout from-test\n" {
		t.Errorf("stdout %q, want the job's %q", got, "stdout from-test\n")
	}
	if got := stderr.String(); !strings.Contains(got, "stderr from-test\n") {
		t.Errorf("stderr %q lacks the job's %q", got, "stderr from-test\n")
	}
}

// TestRunTakesTheLockFromTheEnvironment checks FENCEGUARD_LOCK, and that
// --lock wins over it.
func TestRunTakesTheLockFromTheEnvironment(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	args := []string{"run", "--prefix", lock.prefix, "--key", "k", "--", "sh", "-c", `echo "$FENCING_TOKEN"`}
	r := fenceguard(t, []string{"FENCEGUARD_LOCK=" + lock.url}, args...)
	if r.code != 0 {
		t.Fatalf("--lock from FENCEGUARD_LOCK: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	parseToken(t, "the job", r.stdout)
	r = fenceguard(t, []string{"FENCEGUARD_LOCK=redis://" + closedPorts(t, 1)[0]}, append([]string{args[0], "--lock", lock.url}, args[1:]...)...)
	if r.code != 0 {
		t.Fatalf("--lock and a FENCEGUARD_LOCK that names no server: exit %d, want 0 (the flag wins); stderr: %s", r.code, r.stderr)
	}
}

// TestRunLetsOneOfTwoSimultaneousInvocationsRun starts two invocations with
// --wait 0 at once: exactly one runs its job, the other exits 75.
func TestRunLetsOneOfTwoSimultaneousInvocationsRun(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	cmds := map[string]*exec.Cmd{}
	for _, n := range []string{"a", "b"} {
		cmds[n] = startFenceguard(t, jd.env(), lock.run("k", []string{"--wait", "0"}, holdScript, n)...)
	}
	var loser string
	harness.Eventually(t, 30*time.Second, func() error {
		for n, c := range cmds {
			if exited(c) {
				loser = n
				return nil
			}
		}
		return fmt.Errorf("neither invocation ended")
	})
	winner := map[string]string{"a": "b", "b": "a"}[loser]
	r := finish(t, cmds[loser], time.Second)
	if r.code != 75 {
		t.Fatalf("invocation %s ended first with exit %d, want 75; stderr: %s", loser, r.code, r.stderr)
	}
	checkOwnError(t, "exit 75", r)
	jd.number(t, winner+".token", 30*time.Second)
	if s := jd.read(t, loser+".pid"); s != "" {
		t.Errorf("both jobs ran")
	}
	jd.touch(t, winner+".release")
	if r := finish(t, cmds[winner], 30*time.Second); r.code != 0 {
		t.Errorf("invocation %s: exit %d, want 0; stderr: %s", winner, r.code, r.stderr)
	}
}

// TestRunSerializesWaitingInvocations starts three invocations at once with a
// long --wait: all run their jobs, one after the other, with growing tokens.
func TestRunSerializesWaitingInvocations(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	script := `echo "start $FENCING_TOKEN" >> "$JOB/log"; sleep 0.3; echo "end $FENCING_TOKEN" >> "$JOB/log"`
	var cmds []*exec.Cmd
	for range 3 {
		cmds = append(cmds, startFenceguard(t, jd.env(), lock.run("k", []string{"--wait", "30s"}, script)...))
	}
	for i, c := range cmds {
		if r := finish(t, c, 45*time.Second); r.code != 0 {
			t.Errorf("invocation %d: exit %d, want 0; stderr: %s", i, r.code, r.stderr)
		}
	}
	log := jd.lines(t, "log")
	if len(log) != 6 {
		t.Fatalf("the jobs wrote %q, want 3 start/end pairs", log)
	}
	var prev uint64
	for i := 0; i < len(log); i += 2 {
		start, end := log[i], log[i+1]
		tok, ok := strings.CutPrefix(start, "start ")
		if !ok || end != "end "+tok {
			t.Fatalf("jobs overlapped: %q", log)
		}
		n := parseToken(t, "a job", tok+"\n")
		if n <= prev {
			t.Errorf("job %d ran with token %d, not above the previous job's %d: %q", i/2, n, prev, log)
		}
		prev = n
	}
}

func TestRunExitsTempfailWhenTheLockIsHeld(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	holder := startFenceguard(t, jd.env(), lock.run("k", nil, holdScript, "holder")...)
	jd.number(t, "holder.token", 30*time.Second)

	t.Run("--wait 0", func(t *testing.T) {
		start := time.Now()
		r := fenceguard(t, jd.env(), lock.run("k", []string{"--wait", "0"}, holdScript, "w0")...)
		if r.code != 75 {
			t.Fatalf("exit %d, want 75; stderr: %s", r.code, r.stderr)
		}
		checkOwnError(t, "exit 75", r)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("took %v: --wait 0 makes one attempt", took)
		}
	})
	t.Run("--wait 1s", func(t *testing.T) {
		start := time.Now()
		r := fenceguard(t, jd.env(), lock.run("k", []string{"--wait", "1s"}, holdScript, "w1")...)
		took := time.Since(start)
		if r.code != 75 {
			t.Fatalf("exit %d, want 75; stderr: %s", r.code, r.stderr)
		}
		checkOwnError(t, "exit 75", r)
		if took < time.Second {
			t.Errorf("gave up after %v, before --wait 1s", took)
		}
	})
	t.Run("--conflict-exit-code 0", func(t *testing.T) {
		r := fenceguard(t, jd.env(), lock.run("k", []string{"--conflict-exit-code", "0"}, holdScript, "c0")...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("exit %d, stderr %q; want 0 and nothing printed (cron mails any output)", r.code, r.stderr)
		}
	})
	t.Run("--conflict-exit-code 99", func(t *testing.T) {
		r := fenceguard(t, jd.env(), lock.run("k", []string{"--conflict-exit-code", "99"}, holdScript, "c99")...)
		if r.code != 99 {
			t.Fatalf("exit %d, want 99; stderr: %s", r.code, r.stderr)
		}
	})
	for _, n := range []string{"w0", "w1", "c0", "c99"} {
		if s := jd.read(t, n+".pid"); s != "" {
			t.Errorf("the job of %s ran while the lock was held", n)
		}
	}
	jd.touch(t, "holder.release")
	if r := finish(t, holder, 30*time.Second); r.code != 0 {
		t.Errorf("holder: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
}

// TestRunExitsWhenTheCommandCannotRun checks the shell's codes for a command
// that is not executable (126) or not found (127), and that the lock is free
// afterwards.
func TestRunExitsWhenTheCommandCannotRun(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cmd  string
		want int
	}{
		{"not executable", notExec, 126},
		{"a directory", dir, 126},
		{"no such file", filepath.Join(dir, "missing"), 127},
		{"not on PATH", "fenceguard-no-such-command-" + strconv.Itoa(os.Getpid()), 127},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"run"}, lock.flags("k")...)
			r := fenceguard(t, nil, append(args, "--", c.cmd)...)
			if r.code != c.want {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, c.want, r.stderr)
			}
			checkOwnError(t, fmt.Sprintf("exit %d", c.want), r)
			if r.stdout != "" {
				t.Errorf("stdout %q: the command ran", r.stdout)
			}
			if r := fenceguard(t, nil, lock.run("k", []string{"--wait", "0"}, "exit 0")...); r.code != 0 {
				t.Errorf("a run after it: exit %d, want 0 (lock left held?); stderr: %s", r.code, r.stderr)
			}
		})
	}
}

// TestRunBoundsTheReleaseWhenTheServiceStopsAnswering lets the job end while
// the lock service does not answer: the program still exits with the job's
// status within a few seconds, the lock left to expire.
func TestRunBoundsTheReleaseWhenTheServiceStopsAnswering(t *testing.T) {
	t.Parallel() // mostly waits out the release
	lock := redisLock(t)
	_, upstream, _ := strings.Cut(lock.url, "://")
	p := harness.NewProxy(t, upstream)
	lock.url = "redis://" + p.Addr()
	jd := newJobDir(t)
	fg := startFenceguard(t, jd.env(), lock.run("k", []string{"--ttl", "30s"}, holdScript+"; exit 3", "a")...)
	jd.number(t, "a.token", 30*time.Second)
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	lat := harness.StartLateness(t)
	ended := time.Now()
	jd.touch(t, "a.release")
	r := finish(t, fg, time.Minute)
	if r.code != 3 {
		t.Errorf("exit %d, want the job's 3; stderr: %s", r.code, r.stderr)
	}
	if took := time.Since(ended); took > lat.Allowance(10*time.Second, ended) {
		t.Errorf("exited %v after the job ended, want within a few seconds", took.Round(time.Millisecond))
	}
}

// TestRunLetsTheJobAskForTheToken checks that a job can run fenceguard token
// without naming the lock service: run exports FENCEGUARD_LOCK and
// FENCEGUARD_PREFIX.
func TestRunLetsTheJobAskForTheToken(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	script := `printf '%s|%s\n' "$FENCEGUARD_LOCK" "$FENCEGUARD_PREFIX" > "$JOB/env"
"$FG" token --key "$FENCING_KEY" --check "$FENCING_TOKEN"`
	r := fenceguard(t, append(jd.env(), "FG="+bin), lock.run("k", nil, script)...)
	if r.code != 0 {
		t.Errorf("token --check of the job's own token inside the job: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	if got, want := jd.read(t, "env"), lock.url+"|"+lock.prefix+"\n"; got != want {
		t.Errorf("the job saw FENCEGUARD_LOCK|FENCEGUARD_PREFIX %q, want %q", got, want)
	}
}
