package etcdlock_test

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
)

// The frozen waiter of TestFrozenWaiterDoesNotTakeStaleTurn, frozen for
// real: a child process queues for the lock, is stopped with SIGSTOP once
// its watch is in place, and is continued with SIGCONT after the lock was
// handed to it, its lease expired, and X acquired. Whatever the resumed
// process sees first — its overdue keep-alive timer or the old deletions
// in its watch — it must not report a grant while X holds the lock, and it
// must get the lock, with a larger token, once X releases.
func TestFrozenWaiterProcess(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	c := newClient(t, d.Endpoints)
	ctx := ctxFor(t, time.Minute)
	const key = "k"
	q := d.Prefix + url.PathEscape(key) + "/"
	holder, err := newLocker(t, c, d.Prefix).Acquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestFrozenWaiterChild$", "-test.v")
	cmd.Env = append(os.Environ(), "FG_WAITER_ENDPOINTS="+strings.Join(d.Endpoints, ","), "FG_WAITER_PREFIX="+d.Prefix, "FG_WAITER_KEY="+key)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "waiter: ") {
				lines <- strings.TrimPrefix(l, "waiter: ")
			}
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the waiter process ended early")
			}
			return l
		case <-ctx.Done():
			t.Fatal("no word from the waiter process")
		}
		return ""
	}
	if l := next(); l != "watching" {
		t.Fatalf("waiter: %s", l)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, q, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("queue: %v, %v", resp, err)
	}
	gone := c.Watch(ctx, string(resp.Kvs[1].Key), clientv3.WithRev(resp.Header.Revision+1))
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for deleted := false; !deleted; {
		wr, ok := <-gone
		if !ok || wr.Err() != nil {
			t.Fatalf("watching the waiter's key: %v", wr.Err())
		}
		for _, ev := range wr.Events {
			deleted = deleted || ev.Type == mvccpb.DELETE
		}
	}
	x, err := newLocker(t, c, d.Prefix).TryAcquire(ctx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	requeued := c.Watch(ctx, q, clientv3.WithPrefix(), clientv3.WithRev(int64(x.Token())+1), clientv3.WithFilterDelete())
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lines:
		t.Fatalf("the resumed waiter reported %q while X holds the lock (token %d)", l, x.Token())
	case wr := <-requeued:
		if wr.Err() != nil {
			t.Fatal(wr.Err())
		}
	}
	if err := x.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := next()
	tok, err := strconv.ParseUint(strings.TrimPrefix(l, "granted "), 10, 64)
	if err != nil {
		t.Fatalf("waiter: %s", l)
	}
	if tok <= uint64(x.Token()) {
		t.Fatalf("the waiter was granted token %d after X's %d", tok, x.Token())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("waiter process: %v", err)
	}
}

// watchSignal is a client whose first watch tells, on stdout, when it is
// in place.
type watchSignal struct {
	*clientv3.Client
	once sync.Once
}

func (c *watchSignal) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := c.Client.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
			if wr.Created {
				// The waiter has its watch and reads the keys ahead.
				c.once.Do(func() { fmt.Println("waiter: watching") })
			}
		}
	}()
	return out
}

// TestFrozenWaiterChild is the waiter process of TestFrozenWaiterProcess.
func TestFrozenWaiterChild(t *testing.T) {
	eps := os.Getenv("FG_WAITER_ENDPOINTS")
	if eps == "" {
		t.Skip("run by TestFrozenWaiterProcess")
	}
	ctx := ctxFor(t, time.Minute)
	c := newClient(t, strings.Split(eps, ","))
	l, err := etcdlock.New(&watchSignal{Client: c}, etcdlock.Options{Prefix: os.Getenv("FG_WAITER_PREFIX")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, os.Getenv("FG_WAITER_KEY"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("waiter: granted", lease.Token())
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
