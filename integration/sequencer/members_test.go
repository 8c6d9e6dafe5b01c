package sequencer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// queueScenario: a holder, two queued waiters, a
// forger presenting Issued() and holder+1 at a fence with the sequencer
// check; then every waiter, in turn, must get through.
func queueScenario(t *testing.T, l locks.Locker, issued func() token.Token, fence token.Fence, ttl time.Duration) {
	ctx := context.Background()
	h, err := l.Acquire(ctx, "sku:1", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Claim(ctx, "sku:1", h.Token()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []token.Token
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := l.Acquire(ctx, "sku:1", ttl)
			if err != nil {
				t.Error(err)
				return
			}
			if err := fence.Claim(ctx, "sku:1", w.Token()); err != nil {
				t.Errorf("waiter %d refused after the forger: %v", w.Token(), err)
			}
			mu.Lock()
			order = append(order, w.Token())
			mu.Unlock()
			<-release
			_ = w.Release(ctx)
		}()
		time.Sleep(150 * time.Millisecond)
	}
	refused := 0
	forged := []token.Token{issued(), issued() + 1, h.Token() + 1}
	for _, f := range forged {
		if err := fence.Claim(ctx, "sku:1", f); errors.Is(err, token.ErrForged) {
			refused++
		} else {
			t.Errorf("forged %d (holder %d): %v", f, h.Token(), err)
		}
	}
	// The holder may still act; its own token is admitted.
	if err := fence.Claim(ctx, "sku:1", h.Token()); err != nil {
		t.Errorf("holder's own token after the forger: %v", err)
	}
	_ = h.Release(ctx)
	close(release)
	wg.Wait()
	t.Logf("holder %d, waiters %v; %d of %d forged tokens refused", h.Token(), order, refused, len(forged))
}

// TestEtcdSequencerQueue: queueScenario on etcd.
func TestEtcdSequencerQueue(t *testing.T) {
	db := etcdserver.Shared(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: db.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := etcdlock.New(cli, etcdlock.Options{Prefix: db.Prefix + "lock/"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check := token.All(token.ClockBound{}, token.SequencerCheck(etcdlock.NewSequencer(cli, db.Prefix+"lock/"), token.SequencerOptions{}))
	fence := etcdlock.NewFence(cli, etcdlock.FenceOptions{Prefix: db.Prefix + "fence/", Check: check})
	issued := func() token.Token { v, _ := l.Issued(context.Background(), "sku:1"); return v }
	queueScenario(t, l, issued, fence, 3*time.Second)
}

func zkConn(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range ev {
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for c.State() != zk.StateHasSession && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(c.Close)
	return c
}

// TestZooKeeperEnsemble: on a 3-member ensemble, the Fence through a
// follower session and a leader session never accepts a stale re-claim
// through the lagging follower; the sequencer check refuses a forger with a
// queue of waiters; odd resource names are fenced like any other.
func TestZooKeeperEnsemble(t *testing.T) {
	ens := zkserver.NewEnsemble(t, 3)
	// A budget for the work, not a check of its speed: 900 quorum writes
	// took about 30s with two copies of the suite on the machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader, followers, err := ens.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("FenceFollowerLag", func(t *testing.T) {
		fc := zkConn(t, followers[0].Addr())
		lc := zkConn(t, leader.Addr())
		ff := zklock.NewFence(fc, zklock.FenceOptions{Prefix: "/fg/fence", Check: token.NoCheck()})
		lf := zklock.NewFence(lc, zklock.FenceOptions{Prefix: "/fg/fence", Check: token.NoCheck()})
		const rounds = 300
		accepted := 0
		for i := range rounds {
			r := "res" + string(rune('a'+i%26))
			base := token.Token(10 * (i + 1))
			if err := ff.Claim(ctx, r, base); err != nil {
				t.Fatalf("round %d: follower claim %d: %v", i, base, err)
			}
			if err := lf.Claim(ctx, r, base+5); err != nil {
				t.Fatalf("round %d: leader claim %d: %v", i, base+5, err)
			}
			if err := ff.Claim(ctx, r, base); err == nil {
				accepted++
			} else if !errors.Is(err, token.ErrStale) {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		t.Logf("stale re-claims through the follower accepted: %d of %d", accepted, rounds)
		if accepted > 0 {
			t.Errorf("%d stale claims accepted", accepted)
		}
	})
	t.Run("SequencerQueue", func(t *testing.T) {
		l, err := zklock.New(ens.Addrs(), zklock.Options{Prefix: "/fg/lock", Logger: itest.QuietZK{}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fc := zkConn(t, followers[1%len(followers)].Addr())
		check := token.All(token.ClockBound{}, token.SequencerCheck(zklock.NewSequencer(fc, "/fg/lock"), token.SequencerOptions{}))
		fence := zklock.NewFence(fc, zklock.FenceOptions{Prefix: "/fg/fence2", Check: check})
		issued := func() token.Token { v, _ := l.Issued(context.Background(), "sku:1"); return v }
		queueScenario(t, l, issued, fence, 4*time.Second)
	})
	t.Run("FenceOddNames", func(t *testing.T) {
		c := zkConn(t, leader.Addr())
		f := zklock.NewFence(c, zklock.FenceOptions{Prefix: "/fg/fence3", Check: token.NoCheck()})
		for _, r := range []string{".", "..", "a/b", "a%2Fb", "zookeeper", "x\u2028y"} {
			err := f.Claim(ctx, r, 5)
			err2 := f.Claim(ctx, r, 4)
			t.Logf("resource %q: claim 5 → %v; claim 4 → %v", r, err, err2)
			if err == nil && !errors.Is(err2, token.ErrStale) {
				t.Errorf("%q: stale 4 after 5: %v", r, err2)
			}
		}
	})
}

// TestEtcdFenceAcrossMembers: the etcd Fence through the members of a
// 3-member cluster — claim through one member, a higher token through
// another, the first again through the first — never accepts the stale one.
func TestEtcdFenceAcrossMembers(t *testing.T) {
	cl := etcdserver.NewCluster(t, 3)
	eps := cl.Endpoints()
	var fences []*etcdlock.Fence
	for _, ep := range eps {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		fences = append(fences, etcdlock.NewFence(cli, etcdlock.FenceOptions{Check: token.NoCheck()}))
	}
	ctx := context.Background()
	const rounds = 150
	accepted := 0
	for i := range rounds {
		a, b := fences[i%3], fences[(i+1)%3]
		base := token.Token(10 * (i + 1))
		if err := a.Claim(ctx, "r", base); err != nil {
			t.Fatal(err)
		}
		if err := b.Claim(ctx, "r", base+5); err != nil {
			t.Fatal(err)
		}
		if err := a.Claim(ctx, "r", base); err == nil {
			accepted++
		}
	}
	t.Logf("stale re-claims accepted across members: %d of %d", accepted, rounds)
	if accepted > 0 {
		t.Errorf("%d stale claims accepted", accepted)
	}
}
