package grpcmw

import (
	"context"
	"hash/maphash"
	"sync"
)

const (
	lockShards = 64
	maxSpare   = 8 // freed keyLocks a shard keeps for reuse
)

var lockSeed = maphash.MakeSeed()

// keyLocks is a table of per-key mutexes whose memory follows use: an
// entry exists only while a call holds or waits for its key, so the
// table never holds more entries than there are calls in flight.
type keyLocks struct {
	shards [lockShards]lockShard
}

type lockShard struct {
	mu    sync.Mutex
	held  map[string]*keyLock // guarded by mu; keys held or waited for
	spare []*keyLock          // guarded by mu; free entries, at most maxSpare
	_     [32]byte            // keep neighbouring shards' mutexes off one cache line
}

// keyLock is one key's mutex. A channel rather than a sync.Mutex, so a
// waiter can give up when its call ends.
type keyLock struct {
	sem   chan struct{} // capacity 1; holding the lock = having sent
	shard *lockShard
	key   string // guarded by shard.mu
	refs  int    // guarded by shard.mu; holder + waiters
}

func (t *keyLocks) shard(key string) *lockShard {
	return &t.shards[maphash.String(lockSeed, key)%lockShards]
}

// lock takes key's mutex, or gives up when ctx ends first. The caller must
// call unlock on the returned keyLock.
func (t *keyLocks) lock(ctx context.Context, key string) (*keyLock, error) {
	s := t.shard(key)
	s.mu.Lock()
	l := s.held[key]
	if l == nil {
		l = s.newLocked(key)
	}
	l.refs++
	s.mu.Unlock()

	select { // uncontended: no need to touch ctx.Done, which may allocate
	case l.sem <- struct{}{}:
		return l, nil
	default:
	}
	select {
	case l.sem <- struct{}{}:
		return l, nil
	case <-ctx.Done():
		l.release()
		return nil, context.Cause(ctx)
	}
}

func (s *lockShard) newLocked(key string) *keyLock {
	var l *keyLock
	if n := len(s.spare); n > 0 {
		l = s.spare[n-1]
		s.spare = s.spare[:n-1]
	} else {
		l = &keyLock{sem: make(chan struct{}, 1), shard: s}
	}
	l.key = key
	if s.held == nil {
		s.held = make(map[string]*keyLock)
	}
	s.held[key] = l
	return l
}

func (l *keyLock) unlock() {
	<-l.sem
	l.release()
}

// release drops one reference and frees the entry when it was the last.
func (l *keyLock) release() {
	s := l.shard
	s.mu.Lock()
	defer s.mu.Unlock()
	l.refs--
	if l.refs > 0 {
		return
	}
	delete(s.held, l.key)
	l.key = ""
	if len(s.spare) < maxSpare {
		s.spare = append(s.spare, l)
	}
}

// len returns the number of keys held or waited for.
func (t *keyLocks) len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.held)
		s.mu.Unlock()
	}
	return n
}
