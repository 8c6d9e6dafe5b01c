package zklock_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

// The waiter process's side of TestFrozenWaiter: acquire, report the
// lease, release when told.
const frozenWaiterEnv = "ZKLOCK_FROZEN_WAITER" // addr|prefix|key|ttl

func TestFrozenWaiterChild(t *testing.T) {
	spec := os.Getenv(frozenWaiterEnv)
	if spec == "" {
		t.Skip("the waiter process of TestFrozenWaiter")
	}
	f := strings.Split(spec, "|")
	ttl, err := time.ParseDuration(f[3])
	if err != nil {
		t.Fatal(err)
	}
	l, err := zklock.New([]string{f[0]}, zklock.Options{Prefix: f[1], Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, f[2], ttl)
	if err != nil {
		fmt.Printf("zkwaiter: ERROR %v\n", err)
		return
	}
	fmt.Printf("zkwaiter: LEASE %d %s\n", lease.Token(), lease.(*zklock.Lease).Path())
	bufio.NewReader(os.Stdin).ReadString('\n') // "release", or the parent gone
	_ = lease.Release(ctx)
}

// Issue 15 §5: a waiter frozen (SIGSTOP, in a process of its own) while
// its predecessor is deleted — the deletion's watch event waits in its
// socket — and kept frozen past its session timeout, so the server
// expires its session, deletes its znode, and X acquires. When it
// resumes, the event it is handed is stale: Acquire must not return a
// lease while X holds the lock, and the lease it returns after X releases
// is a real grant, with a token above X's.
func TestFrozenWaiter(t *testing.T) {
	t.Parallel()
	srv := zkserver.New(t) // its own: the watch count below is ours alone
	addrs := []string{srv.Addr()}
	const prefix, key = "/locks", "k"
	dir := prefix + "/" + key
	c := inspect(t, addrs)
	ctx := ctxFor(t, time.Minute)
	holder := newLocker(t, addrs, prefix)
	h, err := holder.Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	const ttl = time.Second // the server's minimum session timeout
	cmd := exec.Command(os.Args[0], "-test.run=^TestFrozenWaiterChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), frozenWaiterEnv+"="+strings.Join([]string{srv.Addr(), prefix, key, ttl.String()}, "|"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var waitErr error
	exited := make(chan struct{}) // closed once the child is reaped; waitErr is set then
	lines := make(chan string, 4) // the child prints two lines at most: never full
	go func() {
		defer func() {
			waitErr = cmd.Wait() // after the last read from stdout, as Wait requires
			close(exited)
		}()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "zkwaiter: "); ok {
				lines <- l
			}
		}
		close(lines)
	}()
	stop := func() {
		syscall.Kill(pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGCONT)
		<-exited
	}
	t.Cleanup(stop)
	// childLog ends the child and returns what it wrote to stderr (only
	// safe to read once it is reaped).
	childLog := func() string { stop(); return stderr.String() }

	// The waiter queued and watches H's znode.
	var waiterNode string
	eventually(t, 20*time.Second, "the waiter queued and watching", func() bool {
		ch := children(t, c, prefix, key)
		if len(ch) != 2 {
			return false
		}
		for _, n := range ch {
			if dir+"/"+n != h.(*zklock.Lease).Path() {
				waiterNode = n
			}
		}
		return watchCount(t, srv.Addr()) >= 1
	})
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the waiter stopped", func() bool { return procState(pid) == 'T' })
	froze := time.Now()
	if err := h.Release(ctx); err != nil { // the event goes to the frozen waiter
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the frozen waiter's session expired", func() bool {
		ok, _, err := c.Exists(dir + "/" + waiterNode)
		return err == nil && !ok
	})
	x, err := newLocker(t, addrs, prefix).Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("the waiter was frozen for %v; X holds with token %d", time.Since(froze).Round(time.Millisecond), x.Token())

	// Either the waiter queues again behind X (right), or it reports a
	// lease while X holds (wrong).
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				log := childLog()
				t.Fatalf("the waiter exited while X held the lock: %v\n%s", waitErr, log)
			}
			t.Fatalf("the resumed waiter reported %q while X (token %d) held the lock", l, x.Token())
		case <-tick.C:
			if ch := children(t, c, prefix, key); len(ch) == 2 {
				break wait // X's znode and the waiter's new one
			}
		case <-deadline:
			t.Fatalf("the resumed waiter neither queued again nor returned\n%s", childLog())
		}
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var l string
	select {
	case l = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiter was not granted after X released\n%s", childLog())
	}
	f := strings.Fields(l)
	if len(f) != 3 || f[0] != "LEASE" {
		t.Fatalf("the waiter reported %q", l)
	}
	tok, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if tok <= uint64(x.Token()) {
		t.Fatalf("the waiter's token %d is not above X's %d", tok, x.Token())
	}
	_, st, err := c.Get(f[2])
	if err != nil || uint64(st.Czxid) != tok {
		t.Fatalf("the waiter's znode %s: %v, %v; want Czxid %d", f[2], st, err, tok)
	}
	if ch := children(t, c, prefix, key); len(ch) != 1 || dir+"/"+ch[0] != f[2] {
		t.Fatalf("queue %v: want only the waiter's znode %s", ch, f[2])
	}
	io.WriteString(stdin, "release\n")
	<-exited
	if waitErr != nil {
		t.Fatalf("the waiter process: %v\n%s", waitErr, stderr.String())
	}
}

// procState returns the state letter of process pid ('T' when stopped).
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
