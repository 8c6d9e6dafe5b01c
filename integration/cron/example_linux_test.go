package cron

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
)

// ttl is every run's lease, as in the README's crontab line.
const ttl = 5 * time.Second

// stock is every item's stock at the start of a scenario.
const stock = 10

// example is the README's set-up: Redis as the lock service, the inventory
// service over PostgreSQL twice — fenced, and with --unfenced — and the
// directory of the job scripts.
type example struct {
	lock     string // fenceguard's --lock URL
	fenced   string // base URL of the fenced service
	unfenced string // base URL of the service started with --unfenced
	dir      string // examples/cron in this repository
	http     *http.Client
}

// TestCronExample runs the scenarios of examples/cron/README.md, each on
// an item (and so a lock key) of its own, in parallel.
func TestCronExample(t *testing.T) {
	ex := setUp(t)
	for _, s := range []struct {
		name string
		run  func(*testing.T, *example)
	}{
		{"OneOfTwoRunsAtOnceSellsTheOtherExits75", oneOfTwoRunsAtOnce},
		{"FrozenRunIsEndedOrRefusedAfterItsLease", frozenRun},
		{"FrozenJobsLateWriteIsRefusedWhenFenced", lateWriteFenced},
		{"FrozenJobsLateWriteLosesAnUpdateWhenUnfenced", lateWriteUnfenced},
		{"LockDelayKeepsTheNextRunOutUntilTheFrozenJobWrote", lockDelay},
		{"FrozenRunWhoseJobEndedWhileFrozenExits77", jobEndedWhileFrozen},
	} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t, ex)
		})
	}
}

// oneOfTwoRunsAtOnce: two runs of the crontab line at the same moment (the
// winner's job held before its sale until the loser has ended): one sells,
// the other exits 75 without running the job; a third with
// --conflict-exit-code 0 exits 0, also without running it.
func oneOfTwoRunsAtOnce(t *testing.T, ex *example) {
	const sku = "lamp-twice"
	ex.put(t, ex.fenced, sku, stock)
	hold := holdFile(t)
	env := ex.env(ex.fenced, sku, hold)
	args := ex.args(sku, "./sell-once.sh")
	runs := []*run{ex.start(t, "run 1", env, args...), ex.start(t, "run 2", env, args...)}

	// The first to end lost the lock: the winner holds until hold goes.
	var lost, won *run
	select {
	case <-runs[0].exited:
		lost, won = runs[0], runs[1]
	case <-runs[1].exited:
		lost, won = runs[1], runs[0]
	case <-time.After(time.Minute):
		t.Fatal("neither run ended within a minute")
	}
	if code := lost.wait(t); code != 75 {
		t.Fatalf("%s: exit %d, want 75 (lock held by the other run)", lost.name, code)
	}
	if lost.has("sell-once[") {
		t.Errorf("%s ran its job though it did not get the lock", lost.name)
	}
	if !lost.has("fenceguard: ") {
		t.Errorf("%s said nothing on stderr about the lock being held", lost.name)
	}
	won.waitLine(t, "holding the lock while")

	quiet := ex.start(t, "run 3", env, append([]string{"run", "--conflict-exit-code", "0"}, args[1:]...)...)
	if code := quiet.wait(t); code != 0 || quiet.has("sell-once[") {
		t.Errorf("run 3 with --conflict-exit-code 0: exit %d, job ran: %v; want exit 0 and no job", code, quiet.has("sell-once["))
	}

	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	if code := won.wait(t); code != 0 {
		t.Fatalf("%s: exit %d, want 0", won.name, code)
	}
	won.waitLine(t, "sold one "+sku)
	if got := ex.stock(t, ex.fenced, sku); got != stock-1 {
		t.Errorf("stock %d, want %d: exactly one sale", got, stock-1)
	}
}

