package history

import (
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// regOp is one operation on an item's value: a read that returned Old, or a
// compare-and-set that read Old and wrote New under one lock hold. Unknown
// marks a set whose write's outcome is unknown.
type regOp struct {
	Cas     bool
	Old     string
	New     string
	Unknown bool
	Client  int
	Op      string
}

// modelFrom is a register holding initial whose operations are reads and
// compare-and-sets. It is nondeterministic only for sets of unknown outcome,
// which may or may not have taken effect.
func modelFrom(initial string) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{initial} },
		Step: func(state, input, _ any) []any {
			s, in := state.(string), input.(regOp)
			switch {
			case !in.Cas:
				if s == in.Old {
					return []any{s}
				}
				return nil
			case in.Unknown:
				if s == in.Old {
					return []any{s, in.New}
				}
				return []any{s}
			case s == in.Old:
				return []any{in.New}
			}
			return nil
		},
		DescribeOperation: func(input, _ any) string {
			in := input.(regOp)
			switch {
			case in.Op == "final":
				return fmt.Sprintf("final read → %q", in.Old)
			case !in.Cas:
				return fmt.Sprintf("c%d %s: read → %q", in.Client, in.Op, in.Old)
			case in.Unknown:
				return fmt.Sprintf("c%d %s: cas(%q → %q) → ?", in.Client, in.Op, in.Old, in.New)
			}
			return fmt.Sprintf("c%d %s: cas(%q → %q)", in.Client, in.Op, in.Old, in.New)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
	}
	return nm.ToModel()
}

// registerOps turns r's accesses into operations on the item's value. A
// critical section that read the value and then wrote a new one is a
// compare-and-set from what it read, spanning from the read's sending to the
// write's answer; one whose write was refused, or that wrote no value, is a
// read. Accesses that were refused or failed changed nothing and are left
// out. The final state, read after everything, is a read too.
func registerOps(r *Resource) []porcupine.Operation {
	type section struct{ read, write *Access }
	sections := map[string]*section{}
	var order []string
	for i := range r.Accesses {
		a := &r.Accesses[i]
		key := fmt.Sprintf("%d/%s", a.Client, a.Op)
		s := sections[key]
		if s == nil {
			s = &section{}
			sections[key] = s
			order = append(order, key)
		}
		if a.Kind == Read {
			s.read = a
		} else {
			s.write = a
		}
	}
	var ops []porcupine.Operation
	var last time.Time
	for _, key := range order {
		s := sections[key]
		if s.read == nil || s.read.Result != OK || s.read.Val == nil {
			continue
		}
		rd, w := s.read, s.write
		last = later(last, rd.End)
		op := porcupine.Operation{
			ClientId: rd.Client - 1,
			Input:    regOp{Old: *rd.Val, Client: rd.Client, Op: rd.Op},
			Call:     rd.Start.UnixNano(),
			Return:   rd.End.UnixNano(),
		}
		if w != nil && w.Val != nil && (w.Result == OK || w.Result == Unknown) {
			in := op.Input.(regOp)
			in.Cas, in.New, in.Unknown = true, *w.Val, w.Result == Unknown
			op.Input = in
			op.Return = w.End.UnixNano()
			last = later(last, w.End)
			if in.Unknown {
				op.Return = math.MaxInt64 // it may take effect at any time from its call on
			}
		}
		ops = append(ops, op)
	}
	final := later(r.FinalAt, last.Add(time.Nanosecond)).UnixNano()
	clients := 0
	for _, op := range ops {
		clients = max(clients, op.ClientId+1)
	}
	ops = append(ops, porcupine.Operation{
		ClientId: clients, Input: regOp{Old: r.Final.Val, Op: "final"}, Call: final, Return: final,
	})
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// registerTimeout bounds one linearizability check. Histories are a few
// dozen operations; a check that runs out is reported, not passed.
const registerTimeout = 30 * time.Second

// CheckRegister checks that the history of r's value is linearizable: that
// the critical sections took effect as if one at a time, each reading what
// the previous one wrote.
func CheckRegister(r *Resource) []Violation {
	switch porcupine.CheckOperationsTimeout(modelFrom(r.Initial.Val), registerOps(r), registerTimeout) {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return []Violation{{"register", "not linearizable: a critical section read a value another had already overwritten, or wrote over one without reading it"}}
	}
	return []Violation{{"register", fmt.Sprintf("linearizability check did not finish in %v", registerTimeout)}}
}

// VisualizeRegister writes porcupine's HTML visualization of r's value
// history to w: the operations on a time line and the longest linearizable
// prefix it found.
func VisualizeRegister(r *Resource, w io.Writer) error {
	m := modelFrom(r.Initial.Val)
	_, info := porcupine.CheckOperationsVerbose(m, registerOps(r), registerTimeout)
	return porcupine.Visualize(m, info, w)
}
