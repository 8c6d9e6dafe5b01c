package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/cleanup"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/ctxerr"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/detach"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/lease"
	"github.com/fenceguard/fenceguard/locks/redislock/internal/rnotify"
	"github.com/fenceguard/fenceguard/token"
)

// Client is what the locker needs of each node's Redis client.
type Client interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// DefaultPrefix is the key prefix of [Options] and [NewSequencer] when
// none is given.
const DefaultPrefix = "fenceguard:redlock:"

// minTTL is the shortest lease redlock grants.
const minTTL = 10 * time.Millisecond

// errClosed is the error of calls on a closed Locker.
var errClosed = fmt.Errorf("redlock: %w", locks.ErrClosed)

// QuorumError reports that too few nodes answered for a quorum: the lock
// service is unavailable, not merely held. No token was issued.
type QuorumError struct {
	Need, Nodes, Failed int
	Err                 error // the nodes' errors, joined
}

func (e *QuorumError) Error() string {
	return fmt.Sprintf("redlock: no quorum: %d of %d nodes failed, %d needed: %v", e.Failed, e.Nodes, e.Need, e.Err)
}

func (e *QuorumError) Unwrap() error { return e.Err }

// CounterError reports a node whose token counter for a key is not a
// token this package wrote: not a canonical decimal number up to
// [token.MaxInt64] (someone else wrote the key). The node counts as
// failed for that key — nothing is read from it or written to it — until
// [Locker.Heal] replaces the value or it is deleted.
type CounterError struct {
	Node  int    // index in the nodes given to New or NewSequencer
	Key   string // the counter's Redis key
	Value string // the stored value, cut at 40 bytes
}

func (e *CounterError) Error() string {
	return fmt.Sprintf("redlock: node %d: malformed token counter %q at %q", e.Node, e.Value, e.Key)
}

// Unwrap returns [token.ErrInvalid]: what the node holds is not a token,
// and retrying does not change that.
func (e *CounterError) Unwrap() error { return token.ErrInvalid }

// nodeErr gives a script's error on node i its type.
func nodeErr(i int, key string, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		if v, ok := strings.CutPrefix(rerr.Error(), counterErrPrefix); ok {
			v, _, _ = strings.Cut(v, " script: ")
			return &CounterError{Node: i, Key: key, Value: v}
		}
	}
	return err
}

// Options configure a [Locker]. Zero fields select defaults.
type Options struct {
	// Prefix starts every key and channel on every node. Default
	// [DefaultPrefix].
	Prefix string

	// DriftFactor and DriftMin give the clock drift allowed for: validity
	// is TTL − elapsed − (TTL·DriftFactor + DriftMin). Defaults 0.01 and
	// 2ms.
	DriftFactor float64
	DriftMin    time.Duration

	// NodeTimeout bounds each call to one node, so a dead node cannot
	// stall an acquire. Default: a tenth of the TTL, within [100ms, 1s].
	NodeTimeout time.Duration

	// CounterIdle is how long a node keeps a key's counter (and its clock
	// offset) after the last grant or renewal. Default 1h.
	CounterIdle time.Duration

	// LockDelay keeps the lock from everyone else for this long past the
	// Deadline of a lease that ended without a Release (expired, or its
	// renewal refused): each node keeps its lock TTL + LockDelay (plus
	// LockDelay·DriftFactor, the drift allowance for the delay) while the
	// lease's TTL, validity and Deadline count the TTL alone. A Release
	// frees the lock at once. 0, the default: no delay. At most
	// [locks.MaxLockDelay]. See "Lock-delay" in the package doc.
	LockDelay time.Duration
}

// Locker runs Redlock over independent Redis nodes, with fencing tokens.
// It is safe for concurrent use; Close it when done (it holds one pub/sub
// connection per node for waiters).
type Locker struct {
	nodes  []Client
	notify []*rnotify.Notifier
	o      Options

	cleanup cleanup.Group // background give-backs
	bg      detach.Group  // commands a cancel left running

	closed atomic.Bool // set by Close: acquires fail with errClosed
}

var _ locks.Locker = (*Locker)(nil)

var _ locks.MinTTLer = (*Locker)(nil)

// MinTTL implements [locks.MinTTLer]: 10ms.
func (l *Locker) MinTTL() time.Duration { return minTTL }

