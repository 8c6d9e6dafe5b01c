package partition

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

func newZKLocker(t *testing.T, addrs ...string) *zklock.Locker {
	t.Helper()
	l, err := zklock.New(addrs, zklock.Options{Logger: itest.QuietZK{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// renewLog is a holder renewing in a loop: the reply times of successful
// renewals, the Deadline they set, and the first failure.
type renewLog struct {
	mu        sync.Mutex
	lastOK    time.Time // reply time of the last successful Renew
	deadline  time.Time // the Deadline it set
	oks       int
	firstErr  error
	errAt     time.Time
	lostAt    time.Time // when Lost() was seen closed
	stop      chan struct{}
	done      chan struct{}
	leaseDone <-chan struct{}
}

func renewLoop(le locks.Lease, every time.Duration) *renewLog {
	r := &renewLog{stop: make(chan struct{}), done: make(chan struct{})}
	ln := le.(locks.LossNotifier)
	go func() {
		select {
		case <-ln.Lost():
			r.mu.Lock()
			r.lostAt = time.Now()
			r.mu.Unlock()
		case <-r.stop:
		}
	}()
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.stop:
				return
			case <-time.After(every):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := le.Renew(ctx)
			cancel()
			now := time.Now()
			r.mu.Lock()
			if err == nil {
				r.lastOK, r.deadline = now, le.Deadline()
				r.oks++
				if r.firstErr != nil {
					r.firstErr = errors.Join(r.firstErr, errors.New("renewed after a failure"))
				}
			} else if r.firstErr == nil {
				r.firstErr, r.errAt = err, now
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *renewLog) finish() {
	close(r.stop)
	<-r.done
}

// zkHandover runs one round: H holds key through member hm only and
// renews every 50ms; W waits through member wm only; fault() breaks H's
// side. It checks that H is told (Lost, Renew failing) before W's Acquire
// returns, that no Renew of H succeeds after that, and that W's token is
// larger. It returns how far H's last Deadline lay past W's grant (≤ 0:
// no overlap), less the lateness the scheduler showed during the round
// (see itest.Timing): on a busy machine every process here, the servers
// included, runs late, and the times compared are taken when a goroutine
// gets to run, not when a reply arrived.
func zkHandover(t *testing.T, hm, wm string, key string, fault func()) time.Duration {
	ctx := itest.Ctx(t, 30*time.Second)
	lh := newZKLocker(t, hm)
	lw := newZKLocker(t, wm)
	const ttl = 2 * time.Second
	h, err := lh.Acquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	log := renewLoop(h, 50*time.Millisecond)
	type got struct {
		le  locks.Lease
		err error
		at  time.Time
	}
	wch := make(chan got, 1)
	go func() {
		le, err := lw.Acquire(ctx, key, ttl)
		wch <- got{le, err, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond) // W queued, H renewing
	tm := itest.StartTiming(t)
	faultAt := time.Now()
	fault()
	w := <-wch
	log.finish()
	_, skew := tm.StopAllowing(0, 0)
	if w.err != nil {
		t.Fatalf("W: %v", w.err)
	}
	defer w.le.Release(context.Background())
	log.mu.Lock()
	defer log.mu.Unlock()
	t.Logf("fault at 0; H lost at %v, first Renew error at %v (%v); H's last OK renew at %v, Deadline %v; W granted by %v; %d OK renewals; scheduler lateness allowed %v",
		sub(log.lostAt, faultAt), sub(log.errAt, faultAt), log.firstErr, sub(log.lastOK, faultAt), sub(log.deadline, faultAt), w.at.Sub(faultAt), log.oks, skew)
	if log.lostAt.IsZero() || log.lostAt.After(w.at.Add(skew)) {
		t.Errorf("H's Lost() not closed before W was granted")
	}
	if !log.lastOK.IsZero() && log.lastOK.After(w.at.Add(skew)) {
		t.Errorf("H renewed successfully at %v, after W was granted at %v", sub(log.lastOK, faultAt), w.at.Sub(faultAt))
	}
	if w.le.Token() <= h.Token() {
		t.Errorf("W's token %d not above H's %d", w.le.Token(), h.Token())
	}
	if err := h.Renew(ctx); !errors.Is(err, locks.ErrNotHeld) {
		t.Errorf("H's Renew after W's grant: %v", err)
	}
	return log.deadline.Sub(w.at) - skew
}

func sub(a, b time.Time) any {
	if a.IsZero() {
		return "never"
	}
	return a.Sub(b).Round(time.Millisecond)
}

// TestZKPausedHolderMemberLosesLeaseFirst: H's member (a follower) is frozen
// (SIGSTOP) while H renews every 50ms; W waits on the leader. H must be
// told before W is granted, and never renew after. The overlap of H's
// Deadline with W's grant (docs/design.md, "zklock": "What is left") is logged.
func TestZKPausedHolderMemberLosesLeaseFirst(t *testing.T) {
	t.Parallel()
	ctx := itest.Ctx(t, 60*time.Second)
	e := zkserver.NewEnsemble(t, 3)
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := followers[0]
	over := zkHandover(t, f.Addr(), leader.Addr(), "paused", func() {
		if err := f.Pause(); err != nil {
			t.Fatal(err)
		}
	})
	if err := f.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("H's Deadline past W's grant by %v", over)
}

// TestZKLeaderKilledWhileHeld: H holds through one follower, W waits
// through the other; the leader is killed (SIGKILL). H's lease must be
// reported lost before W is granted, W's token (a later epoch) larger.
func TestZKLeaderKilledWhileHeld(t *testing.T) {
	t.Parallel()
	ctx := itest.Ctx(t, 60*time.Second)
	e := zkserver.NewEnsemble(t, 3)
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	over := zkHandover(t, followers[0].Addr(), followers[1].Addr(), "leaderkill", func() {
		if err := leader.Kill(); err != nil {
			t.Fatal(err)
		}
	})
	if over > 0 {
		t.Errorf("H's Deadline lay %v past W's grant", over)
	}
}
