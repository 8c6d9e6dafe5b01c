//go:build linux

package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// procStat returns the state letter and process group of pid; ok is false
// when there is no such process.
func procStat(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return 0, 0, false
	}
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], pgrp, true
}

// groupMembers returns the processes of the process group pgid that still
// live. Zombies do not count: on a machine whose init does not reap orphans
// they stay for ever, dead.
func groupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, g, ok := procStat(pid); ok && g == pgid && st != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// killGroupAtEnd kills what is left of the job's process group when the test
// ends (the program may have died without its job).
func killGroupAtEnd(t *testing.T, pgid int) {
	t.Cleanup(func() {
		if len(groupMembers(pgid)) > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
}

// jobPid waits for the job to write its pid to name, checks that the job runs
// in a process group of its own, and returns the pid (= the group's id).
func jobPid(t *testing.T, jd jobDir, name string, fg *exec.Cmd) int {
	t.Helper()
	pid := int(jd.number(t, name, 30*time.Second))
	_, pgrp, ok := procStat(pid)
	if !ok {
		t.Fatalf("job %d: no such process", pid)
	}
	killGroupAtEnd(t, pgrp)
	if pgrp != pid {
		t.Fatalf("the job %d runs in process group %d, not in one of its own", pid, pgrp)
	}
	if _, fgGroup, _ := procStat(fg.Process.Pid); fgGroup == pgrp {
		t.Fatalf("the job shares the program's process group %d", pgrp)
	}
	return pid
}

// pause freezes a whole invocation — the program and its job's process group
// — with SIGSTOP, as a VM pause or a swap storm freezes a host, until the
// returned function continues it (at the end of the test at the latest).
func pause(t *testing.T, fg *exec.Cmd, pgid int) (resume func()) {
	t.Helper()
	// A stall of the machine longer than the TTL can have lost the lease
	// and ended the job already: the outcome to check is the same.
	if err := fg.Process.Signal(syscall.SIGSTOP); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
			_ = fg.Process.Signal(syscall.SIGCONT)
		})
	}
	t.Cleanup(resume)
	return resume
}

// checkGroupGone checks that nothing of the job's process group lives on
// (children the job started included).
func checkGroupGone(t *testing.T, pgid int) {
	t.Helper()
	harness.Eventually(t, 2*time.Second, func() error {
		if m := groupMembers(pgid); len(m) > 0 {
			return fmt.Errorf("processes %v of the job's group %d outlived the program", m, pgid)
		}
		return nil
	})
}

// checkFreeAtOnce checks that the lock is free: a run with --wait 0 gets it.
func checkFreeAtOnce(t *testing.T, lock lockSpec, key string) {
	t.Helper()
	if r := fenceguard(t, nil, lock.run(key, []string{"--wait", "0"}, "exit 0")...); r.code != 0 {
		t.Errorf("a run with --wait 0 afterwards: exit %d, want 0 (the lock was not released); stderr: %s", r.code, r.stderr)
	}
}

// checkLost checks how the program reports a lost lease: exit 77, one error
// line naming the key and the token.
func checkLost(t *testing.T, r result, key string, tok uint64) {
	t.Helper()
	if r.code != 77 {
		t.Fatalf("exit %d, want 77 (lease lost); stderr: %s", r.code, r.stderr)
	}
	own := ownLines(r.stderr)
	if len(own) != 1 {
		t.Fatalf("stderr has %d lines starting %q, want 1: %q", len(own), "fenceguard: ", r.stderr)
	}
	if !strings.Contains(own[0], key) || !strings.Contains(own[0], strconv.FormatUint(tok, 10)) {
		t.Errorf("the error line names not both key %q and token %d: %q", key, tok, own[0])
	}
}

// trapScript is a job that records the signal $2 to $JOB/log and exits 42 on
// it. It runs in $JOB, where a SIGQUIT's core dump of its sleep would go.
const trapScript = `cd "$JOB"; trap 'echo "got $2" >> "$JOB/log"; exit 42' "$2"
echo $$ > "$JOB/$1.pid"
while :; do sleep 0.05; done`

