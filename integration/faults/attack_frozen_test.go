package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/fenceguard/fenceguard/token"
)

// frozen-tx/postgres: a holder process claims a resource in a fenced
// transaction (storage/postgres Tokens.Tx), writes a row and is frozen
// with SIGSTOP inside the transaction for longer than its lease (the
// hold bound, TokensOptions.HoldTimeout, set to the lease's TTL). A
// second holder with a higher token runs its own Tx meanwhile. Fenced:
// the server ends the frozen session at the bound, so the second holder
// gets through within about the bound, not after the whole pause, and the
// frozen holder's commit fails once it is continued (its row is not
// kept). The control is the same with the bound switched off
// (HoldTimeout < 0): the second holder waits for the whole pause.

func init() {
	registerAttack(attack{
		Name: "frozen-tx/postgres",
		About: fmt.Sprintf("a holder SIGSTOPped inside Tx for %v, past its %v lease (HoldTimeout); the next holder must get through within about the bound and the frozen commit fail; "+
			"control: HoldTimeout off, the next holder waits for the whole pause", frozenPause, frozenHold),
		Rounds: 2,
		Short:  1,
		Run:    runFrozenTx,
	})
}

const (
	frozenPause = 3 * time.Second
	frozenHold  = time.Second
)

// attackChildEnv makes the test binary a child process of an attack (see
// TestMain): its value is an attackChildConfig as JSON.
const attackChildEnv = "FENCEGUARD_FAULTS_ATTACK_CHILD"

// attackChildConfig is what an attack's child process is to do.
type attackChildConfig struct {
	Mode string `json:"mode"` // "pg-holder", "waiter" or "transfer-holder"

	// pg-holder
	DSN      string        `json:"dsn,omitempty"`
	Resource string        `json:"resource,omitempty"`
	Token    token.Token   `json:"token,omitempty"`
	Hold     time.Duration `json:"hold,omitempty"` // TokensOptions.HoldTimeout

	// waiter
	Lock lockConfig    `json:"lock,omitzero"`
	Key  string        `json:"key,omitempty"`
	TTL  time.Duration `json:"ttl,omitempty"`

	// transfer-holder, with DSN, Lock and TTL
	Fenced bool `json:"fenced,omitempty"` // TxAll; otherwise a plain transaction
}

// attackChildMain runs an attack's child process and returns its exit
// code. It talks in lines: what it did on stdout, orders on stdin.
func attackChildMain(js string) int {
	var cfg attackChildConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Println("error: bad configuration:", err)
		return 2
	}
	switch cfg.Mode {
	case "pg-holder":
		return pgHolderMain(cfg)
	case "waiter":
		return waiterMain(cfg)
	case "transfer-holder":
		return transferHolderMain(cfg)
	}
	fmt.Println("error: no mode", cfg.Mode)
	return 2
}

