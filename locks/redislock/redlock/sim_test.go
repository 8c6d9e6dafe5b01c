package redlock

import (
	"flag"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/token"
)

// A simulation of the protocol over in-memory nodes, driven through
// interleavings drawn from seeded PCG streams: which acquirer's pending node call runs
// next, which node restarts (losing its lock and counter), when the clock
// moves. The nodes mirror the Lua scripts; the client side is the very
// attempt type the Locker uses, and readers decide with the very function
// Sequencer.Current uses.

type simNode struct {
	holder  string      // the lock: the grant's id ...
	tok     token.Token // ... and the token written back with it (0: not yet)
	expires int64       // sim µs
	counter token.Token // 0: none
}

type sim struct {
	now        int64 // µs; moves forward at every step, like a real clock
	clockFloor bool  // nodes floor counters with their clock
	nodes      []simNode

	readers  int       // Sequencer readers per round (0: none, and no draws for them)
	reads    []simRead // the readers' completed reads
	granted  map[string]token.Token
	restarts [][2]int64 // node, time
}

func (s *sim) acquire(i int, id string, ttl int64) (ok bool, counter token.Token, pttl time.Duration, holder string) {
	n := &s.nodes[i]
	if n.holder != "" && n.expires > s.now {
		return false, 0, time.Duration(n.expires-s.now) * time.Microsecond, n.holder
	}
	n.holder, n.tok, n.expires = id, 0, s.now+ttl
	c := n.counter
	if s.clockFloor {
		c = max(c, token.Token(s.now))
	}
	return true, c, 0, ""
}

func (s *sim) writeBack(i int, id string, tok token.Token) bool {
	n := &s.nodes[i]
	if n.holder != id || n.expires <= s.now {
		return false
	}
	n.tok = tok
	n.counter = max(n.counter, tok)
	return true
}

// view is what currentScript returns of node i.
func (s *sim) view(i int) nodeView {
	n := &s.nodes[i]
	if n.holder == "" || n.expires <= s.now {
		return nodeView{counter: n.counter}
	}
	return nodeView{grant: n.holder, tok: n.tok, counter: n.counter}
}

// holding returns the ids of the attempts whose locks are live on a
// majority of nodes, and which of them have their token on a majority.
func (s *sim) holding() (held map[string]bool, visible map[string]token.Token) {
	count, toks := map[string]int{}, map[string]int{}
	held, visible = map[string]bool{}, map[string]token.Token{}
	for i := range s.nodes {
		v := s.view(i)
		if v.grant == "" {
			continue
		}
		if count[v.grant]++; count[v.grant] > len(s.nodes)/2 {
			held[v.grant] = true
		}
		if v.tok != 0 {
			if toks[v.grant]++; toks[v.grant] > len(s.nodes)/2 {
				visible[v.grant] = v.tok
			}
		}
	}
	return held, visible
}

func (s *sim) release(i int, id string) {
	if n := &s.nodes[i]; n.holder == id {
		n.holder, n.tok = "", 0
	}
}

func (s *sim) restart(i int) {
	s.nodes[i] = simNode{}
	s.restarts = append(s.restarts, [2]int64{int64(i), s.now})
}

// lostSince is how many distinct nodes restarted after time t.
func (s *sim) lostSince(t int64) int {
	lost := map[int64]bool{}
	for _, r := range s.restarts {
		if r[1] >= t {
			lost[r[0]] = true
		}
	}
	return len(lost)
}

// acquirer is one client's attempt as a state machine.
type acquirer struct {
	id      string
	a       *attempt
	phase   int    // 0 acquiring, 1 writing back, 2 holding, 3 done
	pending []bool // node calls not yet answered in this phase
	tok     token.Token
	start   int64
	end     int64 // when it was granted
	ok      bool
}

func (c *acquirer) hasPending() bool {
	for _, p := range c.pending {
		if p {
			return true
		}
	}
	return false
}

type grant struct {
	tok        token.Token
	start, end int64
}

// reader is one client of a Sequencer making successive Current calls,
// one node read per step.
type reader struct {
	pending []bool
	views   []nodeView
	cur     simRead
}

