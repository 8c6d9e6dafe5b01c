package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
)

func TestMain(m *testing.M) {
	if js, ok := os.LookupEnv(clientEnv); ok {
		os.Exit(clientMain(js))
	}
	if js, ok := os.LookupEnv(attackChildEnv); ok {
		os.Exit(attackChildMain(js))
	}
	itest.Main(m)
}

var (
	flagRuns     = flag.Int("faults.runs", 6, "runs per cell (at most 2 with -short; the redis-sentinel and zk-ensemble cells 3 unless given); 20 or more for a long run")
	flagSoak     = flag.Duration("faults.soak", 0, "a soak run: keep running every cell for this long, at least -faults.runs times")
	flagParallel = flag.Int("faults.parallel", 6, "cells running at once")
	flagCells    = flag.String("faults.cells", "", "run only the cells (locker/nemesis, e.g. \"redis/pause\") this regexp matches")
	flagBreak    = flag.String("faults.break", "", "break an enforcer on purpose: its fenced copy reads without a token (fencing only writes); the suite must then fail and write artifacts")
	flagOut      = flag.String("faults.out", "", "directory for the artifacts of violations (default: the test's artifact directory under -artifacts, else $TMPDIR/fenceguard-faults-<time>)")
	flagKeep     = flag.Int("faults.keep", 0, "write the artifacts of the first N runs of every cell, violations or not (to look at)")
	flagDoc      = flag.String("faults.doc", "", "write the summary into this Markdown file (docs/reliability.md), between its markers")
)

// matrix is every cell: every locker under every nemesis that applies to
// it, the slowest first. memlock's lock service is the memory of its
// clients' own process: there is no server to kill, no connection to cut or
// delay, and freezing the process would freeze the lock service with it, so
// only the clock applies.
var matrix = []cellSpec{
	{etcdLock, nemKill}, {zkLock, nemKill}, {zkLock, nemDelay},
	{redisClusterLock, nemKill}, {redisClusterLock, nemPause}, {redisClusterLock, nemCut},
	{etcdLock, nemPause}, {etcdLock, nemCut}, {etcdLock, nemDelay}, {etcdLock, nemClock},
	{zkLock, nemPause}, {zkLock, nemCut}, {zkLock, nemClock},
	{redLock, nemKill}, {redLock, nemPause}, {redLock, nemCut}, {redLock, nemDelay}, {redLock, nemClock},
	{redisLock, nemKill}, {redisLock, nemPause}, {redisLock, nemCut}, {redisLock, nemDelay}, {redisLock, nemClock},
	{memLock, nemClock},
}

// runTimeout bounds one run.
const runTimeout = 5 * time.Minute

// TestFaults runs the matrix: every cell in its own subtest (named
// locker/nemesis), several at once, then prints the summary. See the
// package doc.
func TestFaults(t *testing.T) {
	if procSupported != "" {
		t.Skip(procSupported)
	}
	if *flagBreak != "" && !slices.Contains(allEnforcers, *flagBreak) {
		t.Fatalf("-faults.break=%q: not an enforcer (%v)", *flagBreak, allEnforcers)
	}
	var pick *regexp.Regexp
	if *flagCells != "" {
		var err error
		if pick, err = regexp.Compile(*flagCells); err != nil {
			t.Fatalf("-faults.cells: %v", err)
		}
	}
	out := newArtifacts(t)
	start, load := time.Now(), loadavg()
	var stats []*cellStats
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(*flagParallel, 1))
	for _, spec := range matrix {
		if pick != nil && !pick.MatchString(spec.String()) {
			continue
		}
		st := newCellStats(spec)
		stats = append(stats, st)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(spec.String(), func(t *testing.T) { runCell(t, spec, st, out) })
		})
	}
	wg.Wait()
	sum := summary(stats, time.Since(start), load)
	t.Log("\n" + sum.text())
	out.summary(sum)
	if *flagDoc != "" {
		if err := sum.writeDoc(*flagDoc); err != nil {
			t.Errorf("-faults.doc: %v", err)
		}
	}
}

// maxRunErrors ends a cell whose schedule keeps failing.
const maxRunErrors = 3

