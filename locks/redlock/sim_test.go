package redlock

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/fenceguard/fenceguard/token"
)

// A simulation of the protocol over in-memory nodes, driven through
// interleavings chosen by rapid: which acquirer's pending node call runs
// next, which node restarts (losing its lock and counter), when the clock
// moves. The nodes mirror the Lua scripts; the client side is the very
// attempt type the Locker uses.

type simNode struct {
	holder  string
	expires int64 // sim µs
	counter token.Token
}

type sim struct {
	now        int64 // µs; moves forward at every step, like a real clock
	clockFloor bool  // nodes floor counters with their clock
	nodes      []simNode
}

func (s *sim) acquire(i int, id string, ttl int64) (ok bool, counter token.Token, pttl time.Duration, holder string) {
	n := &s.nodes[i]
	if n.holder != "" && n.expires > s.now {
		return false, 0, time.Duration(n.expires-s.now) * time.Microsecond, n.holder
	}
	n.holder, n.expires = id, s.now+ttl
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
	n.counter = max(n.counter, tok)
	return true
}

func (s *sim) release(i int, id string) {
	if n := &s.nodes[i]; n.holder == id {
		n.holder = ""
	}
}

func (s *sim) restart(i int) { s.nodes[i] = simNode{} }

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

// run plays one interleaving and returns the grants it produced.
func (s *sim) run(t *rapid.T, nAcquirers, rounds int, restarts bool) []grant {
	const ttl = 1_000_000 // 1s in µs
	n := len(s.nodes)
	var grants []grant
	for round := range rounds {
		cs := make([]*acquirer, nAcquirers)
		for j := range cs {
			cs[j] = &acquirer{id: fmt.Sprintf("r%d-c%d", round, j), a: newAttempt(n), pending: allTrue(n), start: s.now}
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
			s.now += int64(rapid.IntRange(1, 300_000).Draw(t, "tick")) // big enough for locks to expire mid-attempt
			if restarts && rapid.IntRange(0, 9).Draw(t, "restart?") == 0 {
				s.restart(rapid.IntRange(0, n-1).Draw(t, "node"))
				continue
			}
			c := active[rapid.IntRange(0, len(active)-1).Draw(t, "acquirer")]
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

func (s *sim) step(t *rapid.T, c *acquirer, ttl int64, grants *[]grant) {
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
			i := idx[rapid.IntRange(0, len(idx)-1).Draw(t, "call")]
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
func check(t *rapid.T, grants []grant) {
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
	rapid.Check(t, func(t *rapid.T) {
		s := &sim{now: 1, clockFloor: true, nodes: make([]simNode, 5)}
		check(t, s.run(t, rapid.IntRange(2, 3).Draw(t, "acquirers"), 4, true))
	})
}

// Without the clock floor and without counter loss, the quorum argument
// alone keeps tokens unique and ordered.
func TestSimQuorumAloneWithoutLoss(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := &sim{now: 1, nodes: make([]simNode, 5)}
		check(t, s.run(t, rapid.IntRange(2, 3).Draw(t, "acquirers"), 4, false))
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
