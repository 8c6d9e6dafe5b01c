package token

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"
)

const fenceShards = 64

var fenceSeed = maphash.MakeSeed()

// MemoryFence is a [Fence] that keeps high-water marks in process memory.
// It serves one resource process: its marks die with the process, so a
// restarted resource accepts any token again until it is claimed anew —
// keep the high-water in the store (PostgreSQL, Redis) when that matters.
//
// The zero value is ready to use. A MemoryFence must not be copied after
// first use. It is safe for concurrent use: keys are spread over 64 shards,
// each with its own mutex, so claims on different keys rarely contend and
// there is no lock across all keys.
//
// # Memory
//
// Every distinct resource key claimed keeps one entry (the key's bytes plus
// about 50 bytes) until [MemoryFence.Prune] removes it; nothing is freed on
// its own, so a client naming random keys grows the fence without bound
// unless something prunes it. Run [MemoryFence.PruneEvery] (or call Prune
// from a loop of your own) with a period longer than any holder keeps one
// token (its whole lease, renewals included) and longer than the Check's
// allowance ahead of the clock ([DefaultSkew], 5 min, for the default):
//
//	go fence.PruneEvery(ctx, 10*time.Minute)
//
// Prune removes the keys not claimed since the previous Prune, so an entry
// lives between one and two periods after its last claim: the fence holds
// at most the keys claimed in the last two periods — about 2·r·period
// entries for r new keys a second — whatever the number of keys ever
// named. The shards' maps keep their capacity after a Prune (Go maps do
// not shrink), so memory is bounded by the most keys claimed in two
// periods, not by the keys held now.
//
// Pruning never costs safety. Prune raises a per-shard floor to the
// highest mark it removed, under the shard's mutex, and a key without an
// entry is compared with its shard's floor: a pruned key still refuses
// every token it refused before, and no claim can slip between the removal
// and the floor. It can cost liveness only when a floor is above a later,
// honest token of another key of the shard — which fenceguard's lockers
// avoid when the period rule above holds, because their tokens grow across
// keys too (cluster-wide revisions, or counters floored by the server
// clock): a mark idle for a whole period was issued before any token a
// holder still uses. Keep tokens from different lock services in different
// fences, and keep the forged-token check on: a forged mark that gets
// pruned becomes the floor of its shard (a ClockBound caps it at the
// skew above the clock, which the period outlasts).
//
// There is no cap on the number of keys: at a cap the fence would have to
// either evict marks claimed in the current period, raising floors above
// tokens honest holders still present (every key of the shard refused
// under a flood), or refuse new keys (every new resource refused under a
// flood). Both trade a bounded lockout for memory; the period bound does
// not. Bound the rate of requests instead, and do not claim keys of
// resources that do not exist.
//
// # Forged tokens
//
// Before a claim, Check runs ([DefaultCheck] when nil: a [ClockBound]
// that refuses tokens more than five minutes ahead of the clock in µs).
// [MemoryFence.Reset] sets a poisoned mark back by hand.
type MemoryFence struct {
	// Check runs before every claim; nil is [DefaultCheck]. Set it before
	// first use.
	Check Check
	// Logger receives the audit record of every Reset; nil is
	// slog.Default(). Set it before first use.
	Logger *slog.Logger

	shards [fenceShards]fenceShard
}

type fenceShard struct {
	mu    sync.Mutex
	marks map[string]mark // guarded by mu
	floor Token           // guarded by mu; high-water of every key pruned here
	gen   uint64          // guarded by mu; incremented by each Prune
	_     [32]byte        // keep neighbouring shards' mutexes off one cache line
}

type mark struct {
	high Token
	gen  uint64 // shard generation of the last claim
}

var (
	_ Fence    = (*MemoryFence)(nil)
	_ Resetter = (*MemoryFence)(nil)
)

func (f *MemoryFence) shard(resource string) *fenceShard {
	return &f.shards[maphash.String(fenceSeed, resource)%fenceShards]
}

// Claim implements [Fence]. It never blocks on other keys' claims; ctx
// goes to the Check only, the claim itself is in memory.
func (f *MemoryFence) Claim(ctx context.Context, resource string, t Token) error {
	t, err := Resolve(ctx, resource, t)
	if err != nil {
		return err
	}
	if err := Admit(ctx, f.Check, resource, t); err != nil {
		return err
	}
	s := f.shard(resource)
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.marks[resource]
	if !ok {
		m.high = s.floor
	}
	if t < m.high {
		return &StaleError{Resource: resource, Presented: t, Current: m.high}
	}
	if s.marks == nil {
		s.marks = make(map[string]mark)
	}
	s.marks[resource] = mark{high: t, gen: s.gen}
	return nil
}

// Reset implements [Resetter]: it sets resource's mark to to and logs it.
// The process's memory is linearizable, so the new mark holds for every
// claim that starts after Reset returns.
func (f *MemoryFence) Reset(ctx context.Context, resource string, to Token) (Token, error) {
	if err := CheckReset(resource, to); err != nil {
		return 0, err
	}
	s := f.shard(resource)
	s.mu.Lock()
	m, ok := s.marks[resource]
	if !ok {
		m.high = s.floor
	}
	prev := m.high
	if s.marks == nil {
		s.marks = make(map[string]mark)
	}
	s.marks[resource] = mark{high: to, gen: s.gen}
	s.mu.Unlock()
	LogReset(ctx, f.Logger, "memory", resource, prev, to)
	return prev, nil
}

// HighWater returns the highest token resource has accepted, or the floor
// a [MemoryFence.Prune] left for it; 0 when it has accepted none.
func (f *MemoryFence) HighWater(resource string) Token {
	s := f.shard(resource)
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.marks[resource]; ok {
		return m.high
	}
	return s.floor
}

// Len returns the number of keys the fence holds entries for.
func (f *MemoryFence) Len() int {
	n := 0
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		n += len(s.marks)
		s.mu.Unlock()
	}
	return n
}

// Prune removes the keys that were not claimed since the previous call to
// Prune (or since the fence was created, on the first call) and returns how
// many it removed. See "Memory" above for how often to call it and why it
// is safe.
func (f *MemoryFence) Prune() int {
	n := 0
	for i := range f.shards {
		s := &f.shards[i]
		s.mu.Lock()
		for k, m := range s.marks {
			if m.gen < s.gen {
				s.floor = max(s.floor, m.high)
				delete(s.marks, k)
				n++
			}
		}
		s.gen++
		s.mu.Unlock()
	}
	return n
}

// PruneEvery calls [MemoryFence.Prune] every period until ctx ends, then
// returns ctx's error. It starts no goroutine of its own: run it in one
// (go f.PruneEvery(ctx, period)), and end ctx to stop it. See "Memory"
// above for the period: longer than any holder keeps one token and than
// the Check's allowance above the clock. It panics if period is not
// positive, as [time.NewTicker] does.
func (f *MemoryFence) PruneEvery(ctx context.Context, period time.Duration) error {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			f.Prune()
		}
	}
}
