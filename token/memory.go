package token

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/token/internal/rule"
)

const fenceShards = 64

var fenceSeed = maphash.MakeSeed()

// MemoryFence is a [Fence] that keeps marks in process memory. It serves
// one resource process: its marks die with the process, so a restarted
// resource accepts any token again until it is claimed anew; keep the marks
// in the store (PostgreSQL, Redis) when that matters.
//
// The zero value is ready to use. A MemoryFence must not be copied after
// first use. It is safe for concurrent use; claims on different keys rarely
// contend (64 shards, a mutex each, no lock across all keys).
//
// # Memory
//
// Every distinct key claimed keeps an entry (the key plus about 50 bytes)
// until [MemoryFence.Prune] removes it, so a client naming random keys
// grows the fence unless something prunes it. Run [MemoryFence.PruneEvery]
// with a period longer than any holder keeps one token (its whole lease,
// renewals included) and longer than the Check's allowance above the clock
// ([DefaultSkew] for the default):
//
//	go fence.PruneEvery(ctx, 10*time.Minute)
//
// The fence then holds at most the keys claimed in the last two periods.
// Pruning never lets a stale token in: a pruned key still refuses every
// token it refused before. Keep tokens of different lock services in
// different fences. There is no cap on the number of keys; bound the rate
// of requests instead. The argument is in docs/design.md, "Bounded state".
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
	v, err := rule.Resolve(ctx, resource, uint64(t))
	if err != nil {
		return err
	}
	t = Token(v)
	if err := rule.Claim(resource, v); err != nil {
		return err
	}
	check := f.Check
	if check == nil {
		check = DefaultCheck()
	}
	if err := check.Check(ctx, resource, t); err != nil {
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
	if err := rule.Reset(resource, uint64(to)); err != nil {
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
	rule.LogReset(ctx, f.Logger, "memory", resource, uint64(prev), uint64(to))
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
