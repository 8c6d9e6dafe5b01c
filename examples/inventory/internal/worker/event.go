package worker

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// Kind says what an [Event] reports.
type Kind string

// The events a worker reports.
const (
	Ready    Kind = "ready"    // gated only: the worker is up and waits for an ack before its first sale (Gate)
	Acquired Kind = "acquired" // the lock was granted: Token; Gate when the worker now waits for an ack
	Read     Kind = "read"     // the item was read (and claimed): Token, Stock; Gate as for Acquired
	Wrote    Kind = "wrote"    // the stock was written: Token, Stock (the new stock) — one unit sold
	Refused  Kind = "refused"  // the service refused the token as stale: Op, Token, Current
	Released Kind = "released" // the critical section ended and the lease was released
	Lost     Kind = "lost"     // the guard reports the lease lost: Err says why
	SoldOut  Kind = "sold-out" // the item's stock is 0; the worker exits
	Failed   Kind = "failed"   // anything else that went wrong: Err
	Counters Kind = "counters" // the worker's fenceguard_* counters, last event before exit
)

// Event is one line of a worker's output.
type Event struct {
	Time     time.Time          `json:"time"`
	Worker   int                `json:"worker"`
	Kind     Kind               `json:"event"`
	Token    token.Token        `json:"token,omitzero"`
	Stock    int                `json:"stock,omitempty"`
	Gate     bool               `json:"gate,omitempty"`
	Op       string             `json:"op,omitempty"` // Refused: "read" or "write"
	Current  token.Token        `json:"current,omitzero"`
	Err      string             `json:"error,omitempty"`
	Counters map[string]float64 `json:"counters,omitempty"`
}

// Encoder writes events as JSON lines, one write per event, so that a
// process frozen right after an event has already sent it. It is safe for
// concurrent use.
type Encoder struct {
	mu  sync.Mutex
	enc *json.Encoder // guarded by mu
}

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{enc: json.NewEncoder(w)} }

// Encode writes e.
func (e *Encoder) Encode(ev Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(ev)
}
