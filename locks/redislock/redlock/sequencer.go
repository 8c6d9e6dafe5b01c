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
	"github.com/fenceguard/fenceguard/locks/redislock/internal/detach"
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
// one parallel round trip; [token.SequencerCheck] caches the answers, so a
// resource pays it about once per grant.
//
// The answer: the holder's token when one grant's "id|token" is the lock's
// value on a majority of the nodes; otherwise the k-th largest of the
// nodes' counters (a node's lock token counts if larger), k the number of
// nodes reporting one minus n − quorum (with every node reporting, the
// third largest of five), the largest when k < 1, and 0 when no node has
// a counter.
//
// With every node reporting, the answer is never below a live holder's
// token, never above the current holder's when one holds a majority, and
// never decreasing (the argument: docs/design.md, "redlock"). With nodes
// unreachable or without a counter it still bounds every live holder but
// may stand above the next holder's token, and a later answer may be
// lower. When a majority of nodes lost lock and counter, the grant they
// held is lost too, and Current may answer below its token: the resource
// refuses that holder (it fails closed).
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
			v, err := readNode(context.WithValue(nctx, callerKey{}, ctx), c, i, k)
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
	res, err := detach.Call(nil, caller(ctx), func() ([]string, error) {
		return currentScript.Run(ctx, c, []string{k.lock, k.counter}).StringSlice()
	})
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
