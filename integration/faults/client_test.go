package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/integration/internal/history"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// clientConfig is all a client needs. A client process gets it, as JSON, in
// its environment (see TestMain).
type clientConfig struct {
	ID        int           `json:"id"`
	Lock      lockConfig    `json:"lock"`
	TTL       time.Duration `json:"ttl"`
	PG        string        `json:"pg"`    // the cell's database
	MySQL     string        `json:"mysql"` // the cell's MySQL database, with mysql-column or mysql-tx
	HTTP      string        `json:"http"`  // base URL of the cell's resource service
	GRPC      string        `json:"grpc"`  // address of its gRPC service
	Enforcers []string      `json:"enforcers"`
	// Broken names an enforcer whose fenced copy this client reads without
	// a token (write-only fencing), to show the suite catches it.
	Broken string `json:"broken,omitempty"`
}

// command is what the orchestrator sends a client, one JSON line each.
type command struct {
	Kind  string      `json:"kind"` // cmdOp, cmdAck, cmdClock, cmdLock, cmdQuit
	Op    *opSpec     `json:"op,omitempty"`
	Clock string      `json:"clock,omitempty"` // cmdClock: "halt" or "run" the guard's clock
	Lock  *lockConfig `json:"lock,omitempty"`  // cmdLock: the lock service to use from now on
}

const (
	cmdOp    = "op"    // run a critical section (one at a time)
	cmdAck   = "ack"   // let a gated critical section go on to its writes
	cmdClock = "clock" // halt the guard's clock, or run it again; answered with evClock
	cmdLock  = "lock"  // reconnect to another lock service endpoint; answered with evLocked
	cmdQuit  = "quit"
)

// opSpec is one critical section: lock Key, read Item in every copy, then
// write it back — the stock less one when Sell (and not sold out), Write as
// the new value when set.
type opSpec struct {
	ID      string        `json:"id"`
	Key     string        `json:"key"`
	Item    string        `json:"item"`
	Sell    bool          `json:"sell,omitempty"`
	Write   string        `json:"write,omitempty"`
	Gate    bool          `json:"gate,omitempty"` // after the reads, report and wait for an ack
	Timeout time.Duration `json:"timeout"`        // for the acquire
}

// event is what a client reports, one JSON line each.
type event struct {
	Client   int              `json:"client"`
	Kind     string           `json:"kind"`
	Op       string           `json:"op,omitempty"`
	Time     time.Time        `json:"time"`
	Token    token.Token      `json:"token,omitzero"`
	Accesses []history.Access `json:"accesses,omitempty"`
	Gated    bool             `json:"gated,omitempty"`
	Lost     bool             `json:"lost,omitempty"` // evDone: the lease had been lost
	Err      string           `json:"error,omitempty"`
}

const (
	evReady    = "ready"
	evAcquired = "acquired" // Token
	evRead     = "read"     // Accesses; Gated when waiting for an ack
	evWrote    = "wrote"    // Accesses
	evDone     = "done"     // the critical section is over: Lost, or Err (no Token: never acquired)
	evClock    = "clock"
	evLocked   = "locked"
	evFailed   = "failed" // the client cannot go on: Err
	evExited   = "exited" // made by the orchestrator when a client process ends
)

// accessTimeout bounds one access to a copy.
const accessTimeout = 10 * time.Second

// client runs critical sections through its own guard and locker and
// reaches every copy of every item. It runs one critical section at a time,
// in a goroutine, so commands (acks, clock steps) reach it while it waits.
type client struct {
	cfg    clientConfig
	log    *slog.Logger
	emit   func(event)
	clock  *stepClock
	pool   *pgxpool.Pool
	copies []copyStore
	acks   chan struct{}
	shared locks.Locker // an in-process locker (memlock), shared by the clients of one process

	mu        sync.Mutex   // guards guard and closeLock
	guard     *guard.Guard // replaced by cmdLock
	closeLock func() error

	running sync.WaitGroup // the critical section in flight
	closers []func()
}