// simRead is one completed Current call.
type simRead struct {
	start, end int64
	ans        token.Token
	all        bool                   // every node reported a counter
	before     []grant                // grants handed out before it began
	heldAtEnd  map[string]bool        // attempts holding a majority when it ended
	visibleAt  map[string]token.Token // grants with their token on a majority at its start ...
	visibleEnd map[string]token.Token // ... and at its end
}

func (s *sim) startRead(r *reader, grants []grant) {
	r.pending, r.views = allTrue(len(s.nodes)), nil
	r.cur = simRead{start: s.now}
	r.cur.before = slices.Clone(grants)
	_, r.cur.visibleAt = s.holding()
}

func (s *sim) stepReader(t *schedule, r *reader) {
	var idx []int
	for i, p := range r.pending {
		if p {
			idx = append(idx, i)
		}
	}
	i := idx[t.IntRange(0, len(idx)-1)]
	r.pending[i] = false
	r.views = append(r.views, s.view(i))
	if len(idx) > 1 {
		return
	}
	r.cur.end = s.now
	r.cur.ans = current(len(s.nodes), r.views)
	r.cur.all = true
	for _, v := range r.views {
		r.cur.all = r.cur.all && max(v.counter, v.tok) != 0
	}
	r.cur.heldAtEnd, r.cur.visibleEnd = s.holding()
	s.reads = append(s.reads, r.cur)
	r.pending = nil
}

// run plays one interleaving and returns the grants it produced.
func (s *sim) run(t *schedule, nAcquirers, rounds int, restarts bool) []grant {
	const ttl = 1_000_000 // 1s in µs
	n := len(s.nodes)
	var grants []grant
	for round := range rounds {
		cs := make([]*acquirer, nAcquirers)
		for j := range cs {
			cs[j] = &acquirer{id: fmt.Sprintf("r%d-c%d", round, j), a: newAttempt(n), pending: allTrue(n), start: s.now}
		}
		rs := make([]*reader, s.readers)
		for j := range rs {
			rs[j] = &reader{}
		}
		for steps := 0; ; steps++ {
			active := []*acquirer{}
			for _, c := range cs {
				if c.phase < 3 {
					active = append(active, c)
				}
			}
			if len(active) == 0 || steps > 500 {
				break
			}
			s.now += int64(t.LogRange(1, 300_000)) // up to big enough for locks to expire mid-attempt
			if restarts && t.IntRange(0, 9) == 0 {
				s.restart(t.IntRange(0, n-1))
				continue
			}
			if len(rs) > 0 {
				if j := t.IntRange(-len(rs), len(active)-1); j < 0 {
					r := rs[-j-1]
					if r.pending == nil {
						s.startRead(r, grants)
					} else {
						s.stepReader(t, r)
					}
					continue
				}
			}
			c := active[t.IntRange(0, len(active)-1)]
			s.step(t, c, ttl, &grants)
		}
	}
	return grants
}

func allTrue(n int) []bool {
	b := make([]bool, n)
	for i := range b {
		b[i] = true
	}
	return b
}

func (s *sim) step(t *schedule, c *acquirer, ttl int64, grants *[]grant) {
	n := len(s.nodes)
	switch c.phase {
	case 0, 1:
		if c.hasPending() {
			var idx []int
			for i, p := range c.pending {
				if p {
					idx = append(idx, i)
				}
			}
			i := idx[t.IntRange(0, len(idx)-1)]
			c.pending[i] = false
			if c.phase == 0 {
				ok, counter, pttl, holder := s.acquire(i, c.id, ttl)
				c.a.acquired(i, ok, counter, pttl, holder, nil)
			} else {
				c.a.wroteBack(i, s.writeBack(i, c.id, c.tok), nil)
			}
			return
		}
		if c.phase == 0 {
			tok, ok, err := c.a.mint()
			if err != nil {
				t.Fatalf("%s: %v", c.id, err)
			}
			if !ok {
				s.giveUp(c)
				return
			}
			c.tok, c.phase, c.pending = tok, 1, append([]bool(nil), c.a.held...)
			return
		}
		drift := ttl/100 + 2000
		if c.a.granted() && s.now-c.start < ttl-drift {
			c.ok, c.end, c.phase = true, s.now, 2
			*grants = append(*grants, grant{c.tok, c.start, c.end})
			if s.granted == nil {
				s.granted = map[string]token.Token{}
			}
			s.granted[c.id] = c.tok
			return
		}
		s.giveUp(c)
	case 2:
		for i := range n {
			s.release(i, c.id)
		}
		c.phase = 3
	}
}

