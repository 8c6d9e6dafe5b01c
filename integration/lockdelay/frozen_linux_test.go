package lockdelay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
)

// The schedule: a lease of ttl, a lock-delay of delay, the holder frozen
// for freeze — past its lease, within the lease plus the delay, with
// 0.4·delay to spare for the resumed holder to write. etcd counts leases
// in whole seconds (2s is its minimum) and checks expiries twice a second;
// without the delay, the next holder is granted at most ~0.6s after the
// TTL, ~1.2s before the frozen one resumes.
const (
	ttl    = 2 * time.Second
	delay  = 3 * time.Second
	freeze = ttl + delay*6/10
)

var backends = []struct {
	name  string
	setup func(t *testing.T) config
}{
	{"redislock", func(t *testing.T) config {
		db := redisserver.Shared(t)
		return config{Backend: "redislock", Addrs: []string{db.Addr}, Prefix: db.Prefix}
	}},
	{"etcdlock", func(t *testing.T) config {
		db := etcdserver.Shared(t)
		return config{Backend: "etcdlock", Addrs: db.Endpoints, Prefix: db.Prefix + "lock/"}
	}},
	{"redlock", func(t *testing.T) config {
		cfg := config{Backend: "redlock"}
		for _, db := range redisserver.SharedN(t, 5) {
			cfg.Addrs, cfg.Prefix = append(cfg.Addrs, db.Addr), db.Prefix
		}
		return cfg
	}},
	{"zklock", func(t *testing.T) config {
		db := zkserver.Shared(t)
		return config{Backend: "zklock", Addrs: db.Addrs, Prefix: db.Chroot + "/locks"}
	}},
}

// TestFrozenHolderWritesBeforeTheNextHolder freezes a holder process with
// SIGSTOP right after its acquire, for longer than its lease but less than
// the lease plus the lock-delay, while another holder waits for the lock.
// With the delay, the frozen holder's late write is the first in the
// resource; without it (the control, same schedule), the next holder was
// granted while the first was frozen and wrote first — the overlap the
// delay prevents.
func TestFrozenHolderWritesBeforeTheNextHolder(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // the holders are processes of their own, the keys each backend's own
			t.Run("LockDelay", func(t *testing.T) {
				order := frozenHolder(t, b.setup(t), delay)
				if order != "AB" {
					t.Errorf("writes in the resource: %s, want the frozen holder's (A) first, then the next holder's (B)", order)
				}
			})
			t.Run("NoDelayControl", func(t *testing.T) {
				order := frozenHolder(t, b.setup(t), 0)
				if order != "BA" {
					t.Errorf("writes in the resource: %s, want the next holder's (B) first, then the frozen holder's late one (A): without the delay the schedule must show the overlap", order)
				}
			})
		})
	}
}

// frozenHolder runs the schedule with lock-delay d and returns the order
// of the writes in the resource, e.g. "AB".
func frozenHolder(t *testing.T, cfg config, d time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Delay = d
	holderCfg := cfg
	holderCfg.Key, holderCfg.TTL = "k", ttl
	holderCfg.Resource = filepath.Join(t.TempDir(), "resource")
	js, err := json.Marshal(holderCfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+string(js))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	pid := cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-exited
	}()

	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "acquired ") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			err := <-exited // stderr is complete once the process is reaped
			exited <- err   // for the deferred kill
			t.Fatalf("holder: %q; stderr: %s", l, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("the holder did not acquire in a minute")
	}
	acquired := time.Now() // after the holder's acquire was sent
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	for !stopped(pid) {
		time.Sleep(time.Millisecond)
	}
	if _, err := stdin.Write([]byte("write\n")); err != nil { // read when it thaws
		t.Fatal(err)
	}

	l, closeLocker, err := newLocker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeLocker()
	type grant struct {
		granted, wrote time.Time
		err            error
	}
	next := make(chan grant, 1)
	go func() {
		lease, err := l.Acquire(ctx, "k", ttl)
		if err != nil {
			next <- grant{err: err}
			return
		}
		g := grant{granted: time.Now()}
		g.wrote, g.err = write(holderCfg.Resource, "B")
		_ = lease.Release(ctx)
		next <- g
	}()

	time.Sleep(time.Until(frozen.Add(freeze)))
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	g := <-next
	if g.err != nil {
		t.Fatalf("next holder: %v", g.err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("holder: %v; stderr: %s", err, stderr.String())
	}
	exited <- nil // for the deferred kill

	b, err := os.ReadFile(holderCfg.Resource)
	if err != nil {
		t.Fatal(err)
	}
	var order string
	var aWrote time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		who, ns, _ := strings.Cut(line, " ")
		order += who
		if who == "A" {
			n, _ := strconv.ParseInt(ns, 10, 64)
			aWrote = time.Unix(0, n)
		}
	}
	t.Logf("delay %v: holder A frozen %v after its grant for %v; next holder B granted %v after A's grant, A resumed at %v, wrote at %v: %s",
		d, frozen.Sub(acquired).Round(time.Millisecond), resumed.Sub(frozen).Round(time.Millisecond),
		g.granted.Sub(acquired).Round(time.Millisecond), resumed.Sub(acquired).Round(time.Millisecond),
		aWrote.Sub(acquired).Round(time.Millisecond), order)
	return order
}

// stopped reports whether pid is stopped (or gone), from /proc.
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces and parentheses
	if i < 0 || i+2 >= len(b) {
		return true
	}
	switch b[i+2] {
	case 'T', 't', 'Z':
		return true
	}
	return false
}
