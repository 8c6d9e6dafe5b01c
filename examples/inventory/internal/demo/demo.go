package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/harness/etcdembed"
)

// Errors Main returns when the demo shows the wrong thing; test with errors.Is.
var (
	// ErrOversold: the run with fencing sold more than the stock. This is
	// the failure the demo exists to rule out.
	ErrOversold = errors.New("demo: the fenced run oversold")
	// ErrNoViolation: the control run without fencing did not oversell, so
	// this time the demo proved nothing.
	ErrNoViolation = errors.New("demo: the unfenced control run did not oversell")
)

// Config is the demo subcommand's configuration.
type Config struct {
	Options
	Store backend.StoreConfig
	// Timeline, when set, is where the SVG timeline of both runs is written.
	Timeline string
	// Events, when set, is where every worker event of both runs is
	// written, one JSON object per line, with the run ("off", "on") added.
	Events string
}

// Main runs the demo: it sets up the lock service and the store, runs the
// workers with fencing off and then on, and prints the story of each run,
// the side-by-side table and the counters to out.
func Main(ctx context.Context, c Config, out io.Writer) error {
	if unsupported != "" {
		return errors.New("demo: " + unsupported)
	}
	o := c.Options.withDefaults()
	fmt.Fprintln(out, "fenceguard inventory demo: a lock holder frozen mid-sale, without and with fencing")
	fmt.Fprintln(out)

	lockDesc := o.Lock.String()
	if o.Lock.Kind == backend.Etcd && len(o.Lock.Etcd) == 0 {
		etcd, err := etcdembed.Start(ctx, etcdembed.Options{})
		if err != nil {
			return fmt.Errorf("demo: starting the embedded etcd: %w", err)
		}
		defer etcd.Close()
		o.Lock.Etcd = etcd.Endpoints()
		lockDesc = "etcd 3.7, embedded in this process (" + o.Lock.Etcd[0] + ")"
	}
	if err := o.validate(); err != nil {
		return err
	}
	store, err := backend.OpenStore(ctx, c.Store, o.Log)
	if err != nil {
		return err
	}
	defer store.Close()
	if store.Notice != "" {
		fmt.Fprintln(out, "NOTICE: "+store.Notice)
		fmt.Fprintln(out)
	}
	f := store.Fencing()
	fmt.Fprintf(out, "  lock service  %s; lease TTL %v\n", lockDesc, o.TTL)
	fmt.Fprintf(out, "  store         %s\n", store.Desc)
	fmt.Fprintf(out, "  fencing       %s\n", f.Setup)
	fmt.Fprintf(out, "  workers       %d processes, each looping: lock, read stock, work %v, write stock-1\n", o.Workers, o.Work)
	fmt.Fprintf(out, "  the pause     after %d sales, w%d is frozen with SIGSTOP between its read and its write,\n", o.FreezeAfter, victim)
	fmt.Fprintf(out, "                for %v (longer than the TTL), until another worker has sold\n", o.Pause)

	prefix := "lamp-" + randomHex(2)
	var results []*Result
	for _, fenced := range []bool{false, true} {
		sku := prefix + "-off"
		title := "fencing OFF: the service trusts the lock (plain SELECT, then UPDATE)"
		if fenced {
			sku = prefix + "-on"
			title = "fencing ON: every access carries the lease's token; the service refuses stale ones"
		}
		fmt.Fprintf(out, "\n%s\n  item %s, %d in stock\n", title, sku, o.Stock)
		ro := o
		ro.Progress = out
		res, err := Run(ctx, store, fenced, sku, ro)
		if err != nil {
			writeWorkerLogs(out, res)
			return err
		}
		results = append(results, res)
	}
	off, on := results[0], results[1]

	fmt.Fprintln(out)
	WriteTable(out, off, on)
	fmt.Fprintln(out)
	WriteCounters(out, off, on)
	fmt.Fprintln(out)

	if c.Events != "" {
		if err := writeEventsFile(c.Events, off, on); err != nil {
			return err
		}
		fmt.Fprintf(out, "events: %s\n", c.Events)
	}
	if c.Timeline != "" {
		if err := writeTimelineFile(c.Timeline, off, on); err != nil {
			return err
		}
		fmt.Fprintf(out, "timeline: %s\n\n", c.Timeline)
	}
	return Verdict(out, off, on)
}

// Verdict prints what the two runs showed and returns ErrOversold or
// ErrNoViolation when they showed the wrong thing.
func Verdict(out io.Writer, off, on *Result) error {
	var errs []error
	if n := off.Oversold(); n > 0 {
		fmt.Fprintf(out, "without fencing: %d units oversold. The lock alone did not protect the stock: w%d's lease\n", n, victim)
		fmt.Fprintf(out, "  expired while it was frozen, and its write, made on what it had read before, overwrote the others' sales.\n")
	} else {
		fmt.Fprintln(out, "without fencing: nothing oversold this time, so this run proves nothing.")
		errs = append(errs, ErrNoViolation)
	}
	if n := on.Oversold(); n > 0 {
		fmt.Fprintf(out, "with fencing: %d units OVERSOLD. This must never happen: please report it.\n", n)
		errs = append(errs, ErrOversold)
	} else {
		fmt.Fprintf(out, "with fencing: nothing oversold. The same late write carried an older token than the item\n")
		fmt.Fprintf(out, "  had seen since, and was refused (409).\n")
	}
	return errors.Join(errs...)
}

func writeTimelineFile(path string, runs ...*Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteTimeline(f, runs...); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeEventsFile(path string, runs ...*Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range runs {
		run := "off"
		if r.Fenced {
			run = "on"
		}
		for _, e := range r.Events {
			if err := enc.Encode(struct {
				Run string `json:"run"`
				worker.Event
			}{run, e}); err != nil {
				f.Close()
				return err
			}
		}
	}
	return f.Close()
}

func writeWorkerLogs(out io.Writer, res *Result) {
	if res == nil {
		return
	}
	for _, p := range res.Workers {
		if p.Err != nil || p.Stderr != "" {
			fmt.Fprintf(out, "--- worker %d (pid %d) exited: %v\n%s\n", p.ID, p.PID, p.Err, p.Stderr)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