// New returns a Locker over nodes: independent Redis servers, not replicas
// of one another. Use an odd number, 3 or 5; a quorum is len/2+1.
func New(nodes []Client, o Options) (*Locker, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", locks.ErrInvalidArgument)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.DriftFactor == 0 {
		o.DriftFactor = 0.01
	}
	if o.DriftMin == 0 {
		o.DriftMin = 2 * time.Millisecond
	}
	if o.CounterIdle == 0 {
		o.CounterIdle = time.Hour
	}
	if o.DriftFactor < 0 || o.DriftFactor > 0.05 || o.DriftMin < 0 || o.NodeTimeout < 0 || o.CounterIdle < time.Second {
		return nil, fmt.Errorf("%w: options %+v", locks.ErrInvalidArgument, o)
	}
	if err := locks.CheckLockDelay(o.LockDelay); err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	l := &Locker{nodes: nodes, o: o}
	for i, c := range nodes {
		if c == nil {
			return nil, fmt.Errorf("%w: node %d is nil", locks.ErrInvalidArgument, i)
		}
		l.notify = append(l.notify, rnotify.ForGoRedis(c))
	}
	return l, nil
}

// Close stops the pub/sub readers; blocked acquires fail with an
// error matching [locks.ErrClosed]. It waits for the commands that calls
// cut short by a cancel left running (each ends with its reply, by the
// client's ReadTimeout, or at the client's Close) and for their
// clean-ups. Granted leases stay usable. Idempotent.
func (l *Locker) Close() error {
	l.closed.Store(true)
	for _, n := range l.notify {
		n.Close()
	}
	l.cleanup.Close() // each is bounded by cleanup.Timeout
	l.bg.Wait()
	return nil
}

// giveBack releases the nodes an attempt that did not grant took, in the
// background, bounded ([cleanup.Group.Run]), so that a call returns by its
// context's deadline or its cancel; Close waits for it. It starts once the
// attempt's commands a cancel cut short (after) have finished.
func (l *Locker) giveBack(ctx context.Context, after []<-chan struct{}, timeout time.Duration, k lockKeys, id string, nodes []bool) {
	l.cleanup.Run(ctx, after, func(ctx context.Context) { l.releaseNodes(ctx, timeout, k, id, nodes) })
}

type lockKeys struct {
	lock, counter, channel string
}

func (l *Locker) keys(key string) lockKeys { return keysFor(l.o.Prefix, key) }

func keysFor(prefix, key string) lockKeys {
	base := prefix + "{" + key + "}"
	return lockKeys{lock: base, counter: base + ":tok", channel: base + ":wake"}
}

func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// px is how long a node keeps the lock of a lease of ttl, in ms: ttl plus
// the lock-delay, which gets a drift allowance of its own so that a node
// whose clock runs fast by up to DriftFactor still keeps the lock for the
// delay past the lease's Deadline (whose allowance covers the ttl alone).
func (l *Locker) px(ttl time.Duration) int64 {
	d := l.o.LockDelay
	if d > 0 {
		d += time.Duration(float64(d) * l.o.DriftFactor)
	}
	return ms(ttl + d)
}

func (l *Locker) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*l.o.DriftFactor) + l.o.DriftMin
}

func (l *Locker) nodeTimeout(ttl time.Duration) time.Duration {
	if l.o.NodeTimeout > 0 {
		return l.o.NodeTimeout
	}
	return min(max(ttl/10, 100*time.Millisecond), time.Second)
}

// each calls fn on the chosen nodes in parallel, each under timeout, and
// returns when all have answered. Answers are serialised by mu.
func (l *Locker) each(ctx context.Context, timeout time.Duration, nodes []bool, fn func(ctx context.Context, i int, mu *sync.Mutex)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range l.nodes {
		if nodes != nil && !nodes[i] {
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			fn(context.WithValue(nctx, callerKey{}, ctx), i, &mu)
		})
	}
	wg.Wait()
}

// callerKey is the key of the caller's context in a node call's context
// (see caller).
type callerKey struct{}

// caller returns the context of the call that a node call's ctx (from
// each) belongs to, or ctx itself. A node call returns early at the
// caller's cancel or deadline (package detach), not at its own
// NodeTimeout, which go-redis enforces on the socket.
func caller(ctx context.Context) context.Context {
	if c, ok := ctx.Value(callerKey{}).(context.Context); ok {
		return c
	}
	return ctx
}

// outcome of an attempt that did not grant.
type outcome int

const (
	held  outcome = iota // another grant holds a quorum: wait for its release
	split                // contenders divided the nodes: retry after a random moment
)

