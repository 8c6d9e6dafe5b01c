// Package lease holds what the Redis lockers' leases share: the grant's
// key, token and TTL, its deadline and whether it was released, and the
// lock that serialises Release calls.
package lease

import (
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// State is embedded in a locker's lease; it provides the accessors of
// [locks.Lease]. It must not be copied after first use.
type State struct {
	key string
	tok token.Token
	ttl time.Duration

	// Releasing serialises Release calls. Deadline and Renew do not take
	// it, so a Release waiting on the server blocks neither.
	Releasing sync.Mutex

	mu       sync.Mutex
	deadline time.Time // guarded by mu
	released bool      // guarded by mu
}

// Init sets the grant's identity and first deadline.
func (s *State) Init(key string, tok token.Token, ttl time.Duration, deadline time.Time) {
	s.key, s.tok, s.ttl, s.deadline = key, tok, ttl, deadline
}

// Key implements locks.Lease.
func (s *State) Key() string { return s.key }

// Token implements locks.Lease.
func (s *State) Token() token.Token { return s.tok }

// TTL implements locks.Lease.
func (s *State) TTL() time.Duration { return s.ttl }

// Deadline implements locks.Lease.
func (s *State) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Extend records a successful renewal.
func (s *State) Extend(deadline time.Time) {
	s.mu.Lock()
	s.deadline = deadline
	s.mu.Unlock()
}

// Released reports whether Release succeeded.
func (s *State) Released() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.released
}

// SetReleased records a successful Release.
func (s *State) SetReleased() {
	s.mu.Lock()
	s.released = true
	s.mu.Unlock()
}
