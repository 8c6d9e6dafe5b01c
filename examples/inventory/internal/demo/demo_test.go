package demo

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/token"
)

// workerEnv makes the test binary run as a worker process: the demo's
// workers are this binary, re-executed, as the real demo re-executes itself.
const workerEnv = "FENCEGUARD_INVENTORY_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := worker.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	harness.Main(m)
}

func testCommand(args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	return cmd
}

// short is a run short enough to repeat: 3 workers, 8 units, 2 s leases
// (etcd's minimum), a 2.2 s freeze.
func short(t *testing.T) Options {
	etcd := etcdserver.Shared(t)
	return Options{
		Workers:     3,
		Stock:       8,
		TTL:         2 * time.Second,
		Work:        20 * time.Millisecond,
		Pause:       2200 * time.Millisecond,
		FreezeAfter: 2,
		RunTimeout:  40 * time.Second,
		Lock:        backend.LockConfig{Kind: backend.Etcd, Etcd: etcd.Endpoints, Prefix: etcd.Prefix},
		Command:     testCommand,
	}
}

func pgStore(t *testing.T) service.Store {
	t.Helper()
	pg := pgserver.Shared(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := service.NewPostgresStore(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, store service.Store, fenced bool, sku string, o Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, store, fenced, sku, o)
	if res != nil {
		requireNoWorkers(t, res)
	}
	if err != nil {
		logRun(t, res)
		t.Fatalf("run %s: %v", sku, err)
	}
	return res
}

// requireNoWorkers checks that every worker process is gone.
func requireNoWorkers(t *testing.T, res *Result) {
	t.Helper()
	for _, p := range res.Workers {
		if p.PID != 0 && alive(p.PID) {
			t.Errorf("worker %d (pid %d) still alive after Run", p.ID, p.PID)
		}
	}
}

func logRun(t *testing.T, res *Result) {
	t.Helper()
	if res == nil {
		return
	}
	t.Logf("story:\n%s", strings.Join(res.Story, "\n"))
	for _, p := range res.Workers {
		if p.Err != nil || p.Stderr != "" {
			t.Logf("worker %d: %v\n%s", p.ID, p.Err, p.Stderr)
		}
	}
}

// The point of the library: with fencing, the frozen holder's late write is
// refused, every time, on the strong PostgreSQL setup and on the in-memory
// one.
func TestFencedRunNeverOversells(t *testing.T) {
	o := short(t)
	pg := pgStore(t)
	mem := service.NewMemoryStore()
	for i := range 6 {
		store, name := service.Store(pg), "postgres"
		if i == 5 {
			store, name = mem, "memory"
		}
		res := run(t, store, true, fmt.Sprintf("fenced-%d", i), o)
		f := res.Freeze
		if res.Oversold() != 0 || res.Final != 0 || res.Sold != o.Stock {
			logRun(t, res)
			t.Fatalf("run %d (%s): sold %d of %d, final stock %d: oversold %d", i, name, res.Sold, o.Stock, res.Final, res.Oversold())
		}
		// The schedule happened: the victim was frozen past its lease, another
		// worker took over, and the victim's write came and was refused.
		if f.End.Sub(f.Start) < o.Pause || f.Takeover == nil || f.Write == nil ||
			f.Write.Kind != worker.Refused || f.Write.Token != f.Token || f.Write.Current <= f.Token || res.Rejected != 1 {
			logRun(t, res)
			t.Fatalf("run %d (%s): the schedule did not happen as planned: %+v, rejected %d", i, name, f, res.Rejected)
		}
	}
}

// The control: the same schedule without fencing oversells every time, by
// exactly the sales the frozen holder's write undid. Were this ever to pass
// without overselling, the fenced test above would prove nothing.
func TestUnfencedControlOversellsEveryTime(t *testing.T) {
	o := short(t)
	pg := pgStore(t)
	mem := service.NewMemoryStore()
	for i := range 4 {
		store, name := service.Store(pg), "postgres"
		if i == 3 {
			store, name = mem, "memory"
		}
		res := run(t, store, false, fmt.Sprintf("control-%d", i), o)
		f := res.Freeze
		if f.Write == nil || f.Write.Kind != worker.Wrote || f.Undone < 1 {
			logRun(t, res)
			t.Fatalf("run %d (%s): the victim's late write: %+v, undone %d", i, name, f.Write, f.Undone)
		}
		if res.Oversold() != f.Undone || res.Rejected != 0 || res.Final != 0 {
			logRun(t, res)
			t.Fatalf("run %d (%s): sold %d of %d, final %d: oversold %d, want %d (the sales undone)",
				i, name, res.Sold, o.Stock, res.Final, res.Oversold(), f.Undone)
		}
	}
}

// progressWatch calls fn once, when a progress line contains s.
type progressWatch struct {
	mu   sync.Mutex
	s    string
	fn   func()
	done bool
}

func (p *progressWatch) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done && bytes.Contains(b, []byte(p.s)) {
		p.done = true
		p.fn()
	}
	return len(b), nil
}

// Cancelled while its victim is frozen, a run ends at once and leaves no
// process behind, frozen or not.
func TestCancelWhileFrozen(t *testing.T) {
	o := short(t)
	o.Pause = 30 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.Progress = &progressWatch{s: "frozen with SIGSTOP", fn: cancel}
	start := time.Now()
	res, err := Run(ctx, service.NewMemoryStore(), true, "cancelled", o)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v after the cancel", d)
	}
	if len(res.Workers) != o.Workers {
		t.Fatalf("%d workers accounted for, want %d", len(res.Workers), o.Workers)
	}
	requireNoWorkers(t, res)
}

