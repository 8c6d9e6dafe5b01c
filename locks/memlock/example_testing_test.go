package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

// exporter is the code under test: a job that writes the pages of a report
// under a lock, claims the report with its token before every page, and
// stops as soon as its lease is lost.
type exporter struct {
	guard *guard.Guard
	fence token.Fence // the resource's check: a store's Fence in production
	write func(ctx context.Context, page int) error
}

func (x *exporter) run(ctx context.Context, pages int) (written int, err error) {
	err = x.guard.Do(ctx, "report:daily", func(ctx context.Context, t token.Token) error {
		for page := range pages {
			if err := ctx.Err(); err != nil {
				return err // the lease is lost: not one page more
			}
			if err := x.fence.Claim(ctx, "report:daily", t); err != nil {
				return err // a newer holder got there first
			}
			if err := x.write(ctx, page); err != nil {
				return err
			}
			written++
		}
		return nil
	})
	return written, err
}

// newExporter wires the exporter to an in-process lock and fence. The TTL
// is longer than any test runs, so the keep-alive never renews: only what
// the test does ends the lease.
func newExporter(locker *memlock.Locker, fence *token.MemoryFence) *exporter {
	g, err := guard.New(locker, guard.Options{TTL: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	return &exporter{guard: g, fence: fence}
}

// Two unit tests of the exporter, with no lock service and no sleeps: its
// lease lost in the middle of its work (Break: the guard tells it at once),
// and its token refused because the next holder took the lock while it
// was paused (TakeOver: it is told nothing, the fence refuses it). In a
// test file, each is the body of a Test function.
func Example_testing() {
	ctx := context.Background()

	// The lease is lost while page 1 is written.
	locker, fence := memlock.New(), &token.MemoryFence{}
	x := newExporter(locker, fence)
	x.write = func(ctx context.Context, page int) error {
		if page == 1 {
			locker.Break("report:daily")
			<-ctx.Done() // the guard cancels the job's context at once
		}
		return nil
	}
	written, err := x.run(ctx, 5)
	fmt.Println("lost: pages written:", written, "- lease lost:", errors.Is(err, guard.ErrLost))

	// The job is paused during page 1; meanwhile its lease runs out and the
	// next holder writes.
	locker, fence = memlock.New(), &token.MemoryFence{}
	x = newExporter(locker, fence)
	x.write = func(ctx context.Context, page int) error {
		if page == 1 {
			next, err := locker.TakeOver("report:daily", time.Minute)
			if err != nil {
				return err
			}
			return fence.Claim(ctx, "report:daily", next.Token())
		}
		return nil
	}
	written, err = x.run(ctx, 5)
	fmt.Println("refused: pages written:", written, "- stale:", errors.Is(err, token.ErrStale))
	// Output:
	// lost: pages written: 2 - lease lost: true
	// refused: pages written: 2 - stale: true
}