// try makes one attempt: acquire the nodes, mint the token from a quorum,
// write it back to a quorum. On failure it gives back whatever it took and
// says whether the lock is held (and how long to wait before another
// attempt is worth making) or merely contended.
//
// In parallel mode every node is asked at once: one round trip, the
// Redlock way, best when nobody competes. In ordered mode the first node
// that answers is asked alone, and the others only once it granted: the
// first node acts as a tie-breaker, so competing acquirers (waiters woken
// by the same release) cannot split the nodes among themselves — the
// losers learn "held" from one node and go back to waiting.
//
// Every attempt is a grant of its own, with a fresh id: whatever an
// earlier attempt left on a node (a lock its give-back did not reach) is
// never taken for this one's.
func (l *Locker) try(ctx context.Context, k lockKeys, key string, ttl time.Duration, ordered bool) (*lockLease, outcome, time.Duration, error) {
	start := time.Now()
	id := newID()
	a := newAttempt(len(l.nodes))
	timeout := l.nodeTimeout(ttl)
	// Nodes whose acquire a cancel cut short: the grant may land there
	// yet, so they are given back too, once their commands have finished.
	cut := make([]bool, len(l.nodes))
	var pending []<-chan struct{}
	ask := func(ctx context.Context, i int, mu *sync.Mutex) {
		ok, floor, pttl, holder, p, err := l.acquireNode(ctx, i, k, id, ttl)
		mu.Lock()
		a.acquired(i, ok, floor, pttl, holder, err)
		if p != nil {
			cut[i], pending = true, append(pending, p)
		}
		mu.Unlock()
	}
	var rest []bool // nodes still to ask; nil for all
	if ordered {
		rest = make([]bool, len(l.nodes))
		for i := range l.nodes {
			before := len(a.errs)
			l.each(ctx, timeout, oneNode(len(l.nodes), i), ask)
			if len(a.errs) > before {
				continue // unreachable: the next node breaks the tie
			}
			if !a.held[i] {
				// Refused: the lock is held, or being taken by another.
				return nil, held, max(a.wait, time.Millisecond), nil
			}
			for j := i + 1; j < len(l.nodes); j++ {
				rest[j] = true
			}
			break
		}
	}
	if !ordered || slices.Contains(rest, true) {
		l.each(ctx, timeout, rest, ask)
	}
	tok, ok, rangeErr := a.mint()
	if ok {
		l.each(ctx, timeout, a.held, func(ctx context.Context, i int, mu *sync.Mutex) {
			ok, err := l.writeBackNode(ctx, i, k, id, tok)
			mu.Lock()
			a.wroteBack(i, ok, err)
			mu.Unlock()
		})
		validity := ttl - time.Since(start) - l.drift(ttl)
		if a.granted() && validity > 0 {
			g := &lockLease{l: l, k: k, id: id}
			g.Init(key, tok, ttl, start.Add(ttl-l.drift(ttl)))
			return g, 0, 0, nil
		}
	}
	if a.heldCount() > 0 || len(pending) > 0 {
		back := slices.Clone(a.held)
		for i, c := range cut {
			back[i] = back[i] || c
		}
		l.giveBack(ctx, pending, timeout, k, id, back)
	}
	if rangeErr != nil {
		return nil, 0, 0, fmt.Errorf("redlock: acquire %q: %w", key, rangeErr)
	}
	if err := a.unreachable(ctx); err != nil {
		return nil, 0, 0, fmt.Errorf("redlock: acquire %q: %w", key, err)
	}
	if a.taken() {
		return nil, held, max(a.wait, time.Millisecond), nil
	}
	return nil, split, 0, nil
}

// oneNode selects node i of n.
func oneNode(n, i int) []bool {
	sel := make([]bool, n)
	sel[i] = true
	return sel
}

// backoff is how long to wait after the n-th split vote in a row: random,
// growing, so that contenders fall out of step and one of them wins.
func backoff(n int) time.Duration {
	return time.Duration(rand.Int64N(int64(time.Millisecond) << min(n, 6)))
}