// frozenRun: a run of sell-rmw.sh frozen whole with SIGSTOP (fenceguard
// and the job's process group) between its read and its write, past its
// lease; another run sells meanwhile; then the frozen one is thawed with
// SIGCONT, fenceguard and job at once. fenceguard must end the job (exit
// 77), or, if the job wrote first, the service must have refused its stale
// token: the stock shows the one sale of the run that held the lock.
func frozenRun(t *testing.T, ex *example) {
	const sku = "lamp-frozen"
	ex.put(t, ex.fenced, sku, stock)
	hold := holdFile(t)
	a := ex.start(t, "frozen run", ex.env(ex.fenced, sku, hold), ex.args(sku, "./sell-rmw.sh")...)
	job := a.waitJob(t, "holding the lock while")
	freeze(t, a, job)

	b := ex.start(t, "next run", ex.env(ex.fenced, sku, ""), ex.args(sku, "--wait", "20s", "./sell-rmw.sh")...)
	if code := b.wait(t); code != 0 {
		t.Fatalf("next run: exit %d, want 0", code)
	}
	b.waitLine(t, fmt.Sprintf("wrote %s: stock %d", sku, stock-1))

	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	thaw(t, a.pid(), -job)
	code := a.wait(t)
	waitGone(t, job)
	refused := a.has("PUT /items/" + sku + "/stock refused: 409 ")
	switch {
	case a.has("wrote " + sku):
		t.Errorf("the frozen run's late write was accepted")
	case a.has("refused") && !refused:
		t.Errorf("the frozen run's late write was refused, but not with 409 (stale token)")
	}
	if code != 77 {
		t.Errorf("frozen run: exit %d, want 77 (lease lost while the job ran)", code)
	}
	if got := ex.stock(t, ex.fenced, sku); got != stock-1 {
		t.Errorf("stock %d, want %d: the next run's sale and nothing else", got, stock-1)
	}
	if refused {
		t.Log("after SIGCONT the frozen job wrote first: refused with 409")
	} else {
		t.Log("after SIGCONT fenceguard ended the frozen job before it wrote")
	}
}

// lateWrite is the frozen run of frozenRun with the job let out to write
// before fenceguard is thawed (the job's write racing fenceguard's SIGTERM
// and winning): the job is thawed alone, writes, ends, and only then is
// fenceguard thawed. It returns the frozen run and the next one.
func lateWrite(t *testing.T, ex *example, base, sku string, extra ...string) (a, b *run) {
	ex.put(t, base, sku, stock)
	hold := holdFile(t)
	a = ex.start(t, "frozen run", ex.env(base, sku, hold), ex.args(sku, append(extra, "./sell-rmw.sh")...)...)
	job := a.waitJob(t, "holding the lock while")
	freeze(t, a, job)

	b = ex.start(t, "next run", ex.env(base, sku, ""), ex.args(sku, append(extra, "--wait", "20s", "./sell-rmw.sh")...)...)
	if code := b.wait(t); code != 0 {
		t.Fatalf("next run: exit %d, want 0", code)
	}
	b.waitLine(t, fmt.Sprintf("wrote %s: stock %d", sku, stock-1))

	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	thaw(t, -job)
	waitGone(t, job)
	thaw(t, a.pid())
	a.wait(t)
	return a, b
}

func lateWriteFenced(t *testing.T, ex *example) {
	const sku = "lamp-late-fenced"
	a, _ := lateWrite(t, ex, ex.fenced, sku)
	if !a.has("PUT /items/" + sku + "/stock refused: 409 ") {
		t.Errorf("the frozen job's late write was not refused with 409")
	}
	if got := ex.stock(t, ex.fenced, sku); got != stock-1 {
		t.Errorf("stock %d, want %d: the next run's sale and nothing else", got, stock-1)
	}
}