func TestRunForwardsSignalsToTheJob(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
		name := strings.TrimPrefix(unixName(sig), "SIG")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lock := redisLock(t)
			jd := newJobDir(t)
			fg := startFenceguard(t, jd.env(), lock.run("k", nil, trapScript, "a", name)...)
			jobPid(t, jd, "a.pid", fg)
			if err := fg.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			r := finish(t, fg, 30*time.Second)
			if got := jd.read(t, "log"); got != "got "+name+"\n" {
				t.Errorf("the job recorded %q, want %q", got, "got "+name+"\n")
			}
			if r.code != 42 {
				t.Fatalf("exit %d, want the job's 42; stderr: %s", r.code, r.stderr)
			}
			checkFreeAtOnce(t, lock, "k")
		})
	}
	t.Run("TERM, not trapped", func(t *testing.T) {
		t.Parallel()
		lock := redisLock(t)
		jd := newJobDir(t)
		fg := startFenceguard(t, jd.env(), lock.run("k", nil, `echo $$ > "$JOB/a.pid"; while :; do sleep 0.05; done`)...)
		pid := jobPid(t, jd, "a.pid", fg)
		if err := fg.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if r := finish(t, fg, 30*time.Second); r.code != 128+15 {
			t.Fatalf("exit %d, want 143 (the job killed by SIGTERM); stderr: %s", r.code, r.stderr)
		}
		checkGroupGone(t, pid)
		checkFreeAtOnce(t, lock, "k")
	})
}

func unixName(s syscall.Signal) string {
	return map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
		syscall.SIGQUIT: "SIGQUIT", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	}[s]
}

// takeWhilePaused pauses the invocation fg (job group pgid) past its TTL,
// and runs another invocation on key meanwhile, which must get the lock
// (with a larger token than holder's) and run its job to the end; then it
// continues fg.
func takeWhilePaused(t *testing.T, lock lockSpec, jd jobDir, key string, fg *exec.Cmd, pgid int, holder uint64) {
	t.Helper()
	resume := pause(t, fg, pgid)
	r := fenceguard(t, jd.env(), lock.run(key, []string{"--wait", "30s"}, `echo "$FENCING_TOKEN" > "$JOB/b.token"`)...)
	if r.code != 0 {
		t.Fatalf("the second invocation, while the first was paused: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	if b := jd.number(t, "b.token", time.Second); b <= holder {
		t.Errorf("the second holder got token %d, not above the paused one's %d", b, holder)
	}
	resume()
}

// TestRunTerminatesTheJobWhenItsLeaseExpiresDuringAPause pauses a whole
// invocation past its TTL while another one takes the lock: continued, the
// first invocation sends its job SIGTERM and exits 77, though the job exits 0.
// TestRunAndTokenOnEveryScheme checks the same on every scheme.
func TestRunTerminatesTheJobWhenItsLeaseExpiresDuringAPause(t *testing.T) {
	t.Parallel()
	checkLostToAPause(t, redisLock(t), "k")
}

func checkLostToAPause(t *testing.T, lock lockSpec, key string) {
	t.Helper()
	jd := newJobDir(t)
	script := `trap 'echo TERM >> "$JOB/log"; exit 0' TERM
echo $$ > "$JOB/a.pid"; echo "$FENCING_TOKEN" > "$JOB/a.token"
while :; do sleep 0.05; done`
	fg := startFenceguard(t, jd.env(), lock.run(key, []string{"--ttl", "1s", "--grace", "5s"}, script)...)
	pid := jobPid(t, jd, "a.pid", fg)
	tok := jd.number(t, "a.token", 30*time.Second)
	takeWhilePaused(t, lock, jd, key, fg, pid, tok)
	r := finish(t, fg, 30*time.Second)
	if got := jd.read(t, "log"); got != "TERM\n" {
		t.Errorf("the job recorded %q, want %q (SIGTERM)", got, "TERM\n")
	}
	checkLost(t, r, key, tok)
	checkGroupGone(t, pid)
	checkFreeAtOnce(t, lock, key)
}

// TestRunKillsTheJobGroupWhenItIgnoresSIGTERM is the pause of the test above
// with a job that ignores SIGTERM and started a child that ignores it too:
// --grace after the SIGTERM the program kills the whole group.
func TestRunKillsTheJobGroupWhenItIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	const key = "k"
	const grace = time.Second
	// The child inherits SIGTERM ignored; the shell itself records it and
	// carries on.
	script := `trap '' TERM; sleep 600 & echo $! > "$JOB/child.pid"
trap 'echo TERM >> "$JOB/log"' TERM
echo "$FENCING_TOKEN" > "$JOB/a.token"; echo $$ > "$JOB/a.pid"
while :; do sleep 0.05; done`
	fg := startFenceguard(t, jd.env(), lock.run(key, []string{"--ttl", "1s", "--grace", grace.String()}, script)...)
	pid := jobPid(t, jd, "a.pid", fg)
	tok := jd.number(t, "a.token", 30*time.Second)
	child := int(jd.number(t, "child.pid", time.Second))
	takeWhilePaused(t, lock, jd, key, fg, pid, tok)
	resumed := time.Now()
	r := finish(t, fg, 30*time.Second)
	took := time.Since(resumed)
	checkLost(t, r, key, tok)
	if got := jd.read(t, "log"); !strings.HasPrefix(got, "TERM\n") {
		t.Errorf("the job recorded %q, want SIGTERM before the kill", got)
	}
	if took < grace*8/10 {
		t.Errorf("the program exited %v after the pause, before --grace %v: the job was not given its grace", took, grace)
	}
	checkGroupGone(t, pid)
	if st, _, ok := procStat(child); ok && st != 'Z' {
		t.Errorf("the job's child %d survived (state %c)", child, st)
	}
	checkFreeAtOnce(t, lock, key)
}

