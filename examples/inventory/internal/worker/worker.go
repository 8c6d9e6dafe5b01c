package worker

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/metrics/prom"
	"github.com/fenceguard/fenceguard/token"
)

// Defaults of [Config].
const (
	DefaultTTL   = 2 * time.Second
	DefaultWork  = 100 * time.Millisecond
	writeTimeout = 10 * time.Second
)

// Config is a worker process's configuration: its flags.
type Config struct {
	ID      int           // shown in events and logs
	Service string        // the service's base URL; several, comma-separated, are addressed in turn
	SKU     string        // the item to sell
	TTL     time.Duration // lease TTL
	Work    time.Duration // time spent between the read and the write
	Gate    bool          // wait for an ack on stdin after each grant and each read
	Lock    backend.LockConfig
}

// Parse reads a worker's flags.
func Parse(args []string) (Config, error) {
	c := Config{TTL: DefaultTTL, Work: DefaultWork}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.IntVar(&c.ID, "id", 1, "worker number, for events and logs")
	fs.StringVar(&c.Service, "service", "http://127.0.0.1:8080", "base URL of the inventory service; several instances, comma-separated, are addressed in turn (one request to each)")
	fs.StringVar(&c.SKU, "sku", "lamp", "item to sell")
	fs.DurationVar(&c.TTL, "ttl", c.TTL, "lease TTL")
	fs.DurationVar(&c.Work, "work", c.Work, "time spent between reading the stock and writing it")
	fs.BoolVar(&c.Gate, "gate", false, "after each grant and each read, wait for a line on stdin (the demo's acknowledgement)")
	c.Lock.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("worker: unexpected arguments %q", fs.Args())
	}
	if c.SKU == "" || c.TTL <= 0 || c.Work < 0 || c.Service == "" {
		return Config{}, errors.New("worker: --sku and --service must be set, --ttl positive and --work not negative")
	}
	return c, c.Lock.Validate(true)
}

// Args returns c as the flags Parse reads.
func (c Config) Args() []string {
	args := []string{
		"--id=" + strconv.Itoa(c.ID),
		"--service=" + c.Service,
		"--sku=" + c.SKU,
		"--ttl=" + c.TTL.String(),
		"--work=" + c.Work.String(),
	}
	if c.Gate {
		args = append(args, "--gate")
	}
	return append(args, c.Lock.Args()...)
}

// Main is the worker subcommand: it connects to the lock service and sells
// until the item is sold out or ctx ends. Events go to out; with --gate,
// acknowledgements come from in.
func Main(ctx context.Context, args []string, in io.Reader, out io.Writer, log *slog.Logger) error {
	c, err := Parse(args)
	if err != nil {
		return err
	}
	log = log.With("worker", c.ID)
	locker, closeLocker, err := backend.OpenLocker(ctx, c.Lock, log)
	if err != nil {
		return err
	}
	defer closeLocker()
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg, prom.Options{Class: service.Class})
	if err != nil {
		return err
	}
	g, err := guard.New(locker, guard.Options{TTL: c.TTL, Observer: m.Observe, Logger: log})
	if err != nil {
		return err
	}
	w := &Worker{
		ID:     c.ID,
		SKU:    c.SKU,
		Work:   c.Work,
		Guard:  g,
		Events: NewEncoder(out),
		Log:    log,
	}
	for _, base := range strings.Split(c.Service, ",") {
		w.Clients = append(w.Clients, &service.Client{Base: base})
	}
	if c.Gate {
		w.Acks = lines(in)
	}
	runErr := w.Run(ctx)
	counters, err := service.Counters(reg)
	w.emit(Event{Kind: Counters, Counters: counters})
	return errors.Join(runErr, err)
}

// lines sends a value for every line read from r, and is closed at EOF or
// on a read error. Its goroutine ends then.
func lines(r io.Reader) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- struct{}{}
		}
	}()
	return ch
}