// jobEndedWhileFrozen: in the lateWrite schedule the lease was lost while
// the job ran — its deadline passed while both were frozen, and the job
// ended only after — so fenceguard must exit 77, whichever of the job's
// end and the lost lease it notices first once thawed. Which one it
// notices first is a race, so the schedule runs several times at once.
func jobEndedWhileFrozen(t *testing.T, ex *example) {
	for i := range 3 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			a, _ := lateWrite(t, ex, ex.unfenced, "lamp-ended-frozen-"+strconv.Itoa(i))
			if a.code != 77 || !a.has("fenceguard: lease on ") {
				t.Errorf("frozen run: exit %d, lost lease said on stderr: %v; want 77, said", a.code, a.has("fenceguard: lease on "))
			}
		})
	}
}

// lateWriteUnfenced is the control: the same schedule at the unfenced
// service must lose an update — both runs write stock-1 — or it proves
// nothing about the fenced one.
func lateWriteUnfenced(t *testing.T, ex *example) {
	const sku = "lamp-late-unfenced"
	a, _ := lateWrite(t, ex, ex.unfenced, sku)
	if !a.has(fmt.Sprintf("wrote %s: stock %d", sku, stock-1)) {
		t.Fatalf("the frozen job's late write did not land at the unfenced service")
	}
	if got := ex.stock(t, ex.unfenced, sku); got != stock-1 {
		t.Errorf("stock %d after two accepted sales, want %d: the control must show the lost update", got, stock-1)
	}
}

// lockDelay: the lateWrite schedule at the unfenced service, every run
// with --lock-delay: the next run is not granted while the frozen one is
// frozen past its lease, so the frozen job's write lands first and the
// next run reads it: two sales, nothing lost.
func lockDelay(t *testing.T, ex *example) {
	const sku = "lamp-delay"
	delay := []string{"--lock-delay", "10s", "--grace", "5s"}
	ex.put(t, ex.unfenced, sku, stock)
	hold := holdFile(t)
	a := ex.start(t, "frozen run", ex.env(ex.unfenced, sku, hold), ex.args(sku, append(delay, "./sell-rmw.sh")...)...)
	job := a.waitJob(t, "holding the lock while")
	read := time.Now() // after the frozen run's grant
	freeze(t, a, job)

	b := ex.start(t, "next run", ex.env(ex.unfenced, sku, ""), ex.args(sku, append(delay, "--wait", "30s", "./sell-rmw.sh")...)...)
	time.Sleep(time.Until(read.Add(ttl + time.Second)))
	if b.has("sell-rmw[") {
		t.Fatalf("the next run was granted %v after the frozen run read, within the lock-delay", time.Since(read).Round(time.Millisecond))
	}

	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	thaw(t, -job)
	a.waitLine(t, fmt.Sprintf("wrote %s: stock %d", sku, stock-1))
	waitGone(t, job)
	thaw(t, a.pid())
	a.wait(t)
	if code := b.wait(t); code != 0 {
		t.Fatalf("next run: exit %d, want 0", code)
	}
	b.waitLine(t, fmt.Sprintf("read %s: stock %d", sku, stock-1))
	if got := ex.stock(t, ex.unfenced, sku); got != stock-2 {
		t.Errorf("stock %d, want %d: two sales, none lost", got, stock-2)
	}
}

// setUp starts Redis, PostgreSQL and the two services.
func setUp(t *testing.T) *example {
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "cron"))
	if err != nil {
		t.Fatal(err)
	}
	redis := redisserver.New(t)
	ports, err := harness.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	ex := &example{lock: "redis://" + redis.Addr(), dir: dir, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	fenced := ex.serve(t, ports[0], pgserver.Shared(t).DSN, redis.Addr())
	unfenced := ex.serve(t, ports[1], pgserver.Shared(t).DSN, redis.Addr(), "--unfenced")
	ex.fenced, ex.unfenced = fenced(), unfenced()
	return ex
}

