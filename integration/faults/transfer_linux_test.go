package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/token"
)

// transferMargin is how long past its lease the frozen holder stays frozen
// before the next holder asks for the locks.
const transferMargin = 500 * time.Millisecond

// transferBound is how long the next holder may take, from asking for both
// locks to its commit, while the frozen holder still is: the lock service
// expires the frozen lease within about a second, and the fenced frozen
// transaction's claim has been ended by the server at its lease's end.
const transferBound = 10 * time.Second

// TestTransferFrozenHolder plays the transfer workload with a holder frozen
// by SIGSTOP between its read and its write, on every locker, fenced and
// in a control with fencing off. c1, a child process, moves 10 from A to
// B under guard.DoAll over both accounts: it reads both balances and is
// frozen past its lease. c2, the test itself with a locker and guard of
// its own, is then granted both locks and moves 5 from B to A; c1 is
// continued after c2's commit and writes the balances it computed before.
//
// Fenced (TxAll): c2 gets through while c1 is still frozen — the server
// ended c1's transaction at its lease's end, releasing the claimed marks —
// and c1's transfer is refused, so the balances are exactly those of the
// committed transfers. Control (a plain transaction, no claim): c1's read
// held nothing, c2 commits, and c1's late write of its stale sums commits
// over it: a lost update. The total stays 200 either way — what breaks is
// that the balances no longer add up to the transfers that committed — and
// the control must show it, or the schedule proved nothing and the test
// fails.
//
// The lockers play at once, each on its own keys and databases: a play
// spends most of its time waiting for a frozen lease to end.
func TestTransferFrozenHolder(t *testing.T) {
	for _, kind := range []string{redisLock, redLock, etcdLock, zkLock} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			a := newAttackLocks(t, kind)
			t.Run("fenced", func(t *testing.T) { checkTransfer(t, true, playTransfer(t, a, true)) })
			t.Run("control", func(t *testing.T) { checkTransfer(t, false, playTransfer(t, a, false)) })
		})
	}
}

// transferRun is what one play of the schedule did.
type transferRun struct {
	c1, c2             transferResult // how each holder's transfer ended
	c1Tokens, c2Tokens map[string]token.Token
	c2Wait             time.Duration // from c2 asking for the locks to its transfer's end
	c2Lost             int           // times c2 lost its own lease before its transfer ended, and asked again
	a, b               int64         // the balances at the end
}