// acquireNode runs the acquire script on node i; granted, it reports the
// node's floor (readFloor). When ctx ends first it returns at once, with
// the channel closed once the script's command has finished (pending).
func (l *Locker) acquireNode(ctx context.Context, i int, k lockKeys, id string, ttl time.Duration) (ok bool, floor token.Token, pttl time.Duration, holder string, pending <-chan struct{}, err error) {
	res, pending, err := detach.Start(&l.bg, caller(ctx), func() ([]any, error) {
		return acquireScript.Run(ctx, l.nodes[i], []string{k.lock, k.counter}, id, l.px(ttl)).Slice()
	})
	if err != nil {
		return false, 0, 0, "", pending, nodeErr(i, k.counter, err)
	}
	if got, _ := res[0].(int64); got != 1 && len(res) == 3 {
		p, _ := res[1].(int64)
		holder, _ = res[2].(string)
		holder, _, _ = strings.Cut(holder, "|") // the grant's id, with or without its token
		return false, 0, time.Duration(p) * time.Millisecond, holder, nil, nil
	}
	if len(res) != 4 {
		return false, 0, 0, "", nil, fmt.Errorf("redlock: node %d: unexpected acquire reply %v", i, res)
	}
	floor, err = readFloor(res[1:])
	if err != nil {
		return false, 0, 0, "", nil, fmt.Errorf("redlock: node %d: unexpected acquire reply %v: %w", i, res, err)
	}
	return true, floor, 0, "", nil, nil
}

// readFloor reads a script's {counter or "", now, offset} and computes
// the node's floor, max(counter, now + offset): at least every token the
// node saw, and, from the µs after a token's write-back there, at least
// that token by the clock alone. now + offset past the ceiling counts as
// the ceiling (nothing more is minted).
func readFloor(res []any) (token.Token, error) {
	var v [3]token.Token
	for j, x := range res {
		s, _ := x.(string)
		if j == 0 && s == "" {
			continue
		}
		t, err := parseCounter(s)
		if err != nil {
			return 0, err
		}
		v[j] = t
	}
	c, now, d := v[0], v[1], v[2]
	f := token.MaxInt64
	if d <= token.MaxInt64-now {
		f = now + d
	}
	return max(c, f), nil
}

// readIssued reads the issued script's reply on node i: the node's floor
// (readFloor), or the held grant's token when that is larger.
func readIssued(i int, res []any) (token.Token, error) {
	if len(res) != 4 {
		return 0, fmt.Errorf("redlock: node %d: unexpected reply %v", i, res)
	}
	floor, err := readFloor(res[:3])
	if s, _ := res[3].(string); err != nil || s == "" {
		return floor, err
	}
	held, err := parseCounter(res[3].(string))
	return max(floor, held), err
}

// parseCounter reads a counter, offset or token as the scripts return
// it: a canonical decimal string of at most [token.MaxInt64], or "0" for
// no offset.
func parseCounter(s string) (token.Token, error) {
	if s == "0" {
		return 0, nil
	}
	t, err := token.Parse(s)
	if err != nil {
		return 0, err
	}
	if t > token.MaxInt64 {
		return 0, &token.RangeError{What: "redlock counter", Token: t, Max: token.MaxInt64}
	}
	return t, nil
}

// writeBackNode writes tok back to node i, and raises the node's offset to
// tok's lead over its clock (see writeBackScript).
func (l *Locker) writeBackNode(ctx context.Context, i int, k lockKeys, id string, tok token.Token) (bool, error) {
	n, err := detach.Call(&l.bg, caller(ctx), func() (int, error) {
		return writeBackScript.Run(ctx, l.nodes[i], []string{k.lock, k.counter}, id, tok.String(), ms(l.o.CounterIdle)).Int()
	})
	return n == 1, nodeErr(i, k.counter, err)
}

// releaseNodes gives back the chosen nodes' locks (all when nodes is nil).
// It returns how many nodes held this grant.
func (l *Locker) releaseNodes(ctx context.Context, timeout time.Duration, k lockKeys, id string, nodes []bool) (released int, errs []error) {
	l.each(ctx, timeout, nodes, func(ctx context.Context, i int, mu *sync.Mutex) {
		n, err := detach.Call(&l.bg, caller(ctx), func() (int, error) {
			return releaseScript.Run(ctx, l.nodes[i], []string{k.lock}, id, k.channel).Int()
		})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		} else if n == 1 {
			released++
		}
	})
	return released, errs
}