// newClient connects a client. shared is the locker of an in-process client;
// nil for a client process, which opens cfg.Lock.
func newClient(ctx context.Context, cfg clientConfig, shared locks.Locker, emit func(event), log *slog.Logger) (*client, error) {
	c := &client{cfg: cfg, log: log, emit: emit, clock: newStepClock(), acks: make(chan struct{}, 4), shared: shared}
	c.closers = append(c.closers, c.clock.Close)
	pcfg, err := pgxpool.ParseConfig(cfg.PG)
	if err != nil {
		c.close()
		return nil, err
	}
	pcfg.MaxConns = 4
	if c.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		c.close()
		return nil, err
	}
	c.closers = append(c.closers, c.pool.Close)
	var mdb *sql.DB
	if cfg.MySQL != "" {
		if mdb, err = openMy(cfg.MySQL); err != nil {
			c.close()
			return nil, err
		}
		c.closers = append(c.closers, func() { mdb.Close() })
	}
	stores, closeStores, err := openCopies(cfg, c.pool, mdb)
	if err != nil {
		c.close()
		return nil, err
	}
	c.copies = stores
	c.closers = append(c.closers, closeStores)
	if err := c.relock(ctx, cfg.Lock); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// relock (re)connects to the lock service and builds a guard over it.
func (c *client) relock(ctx context.Context, lc lockConfig) error {
	l, closeLock := c.shared, func() error { return nil }
	if l == nil {
		var err error
		if l, closeLock, err = openLocker(ctx, lc, c.log); err != nil {
			return err
		}
	}
	g, err := guard.New(l, guard.Options{TTL: c.cfg.TTL, Clock: c.clock, Logger: c.log})
	if err != nil {
		closeLock()
		return err
	}
	c.mu.Lock()
	old := c.closeLock
	c.guard, c.closeLock = g, closeLock
	c.mu.Unlock()
	if old != nil {
		old()
	}
	return nil
}

func (c *client) currentGuard() *guard.Guard {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.guard
}

// handle carries out one command. It does not block on a critical section.
func (c *client) handle(ctx context.Context, cmd command) {
	switch cmd.Kind {
	case cmdOp:
		c.running.Add(1)
		go func() {
			defer c.running.Done()
			c.run(ctx, *cmd.Op)
		}()
	case cmdAck:
		select {
		case c.acks <- struct{}{}:
		default: // nobody waits for that many: the orchestrator's mistake, which its timeout shows
		}
	case cmdClock:
		if cmd.Clock == "halt" {
			c.clock.Halt()
		} else {
			c.clock.Run()
		}
		c.emit(event{Kind: evClock, Time: time.Now()})
	case cmdLock:
		c.running.Wait()
		if err := c.relock(ctx, *cmd.Lock); err != nil {
			c.emit(event{Kind: evFailed, Time: time.Now(), Err: "relock: " + err.Error()})
			return
		}
		c.emit(event{Kind: evLocked, Time: time.Now()})
	}
}

