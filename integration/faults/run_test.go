package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/token"
)

// The two interleavings the schedule forces, alternately. In both, c1 (the
// victim) has read the item and c2 is granted the lock after c1 lost it.
const (
	// lateWrite: c2 reads and writes, then c1 writes what it computed
	// before the fault — Kleppmann's paused client. Without fencing, c1's
	// write undoes c2's sale; fencing refuses it because c2 claimed the
	// item with a higher token.
	lateWrite = "late-write"
	// writeBetween: c2 reads, c1 writes, then c2 writes. Without fencing
	// both writes land and two sales take one unit. Fencing that checks
	// only writes would let c1's write through too (nothing higher was
	// written yet): only the read's claim refuses it.
	writeBetween = "write-between"
)

// run is one run of a cell: one forced schedule under one fault, with
// other work around it, then the checks.
type run struct {
	c       *cell
	n       int
	id      string
	variant string
	items   []string // the forced item, then the bystander's
	rng     *rand.Rand
	start   time.Time

	events  []event           // everything the clients reported, in arrival order
	opItem  map[string]string // critical section → its item
	busy    map[int]string    // client → its critical section in flight
	gated   map[int]bool      // clients waiting for an ack
	seq     int
	bgLeft  int // critical sections c3 still runs on the other item meanwhile
	windows []faultWindow

	victimOp, takerOp   string
	victimTok, takerTok token.Token
	takeover            time.Time // c2 granted the lock c1 lost
	faults              int
}

// faultWindow is a fault as the timeline shows it.
type faultWindow struct {
	Lane  int       `json:"lane"` // 0: c1; -1: a server
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Label string    `json:"label"`
}

func (c *cell) newRun(n int) *run {
	r := &run{c: c, n: n, id: fmt.Sprintf("r%03d", n), busy: map[int]string{}, gated: map[int]bool{}, opItem: map[string]string{}, rng: rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano())))}
	r.variant = lateWrite
	if n%2 == 1 {
		r.variant = writeBetween
	}
	r.items = []string{r.id + "-a", r.id + "-b"}
	return r
}

// backgroundOps is how many critical sections c3 runs on the other item
// while the fault is played out on the forced one.
const backgroundOps = 4

// opTimeout bounds an ordinary critical section's acquire. It is a
// liveness budget only (what the run judges is what the resource accepted),
// so it is generous: on a loaded machine (load 80-90 on 2 cores) a Redlock
// acquire with a 300 ms TTL fails attempt after attempt for many seconds,
// its quorum round outlasting the validity, and 10 s + 5 TTLs ran out
// before a fault was even injected.
func (r *run) opTimeout() time.Duration { return 40*time.Second + 5*r.c.ttl }

// op sends client id a critical section on item and returns its id. kind
// is "sell", "write" (a new value), "read", or "sell+write".
func (r *run) op(ctx context.Context, id int, item, kind string, gate bool, timeout time.Duration) (string, error) {
	if cur := r.busy[id]; cur != "" {
		return "", fmt.Errorf("c%d is still in %s", id, cur)
	}
	r.seq++
	spec := opSpec{ID: fmt.Sprintf("%s-c%d-%d", r.id, id, r.seq), Key: item, Item: item, Gate: gate, Timeout: timeout}
	spec.Sell = kind == "sell" || kind == "sell+write"
	if kind == "write" || kind == "sell+write" {
		spec.Write = spec.ID
	}
	r.busy[id], r.opItem[spec.ID] = spec.ID, item
	return spec.ID, r.c.send(ctx, id, command{Kind: cmdOp, Op: &spec})
}

// randomOp sends client id a critical section of a random kind on item.
func (r *run) randomOp(ctx context.Context, id int, item string) error {
	kinds := []string{"sell", "sell", "write", "read", "sell+write"}
	_, err := r.op(ctx, id, item, kinds[r.rng.IntN(len(kinds))], false, r.opTimeout())
	return err
}

// await reads events until pred holds for one, and returns it. Every event
// is recorded on the way.
func (r *run) await(ctx context.Context, timeout time.Duration, what string, pred func(event) bool) (event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case e := <-r.c.events:
			if err := r.record(ctx, e); err != nil {
				return e, err
			}
			if pred(e) {
				return e, nil
			}
		case <-t.C:
			return event{}, fmt.Errorf("no %s within %v (busy: %v)", what, timeout, r.busy)
		case <-ctx.Done():
			return event{}, fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		}
	}
}

func (r *run) record(ctx context.Context, e event) error {
	r.events = append(r.events, e)
	switch e.Kind {
	case evExited, evFailed:
		p := r.c.procs[e.Client]
		tail := ""
		if p.stderr != nil {
			tail = p.stderr.String()
		}
		return fmt.Errorf("client c%d %s: %s\n%s", e.Client, e.Kind, e.Err, tail)
	case evAcquired:
		switch e.Op {
		case r.victimOp:
			r.victimTok = e.Token
		case r.takerOp:
			r.takerTok, r.takeover = e.Token, e.Time
		}
	case evRead:
		if e.Gated {
			r.gated[e.Client] = true
		}
	case evWrote:
		delete(r.gated, e.Client)
	case evDone:
		delete(r.busy, e.Client)
		delete(r.gated, e.Client)
		if e.Client == bystander && r.bgLeft > 0 {
			r.bgLeft--
			return r.randomOp(ctx, bystander, r.items[1])
		}
	}
	return nil
}

