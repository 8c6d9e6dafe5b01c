package boundedstate

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks"
)

const (
	// distinct is how many distinct keys a test locks once each.
	distinct = 2000
	// warm is how many keys a test locks before its baseline, so that
	// connections, pools and sessions are open when it is taken.
	warm = 100
	// workers lock keys concurrently.
	workers = 8
	// heapPerKey bounds the growth of the process's live heap per
	// distinct key: an entry kept per key (a map entry, the key's name,
	// a struct) costs well above it.
	heapPerKey = 64
	ttl        = 10 * time.Second
)

// lockKeys acquires and releases n keys named name+"-"+i on workers
// goroutines, each key once.
func lockKeys(t *testing.T, l locks.Locker, name string, n int) {
	t.Helper()
	ctx := itest.Ctx(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				key := fmt.Sprintf("%s-%d", name, i)
				lease, err := l.Acquire(ctx, key, ttl)
				if err == nil {
					err = lease.Release(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("key %s: %w", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// process is this process's live heap (after a collection) and goroutines.
type process struct {
	heap       uint64
	goroutines int
}

func snapshot() process {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return process{heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
}

// warmUp locks warm keys, so that connections, pools and sessions are
// open, and returns the process's state then: the baseline.
func warmUp(t *testing.T, l locks.Locker) process {
	t.Helper()
	lockKeys(t, l, "warm", warm)
	return snapshot()
}

// checkProcess checks that the goroutines came back to the baseline and
// that the live heap, l's state included, grew by less than heapPerKey
// per distinct key.
func checkProcess(t *testing.T, l locks.Locker, before process) {
	t.Helper()
	var after process
	itest.Eventually(5*time.Second, func() bool {
		after = snapshot()
		return after.goroutines <= before.goroutines
	})
	t.Logf("process over %d distinct keys: goroutines %d → %d, live heap %d → %d B", distinct, before.goroutines, after.goroutines, before.heap, after.heap)
	if after.goroutines > before.goroutines {
		t.Errorf("goroutines: %d before %d distinct keys, %d after", before.goroutines, distinct, after.goroutines)
	}
	if grew := int64(after.heap) - int64(before.heap); grew > distinct*heapPerKey {
		t.Errorf("live heap grew by %d B over %d distinct keys (%d B a key; at most %d allowed)", grew, distinct, grew/distinct, heapPerKey)
	}
	runtime.KeepAlive(l) // its state is what the heap measures
}
