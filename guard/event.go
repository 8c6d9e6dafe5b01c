package guard

import (
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// EventKind says what an [Event] reports.
type EventKind int

// The events a Guard reports.
const (
	// Acquired: a lease was granted. Duration is how long Acquire waited.
	Acquired EventKind = iota + 1
	// AcquireFailed: Acquire gave up. Duration is how long it tried; Err
	// says why.
	AcquireFailed
	// Renewed: a renewal succeeded. Duration is its round trip.
	Renewed
	// RenewFailed: a renewal failed without being refused (the server was
	// unreachable); the lease lives on until its local deadline. Err says
	// why.
	RenewFailed
	// Lost: the lease was lost. Duration is how long it had been held; Err
	// wraps [ErrLost] and the reason.
	Lost
	// Released: the lease was released. Duration is how long it was held;
	// Err is set when the release call failed.
	Released
)

func (k EventKind) String() string {
	switch k {
	case Acquired:
		return "acquired"
	case AcquireFailed:
		return "acquire_failed"
	case Renewed:
		return "renewed"
	case RenewFailed:
		return "renew_failed"
	case Lost:
		return "lost"
	case Released:
		return "released"
	}
	return "unknown"
}

// Event is what [Options.Observer] receives. Nested holds report nothing.
type Event struct {
	Kind     EventKind
	Key      string
	Token    token.Token // zero for AcquireFailed
	Duration time.Duration
	Err      error
}