// playTransfer plays the schedule once, fenced or not, on a fresh database
// and with a's lock service.
func playTransfer(t *testing.T, a *attackLocks, fenced bool) transferRun {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	pool, pg := attackPG(t, ctx)
	if err := createAccounts(ctx, pool); err != nil {
		t.Fatal(err)
	}

	var r transferRun
	child := startAttackChild(t, attackChildConfig{Mode: "transfer-holder", DSN: pg.DSN, Lock: a.lc, TTL: transferTTL, Fenced: fenced})
	l, _ := child.line(30 * time.Second)
	var readA, readB int64
	var tokA, tokB token.Token
	if _, err := fmt.Sscanf(l, "read %d %d %d %d", &readA, &readB, &tokA, &tokB); err != nil {
		t.Fatalf("the frozen holder said %q; stderr:\n%s", l, child.stderr)
	}
	r.c1Tokens = map[string]token.Token{"acct:A": tokA, "acct:B": tokB}
	child.freeze(t)
	frozeAt := time.Now()
	time.Sleep(time.Until(frozeAt.Add(transferTTL + transferMargin)))

	g, err := guard.New(a.open(t, ctx), guard.Options{TTL: transferTTL, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	c2ctx, c2cancel := context.WithTimeout(ctx, transferBound)
	start := time.Now()
	for {
		ran := false
		err = g.DoAll(c2ctx, transferKeys, func(ctx context.Context, tokens map[string]token.Token) error {
			r.c2Tokens, ran = tokens, true
			err := runTransfer(ctx, pool, fenced, tokens, "B", "A", 5, nil)
			r.c2 = transferOutcome(err)
			return err
		})
		if !ran {
			r.c2 = transferOutcome(fmt.Errorf("DoAll: %w", err))
		}
		// c2 losing its own lease (its renewals starved on a loaded
		// machine) says nothing of c1: c2 asks again, within the same
		// bound, unless its transfer may have taken effect.
		if r.c2.Committed || r.c2.Refusal == "unknown" || !errors.Is(err, guard.ErrLost) || c2ctx.Err() != nil {
			break
		}
		r.c2Lost++
	}
	r.c2Wait = time.Since(start)
	c2cancel()
	if !stopped(child.pid()) || !alive(child.pid()) {
		t.Fatalf("the frozen holder (pid %d) is no longer frozen, state %q", child.pid(), procState(child.pid()))
	}

	child.thaw(t)
	child.say("go on")
	l, _ = child.line(30 * time.Second)
	js, ok := strings.CutPrefix(l, "result ")
	if !ok || json.Unmarshal([]byte(js), &r.c1) != nil {
		t.Fatalf("the frozen holder, continued, said %q; stderr:\n%s", l, child.stderr)
	}
	child.wait(t)
	t.Logf("c1 frozen %v, read A=%d B=%d", time.Since(frozeAt).Round(time.Millisecond), readA, readB)

	if err := pool.QueryRow(ctx, `SELECT (SELECT balance FROM accounts WHERE id = 'A'), (SELECT balance FROM accounts WHERE id = 'B')`).Scan(&r.a, &r.b); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkTransfer judges one play: the total is conserved, the balances are
// the effect of exactly the committed transfers with fencing on, and not
// with fencing off (the control must bite).
func checkTransfer(t *testing.T, fenced bool, r transferRun) {
	t.Helper()
	wantA, wantB := int64(transferOpening), int64(transferOpening)
	if r.c2.Committed {
		wantA, wantB = wantA+5, wantB-5
	}
	if r.c1.Committed {
		wantA, wantB = wantA-10, wantB+10
	}
	lost := r.a != wantA || r.b != wantB
	t.Logf("c1 %v: %s; c2 %v after %v (own lease lost %d times): %s; A=%d B=%d, from the committed transfers A=%d B=%d",
		r.c1Tokens, r.c1, r.c2Tokens, r.c2Wait.Round(time.Millisecond), r.c2Lost, r.c2, r.a, r.b, wantA, wantB)

	if r.a+r.b != 2*transferOpening {
		t.Errorf("A+B = %d, want %d", r.a+r.b, 2*transferOpening)
	}
	if !r.c2.Committed {
		t.Errorf("c2, granted both locks after c1's lease ended, did not commit within %v while c1 was frozen: %s", transferBound, r.c2.Err)
	}
	for _, k := range transferKeys {
		if r.c2Tokens != nil && r.c2Tokens[k] <= r.c1Tokens[k] {
			t.Errorf("%s: c2's token %d is not above the frozen holder's %d", k, r.c2Tokens[k], r.c1Tokens[k])
		}
	}
	if fenced {
		switch {
		case r.c1.Committed:
			t.Errorf("fenced: the frozen holder's stale transfer committed")
		case r.c1.Refusal != "stale" && r.c1.Refusal != "hold-expired":
			t.Errorf("fenced: the frozen holder's transfer failed, but was not refused as stale or ended with its lease: %s", r.c1.Err)
		}
		if lost {
			t.Errorf("fenced: A=%d B=%d, want A=%d B=%d: the effect of the committed transfers", r.a, r.b, wantA, wantB)
		}
		return
	}
	switch {
	case !r.c1.Committed:
		t.Errorf("control inconclusive: the frozen holder's stale transfer did not complete (%s: %s), so the control cannot show the lost update; a schedule that does not bite proves nothing", r.c1.Refusal, r.c1.Err)
	case !lost:
		t.Errorf("control: A=%d B=%d, the effect of the committed transfers: no lost update; a schedule that does not bite proves nothing", r.a, r.b)
	}
}
