package postgres_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// holdChildEnv carries a holdConfig to a child process of
// TestTxFrozenHolder, which TestMain turns into a holder (holdChild).
const holdChildEnv = "FENCEGUARD_PG_HOLD_CHILD"

// holdConfig tells the child how to hold the resource.
type holdConfig struct {
	DSN      string
	Resource string
	Token    token.Token
	Lazy     bool          // ClaimWithFirstStatement
	Hold     time.Duration // TokensOptions.HoldTimeout; 0: none given
	Deadline time.Duration // a context deadline; 0: none
	// Lease, when set, puts the token and a lease ending that long after
	// the start in Tx's context, as guard.Do does.
	Lease time.Duration
	// FreezeBeforeCommit makes the child wait (and be frozen) between the
	// lease check and the COMMIT instead of inside fn.
	FreezeBeforeCommit bool
	// Resources, when set, makes the child hold them all with TxAll,
	// each under Token, its context carrying every one's token and the
	// lease, as guard.DoAll's does.
	Resources []string
}

// holdChild is the frozen holder: it claims the resource in a fenced
// transaction, writes a row, says "ready" on stdout and waits inside fn —
// the parent freezes it there — until a line comes on stdin; then fn
// returns and Tx commits. It reports Tx's outcome on stdout.
func holdChild() int {
	var cfg holdConfig
	if err := json.Unmarshal([]byte(os.Getenv(holdChildEnv)), &cfg); err != nil {
		fmt.Println("child: bad config:", err)
		return 2
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		fmt.Println("child: connect:", err)
		return 2
	}
	tokens, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: cfg.Lazy, HoldTimeout: cfg.Hold})
	if err != nil {
		fmt.Println("child:", err)
		return 2
	}
	txCtx := ctx
	if cfg.Lease > 0 {
		end := time.Now().Add(cfg.Lease)
		keys := cfg.Resources
		if len(keys) == 0 {
			keys = []string{cfg.Resource}
		}
		for _, k := range keys {
			txCtx = token.NewContext(txCtx, k, cfg.Token)
		}
		txCtx = token.WithExpiry(txCtx, func() time.Time { return end })
	}
	if cfg.Deadline > 0 {
		var cancel context.CancelFunc
		txCtx, cancel = context.WithTimeout(ctx, cfg.Deadline)
		defer cancel()
	}
	stdin := bufio.NewReader(os.Stdin)
	wait := func() error {
		fmt.Println("ready")
		_, err := stdin.ReadString('\n') // frozen here
		return err
	}
	if cfg.FreezeBeforeCommit {
		postgres.SetBeforeCommit(func() { _ = wait() })
	}
	fn := func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO held (who) VALUES ('frozen holder')`); err != nil {
			return err
		}
		if cfg.FreezeBeforeCommit {
			return nil
		}
		return wait()
	}
	if len(cfg.Resources) > 0 {
		claims := map[string]token.Token{}
		for _, r := range cfg.Resources {
			claims[r] = 0 // from the context
		}
		err = tokens.TxAll(txCtx, conn, claims, fn)
	} else {
		err = tokens.Tx(txCtx, conn, cfg.Resource, cfg.Token, fn)
	}
	if err != nil {
		fmt.Printf("result: failed (hold expired: %v): %s\n", errors.Is(err, postgres.ErrHoldExpired), strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		fmt.Println("result: committed")
	}
	_ = conn.Close(ctx)
	return 0
}

// A holder frozen (SIGSTOP) inside a fenced transaction, past the bound on
// its hold: the server ends its session, so the next holder gets the
// resource within about the bound instead of waiting for the thaw, and
// the frozen holder's commit fails when it resumes — nothing it wrote is
// kept. The bound is the HoldTimeout, or the context's deadline when that
// comes first; in both Tx modes.
func TestTxFrozenHolder(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see that the child is stopped")
	}
	for _, c := range []struct {
		name string
		cfg  holdConfig
	}{
		{"claim first, HoldTimeout", holdConfig{Hold: 2 * time.Second}},
		{"claim with the first statement, HoldTimeout", holdConfig{Lazy: true, Hold: 2 * time.Second}},
		{"claim first, deadline", holdConfig{Deadline: 2 * time.Second}},
		{"claim with the first statement, deadline", holdConfig{Lazy: true, Deadline: 2 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a database and a frozen holder process of its own
			pg := pgserver.Shared(t)
			pool := poolIn(t, pg.DSN, "UTC")
			ctx := ctxFor(t, 2*time.Minute)
			if err := postgres.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			exec(t, pool, `CREATE TABLE held (who text NOT NULL)`)
			cfg := c.cfg
			cfg.DSN, cfg.Resource, cfg.Token = pg.DSN, "sku:1", 5
			child := startHolder(t, cfg)
			if line := child.line(t); line != "ready" {
				t.Fatalf("child said %q, want ready", line)
			}
			child.stop(t)

			// The pause would last the whole test (up to a minute) without
			// the bound: the next holder must not wait for it.
			start := time.Now()
			next, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err := postgres.Tx(next, pool, "sku:1", 6, func(tx pgx.Tx) error {
				_, err := tx.Exec(next, `INSERT INTO held (who) VALUES ('next holder')`)
				return err
			})
			waited := time.Since(start)
			if err != nil {
				t.Fatalf("the next holder, after %v with the frozen one stopped: %v", waited.Round(time.Millisecond), err)
			}
			t.Logf("the next holder got through after %v (bound 2s), the frozen holder still stopped", waited.Round(time.Millisecond))

			child.resume(t)
			result := child.line(t)
			child.wait(t)
			if !strings.HasPrefix(result, "result: failed") {
				t.Fatalf("the frozen holder's Tx: %q, want its commit failed", result)
			}
			t.Logf("the frozen holder, thawed: %s", result)
			var who []string
			rows, err := pool.Query(ctx, `SELECT who FROM held ORDER BY who`)
			if err == nil {
				who, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(who) != 1 || who[0] != "next holder" {
				t.Fatalf("rows written: %q, want only the next holder's", who)
			}
			if hw := highWater(t, pool, "sku:1"); hw != 6 {
				t.Fatalf("high-water %d, want 6", hw)
			}
		})
	}
}

// A holder frozen (SIGSTOP) inside a fenced transaction under a lease of
// 3 s, with default settings, for 8 s: the transaction must not commit.
// The bound follows the lease, with nothing to keep in step: the server
// ends the frozen holder's session when the lease ends, so the next holder
// gets the resource after about the lease instead of the pause, and the
// thawed holder gets ErrHoldExpired. Frozen between the lease check and
// the COMMIT, the server's bound still ends the transaction at the
// lease's end.
func TestTxFrozenHolderFollowsLease(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see that the child is stopped")
	}
	const lease = 3 * time.Second
	for _, c := range []struct {
		name   string
		cfg    holdConfig
		freeze time.Duration
	}{
		{"claim first, frozen in fn", holdConfig{}, 8 * time.Second},
		{"claim with the first statement, frozen in fn", holdConfig{Lazy: true}, 8 * time.Second},
		{"claim first, frozen before COMMIT", holdConfig{FreezeBeforeCommit: true}, 8 * time.Second},
		{"claim with the first statement, frozen before COMMIT", holdConfig{Lazy: true, FreezeBeforeCommit: true}, 8 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // a database and a frozen holder process of its own
			pg := pgserver.Shared(t)
			pool := poolIn(t, pg.DSN, "UTC")
			ctx := ctxFor(t, 2*time.Minute)
			if err := postgres.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			exec(t, pool, `CREATE TABLE held (who text NOT NULL)`)
			cfg := c.cfg
			cfg.DSN, cfg.Resource, cfg.Token, cfg.Lease = pg.DSN, "sku:1", 5, lease
			start := time.Now()
			child := startHolder(t, cfg)
			if line := child.line(t); line != "ready" {
				t.Fatalf("child said %q, want ready", line)
			}
			child.stop(t)

			// The next holder waits on the row while the frozen one is
			// stopped; the frozen one is thawed after the pause either way.
			next, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			nextErr := make(chan error, 1)
			nextAt := make(chan time.Duration, 1)
			go func() {
				err := postgres.Tx(next, pool, "sku:1", 6, func(tx pgx.Tx) error {
					_, err := tx.Exec(next, `INSERT INTO held (who) VALUES ('next holder')`)
					return err
				})
				nextAt <- time.Since(start)
				nextErr <- err
			}()
			time.Sleep(c.freeze - time.Since(start))
			child.resume(t)
			result := child.line(t)
			child.wait(t)
			t.Logf("the frozen holder, thawed: %s", result)
			if err := <-nextErr; err != nil {
				t.Fatalf("the next holder: %v", err)
			}
			got := <-nextAt
			t.Logf("the next holder got through %v after the frozen one started (lease %v, pause %v)", got.Round(time.Millisecond), lease, c.freeze)
			if got > c.freeze-time.Second {
				t.Errorf("the next holder waited %v, for the pause (%v) rather than the lease (%v)", got.Round(time.Millisecond), c.freeze, lease)
			}
			if !strings.HasPrefix(result, "result: failed (hold expired: true)") {
				t.Errorf("the frozen holder's Tx: %q, want it refused with ErrHoldExpired", result)
			}
			var who []string
			rows, err := pool.Query(ctx, `SELECT who FROM held ORDER BY who`)
			if err == nil {
				who, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(who) != 1 || who[0] != "next holder" {
				t.Fatalf("rows written: %q, want only the next holder's: the frozen holder committed after its lease", who)
			}
		})
	}
}

// A holder frozen (SIGSTOP) inside a TxAll over acct:a and acct:b, under
// a lease of 3 s, for 8 s: the server ends its session when the lease
// ends, so a holder of acct:b and acct:c gets through after about the
// lease, and the thawed holder's commit fails with ErrHoldExpired —
// nothing it wrote, and neither of its claims, is kept.
func TestTxAllFrozenHolderFollowsLease(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see that the child is stopped")
	}
	const lease, freeze = 3 * time.Second, 8 * time.Second
	for _, lazy := range []bool{false, true} {
		t.Run(fmt.Sprintf("ClaimWithFirstStatement %v", lazy), func(t *testing.T) {
			t.Parallel() // a database and a frozen holder process of its own
			pg := pgserver.Shared(t)
			pool := poolIn(t, pg.DSN, "UTC")
			ctx := ctxFor(t, 2*time.Minute)
			if err := postgres.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			exec(t, pool, `CREATE TABLE held (who text NOT NULL)`)
			cfg := holdConfig{DSN: pg.DSN, Token: 5, Lease: lease, Lazy: lazy, Resources: []string{"acct:b", "acct:a"}}
			start := time.Now()
			child := startHolder(t, cfg)
			if line := child.line(t); line != "ready" {
				t.Fatalf("child said %q, want ready", line)
			}
			child.stop(t)

			next, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			nextErr := make(chan error, 1)
			nextAt := make(chan time.Duration, 1)
			go func() {
				err := postgres.TxAll(next, pool, map[string]token.Token{"acct:b": 6, "acct:c": 6}, func(tx pgx.Tx) error {
					_, err := tx.Exec(next, `INSERT INTO held (who) VALUES ('next holder')`)
					return err
				})
				nextAt <- time.Since(start)
				nextErr <- err
			}()
			time.Sleep(freeze - time.Since(start))
			child.resume(t)
			result := child.line(t)
			child.wait(t)
			t.Logf("the frozen holder, thawed: %s", result)
			if err := <-nextErr; err != nil {
				t.Fatalf("the next holder: %v", err)
			}
			got := <-nextAt
			t.Logf("the next holder got through %v after the frozen one started (lease %v, pause %v)", got.Round(time.Millisecond), lease, freeze)
			if got > freeze-time.Second {
				t.Errorf("the next holder waited %v, for the pause (%v) rather than the lease (%v)", got.Round(time.Millisecond), freeze, lease)
			}
			if !strings.HasPrefix(result, "result: failed (hold expired: true)") {
				t.Errorf("the frozen holder's TxAll: %q, want it refused with ErrHoldExpired", result)
			}
			var who []string
			rows, err := pool.Query(ctx, `SELECT who FROM held ORDER BY who`)
			if err == nil {
				who, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(who) != 1 || who[0] != "next holder" {
				t.Fatalf("rows written: %q, want only the next holder's: the frozen holder committed after its lease", who)
			}
			if hw := highWater(t, pool, "acct:a"); hw != 0 {
				t.Fatalf("acct:a at %d: the frozen holder's claim was kept", hw)
			}
		})
	}
}

// holder is a child process holding a fenced transaction.
type holder struct {
	cmd    *osexec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
}

func startHolder(t *testing.T, cfg holdConfig) *holder {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := osexec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdChildEnv+"="+string(js))
	cmd.SysProcAttr = holderSysProcAttr()
	h := &holder{cmd: cmd, lines: make(chan string, 4), stderr: &strings.Builder{}}
	cmd.Stderr = h.stderr
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // not waited for: the test failed
			_ = cmd.Process.Signal(sigCont)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return h
}

// line returns the child's next line of output.
func (h *holder) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatalf("the child exited without a word; stderr:\n%s", h.stderr.String())
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("no word from the child in a minute")
		return ""
	}
}

// stop freezes the child and waits until the kernel says it is stopped.
func (h *holder) stop(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(sigStop); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state …: comm may hold spaces, the state follows the last ')'.
		if s := string(b); strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " T") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop")
		}
		time.Sleep(time.Millisecond)
	}
}

// resume thaws the child and lets fn return.
func (h *holder) resume(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(sigCont); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(h.stdin, "go on\n"); err != nil {
		t.Fatal(err)
	}
}

func (h *holder) wait(t *testing.T) {
	t.Helper()
	_ = h.stdin.Close()
	for range h.lines {
	}
	if err := h.cmd.Wait(); err != nil {
		var ee *osexec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("child: %v; stderr:\n%s", err, h.stderr.String())
		}
		t.Fatal(err)
	}
}

// The bound is SET LOCAL: it holds inside the transaction, is gone after
// it, takes the sooner of HoldTimeout and the context's deadline, yields to
// a tighter setting of the session's, and leaves the caller's own
// transaction (a nested Tx) alone.
func TestTxHoldSetting(t *testing.T) {
	t.Parallel()
	pg := pgserver.Shared(t)
	pool := poolIn(t, pg.DSN, "UTC")
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var s string
		if err := q.QueryRow(ctx, `SELECT current_setting('idle_in_transaction_session_timeout')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	inside := func(k *postgres.Tokens, ctx context.Context, db postgres.DB) string {
		t.Helper()
		var s string
		err := k.Tx(ctx, db, "sku:1", 5, func(tx pgx.Tx) error {
			s = setting(tx)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tokens := func(o postgres.TokensOptions) *postgres.Tokens {
		k, err := postgres.NewTokens(o)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, lazy := range []bool{false, true} {
		if got := inside(tokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy}), ctx, conn); got != "15s" {
			t.Errorf("lazy %v, default: %q inside, want 15s", lazy, got)
		}
		if got := setting(conn); got != "0" {
			t.Errorf("lazy %v: %q after the transaction, want 0 (SET LOCAL)", lazy, got)
		}
		if got := inside(tokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy, HoldTimeout: 3 * time.Second}), ctx, conn); got != "3s" {
			t.Errorf("lazy %v, HoldTimeout 3s: %q inside", lazy, got)
		}
		if got := inside(tokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy, HoldTimeout: -1}), ctx, conn); got != "0" {
			t.Errorf("lazy %v, HoldTimeout -1: %q inside, want the session's 0", lazy, got)
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got := inside(tokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy}), dctx, conn)
		cancel()
		if d, err := time.ParseDuration(got); err != nil || d > 5*time.Second || d < time.Second {
			t.Errorf("lazy %v, a 5s deadline: %q inside, want at most 5s", lazy, got)
		}
		// A tighter setting of the session wins.
		exec(t, conn, `SET idle_in_transaction_session_timeout = '1500ms'`)
		if got := inside(tokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy}), ctx, conn); got != "1500ms" {
			t.Errorf("lazy %v, session at 1500ms: %q inside, want 1500ms", lazy, got)
		}
		exec(t, conn, `SET idle_in_transaction_session_timeout = '1min'`)
		if got := inside(tokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy}), ctx, conn); got != "15s" {
			t.Errorf("lazy %v, session at 1min: %q inside, want 15s", lazy, got)
		}
		exec(t, conn, `RESET idle_in_transaction_session_timeout`)
	}
	// Nested: the caller's transaction keeps its setting.
	outer, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Rollback(ctx)
	if got := inside(tokens(postgres.TokensOptions{HoldTimeout: 3 * time.Second}), ctx, outer); got != "0" {
		t.Errorf("nested: %q inside, want the caller's 0", got)
	}
	if got := setting(outer); got != "0" {
		t.Errorf("nested: %q after, want the caller's 0", got)
	}
	if _, err := postgres.NewTokens(postgres.TokensOptions{HoldTimeout: 30 * 24 * time.Hour}); err == nil {
		t.Errorf("NewTokens accepted a HoldTimeout of 30 days")
	}
}