func (s *sim) giveUp(c *acquirer) {
	for i, h := range c.a.held {
		if h {
			s.release(i, c.id)
		}
	}
	c.phase = 3
}

// check asserts that tokens are unique and that a grant that completed
// before another started has the smaller token.
func check(t *schedule, grants []grant) {
	seen := map[token.Token]bool{}
	for _, g := range grants {
		if seen[g.tok] {
			t.Fatalf("token %d handed out twice: %+v", g.tok, grants)
		}
		seen[g.tok] = true
	}
	for _, a := range grants {
		for _, b := range grants {
			if a.end < b.start && a.tok >= b.tok {
				t.Fatalf("grant %+v completed before %+v started but has the larger token", a, b)
			}
		}
	}
}

// With the clock floor, tokens stay unique and ordered however nodes
// restart (losing their counters) during and between grants.
func TestSimClockFloorSurvivesRestarts(t *testing.T) {
	forSchedules(t, func(t *schedule) {
		s := &sim{now: 1, clockFloor: true, nodes: make([]simNode, 5)}
		check(t, s.run(t, t.IntRange(2, 3), 4, true))
	})
}

// Without the clock floor and without counter loss, the quorum argument
// alone keeps tokens unique and ordered.
func TestSimQuorumAloneWithoutLoss(t *testing.T) {
	forSchedules(t, func(t *schedule) {
		s := &sim{now: 1, nodes: make([]simNode, 5)}
		check(t, s.run(t, t.IntRange(2, 3), 4, false))
	})
}

// The assumption matters: without the clock floor, losing the counters of
// the nodes two majorities share lets a later grant take a smaller token.
func TestSimLostIntersectionWithoutClockFloorRegresses(t *testing.T) {
	s := &sim{now: 1, nodes: make([]simNode, 5)}
	grantOn := func(id string, nodes ...int) token.Token {
		a := newAttempt(5)
		for _, i := range nodes {
			ok, c, p, h := s.acquire(i, id, 1_000_000)
			a.acquired(i, ok, c, p, h, nil)
		}
		tok, ok, err := a.mint()
		if !ok || err != nil {
			t.Fatalf("%s: no quorum (%v)", id, err)
		}
		for _, i := range nodes {
			a.wroteBack(i, s.writeBack(i, id, tok), nil)
		}
		if !a.granted() {
			t.Fatalf("%s: write-back failed", id)
		}
		for _, i := range nodes {
			s.release(i, id)
		}
		s.now += 1000
		return tok
	}
	grantOn("a", 0, 1, 2) // counters 0,1,2 → 1
	b := grantOn("b", 0, 1, 2)
	s.restart(2) // the only node the next majority shares with {0, 1, 2}
	c := grantOn("c", 2, 3, 4)
	if c > b {
		t.Fatalf("token %d after %d: the regression did not happen", c, b)
	}
	// And with the clock floor the same schedule is safe.
	s = &sim{now: 1, clockFloor: true, nodes: make([]simNode, 5)}
	grantOn("a", 0, 1, 2)
	b = grantOn("b", 0, 1, 2)
	s.restart(2)
	if c := grantOn("c", 2, 3, 4); c <= b {
		t.Fatalf("with the clock floor: token %d after %d", c, b)
	}
}