func TestOptionsValidate(t *testing.T) {
	lock := backend.LockConfig{Kind: backend.Etcd, Etcd: []string{"127.0.0.1:1"}}
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"pause not longer than the TTL", Options{TTL: 2 * time.Second, Pause: 2 * time.Second, Lock: lock}},
		{"one worker", Options{Workers: 1, Lock: lock}},
		{"nothing left to sell", Options{Stock: 3, FreezeAfter: 3, Lock: lock}},
		{"no lock service", Options{Lock: backend.LockConfig{Kind: backend.Redis}}},
	} {
		if err := c.o.withDefaults().validate(); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if err := (Options{Lock: lock}).withDefaults().validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// synthetic is a small unfenced run, as the runner would record it.
func synthetic() *Result {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(ms, w int, k worker.Kind, tok, stock int) worker.Event {
		return worker.Event{Time: at(ms), Worker: w, Kind: k, Token: tokenOf(tok), Stock: stock}
	}
	r := &Result{SKU: "lamp-x-off", TTL: 2 * time.Second, Initial: 4, Final: 0, Start: t0, End: at(5000)}
	r.Events = []worker.Event{
		ev(100, 1, worker.Acquired, 5, 0), ev(110, 1, worker.Read, 5, 4), ev(200, 1, worker.Wrote, 5, 3), ev(210, 1, worker.Released, 0, 0),
		ev(220, 1, worker.Acquired, 7, 0), ev(230, 1, worker.Read, 7, 3),
		ev(2500, 2, worker.Acquired, 9, 0), ev(2510, 2, worker.Read, 9, 3), ev(2600, 2, worker.Wrote, 9, 2), ev(2610, 2, worker.Released, 0, 0),
		ev(2700, 2, worker.Acquired, 11, 0), ev(2710, 2, worker.Read, 11, 2), ev(2800, 2, worker.Wrote, 11, 1), ev(2810, 2, worker.Released, 0, 0),
		ev(3900, 1, worker.Wrote, 7, 2), ev(3910, 1, worker.Lost, 0, 0),
		ev(4000, 2, worker.Acquired, 13, 0), ev(4010, 2, worker.Read, 13, 2), ev(4100, 2, worker.Wrote, 13, 1), ev(4110, 2, worker.Released, 0, 0),
		ev(4200, 2, worker.Acquired, 15, 0), ev(4210, 2, worker.Read, 15, 1), ev(4300, 2, worker.Wrote, 15, 0), ev(4310, 2, worker.Released, 0, 0),
	}
	r.Sold = 6
	take, write := r.Events[6], r.Events[14]
	r.Freeze = Freeze{Worker: 1, PID: 42, Token: 7, StockRead: 3, Start: at(240), End: at(3800), Takeover: &take, Write: &write, Undone: 2}
	r.Counters = map[string]float64{`fenceguard_acquisitions_total{class="sku"}`: 6, `fenceguard_renewals_total{class="sku"}`: 0}
	return r
}

func tokenOf(n int) (t tokenT) { return tokenT(n) }

func TestReport(t *testing.T) {
	off := synthetic()
	on := synthetic()
	on.Fenced, on.Sold, on.Rejected = true, 4, 1
	if off.Oversold() != 2 || on.Oversold() != 0 {
		t.Fatalf("oversold %d and %d, want 2 and 0", off.Oversold(), on.Oversold())
	}
	if tp := off.Throughput(); tp < 1.4 || tp > 1.5 { // 6 sales from 0.1s to 4.3s
		t.Errorf("throughput %.2f", tp)
	}
	var b bytes.Buffer
	WriteTable(&b, off, on)
	WriteCounters(&b, off, on)
	out := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"units oversold 2 0 <-", "stale writes rejected 0 1",
		`fenceguard_acquisitions_total{class="sku"} 6 6`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "renewals_total") {
		t.Errorf("a counter that stayed 0 is listed:\n%s", out)
	}
	b.Reset()
	if err := Verdict(&b, off, on); err != nil {
		t.Errorf("Verdict: %v", err)
	}
	if err := Verdict(io.Discard, on, off); !errors.Is(err, ErrOversold) || !errors.Is(err, ErrNoViolation) {
		t.Errorf("Verdict with the runs swapped: %v, want both errors", err)
	}
}

// The timeline is well-formed SVG with the labels that carry the story.
func TestTimeline(t *testing.T) {
	off := synthetic()
	on := synthetic()
	on.Fenced = true
	refused := worker.Event{Time: off.Freeze.Write.Time, Worker: 1, Kind: worker.Refused, Op: "write", Token: 7, Current: 11}
	on.Freeze.Write = &refused
	on.Events[14] = refused
	on.Sold, on.Rejected = 5, 1
	var b bytes.Buffer
	if err := WriteTimeline(&b, off, on); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			texts = append(texts, string(cd))
		}
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{
		"fencing OFF", "fencing ON", "2 units oversold",
		"FROZEN (SIGSTOP) 3.6s — holds token 7, read stock 3",
		"w1's lease expired: w2 granted token 9",
		"stale write ACCEPTED: token 7 sets stock 2 (it was 1)",
		"stale write REFUSED (409): token 7 &lt; 11",
		"w1", "w2", "stock",
	} {
		if !strings.Contains(all, strings.ReplaceAll(want, "&lt;", "<")) {
			t.Errorf("timeline lacks %q", want)
		}
	}
}

type tokenT = token.Token