// close waits for the critical section in flight and disconnects.
func (c *client) close() {
	c.running.Wait()
	c.mu.Lock()
	closeLock := c.closeLock
	c.closeLock = nil
	c.mu.Unlock()
	if closeLock != nil {
		closeLock()
	}
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// run is one critical section. Its accesses go out whatever the guard
// believes about the lease: a holder paused after its last look at the
// lease context writes anyway, so the suite makes every stale holder do so
// rather than count on where the pause lands. Only the resource's check can
// stop it.
func (c *client) run(ctx context.Context, op opSpec) {
	for len(c.acks) > 0 { // an ack meant for an earlier section
		<-c.acks
	}
	actx, cancel := context.WithTimeout(ctx, op.Timeout)
	lease, err := c.currentGuard().Acquire(actx, op.Key)
	cancel()
	if err != nil {
		c.emit(event{Kind: evDone, Op: op.ID, Time: time.Now(), Err: "acquire: " + err.Error()})
		return
	}
	tok := lease.Token()
	c.emit(event{Kind: evAcquired, Op: op.ID, Time: time.Now(), Token: tok})
	live := lease.Context()
	actx = context.WithoutCancel(live) // keeps the token in the context for the HTTP transport

	reads := c.each(func(s copyStore) *history.Access { return c.read(actx, live, s, op, tok) })
	c.emit(event{Kind: evRead, Op: op.ID, Time: time.Now(), Accesses: reads, Gated: op.Gate})
	if op.Gate {
		select {
		case <-c.acks:
		case <-ctx.Done():
		}
	}
	byCopy := map[string]history.Access{}
	for _, a := range reads {
		byCopy[a.Copy] = a
	}
	writes := c.each(func(s copyStore) *history.Access {
		rd := byCopy[s.name()]
		if rd.Result != history.OK || ctx.Err() != nil {
			return nil
		}
		var stock *int
		if op.Sell && *rd.Stock > 0 {
			stock = ptr(*rd.Stock - 1)
		}
		var val *string
		if op.Write != "" {
			val = ptr(op.Write)
		}
		if stock == nil && val == nil {
			return nil
		}
		return c.write(actx, live, s, op, tok, stock, val)
	})
	c.emit(event{Kind: evWrote, Op: op.ID, Time: time.Now(), Accesses: writes})

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	err = lease.Release(rctx)
	cancel()
	ev := event{Kind: evDone, Op: op.ID, Time: time.Now(), Token: tok, Lost: errors.Is(err, guard.ErrLost)}
	if err != nil {
		ev.Err = err.Error()
	}
	c.emit(ev)
}

// each runs f on every copy at once and returns the accesses it made.
func (c *client) each(f func(copyStore) *history.Access) []history.Access {
	out := make([]*history.Access, len(c.copies))
	var wg sync.WaitGroup
	for i, s := range c.copies {
		wg.Go(func() { out[i] = f(s) })
	}
	wg.Wait()
	var as []history.Access
	for _, a := range out {
		if a != nil {
			as = append(as, *a)
		}
	}
	return as
}

func (c *client) read(ctx, live context.Context, s copyStore, op opSpec, tok token.Token) *history.Access {
	a := &history.Access{Client: c.cfg.ID, Op: op.ID, Copy: s.name(), Item: op.Item, Kind: history.Read, Token: tok,
		LeaseLive: live.Err() == nil, Start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, accessTimeout)
	st, err := s.read(ctx, op.Item, tok)
	cancel()
	a.End = time.Now()
	a.Result, a.Current, a.Err = classify(history.Read, err)
	if a.Result == history.OK {
		a.Stock, a.Val = &st.Stock, &st.Val
	}
	return a
}

func (c *client) write(ctx, live context.Context, s copyStore, op opSpec, tok token.Token, stock *int, val *string) *history.Access {
	a := &history.Access{Client: c.cfg.ID, Op: op.ID, Copy: s.name(), Item: op.Item, Kind: history.Write, Token: tok,
		Stock: stock, Val: val, LeaseLive: live.Err() == nil, Start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, accessTimeout)
	err := s.write(ctx, op.Item, tok, stock, val)
	cancel()
	a.End = time.Now()
	a.Result, a.Current, a.Err = classify(history.Write, err)
	return a
}

// errNotFound: the copy has no such item. Nothing was done.
var errNotFound = errors.New("no such item")

// classify turns an access's error into its result: refused as stale,
// not done, or — for a write that failed otherwise — unknown.
func classify(kind string, err error) (history.Result, token.Token, string) {
	var se *token.StaleError
	switch {
	case err == nil:
		return history.OK, 0, ""
	case errors.As(err, &se):
		return history.Stale, se.Current, err.Error()
	case errors.Is(err, errNotFound), kind == history.Read:
		return history.Failed, 0, err.Error()
	}
	return history.Unknown, 0, err.Error()
}

func ptr[T any](v T) *T { return &v }

func (e event) String() string {
	s := fmt.Sprintf("c%d %s", e.Client, e.Kind)
	if e.Op != "" {
		s += " " + e.Op
	}
	if !e.Token.IsZero() {
		s += " token " + e.Token.String()
	}
	if e.Err != "" {
		s += ": " + e.Err
	}
	return s
}