// checkReads asserts what Sequencer.Current promises (see its doc): never
// below a token granted before the read began (as long as at most
// n − quorum nodes lost their counters since that grant began); when every
// node reported a counter, never above the token of a grant holding a majority at its end,
// exactly the holder's token when one held a majority with its token from
// start to end, and never below an earlier such answer. With exact false
// only the first is checked.
func (s *sim) checkReads(t *schedule, exact bool) {
	for _, r := range s.reads {
		for _, g := range r.before {
			if lost := s.lostSince(g.start); r.ans < g.tok && lost <= len(s.nodes)/2 {
				t.Fatalf("read %+v answered %d, below token %d granted before it began (%d nodes restarted since)", r, r.ans, g.tok, lost)
			}
		}
		if !exact || !r.all {
			continue
		}
		for id := range r.heldAtEnd {
			if tok, ok := s.granted[id]; ok && r.ans > tok {
				t.Fatalf("read %+v answered %d, above the token %d of %s, which held a majority when it ended", r, r.ans, tok, id)
			}
		}
		for id, tok := range r.visibleAt {
			if r.visibleEnd[id] == tok && r.ans != tok {
				t.Fatalf("read %+v answered %d while %s held a majority with token %d throughout", r, r.ans, id, tok)
			}
		}
	}
	if !exact {
		return
	}
	for _, a := range s.reads {
		if !a.all {
			continue
		}
		for _, b := range s.reads {
			if a.end < b.start && b.ans < a.ans {
				t.Fatalf("read %+v answered %d after read %+v answered %d", b, b.ans, a, a.ans)
			}
		}
	}
}

// Current's answers, decided by the same function as Sequencer.Current
// from node reads interleaved with acquirers (whose failed attempts leave
// tokens on minorities), keep the Sequencer's promises.
func TestSimSequencer(t *testing.T) {
	forSchedules(t, func(t *schedule) {
		s := &sim{now: 1, clockFloor: t.Bool(), nodes: make([]simNode, 5), readers: t.IntRange(1, 2)}
		check(t, s.run(t, t.IntRange(2, 3), 4, false))
		s.checkReads(t, true)
	})
}

// With nodes restarting (losing lock and counter) and the clock floor,
// Current is still never below a token granted before it.
func TestSimSequencerRestarts(t *testing.T) {
	forSchedules(t, func(t *schedule) {
		s := &sim{now: 1, clockFloor: true, nodes: make([]simNode, 5), readers: t.IntRange(1, 2)}
		check(t, s.run(t, t.IntRange(2, 3), 4, true))
		s.checkReads(t, false)
	})
}

var (
	simSeed      = flag.Uint64("sim.seed", 0, "run the simulations with this schedule seed only (0: the default set)")
	simSchedules = flag.Int("sim.schedules", 2000, "schedules per simulation test (a tenth with -short)")
)

// schedule is one interleaving of a simulation: its choices are drawn from
// a PCG stream seeded with seed, or, with r nil, are all the lowest
// allowed (one acquirer at a time, the smallest clock steps: the schedule
// a shrinker converges to).
type schedule struct {
	tb   testing.TB
	seed uint64
	r    *rand.Rand
}

// IntRange draws an int in [lo, hi], uniformly.
func (s *schedule) IntRange(lo, hi int) int {
	if s.r == nil {
		return lo
	}
	return lo + s.r.IntN(hi-lo+1)
}

// LogRange draws an int in [lo, hi] whose distance from lo has a uniformly
// drawn bit length: mostly small steps, now and then a large one.
func (s *schedule) LogRange(lo, hi int) int {
	if s.r == nil {
		return lo
	}
	span := uint64(hi - lo)
	w := s.r.IntN(bits.Len64(span) + 1)
	return lo + int(s.r.Uint64N(min(span, 1<<w-1)+1))
}

// Bool draws a bool.
func (s *schedule) Bool() bool { return s.r != nil && s.r.IntN(2) == 1 }

// Fatalf fails the test, naming the schedule's seed (replay it with
// -sim.seed).
func (s *schedule) Fatalf(format string, args ...any) {
	s.tb.Helper()
	if s.r == nil {
		s.tb.Fatalf("lowest-draw schedule: "+format, args...)
	}
	s.tb.Fatalf("schedule -sim.seed=%d: "+format, append([]any{s.seed}, args...)...)
}

// forSchedules runs f over the lowest-draw schedule and then over
// -sim.schedules seeded ones (or the one -sim.seed names).
func forSchedules(t *testing.T, f func(*schedule)) {
	t.Helper()
	if *simSeed != 0 {
		f(&schedule{tb: t, seed: *simSeed, r: rand.New(rand.NewPCG(*simSeed, 0))})
		return
	}
	f(&schedule{tb: t})
	n := *simSchedules
	if testing.Short() {
		n = max(1, n/10)
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		f(&schedule{tb: t, seed: seed, r: rand.New(rand.NewPCG(seed, 0))})
	}
}
