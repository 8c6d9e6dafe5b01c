// Package cleanup runs the clean-up of a failed lock call — a queue entry,
// a grant whose reply was lost, nodes a partial attempt took — so that the
// call still returns by its context's deadline: the clean-up cannot run on
// the caller's context (it may be what ended), so it runs on a bounded one
// of its own, and the caller waits for it only while its context lives and
// a little after. A locker's Close waits for what is still running. See
// "A call returns at its deadline" in docs/design.md.
package cleanup

import (
	"context"
	"sync"
	"time"
)

const (
	// Timeout bounds one clean-up.
	Timeout = time.Second
	// Wait is how long a call whose context has ended still waits for its
	// clean-up before returning.
	Wait = 50 * time.Millisecond
)

// Group runs a locker's clean-ups. The zero value is ready to use; it must
// not be copied after first use.
type Group struct {
	mu     sync.Mutex
	closed bool // guarded by mu
	wg     sync.WaitGroup
}

// Run runs fn on a context of its own bounded by [Timeout], waits for it
// while ctx lives and [Wait] after, and then returns, fn finishing in the
// background. When after holds channels, fn starts (and its Timeout with
// it) once they are all closed — the commands a cancel cut short, which
// the clean-up must follow — and Run does not wait for it. After
// [Group.Close] it runs fn before returning (nothing would wait for a
// goroutine any more).
func (g *Group) Run(ctx context.Context, after []<-chan struct{}, fn func(ctx context.Context)) {
	run := func() {
		for _, c := range after {
			<-c
		}
		cctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		fn(cctx)
	}
	done := make(chan struct{})
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		run()
		return
	}
	g.wg.Go(func() {
		defer close(done)
		run()
	})
	g.mu.Unlock()
	if len(after) > 0 {
		return // fn waits for a command that ctx's end left running: not worth waiting for
	}
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	t := time.NewTimer(Wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// Close waits for the clean-ups running in the background; later calls to
// Run run in the caller. Close is idempotent.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