// idle waits until no client is in a critical section.
func (r *run) idle(ctx context.Context, timeout time.Duration) error {
	if len(r.busy) == 0 {
		return nil
	}
	_, err := r.await(ctx, timeout, "end of every critical section", func(event) bool { return len(r.busy) == 0 })
	return err
}

// opEvent waits for event kind of client id's critical section op — or for
// its end, which is an error unless kind is evDone. It may have come
// already.
func (r *run) opEvent(ctx context.Context, id int, op, kind string, timeout time.Duration) (event, error) {
	for _, e := range r.events {
		if e.Client == id && e.Op == op && (e.Kind == kind || e.Kind == evDone) {
			if e.Kind != kind {
				return e, fmt.Errorf("c%d's %s ended before %s: %s", id, op, kind, e.Err)
			}
			return e, nil
		}
	}
	e, err := r.await(ctx, timeout, fmt.Sprintf("%s of c%d's %s", kind, id, op), func(e event) bool {
		return e.Client == id && e.Op == op && (e.Kind == kind || e.Kind == evDone)
	})
	if err == nil && e.Kind != kind {
		err = fmt.Errorf("c%d's %s ended before %s: %s", id, op, kind, e.Err)
	}
	return e, err
}

// schedule is the run: ordinary work, then the forced interleaving under
// the fault, then ordinary work again with the fault healed.
func (r *run) schedule(ctx context.Context) error {
	nem := r.c.nem
	forced, other := r.items[0], r.items[1]
	// long bounds waits for events that follow an acquire: at least the
	// acquire's own budget.
	long := nem.takeover + r.opTimeout() + 30*time.Second

	// Before: c2 and c3 sell one unit each.
	if _, err := r.op(ctx, taker, forced, "sell", false, r.opTimeout()); err != nil {
		return err
	}
	if _, err := r.op(ctx, bystander, other, "sell", false, r.opTimeout()); err != nil {
		return err
	}
	if err := r.idle(ctx, long); err != nil {
		return err
	}

	// The victim takes the lock and reads; c3 keeps working on the other
	// item throughout.
	prepStart := time.Now()
	if err := nem.prepare(ctx, r); err != nil {
		return fmt.Errorf("preparing the fault: %w", err)
	}
	r.bgLeft = backgroundOps - 1
	if err := r.randomOp(ctx, bystander, other); err != nil {
		return err
	}
	var err error
	if r.victimOp, err = r.op(ctx, victim, forced, "sell+write", true, r.opTimeout()); err != nil {
		return err
	}
	if _, err := r.opEvent(ctx, victim, r.victimOp, evRead, long); err != nil {
		return err
	}

	// The fault; c2 is granted the lock c1 lost.
	faultStart := time.Now()
	if err := nem.inject(ctx, r); err != nil {
		return fmt.Errorf("injecting the fault: %w", err)
	}
	r.faults += nem.faults
	if r.takerOp, err = r.op(ctx, taker, forced, "sell+write", r.variant == writeBetween, nem.takeover); err != nil {
		return err
	}
	if _, err := r.opEvent(ctx, taker, r.takerOp, evAcquired, nem.takeover+5*time.Second); err != nil {
		return fmt.Errorf("the lock never passed to c2: %w", err)
	}
	if r.takerTok <= r.victimTok {
		return fmt.Errorf("token regression: c2 was granted token %s after c1's %s", r.takerTok, r.victimTok)
	}
	next := evDone
	if r.variant == writeBetween {
		next = evRead
	}
	if _, err := r.opEvent(ctx, taker, r.takerOp, next, long); err != nil {
		return err
	}

	// The victim writes what it computed before the fault.
	heal := func() error {
		if err := nem.heal(ctx, r); err != nil {
			return fmt.Errorf("healing the fault: %w", err)
		}
		end := time.Now()
		r.windows = append(r.windows, faultWindow{Lane: nem.lane, Start: faultStart, End: end,
			Label: fmt.Sprintf("%s %.1fs", nem.label, end.Sub(faultStart).Seconds())})
		if r.c.spec == (cellSpec{redLock, nemKill}) {
			r.windows = append(r.windows, faultWindow{Lane: 0, Start: prepStart, End: time.Now(), Label: "c1 cut off from nodes 4, 5"})
		}
		return nil
	}
	if !nem.healAfterVictim {
		if err := heal(); err != nil {
			return err
		}
	}
	if err := r.c.send(ctx, victim, command{Kind: cmdAck}); err != nil {
		return err
	}
	if _, err := r.opEvent(ctx, victim, r.victimOp, evDone, long); err != nil {
		return err
	}
	if nem.healAfterVictim {
		if err := heal(); err != nil {
			return err
		}
	}
	if r.variant == writeBetween {
		if err := r.c.send(ctx, taker, command{Kind: cmdAck}); err != nil {
			return err
		}
		if _, err := r.opEvent(ctx, taker, r.takerOp, evDone, long); err != nil {
			return err
		}
	}
	r.bgLeft = 0
	if err := r.idle(ctx, long); err != nil {
		return err
	}

	// After: every client, the victim included, works on both items.
	for range 2 {
		for id := 1; id <= nClients; id++ {
			if err := r.randomOp(ctx, id, r.items[r.rng.IntN(2)]); err != nil {
				return err
			}
		}
		if err := r.idle(ctx, long); err != nil {
			return err
		}
	}
	return nil
}

