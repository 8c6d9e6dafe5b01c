package history

import (
	"strings"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// Kinds of access.
const (
	Read  = "read"
	Write = "write"
)

// Result is what the resource answered to an access.
type Result string

// The results an access can have.
const (
	OK      Result = "ok"      // done
	Stale   Result = "stale"   // refused: the token was below the resource's mark; nothing done
	Failed  Result = "failed"  // not done (no such row, a read that failed)
	Unknown Result = "unknown" // a write whose outcome is unknown: it may or may not have been done
)

// Access is one access of a client to one copy of an item, as the client saw
// it. Reads return both fields of the item; a write sets the fields that are
// not nil.
type Access struct {
	Client int         `json:"client"`
	Op     string      `json:"op"` // the critical section (one lock hold) it belongs to
	Copy   string      `json:"copy"`
	Item   string      `json:"item"`
	Kind   string      `json:"kind"` // Read or Write
	Token  token.Token `json:"token"`
	Start  time.Time   `json:"start"` // sent
	End    time.Time   `json:"end"`   // answered
	Stock  *int        `json:"stock,omitempty"`
	Val    *string     `json:"val,omitempty"`
	Result Result      `json:"result"`
	// Current is the resource's mark when it refused the token.
	Current token.Token `json:"current,omitzero"`
	Err     string      `json:"error,omitempty"`
	// LeaseLive says whether the holder's lease context was still live
	// when the access was sent: false once its guard knew the lease lost.
	LeaseLive bool `json:"lease_live"`
}

// Accepted is one entry of a resource's own log: an access it accepted,
// in the order it accepted them (Seq), with the token it carried and the
// item's fields after it. Kind is Read, Write, or "claim" for a claim of a
// separate high-water mark (a fenced transaction's, the middleware's).
//
// Mark names the high-water mark that checked the token. Accesses whose
// claim and effect are one step share one mark — a fenced transaction's
// statements and its claim, say. Two marks checked one after the other, as
// an HTTP middleware's Fence in front of a store that checks again, are two:
// a request can pass the first, then land its effect after a newer token
// passed the first too but before it reached the store; the store's own
// check orders them, so each mark is monotone on its own, not their merge.
type Accepted struct {
	Mark  string      `json:"mark,omitempty"`
	Seq   int64       `json:"seq"`
	Time  time.Time   `json:"time"`
	Token token.Token `json:"token"`
	Kind  string      `json:"kind"`
	Stock int         `json:"stock"`
	Val   string      `json:"val"`
}

// State is an item's fields.
type State struct {
	Stock int    `json:"stock"`
	Val   string `json:"val"`
}

// Resource is the history of one copy of one item in one run.
type Resource struct {
	Copy     string     `json:"copy"`
	Item     string     `json:"item"`
	Fenced   bool       `json:"fenced"`
	Initial  State      `json:"initial"`
	Final    State      `json:"final"`
	FinalAt  time.Time  `json:"final_at"` // when the final state was read, after every access
	Accesses []Access   `json:"accesses"` // every access of every client to this copy of this item
	Log      []Accepted `json:"log"`      // the resource's log, in its order
}

// Violation is one thing a checker found wrong.
type Violation struct {
	Check  string `json:"check"` // "inventory", "register" or "tokens"
	Detail string `json:"detail"`
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Short is the violation in a few words: its check and the start of its
// detail.
func (v Violation) Short() string {
	d, _, _ := strings.Cut(v.Detail, ":")
	if len(d) > 48 {
		d = d[:45] + "..."
	}
	return v.Check + ": " + d
}

// Check runs every checker on r.
func Check(r *Resource) []Violation {
	var vs []Violation
	vs = append(vs, CheckInventory(r)...)
	vs = append(vs, CheckRegister(r)...)
	vs = append(vs, CheckTokens(r)...)
	return vs
}