// pgHolderMain claims cfg.Resource for cfg.Token in a fenced transaction,
// writes a row, says "ready" and waits inside the transaction (where the
// attack freezes it) for a line on stdin; then it commits and says how
// that went.
func pgHolderMain(cfg attackChildConfig) int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		fmt.Println("error: connect:", err)
		return 2
	}
	defer conn.Close(ctx)
	tokens, err := postgres.NewTokens(postgres.TokensOptions{HoldTimeout: cfg.Hold, Logger: quietLog})
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	stdin := bufio.NewReader(os.Stdin)
	err = tokens.Tx(ctx, conn, cfg.Resource, cfg.Token, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO frozen_rows (resource, who) VALUES ($1, 'frozen')`, cfg.Resource); err != nil {
			return err
		}
		fmt.Println("ready")
		_, err := stdin.ReadString('\n') // frozen here
		return err
	})
	if err != nil {
		fmt.Println("result: failed:", strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		fmt.Println("result: committed")
	}
	return 0
}

// attackChild is a child process of an attack.
type attackChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *tailBuffer
	waited chan struct{}
}

func startAttackChild(t *testing.T, cfg attackChildConfig) *attackChild {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), attackChildEnv+"="+string(js))
	cmd.SysProcAttr = sysProcAttr()
	c := &attackChild{cmd: cmd, lines: make(chan string, 16), stderr: &tailBuffer{max: 32 << 10}, waited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
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
		defer close(c.waited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		cmd.Wait()
	}()
	t.Cleanup(c.kill)
	return c
}

func (c *attackChild) pid() int { return c.cmd.Process.Pid }

// line returns the child's next line; "" when it ended or d passed.
func (c *attackChild) line(d time.Duration) (string, bool) {
	select {
	case l, ok := <-c.lines:
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// freeze stops the child and waits until the kernel says it is stopped.
func (c *attackChild) freeze(t *testing.T) {
	t.Helper()
	if err := kill(c.pid(), sigStop); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !stopped(c.pid()); {
		if time.Now().After(deadline) {
			t.Fatal("the child did not stop")
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *attackChild) thaw(t *testing.T) {
	t.Helper()
	if err := kill(c.pid(), sigCont); err != nil {
		t.Fatal(err)
	}
}

func (c *attackChild) say(s string) { io.WriteString(c.stdin, s+"\n") }

// wait closes the child's stdin and waits for it to exit.
func (c *attackChild) wait(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	select {
	case <-c.waited:
	case <-time.After(20 * time.Second):
		t.Errorf("the child did not exit; stderr:\n%s", c.stderr)
		c.kill()
	}
	if c.stderr.raced() {
		t.Errorf("the child raced:\n%s", c.stderr)
	}
}

func (c *attackChild) kill() {
	select {
	case <-c.waited:
		return
	default:
	}
	kill(c.pid(), syscall.SIGKILL)
	kill(c.pid(), sigCont)
	<-c.waited
}

func runFrozenTx(t *testing.T, s *attackStats) {
	if procSupported != "" {
		t.Skip(procSupported)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, pg := attackPG(t, ctx)
	if _, err := pool.Exec(ctx, `CREATE TABLE frozen_rows (resource text NOT NULL, who text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for round := range s.Rounds() {
		for _, control := range []bool{false, true} {
			resource := fmt.Sprintf("sku:%d-%v", round, control)
			hold := frozenHold
			if control {
				hold = -1
			}
			child := startAttackChild(t, attackChildConfig{Mode: "pg-holder", DSN: pg.DSN, Resource: resource, Token: 5, Hold: hold})
			if l, _ := child.line(time.Minute); l != "ready" {
				t.Fatalf("the holder said %q; stderr:\n%s", l, child.stderr)
			}
			child.freeze(t)
			frozeAt := time.Now()
			s.Add(func(s *attackStats) { s.Faults++ })

			var (
				wg     sync.WaitGroup
				waited time.Duration
				err    error
			)
			got := make(chan struct{})
			wg.Go(func() {
				defer close(got)
				nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				start := time.Now()
				err = postgres.Tx(nctx, pool, resource, 6, func(tx pgx.Tx) error {
					_, err := tx.Exec(nctx, `INSERT INTO frozen_rows (resource, who) VALUES ($1, 'next')`, resource)
					return err
				})
				waited = time.Since(start)
			})
			select {
			case <-got:
			case <-time.After(frozenPause):
			}
			time.Sleep(time.Until(frozeAt.Add(frozenPause))) // the whole pause, whoever got through
			child.thaw(t)
			child.say("go on")
			wg.Wait()
			result, _ := child.line(30 * time.Second)
			child.wait(t)
			if err != nil {
				t.Errorf("round %d (control %v): the next holder's Tx: %v", round, control, err)
			}
			var who []string
			rows, qerr := pool.Query(ctx, `SELECT who FROM frozen_rows WHERE resource = $1 ORDER BY who`, resource)
			if qerr == nil {
				who, qerr = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if qerr != nil {
				t.Fatal(qerr)
			}
			blocked := waited >= frozenPause*8/10
			t.Logf("round %d, %s: the next holder waited %v (pause %v, bound %v); the frozen holder: %s; rows %v",
				round, map[bool]string{false: "fenced", true: "control"}[control], waited.Round(time.Millisecond), frozenPause, hold, result, who)
			s.Add(func(s *attackStats) {
				if control {
					if blocked {
						s.Control++
					}
					return
				}
				if blocked || err != nil {
					s.Lockouts++
				}
				s.Attempts++
				if strings.HasPrefix(result, "result: failed:") && !strings.Contains(strings.Join(who, ","), "frozen") {
					s.Refused++
				} else {
					s.Accepted++
				}
			})
			if !control && blocked {
				t.Errorf("round %d: the next holder waited %v, most of the %v pause (bound %v)", round, waited, frozenPause, frozenHold)
			}
			if !control && !strings.HasPrefix(result, "result: failed:") {
				t.Errorf("round %d: the frozen holder, continued after its lease: %q, want its commit failed", round, result)
			}
		}
		s.Add(func(s *attackStats) { s.Runs++ })
	}
}