// leaseCtx carries resource's token t and a lease whose end end reports,
// as guard.Do's context does.
func leaseCtx(ctx context.Context, resource string, t token.Token, end func() time.Time) context.Context {
	return token.WithExpiry(token.NewContext(ctx, resource, t), end)
}

// A lease renewed while fn runs moves the commit's bound on with it: fn
// working past the lease's end at the claim, never idle for long, still
// commits. A lease that has ended refuses the commit, and a lease that
// ended before the claim sends nothing.
func TestTxLeaseBoundFollowsRenewals(t *testing.T) {
	t.Parallel()
	pg := pgserver.Shared(t)
	pool := poolIn(t, pg.DSN, "UTC")
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `CREATE TABLE held (who text NOT NULL)`)
	const lease = time.Second
	for _, lazy := range []bool{false, true} {
		tokens, err := postgres.NewTokens(postgres.TokensOptions{ClaimWithFirstStatement: lazy})
		if err != nil {
			t.Fatal(err)
		}
		// Renewed: the end is always a lease ahead.
		renewed := leaseCtx(ctx, "sku:1", 5, func() time.Time { return time.Now().Add(lease) })
		start := time.Now()
		err = tokens.Tx(renewed, pool, "", 0, func(tx pgx.Tx) error {
			for time.Since(start) < 2*lease {
				if _, err := tx.Exec(ctx, `INSERT INTO held (who) VALUES ('renewed')`); err != nil {
					return err
				}
				time.Sleep(lease / 5)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("lazy %v: a renewed lease, fn working past its first end: %v", lazy, err)
		}

		// Not renewed: fn outlasts the lease, the commit is refused.
		end := time.Now().Add(lease)
		fixed := leaseCtx(ctx, "sku:1", 5, func() time.Time { return end })
		err = tokens.Tx(fixed, pool, "", 0, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO held (who) VALUES ('expired')`); err != nil {
				return err
			}
			time.Sleep(lease + 100*time.Millisecond)
			return nil
		})
		if !errors.Is(err, postgres.ErrHoldExpired) {
			t.Fatalf("lazy %v: fn outlasting its lease: %v, want ErrHoldExpired", lazy, err)
		}

		// A live lease around a transaction that failed, or that fn
		// ended itself: COMMIT reports it as without a lease.
		live := leaseCtx(ctx, "sku:1", 5, func() time.Time { return time.Now().Add(lease) })
		err = tokens.Tx(live, pool, "", 0, func(tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, `SELECT 1 / 0`)
			return nil
		})
		if !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("lazy %v: fn going on past a failed statement: %v, want pgx.ErrTxCommitRollback", lazy, err)
		}
		err = tokens.Tx(live, pool, "", 0, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO held (who) VALUES ('rolled back')`); err != nil {
				return err
			}
			return tx.Rollback(ctx)
		})
		if !errors.Is(err, pgx.ErrTxClosed) {
			t.Fatalf("lazy %v: fn rolling back itself: %v, want pgx.ErrTxClosed", lazy, err)
		}

		// Ended before the claim: nothing is sent.
		gone := leaseCtx(ctx, "sku:1", 5, func() time.Time { return time.Now().Add(-time.Millisecond) })
		err = tokens.Tx(gone, pool, "", 0, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO held (who) VALUES ('gone')`)
			return err
		})
		if !errors.Is(err, postgres.ErrHoldExpired) {
			t.Fatalf("lazy %v: a lease ended before the claim: %v, want ErrHoldExpired", lazy, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM held WHERE who <> 'renewed'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows of a transaction past its lease committed", n)
	}
}

// Under a lease, the bound set right before COMMIT only ever tightens the
// one set with the claim: a HoldTimeout shorter than the lease still ends
// a holder that goes idle before its COMMIT, and a lease ending beyond
// what PostgreSQL can bound does not fail the transaction.
func TestTxHoldTimeoutBoundsCommitUnderALongLease(t *testing.T) {
	// Not parallel: the hook before COMMIT is the package's, every Tx's.
	pg := pgserver.Shared(t)
	pool := poolIn(t, pg.DSN, "UTC")
	ctx := ctxFor(t, time.Minute)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `CREATE TABLE held_long (who text NOT NULL)`)
	tokens, err := postgres.NewTokens(postgres.TokensOptions{HoldTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	long := leaseCtx(ctx, "sku:long", 5, func() time.Time { return time.Now().Add(30 * time.Second) })
	postgres.SetBeforeCommit(func() { time.Sleep(2500 * time.Millisecond) }) // idle past HoldTimeout, well within the lease
	err = tokens.Tx(long, pool, "", 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO held_long (who) VALUES ('idle past HoldTimeout')`)
		return err
	})
	postgres.SetBeforeCommit(nil)
	if !errors.Is(err, postgres.ErrHoldExpired) {
		t.Fatalf("idle 2.5s before COMMIT with HoldTimeout 1s and 30s of lease left: %v, want ErrHoldExpired", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM held_long`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows committed past HoldTimeout", n)
	}

	farTokens, err := postgres.NewTokens(postgres.TokensOptions{})
	if err != nil {
		t.Fatal(err)
	}
	far := leaseCtx(ctx, "sku:far", 6, func() time.Time { return time.Now().Add(30 * 24 * time.Hour) })
	if err := farTokens.Tx(far, pool, "", 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO held_long (who) VALUES ('a lease of 30 days')`)
		return err
	}); err != nil {
		t.Fatalf("a lease ending in 30 days: %v", err)
	}
}