func runCell(t *testing.T, spec cellSpec, st *cellStats, out *artifacts) {
	start := time.Now()
	defer func() { st.Duration, st.Failed = time.Since(start), t.Failed() }()
	c := newCell(t, spec, allEnforcers, out, *flagBreak)
	runs := ensembleRuns(spec, *flagRuns)
	if testing.Short() {
		runs = min(runs, 2)
	}
	for n := 0; n < runs || time.Since(start) < *flagSoak; n++ {
		if d, ok := t.Deadline(); ok && time.Until(d) < 2*time.Minute {
			t.Errorf("stopping %s after %d runs: the test binary's -timeout is near; give it more", spec, n)
			break
		}
		r := c.newRun(n)
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		res, err := c.do(ctx, r)
		cancel()
		st.Faults += r.faults
		if err != nil {
			st.Errors++
			t.Errorf("run %d (%s): %v\nevents:\n%s", n, r.variant, err, r.dump())
			if errors.Is(err, errFatal) || st.Errors >= maxRunErrors {
				t.Fatalf("giving up on %s after %d failed runs", spec, st.Errors)
			}
			continue
		}
		st.Runs++
		c.judge(t, res, st)
	}
	for _, e := range c.enforcers {
		if es := st.Enf[e]; es.Inconclusive*10 > es.Runs {
			t.Errorf("%s: %d of %d runs left %s's control inconclusive (a forced write did not complete): too few runs proved anything", spec, es.Inconclusive, es.Runs, e)
		}
	}
}

// errFatal marks a run failure the cell cannot go on after.
var errFatal = errors.New("the cell cannot go on")

// do is one run: seed its items, play the schedule, read and check.
func (c *cell) do(ctx context.Context, r *run) (*runResult, error) {
	if err := c.res.seed(ctx, r.items, initialStock, "v0"); err != nil {
		return nil, err
	}
	r.start = time.Now()
	if err := r.schedule(ctx); err != nil {
		c.nem.cleanup()
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if derr := r.drain(dctx); derr != nil {
			return nil, errors.Join(err, fmt.Errorf("%w: clients still busy: %v", errFatal, derr))
		}
		return nil, err
	}
	return r.check(ctx)
}

// judge counts what a run showed and reports what must not happen: a
// violation with fencing on, a control without one (the schedule did not
// bite, so the run proved nothing), a stale write the fenced copy did not
// refuse.
func (c *cell) judge(t *testing.T, res *runResult, st *cellStats) {
	r := res.run
	for _, e := range c.enforcers {
		er, es := res.enforcers[e], st.Enf[e]
		es.Runs++
		if len(er.control) > 0 {
			es.Control++
		}
		if er.refused {
			es.Refused++
		}
		if len(er.fenced) > 0 {
			es.Fenced++
			dir := c.out.write(t, res, e, false)
			t.Errorf("run %d (%s): %s, fencing ON, VIOLATED: %v\n\tartifacts: %s", r.n, r.variant, e, er.fenced, dir)
		}
		if r.n < *flagKeep && len(er.fenced) == 0 {
			c.out.write(t, res, e, true)
		}
		if !er.controlForced {
			vw, tw := er.controlVictimWrite, er.controlTakerWrite
			if vw != nil && vw.Result == history.OK && tw != nil && tw.Result == history.OK {
				t.Errorf("run %d (%s): %s's control shows no violation on the forced item although both forced writes landed: the schedule did not bite, so this run proved nothing\n\tvictim's write: %+v\n\ttaker's write: %+v",
					r.n, r.variant, e, vw, tw)
			} else {
				es.Inconclusive++
				t.Logf("run %d (%s): %s's control inconclusive: a forced write to it did not complete\n\tvictim's write: %+v\n\ttaker's write: %+v",
					r.n, r.variant, e, vw, tw)
			}
		}
		if !er.refused && e != c.broken {
			t.Errorf("run %d (%s): %s did not refuse c1's stale write as stale: %+v", r.n, r.variant, e, er.staleWrite)
		}
		// Refusing everything is safe too: the holder that took the lock
		// over, whom nobody overtook, must get its write in.
		if w := er.takerWrite; w == nil || w.Result != history.OK {
			t.Errorf("run %d (%s): %s did not accept c2's write, the lock's rightful holder: %+v", r.n, r.variant, e, w)
		}
		es.HonestRefusals += er.honestRefusals
	}
}
