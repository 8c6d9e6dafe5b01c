package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/token"
)

// sequencerTimeout bounds each node's answer to [Sequencer.Current].
const sequencerTimeout = time.Second

// Sequencer tells a resource the token of the current grant of a redlock
// lock: it implements [token.Sequencer], for [token.SequencerCheck]. It
// needs only a client per node (the same nodes, in any order, and the same
// prefix as the [Locker]'s), holds no connection of its own and has
// nothing to close. It is safe for concurrent use.
type Sequencer struct {
	nodes  []Client
	prefix string
}

var _ token.Sequencer = (*Sequencer)(nil)

// NewSequencer returns a Sequencer over the lockers' nodes. An empty
// prefix is [DefaultPrefix], as for [Options].Prefix.
func NewSequencer(nodes []Client, prefix string) *Sequencer {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Sequencer{nodes: slices.Clone(nodes), prefix: prefix}
}

// Current implements [token.Sequencer]. It asks every node at once, each
// for at most a second, what it holds for key — the lock's value, which
// carries the grant's token once written back, and the counter — and needs
// answers from a majority, else it returns a [*QuorumError]. Its cost is
// one parallel round trip to every node; [token.SequencerCheck] caches the
// answers, so a resource pays it about once per grant, not per access.
//
// The answer:
//
//   - when one grant's "id|token" is the lock's value on a majority of the
//     nodes: that token, the current holder's;
//   - otherwise (the lock is free, expired, or being taken): from the
//     nodes' counters — each node's counter, or the token in its lock's
//     value if larger — the k-th largest, where k is the number of nodes
//     that reported one minus the number a majority may leave out
//     (n − quorum). With every node reporting, k is the quorum: the third
//     largest of five. When k < 1, the largest; with no counter anywhere,
//     0 (no grant known: every token is refused).
//
// Why. A grant's token is handed out only after its write-back reached a
// majority W: on each node of W the lock's value became "id|token" and the
// counter rose to at least the token, in one script. Counters never go
// down. Write m for the number of nodes that report a counter; a majority
// has at least quorum − (n − m) = k nodes among them.
//
//   - Never below a live holder's token. If a grant holds a majority with
//     its token, the answer is its token, at least every earlier grant's
//     (the package's monotonicity argument). Otherwise, each grant handed
//     out before the reads has its W, a majority: at least k reporting
//     nodes are in it and report at least its token, and so does the k-th
//     largest.
//   - Never above the current holder's when one holds a majority. With its
//     token on a majority, the answer is that token. While its write-back
//     is under way the answer comes from counters; with every node
//     reporting it is the quorum-th largest, so a majority T of nodes
//     reported at least the answer, and the holder's majority shares a node
//     r with T. If r was read before the holder's acquire script ran there,
//     the holder read at least r's value and minted above it; if after, r
//     reported what the holder read there or the holder's own token (while
//     a grant holds a node's lock no other grant writes there). A failed
//     attempt's token, left on a minority by a write-back that did not
//     reach a majority, is outvoted. (The largest counter would not be:
//     failed attempts can stack tokens on one minority above what the next
//     holder, on the other nodes, mints.)
//   - Never decreasing. Every exact answer a — a holder's token, or the
//     quorum-th largest with every node reporting — was reported at or
//     above by a majority T: the holder's W, or the quorum nodes at the
//     top. A later call finds those counters no lower; at least k of its
//     reporting nodes are in T, so its k-th largest is at least a. A
//     holder it finds holds a majority, so a node r of T: if the holder
//     took r after the first call read it, it read at least a there and
//     minted above; if before, r reported what the holder read or its
//     token. Either way the holder's token is at least a.
//
// What it assumes, beyond what the tokens assume (see the package doc). A
// lost counter (a restart without persistence, CounterIdle passed) is
// absent, not zero: it lowers m, not the answer. The second and third
// properties are argued with every node reporting a counter. With nodes
// unreachable or without one, the answer still bounds every live holder,
// but may stand above the next holder's token — only if failed attempts
// left tokens on the reporting nodes above what the next holder reads,
// which the clock floor prevents unless counters were healed above the
// clock — and a later answer may then be lower. [Locker.Heal] raises
// counters: until the next grant holds a majority with its token, answers
// may stand at the heal target. When a majority of nodes lost both lock
// and counter, the grant they held is lost too; Current may then answer
// below its token, and the resource refuses its holder (it fails closed).
func (s *Sequencer) Current(ctx context.Context, key string) (token.Token, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: sequencer: empty key", locks.ErrInvalidArgument)
	}
	if len(s.nodes) == 0 || slices.Contains(s.nodes, nil) {
		return 0, fmt.Errorf("%w: sequencer: no nodes, or a nil one", locks.ErrInvalidArgument)
	}
	k := keysFor(s.prefix, key)
	n := len(s.nodes)
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		views []nodeView
		errs  []error
	)
	for i, c := range s.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, sequencerTimeout)
			defer cancel()
			v, err := readNode(nctx, c, i, k)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			views = append(views, v)
		})
	}
	wg.Wait()
	if quorum := n/2 + 1; len(views) < quorum {
		return 0, fmt.Errorf("redlock: current token of %q: %w", key,
			ctxerr.Wrap(ctx, &QuorumError{Need: quorum, Nodes: n, Failed: n - len(views), Err: errors.Join(errs...)}))
	}
	return current(n, views), nil
}

// nodeView is what one node holds for a lock: the grant holding its lock
// ("" when free) with the token written back with it (0 when not yet),
// and its counter (0 when it has none).
type nodeView struct {
	grant   string
	tok     token.Token
	counter token.Token
}

func readNode(ctx context.Context, c Client, i int, k lockKeys) (nodeView, error) {
	res, err := currentScript.Run(ctx, c, []string{k.lock, k.counter}).StringSlice()
	if err != nil {
		return nodeView{}, nodeErr(i, k.counter, err)
	}
	if len(res) != 2 {
		return nodeView{}, fmt.Errorf("redlock: node %d: unexpected reply %q", i, res)
	}
	var v nodeView
	if res[1] != "" {
		if v.counter, err = parseCounter(res[1]); err != nil {
			return nodeView{}, &CounterError{Node: i, Key: k.counter, Value: res[1]}
		}
	}
	id, tok, ok := strings.Cut(res[0], "|")
	v.grant = id
	if ok {
		// A token that does not parse is not a write-back of ours: the
		// grant counts as not written back on this node.
		v.tok, _ = parseCounter(tok)
	}
	return v, nil
}

// current decides [Sequencer.Current] from the views of the nodes that
// answered, out of n (see there for why).
func current(n int, views []nodeView) token.Token {
	quorum := n/2 + 1
	type grant struct {
		id  string
		tok token.Token
	}
	holders := map[grant]int{}
	var counters []token.Token
	for _, v := range views {
		if v.grant != "" && v.tok != 0 {
			g := grant{v.grant, v.tok}
			if holders[g]++; holders[g] >= quorum {
				return v.tok
			}
		}
		if c := max(v.counter, v.tok); c != 0 {
			counters = append(counters, c)
		}
	}
	if len(counters) == 0 {
		return 0
	}
	slices.Sort(counters)
	slices.Reverse(counters)
	k := max(len(counters)-(n-quorum), 1)
	return counters[k-1]
}