// drain waits, after a failed schedule, until no critical section is in
// flight, so the next run starts clean.
func (r *run) drain(ctx context.Context) error {
	r.bgLeft = 0
	release := func() {
		for id := range r.gated {
			r.c.send(ctx, id, command{Kind: cmdAck}) // a gated section must not wait for ever
			delete(r.gated, id)
		}
	}
	release()
	_, err := r.await(ctx, 2*r.c.nem.takeover+r.opTimeout()+30*time.Second, "end of every critical section", func(event) bool {
		release()
		return len(r.busy) == 0
	})
	if len(r.busy) == 0 {
		return nil
	}
	return err
}

// dump is the run's events, for a failure's message.
func (r *run) dump() string {
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "\t%7.3fs %v\n", e.Time.Sub(r.start).Seconds(), e)
	}
	return b.String()
}

// enforcerResult is what one run showed of one enforcer.
type enforcerResult struct {
	fenced, control []history.Violation // over both items
	controlForced   bool                // the control's forced item shows a violation
	refused         bool                // the fenced copy refused the victim's stale write
	staleWrite      *history.Access     // the victim's write to the fenced copy of the forced item
	takerWrite      *history.Access     // the taker's write to it, which must be accepted
	// The victim's and the taker's writes to the control's forced item:
	// the control can show the lost update only when both completed.
	controlVictimWrite, controlTakerWrite *history.Access
	honestRefusals                        int // accesses of the fenced copies refused other than the victim's forced ones
}

// runResult is what one run showed.
type runResult struct {
	run        *run
	enforcers  map[string]*enforcerResult
	histories  map[string]*history.Resource // by copy + "|" + item
	violations map[string][]history.Violation
}

// check reads the final state of every copy and judges every history.
func (r *run) check(ctx context.Context) (*runResult, error) {
	states, logs, err := r.c.res.collect(ctx, r.items)
	if err != nil {
		return nil, fmt.Errorf("reading the final state: %w", err)
	}
	finalAt := time.Now()
	acc := map[string][]history.Access{}
	for _, e := range r.events {
		for _, a := range e.Accesses {
			acc[a.Copy+"|"+a.Item] = append(acc[a.Copy+"|"+a.Item], a)
		}
	}
	res := &runResult{run: r, enforcers: map[string]*enforcerResult{}, histories: map[string]*history.Resource{},
		violations: map[string][]history.Violation{}}
	var errs []error
	for _, e := range r.c.enforcers {
		er := &enforcerResult{}
		res.enforcers[e] = er
		for _, fenced := range []bool{true, false} {
			cp := copyName(e, fenced)
			for i, it := range r.items {
				st, ok := states[cp][it]
				if !ok {
					errs = append(errs, fmt.Errorf("%s has no item %s at the end", cp, it))
					continue
				}
				h := &history.Resource{Copy: cp, Item: it, Fenced: fenced, Initial: history.State{Stock: initialStock, Val: "v0"},
					Final: st, FinalAt: finalAt, Accesses: acc[cp+"|"+it], Log: logs[cp][it]}
				vs := history.Check(h)
				res.histories[cp+"|"+it] = h
				res.violations[cp+"|"+it] = vs
				if fenced {
					er.fenced = append(er.fenced, vs...)
				} else {
					er.control = append(er.control, vs...)
					er.controlForced = er.controlForced || i == 0 && len(vs) > 0
				}
			}
		}
		for _, a := range acc[e+"|"+r.items[0]] {
			switch {
			case a.Op == r.victimOp && a.Kind == history.Write:
				er.staleWrite = &a
				er.refused = a.Result == history.Stale
			case a.Op == r.takerOp && a.Kind == history.Write:
				er.takerWrite = &a
			}
		}
		for _, a := range acc[copyName(e, false)+"|"+r.items[0]] {
			switch {
			case a.Op == r.victimOp && a.Kind == history.Write:
				er.controlVictimWrite = &a
			case a.Op == r.takerOp && a.Kind == history.Write:
				er.controlTakerWrite = &a
			}
		}
		for _, it := range r.items {
			for _, a := range acc[e+"|"+it] {
				if a.Result == history.Stale && a.Op != r.victimOp {
					er.honestRefusals++
				}
			}
		}
	}
	return res, errors.Join(errs...)
}