// TestRunTerminatesTheJobWhenRenewalIsRefused deletes the lock behind the
// holder's back: its next renewal is refused, well before its TTL runs out.
func TestRunTerminatesTheJobWhenRenewalIsRefused(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	lock := lockSpec{url: "redis://" + db.Addr, prefix: db.Prefix}
	jd := newJobDir(t)
	const key = "k"
	const ttl = 6 * time.Second // renewed every 2s
	script := `trap 'echo TERM >> "$JOB/log"; exit 0' TERM
echo $$ > "$JOB/a.pid"; echo "$FENCING_TOKEN" > "$JOB/a.token"
while :; do sleep 0.05; done`
	fg := startFenceguard(t, jd.env(), lock.run(key, []string{"--ttl", ttl.String(), "--grace", "5s"}, script)...)
	pid := jobPid(t, jd, "a.pid", fg)
	tok := jd.number(t, "a.token", 30*time.Second)

	rdb := redis.NewClient(&redis.Options{Addr: db.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The lock's key: <prefix>{<key>} (package redislock).
	n, err := rdb.Del(ctx, db.Prefix+"{"+key+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the lock's key %q was not there to delete", db.Prefix+"{"+key+"}")
	}
	// The renewal after the delete, at most TTL/3 later, is refused; the
	// local deadline would pass only after TTL·(1 − drift) from the last one.
	harness.Eventually(t, ttl*2/3, func() error {
		if jd.read(t, "log") == "" {
			return fmt.Errorf("the job got no SIGTERM %v after its lock was deleted", ttl*2/3)
		}
		return nil
	})
	r := finish(t, fg, 30*time.Second)
	checkLost(t, r, key, tok)
	checkGroupGone(t, pid)
	checkFreeAtOnce(t, lock, key)
}

// groupAliveScript defines alive PGID, which prints whether a process of the
// group PGID lives (zombies do not count).
const groupAliveScript = `alive() {
	a=dead
	for s in /proc/[0-9]*/stat; do
		{ read -r line < "$s"; } 2>/dev/null || continue
		rest=${line##*) }
		set -- $rest
		if [ "$3" = "$PG" ] && [ "$1" != Z ]; then a=alive; fi
	done
	echo $a
}
`

// TestRunLockDelayKeepsTheNextJobOutUntilThePausedJobIsDead pauses an
// invocation A past its TTL while B waits for the lock. With --lock-delay
// longer than --grace, B's job starts only once A's job (which ignores
// SIGTERM) is dead; without it B's job starts while A's still lives, paused.
func TestRunLockDelayKeepsTheNextJobOutUntilThePausedJobIsDead(t *testing.T) {
	t.Parallel()
	aScript := `trap 'echo "A TERM" >> "$JOB/log"' TERM
echo "A start" >> "$JOB/log"; echo $$ > "$JOB/a.pid"
while :; do sleep 0.05; done`
	bScript := groupAliveScript + `PG=$(cat "$JOB/a.pid"); echo "B start, A's job $(alive)" >> "$JOB/log"`

	for _, c := range []struct {
		name  string
		delay []string
	}{
		{"lock-delay 3s", []string{"--lock-delay", "3s"}},
		{"no lock-delay", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lock := redisLock(t)
			jd := newJobDir(t)
			opts := append([]string{"--ttl", "1s", "--grace", "1s"}, c.delay...)
			a := startFenceguard(t, jd.env(), lock.run("k", opts, aScript)...)
			pid := jobPid(t, jd, "a.pid", a)
			resume := pause(t, a, pid)
			// B's own lease is not the subject: the default TTL keeps a
			// loaded machine from taking it away.
			b := startFenceguard(t, jd.env(), lock.run("k", []string{"--wait", "30s"}, bScript)...)
			if c.delay == nil {
				harness.Eventually(t, 15*time.Second, func() error {
					if !slices.ContainsFunc(jd.lines(t, "log"), func(l string) bool { return strings.HasPrefix(l, "B start") }) {
						return fmt.Errorf("B's job has not started while A is paused past its TTL")
					}
					return nil
				})
			} else {
				time.Sleep(1500 * time.Millisecond) // the pause: past the TTL, within TTL + lock-delay − grace
			}
			resume()
			ra := finish(t, a, 30*time.Second)
			rb := finish(t, b, 30*time.Second)
			if ra.code != 77 {
				t.Errorf("A: exit %d, want 77; stderr: %s", ra.code, ra.stderr)
			}
			if rb.code != 0 {
				t.Errorf("B: exit %d, want 0; stderr: %s", rb.code, rb.stderr)
			}
			// A's job may die by the SIGKILL before its trap records the
			// SIGTERM: what matters is whether it lived when B's started.
			log := jd.lines(t, "log")
			want := "B start, A's job dead"
			if c.delay == nil {
				want = "B start, A's job alive"
			}
			i := slices.IndexFunc(log, func(l string) bool { return strings.HasPrefix(l, "B start") })
			if len(log) == 0 || log[0] != "A start" || i < 0 || log[i] != want {
				t.Errorf("the jobs recorded %q, want A's start, then %q", log, want)
			}
		})
	}
}

// TestRunEndsTheWaitForTheLockOnASignal signals an invocation waiting in the
// lock's queue: it gives up at once, with 128+N, and never runs its job.
func TestRunEndsTheWaitForTheLockOnASignal(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	lock := lockSpec{url: "redis://" + db.Addr, prefix: db.Prefix}
	jd := newJobDir(t)
	const key = "k"
	holder := startFenceguard(t, jd.env(), lock.run(key, nil, holdScript, "a")...)
	jd.number(t, "a.token", 30*time.Second)
	waiter := startFenceguard(t, jd.env(), lock.run(key, []string{"--wait", "60s"}, holdScript, "b")...)

	rdb := redis.NewClient(&redis.Options{Addr: db.Addr})
	defer rdb.Close()
	// The waiter is in the lock's queue: <prefix>{<key>}:q (package redislock).
	harness.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := rdb.ZCard(ctx, db.Prefix+"{"+key+"}:q").Result()
		if err == nil && n == 0 {
			err = fmt.Errorf("no waiter in the lock's queue")
		}
		return err
	})
	if err := waiter.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := finish(t, waiter, 10*time.Second)
	if r.code != 128+15 {
		t.Errorf("waiter: exit %d, want 143 (ended by SIGTERM); stderr: %s", r.code, r.stderr)
	}
	if s := jd.read(t, "b.pid"); s != "" {
		t.Errorf("the waiter's job ran")
	}
	jd.touch(t, "a.release")
	if r := finish(t, holder, 30*time.Second); r.code != 0 {
		t.Errorf("holder: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	checkFreeAtOnce(t, lock, key)
}

// TestRunTerminatesTheJobWhenTheServiceStopsAnswering cuts the holder off
// from a lock service that then answers nothing: no renewal succeeds, the
// local deadline passes, and the job is terminated.
func TestRunTerminatesTheJobWhenTheServiceStopsAnswering(t *testing.T) {
	t.Parallel() // mostly waits out the release
	lock := redisLock(t)
	_, upstream, _ := strings.Cut(lock.url, "://")
	p := harness.NewProxy(t, upstream)
	lock.url = "redis://" + p.Addr()
	jd := newJobDir(t)
	const key = "k"
	const ttl = 2 * time.Second
	script := `trap 'echo TERM >> "$JOB/log"; exit 0' TERM
echo $$ > "$JOB/a.pid"; echo "$FENCING_TOKEN" > "$JOB/a.token"
while :; do sleep 0.05; done`
	fg := startFenceguard(t, jd.env(), lock.run(key, []string{"--ttl", ttl.String(), "--grace", "5s"}, script)...)
	pid := jobPid(t, jd, "a.pid", fg)
	tok := jd.number(t, "a.token", 30*time.Second)
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	// The deadline is at most the TTL after the blackhole.
	harness.Eventually(t, ttl+2*time.Second, func() error {
		if jd.read(t, "log") == "" {
			return fmt.Errorf("the job got no SIGTERM %v after the lock service stopped answering", ttl)
		}
		return nil
	})
	r := finish(t, fg, 30*time.Second)
	checkLost(t, r, key, tok)
	checkGroupGone(t, pid)
}

// procState is the state letter of pid (0 when there is no such process).
func procState(pid int) byte {
	st, _, _ := procStat(pid)
	return st
}

// waitState waits until pid's state is (or, with not, is not) one of states,
// where 0 stands for no such process.
func waitState(t *testing.T, what string, pid int, not bool, states string) {
	t.Helper()
	harness.Eventually(t, 10*time.Second, func() error {
		st := procState(pid)
		if (strings.IndexByte(states, st) >= 0) != not {
			return nil
		}
		return fmt.Errorf("%s (pid %d) is in state %q", what, pid, st)
	})
}

// TestRunTakesTheJobDownWhenKilled kills the program with SIGKILL, which it
// cannot pass on: the job dies with it rather than run on without the lock.
func TestRunTakesTheJobDownWhenKilled(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	fg := startFenceguard(t, jd.env(), lock.run("k", nil, `echo $$ > "$JOB/a.pid"; while :; do sleep 0.05; done`)...)
	pid := jobPid(t, jd, "a.pid", fg)
	if err := fg.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	finish(t, fg, 10*time.Second)
	waitState(t, "the job of the killed program", pid, false, "Z\x00")
}

// TestRunStopsTheJobOnCtrlZ sends the program SIGTSTP, as a terminal's
// Ctrl-Z does: the job stops with it, and SIGCONT to the program continues
// both.
func TestRunStopsTheJobOnCtrlZ(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	fg := startFenceguard(t, jd.env(), lock.run("k", nil, holdScript, "a")...)
	pid := jobPid(t, jd, "a.pid", fg)
	if err := fg.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	waitState(t, "the job", pid, false, "T")
	waitState(t, "the program", fg.Process.Pid, false, "T")
	if err := fg.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, "the job", pid, true, "T")
	jd.touch(t, "a.release")
	if r := finish(t, fg, 30*time.Second); r.code != 0 {
		t.Errorf("exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
}

// TestRunEndsTheJobWhenItsLeaseRanOutDuringCtrlZ stops an invocation with
// SIGTSTP past its TTL while another takes the lock: continued, the job is
// terminated and the program exits 77.
func TestRunEndsTheJobWhenItsLeaseRanOutDuringCtrlZ(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	const key = "k"
	script := `trap 'echo TERM >> "$JOB/log"; exit 0' TERM
echo "$FENCING_TOKEN" > "$JOB/a.token"; echo $$ > "$JOB/a.pid"
while :; do sleep 0.05; done`
	fg := startFenceguard(t, jd.env(), lock.run(key, []string{"--ttl", "1s", "--grace", "5s"}, script)...)
	pid := jobPid(t, jd, "a.pid", fg)
	tok := jd.number(t, "a.token", time.Second)
	if err := fg.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	// Stopped, or (a stall of the machine past the TTL lost the lease
	// first) gone: either way the job must end with 77 below.
	waitState(t, "the program", fg.Process.Pid, false, "TZ\x00")
	r := fenceguard(t, jd.env(), lock.run(key, []string{"--wait", "30s"}, "exit 0")...)
	if r.code != 0 {
		t.Fatalf("the second invocation, while the first was stopped: exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
	if err := fg.Process.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	r = finish(t, fg, 30*time.Second)
	if got := jd.read(t, "log"); got != "TERM\n" {
		t.Errorf("the job recorded %q, want %q (SIGTERM)", got, "TERM\n")
	}
	checkLost(t, r, key, tok)
	checkGroupGone(t, pid)
}

// TestRunTerminatesAStoppedJob forwards SIGTERM to a job that stopped itself
// (as one reading the terminal does): the job must act on it, not hold the
// lock stopped for good.
func TestRunTerminatesAStoppedJob(t *testing.T) {
	t.Parallel()
	lock := redisLock(t)
	jd := newJobDir(t)
	fg := startFenceguard(t, jd.env(), lock.run("k", nil, `echo $$ > "$JOB/a.pid"; kill -STOP $$; echo continued >> "$JOB/log"`)...)
	pid := jobPid(t, jd, "a.pid", fg)
	waitState(t, "the job", pid, false, "T")
	if err := fg.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, fg, 30*time.Second); r.code != 128+15 {
		t.Errorf("exit %d, want 143 (the job ended by SIGTERM); stderr: %s", r.code, r.stderr)
	}
	if s := jd.read(t, "log"); s != "" {
		t.Errorf("the job carried on after SIGTERM: %q", s)
	}
	checkFreeAtOnce(t, lock, "k")
}