// serve starts `inventory serve` on port and returns a function that waits
// until it answers and returns its base URL. The service is stopped when
// t ends.
func (ex *example) serve(t *testing.T, port int, dsn, redis string, extra ...string) func() string {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--addr", addr, "--database-url", dsn, "--store", "postgres",
		"--lock", "redis", "--redis", redis}, extra...)
	cmd := exec.Command(inventoryBin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("inventory %s:\n%s", strings.Join(args, " "), b)
		}
	})
	base := "http://" + addr
	return func() string {
		deadline := time.Now().Add(time.Minute)
		for {
			resp, err := ex.http.Get(base + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return base
				}
			}
			select {
			case <-exited:
				b, _ := os.ReadFile(log.Name())
				t.Fatalf("inventory %s exited:\n%s", strings.Join(args, " "), b)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("inventory serve on %s did not answer within a minute", addr)
			}
		}
	}
}

// args is the README's command line for sku, with rest (options, then
// the job) after its fixed part.
func (ex *example) args(sku string, rest ...string) []string {
	args := []string{"run", "--lock", ex.lock, "--key", "sku:" + sku, "--ttl", ttl.String()}
	job := rest[len(rest)-1]
	return append(append(args, rest[:len(rest)-1]...), "--", job)
}

// env is the job's environment: the service, the item, and the hold file
// when not empty.
func (ex *example) env(base, sku, hold string) []string {
	env := []string{"INVENTORY=" + base, "SKU=" + sku}
	if hold != "" {
		env = append(env, "HOLD="+hold)
	}
	return env
}