// TryAcquire implements [locks.Locker]: one attempt. It returns
// [locks.ErrNotObtained] when others hold (or are taking) the lock, and a
// [*QuorumError] when too few nodes answer.
func (l *Locker) TryAcquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, minTTL); err != nil {
		return nil, err
	}
	if l.closed.Load() {
		return nil, errClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k := l.keys(key)
	// A split vote says nothing about whether the lock is free: try again
	// until one contender wins (then the lock is taken) or ttl runs out.
	give := time.Now().Add(ttl)
	for n := 0; ; n++ {
		lease, out, _, err := l.try(ctx, k, key, ttl, n > 0)
		switch {
		case err != nil:
			return nil, err
		case lease != nil:
			return lease, nil
		case out == held || time.Now().After(give):
			return nil, locks.ErrNotObtained
		}
		if err := sleep(ctx, backoff(n)); err != nil {
			return nil, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Acquire implements [locks.Locker]. A waiter listens on every node for
// releases and tries again when one comes, or when the shortest remaining
// TTL among the nodes that refused it runs out. When too few nodes answer
// it returns a [*QuorumError] rather than waiting.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (locks.Lease, error) {
	if err := locks.CheckArgs(key, ttl, minTTL); err != nil {
		return nil, err
	}
	if l.closed.Load() {
		return nil, errClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, waiter := l.keys(key), newID()
	var wake chan struct{} // merged wake-ups from all nodes, once listening
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	splits, ordered := 0, false
	for {
		lease, out, wait, err := l.try(ctx, k, key, ttl, ordered)
		ordered = true // only a first, uncontended attempt goes in parallel
		if err != nil {
			return nil, err
		}
		if lease != nil {
			return lease, nil
		}
		if out == split {
			wait, splits = backoff(splits), splits+1
		} else {
			splits = 0
		}
		if wake == nil {
			// Listen, then try again at once: a release between the
			// attempt and the subscription would otherwise be missed.
			if wake, stop, err = l.listen(ctx, k.channel, waiter); err != nil {
				return nil, err
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
		}
	}
}

// listen registers id on channel at every node it can reach and merges
// their wake-ups. Nodes that cannot be reached are skipped: the waiter's
// timer covers them.
func (l *Locker) listen(ctx context.Context, channel, id string) (chan struct{}, func(), error) {
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var registered []int
	var mu sync.Mutex
	closed := false
	l.each(ctx, time.Second, nil, func(ctx context.Context, i int, _ *sync.Mutex) {
		w, err := l.notify[i].Register(ctx, channel, id)
		if err != nil {
			mu.Lock()
			closed = closed || errors.Is(err, rnotify.ErrClosed)
			mu.Unlock()
			return
		}
		mu.Lock()
		registered = append(registered, i)
		mu.Unlock()
		wg.Go(func() {
			for {
				select {
				case <-w:
					select {
					case wake <- struct{}{}:
					default:
					}
				case <-done:
					return
				}
			}
		})
	})
	stop := func() {
		close(done)
		wg.Wait()
		for _, i := range registered {
			l.notify[i].Unregister(channel, id)
		}
	}
	if closed {
		stop()
		return nil, nil, errClosed
	}
	return wake, stop, nil
}

// Issued returns an upper bound of every token granted for key: the largest
// max(counter, clock in µs + offset, the held grant's token) among a
// majority of nodes (every token was
// written back to a majority, and any two majorities share a node), read
// and compared exactly. A presented token above it was never issued. For
// refusing forged tokens prefer a [Sequencer]: its bound is the current
// holder's token, not the clock.
func (l *Locker) Issued(ctx context.Context, key string) (token.Token, error) {
	k := l.keys(key)
	a := newAttempt(len(l.nodes))
	var top token.Token
	answered := 0
	l.each(ctx, time.Second, nil, func(ctx context.Context, i int, mu *sync.Mutex) {
		res, err := detach.Call(&l.bg, caller(ctx), func() ([]any, error) {
			return issuedScript.Run(ctx, l.nodes[i], []string{k.counter, k.lock}).Slice()
		})
		var floor token.Token
		if err == nil {
			floor, err = readIssued(i, res)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			a.errs = append(a.errs, nodeErr(i, k.counter, err))
			return
		}
		top = max(top, floor)
		answered++
	})
	if answered < a.quorum {
		return 0, a.quorumErr(ctx, a.n-answered)
	}
	return top, nil
}

// maxHeal is the largest target Heal accepts.
const maxHeal = token.MaxInt64 - 1

// Heal raises key's counter to at least to on every node it reaches, so
// the next grant's token is above it; it needs a majority. Use it with
// [token.StaleError.Current] when a resource refused a token because
// counters were lost and clocks went back. A target of zero or above
// [token.MaxInt64] − 1 is refused with an error wrapping
// [locks.ErrInvalidArgument] (and, above it, a [*token.RangeError]) before
// any node is touched. A node's malformed counter ([CounterError]) is
// replaced by max(to, the node's clock in µs).
//
// Healed tokens keep growing with the clocks, ahead of them by the heal's
// lead (stored with each node's counter): a key healed to v has tokens for
// about (token.MaxInt64 − v) µs.
func (l *Locker) Heal(ctx context.Context, key string, to token.Token) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: heal: empty key", locks.ErrInvalidArgument)
	case to == 0:
		return fmt.Errorf("%w: heal %q to 0", locks.ErrInvalidArgument, key)
	case to > maxHeal:
		return fmt.Errorf("%w: heal %q: %w", locks.ErrInvalidArgument, key,
			&token.RangeError{What: "redlock heal target", Token: to, Max: maxHeal})
	}
	k := l.keys(key)
	a := newAttempt(len(l.nodes))
	l.each(ctx, time.Second, nil, func(ctx context.Context, i int, mu *sync.Mutex) {
		err := l.healNode(ctx, i, k, to)
		mu.Lock()
		defer mu.Unlock()
		a.wroteBack(i, err == nil, err)
	})
	if !a.granted() {
		return a.quorumErr(ctx, len(a.errs))
	}
	return nil
}

// healNode raises node i's counter to at least to, and its offset so that
// its clock floor is at least to from now on.
func (l *Locker) healNode(ctx context.Context, i int, k lockKeys, to token.Token) error {
	_, err := detach.Call(&l.bg, caller(ctx), func() (struct{}, error) {
		return struct{}{}, healScript.Run(ctx, l.nodes[i], []string{k.counter}, to.String(), ms(l.o.CounterIdle), (to + 1).String()).Err()
	})
	return err
}

func newID() string {
	return strconv.FormatUint(rand.Uint64(), 36) + "." + strconv.FormatUint(rand.Uint64(), 36)
}

// lockLease is a redlock lease. Its deadline is the start of the last
// successful acquire or renewal, plus TTL, minus the drift allowance.
type lockLease struct {
	lease.State
	l  *Locker
	k  lockKeys
	id string
}

var _ locks.Lease = (*lockLease)(nil)

// Renew implements [locks.Lease]: extends the lock on every node; it
// succeeds when a quorum extended it. (That is proof enough even when the
// renewal comes late: a node extends only while it still holds this
// grant's id, which nobody else ever writes, so a quorum of successes means
// those nodes held the grant without a break and no other grant can have
// had a quorum meanwhile.) It returns [locks.ErrNotHeld] when so many nodes
// refused that no quorum is possible.
func (s *lockLease) Renew(ctx context.Context) error {
	if s.Released() {
		return locks.NotHeldError("renew", s.Key(), s.Token())
	}
	l, ttl := s.l, s.TTL()
	start := time.Now()
	a := newAttempt(len(l.nodes))
	l.each(ctx, l.nodeTimeout(ttl), nil, func(ctx context.Context, i int, mu *sync.Mutex) {
		n, err := detach.Call(&l.bg, caller(ctx), func() (int, error) {
			return renewScript.Run(ctx, l.nodes[i], []string{s.k.lock, s.k.counter}, s.id, l.px(ttl), ms(l.o.CounterIdle)).Int()
		})
		mu.Lock()
		defer mu.Unlock()
		a.wroteBack(i, n == 1, err)
		if err == nil && n != 1 {
			a.refused++
		}
	})
	switch {
	case a.granted():
		s.Extend(start.Add(ttl - l.drift(ttl)))
		return nil
	case a.refused > a.n-a.quorum:
		return locks.NotHeldError("renew", s.Key(), s.Token())
	}
	return fmt.Errorf("redlock: renew %q: %w", s.Key(), a.quorumErr(ctx, len(a.errs)))
}

// Release implements [locks.Lease]: deletes the lock on every node that
// still holds this grant, and wakes their waiters. It returns
// [locks.ErrNotHeld] when fewer than a quorum still held it.
func (s *lockLease) Release(ctx context.Context) error {
	s.Releasing.Lock()
	defer s.Releasing.Unlock()
	if s.Released() {
		return nil
	}
	released, errs := s.l.releaseNodes(ctx, s.l.nodeTimeout(s.TTL()), s.k, s.id, nil)
	quorum := len(s.l.nodes)/2 + 1
	switch {
	case released >= quorum:
		s.SetReleased()
		return nil
	case released+len(errs) >= quorum:
		return fmt.Errorf("redlock: release %q: %w", s.Key(), ctxerr.Wrap(ctx, errors.Join(errs...)))
	}
	return locks.NotHeldError("release", s.Key(), s.Token())
}