// Worker sells units of one item, one per lock hold.
type Worker struct {
	ID    int
	SKU   string
	Work  time.Duration
	Guard *guard.Guard
	// Clients are the service's instances, addressed in turn: each request
	// goes to the next one, so one critical section's read and write may
	// reach different instances — which a store that enforces tokens in
	// its statements (the PostgreSQL one) must and does make no matter.
	Clients []*service.Client
	next    int
	Events  *Encoder
	// Acks, when set, gates the worker: before its first sale (a Ready
	// event), and after each grant and each read, it waits for a value (or
	// for the channel to close, which ends the worker).
	Acks <-chan struct{}
	// Log receives what goes wrong. Default slog.Default().
	Log *slog.Logger
}

// errDemoGone: the gate's channel closed, the demo that acknowledges is gone.
var errDemoGone = errors.New("worker: gate closed")

// Run sells until the item is sold out, ctx ends or the gate closes. It
// returns nil in the first two cases.
func (w *Worker) Run(ctx context.Context) error {
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.Acks != nil {
		w.emit(Event{Kind: Ready, Gate: true})
		if err := w.wait(ctx); err != nil {
			if errors.Is(err, errDemoGone) {
				return err
			}
			return nil
		}
	}
	for ctx.Err() == nil {
		soldOut, err := w.sellOne(ctx)
		switch {
		case soldOut:
			w.emit(Event{Kind: SoldOut})
			return nil
		case errors.Is(err, errDemoGone):
			return err
		case err != nil && ctx.Err() == nil:
			// The service or the lock service failed; the event says so.
			// Do not spin while it is down.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// sellOne is one critical section: read, work, write back one less.
func (w *Worker) sellOne(ctx context.Context) (soldOut bool, err error) {
	held := false
	err = w.Guard.Do(ctx, "sku:"+w.SKU, func(lctx context.Context, t token.Token) error {
		held = true
		w.emit(Event{Kind: Acquired, Token: t, Gate: w.Acks != nil})
		if err := w.wait(ctx); err != nil {
			return err
		}
		it, err := w.client().Get(lctx, w.SKU) // the Transport sends t
		if err != nil {
			w.refused("read", t, err)
			return err
		}
		w.emit(Event{Kind: Read, Token: t, Stock: it.Stock, Gate: w.Acks != nil})
		if err := w.wait(ctx); err != nil {
			return err
		}
		if it.Stock == 0 {
			soldOut = true
			return nil
		}
		select { // the work: nothing here looks at the lease
		case <-time.After(w.Work):
		case <-ctx.Done():
			return ctx.Err()
		}
		// See the package doc: the write keeps the token, not the lease's
		// cancellation.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(lctx), writeTimeout)
		defer cancel()
		if _, err := w.client().SetStock(wctx, w.SKU, it.Stock-1); err != nil {
			w.refused("write", t, err)
			return err
		}
		w.emit(Event{Kind: Wrote, Token: t, Stock: it.Stock - 1})
		return nil
	})
	if held {
		if errors.Is(err, guard.ErrLost) {
			w.emit(Event{Kind: Lost, Err: err.Error()})
		} else {
			w.emit(Event{Kind: Released})
		}
	}
	var stale *token.StaleError
	if err != nil && !errors.As(err, &stale) && !errors.Is(err, guard.ErrLost) &&
		!errors.Is(err, errDemoGone) && ctx.Err() == nil {
		w.Log.Warn("sale failed", "err", err)
		w.emit(Event{Kind: Failed, Err: err.Error()})
	}
	return soldOut, err
}

// client is the instance the next request goes to.
func (w *Worker) client() *service.Client {
	c := w.Clients[w.next%len(w.Clients)]
	w.next++
	return c
}

// wait blocks at a gate until the demo acknowledges the event just sent.
func (w *Worker) wait(ctx context.Context) error {
	if w.Acks == nil {
		return nil
	}
	select {
	case _, ok := <-w.Acks:
		if !ok {
			return errDemoGone
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refused reports a stale-token refusal of an access.
func (w *Worker) refused(op string, t token.Token, err error) {
	var stale *token.StaleError
	if errors.As(err, &stale) {
		w.emit(Event{Kind: Refused, Op: op, Token: t, Current: stale.Current})
	}
}

func (w *Worker) emit(e Event) {
	e.Time = time.Now()
	e.Worker = w.ID
	if err := w.Events.Encode(e); err != nil {
		w.Log.Debug("event lost", "err", err)
	}
}