// holdFile creates a file for a job's HOLD and returns its path.
func holdFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// put creates the item (PUT /admin/items/{sku}).
func (ex *example) put(t *testing.T, base, sku string, n int) {
	req, err := http.NewRequest(http.MethodPut, base+"/admin/items/"+sku, strings.NewReader(fmt.Sprintf(`{"stock":%d}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ex.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /admin/items/%s: %s", sku, resp.Status)
	}
}

// stock reads the item's stock without claiming it (GET /admin/items/{sku}).
func (ex *example) stock(t *testing.T, base, sku string) int {
	resp, err := ex.http.Get(base + "/admin/items/" + sku)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var it struct{ Stock int }
	if err := json.NewDecoder(resp.Body).Decode(&it); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /admin/items/%s: %s, %v", sku, resp.Status, err)
	}
	return it.Stock
}

// run is one fenceguard process and what it and its job print (stdout and
// stderr, one stream, as cron mails it).
type run struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process ended; code is set then
	code   int

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced when a line comes or the output ends
	eof   bool
}

// start runs fenceguard with args in the scripts' directory, env added to
// the test's environment. When t ends the run is thawed and killed if it
// is still there (a failed test may leave it frozen), and its output
// logged.
func (ex *example) start(t *testing.T, name string, env []string, args ...string) *run {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fenceguardBin, args...)
	cmd.Dir = ex.dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		t.Fatal(err)
	}
	r := &run{name: name, cmd: cmd, exited: make(chan struct{}), more: make(chan struct{})}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			r.add(sc.Text(), false)
		}
		r.add("", true)
	}()
	go func() {
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			r.code = exit.ExitCode()
		default:
			r.code = -1
		}
		close(r.exited)
	}()
	t.Cleanup(func() {
		if job := r.job(); job != 0 {
			_ = syscall.Kill(-job, syscall.SIGCONT)
			_ = syscall.Kill(-job, syscall.SIGKILL)
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-r.exited
		select {
		case <-scanned:
		case <-time.After(5 * time.Second): // something of the job's holds the pipe
		}
		pr.Close()
		<-scanned
		t.Logf("%s: fenceguard %s: exit %d\n\t%s", name, strings.Join(args, " "), r.code, strings.Join(r.output(), "\n\t"))
	})
	return r
}

func (r *run) add(line string, eof bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if eof {
		r.eof = true
	} else {
		r.lines = append(r.lines, line)
	}
	close(r.more)
	r.more = make(chan struct{})
}

func (r *run) output() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// has reports whether a line printed so far contains s.
func (r *run) has(s string) bool {
	for _, l := range r.output() {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func (r *run) pid() int { return r.cmd.Process.Pid }

// jobLine is how the job scripts start their lines: "sell-rmw[PID] token N:".
var jobLine = regexp.MustCompile(`^sell-(?:once|rmw)\[(\d+)\] token (\d+):`)

// job returns the pid of the run's job, from its first line, or 0.
func (r *run) job() int {
	for _, l := range r.output() {
		if m := jobLine.FindStringSubmatch(l); m != nil {
			pid, _ := strconv.Atoi(m[1])
			return pid
		}
	}
	return 0
}

// waitLine waits up to a minute for a line that contains s and returns it.
func (r *run) waitLine(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		r.mu.Lock()
		lines, eof, more := r.lines, r.eof, r.more
		r.mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, s) {
				return l
			}
		}
		if eof {
			t.Fatalf("%s ended without a line saying %q", r.name, s)
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("%s: no line saying %q within a minute", r.name, s)
		}
	}
}

// waitJob waits for the job's line containing s and returns the job's pid,
// checked to lead a process group of its own, as fenceguard runs it.
func (r *run) waitJob(t *testing.T, s string) int {
	t.Helper()
	r.waitLine(t, s)
	job := r.job()
	if job == 0 {
		t.Fatalf("%s: no line from the job names its pid", r.name)
	}
	if pgid, err := syscall.Getpgid(job); err != nil || pgid != job {
		t.Fatalf("%s: the job (pid %d) is in process group %d (%v), want a group of its own", r.name, job, pgid, err)
	}
	return job
}

// wait waits up to a minute for the run to end, and for the end of its
// output (the job's too), and returns its exit code.
func (r *run) wait(t *testing.T) int {
	t.Helper()
	timeout := time.After(time.Minute)
	select {
	case <-r.exited:
	case <-timeout:
		t.Fatalf("%s still running after a minute", r.name)
	}
	for {
		r.mu.Lock()
		eof, more := r.eof, r.more
		r.mu.Unlock()
		if eof {
			return r.code
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("%s ended (exit %d), but its output is still open a minute on: is its job still running?", r.name, r.code)
		}
	}
}

// freeze stops the run whole, fenceguard and its job's process group, as a
// frozen machine would, and waits until the kernel shows both stopped.
func freeze(t *testing.T, r *run, job int) {
	t.Helper()
	if err := syscall.Kill(r.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-job, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !frozen(r.pid()) || !frozen(job) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not stopped 10s after SIGSTOP: fenceguard (pid %d) in state %q, the job (pid %d) in %q",
				r.name, r.pid(), state(r.pid()), job, state(job))
		}
		time.Sleep(time.Millisecond)
	}
}

// thaw sends SIGCONT to each pid (a negative one: a process group), in
// order. A group may be gone by its turn: fenceguard, thawed first, passes
// SIGCONT on to its job's group and may have ended it already.
func thaw(t *testing.T, pids ...int) {
	t.Helper()
	for _, p := range pids {
		err := syscall.Kill(p, syscall.SIGCONT)
		if err != nil && !(p < 0 && errors.Is(err, syscall.ESRCH)) {
			t.Fatalf("SIGCONT to %d: %v", p, err)
		}
	}
}

// waitGone waits up to a minute until pid has exited (a zombie counts: its
// parent may be frozen).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for state(pid) != 'Z' && state(pid) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running a minute after it was let go", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopped reports whether pid is stopped (or gone).
func stopped(pid int) bool {
	switch state(pid) {
	case 'T', 't', 'Z', 0:
		return true
	}
	return false
}

// frozen reports whether pid is stopped, or gone, or has a SIGSTOP
// pending: then it stops before it runs any more of its own code. A shell
// caught by its group's stop in vfork stays so, waiting (state D) for a
// child that the same stop stopped before its exec.
func frozen(pid int) bool {
	return stopped(pid) || stopPending(pid)
}

func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	const bit = 1 << (syscall.SIGSTOP - 1)
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || name != "SigPnd" && name != "ShdPnd" {
			continue
		}
		if m, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64); err == nil && m&bit != 0 {
			return true
		}
	}
	return false
}

// state is pid's state letter from /proc, or 0 when it is gone.
func state(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
