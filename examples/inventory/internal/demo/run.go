package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/child"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/token"
)

// Options configure one run ([Run]) and the whole demo ([Config]). Zero
// fields select the defaults.
type Options struct {
	Workers     int           // worker processes; default 4
	Stock       int           // units in stock at the start; default 30
	TTL         time.Duration // lease TTL; default 2s
	Work        time.Duration // a worker's time between read and write; default 100ms
	Pause       time.Duration // how long the victim stays frozen at least; default 3.5s, must exceed TTL
	MaxPause    time.Duration // longest freeze while waiting for another worker to sell; default 30s
	FreezeAfter int           // units sold before the victim is frozen; default 3
	RunTimeout  time.Duration // a run that has not sold out by then is stopped; default 60s

	// Lock is the lock service the workers use; its endpoints must be set.
	Lock backend.LockConfig

	// Services, when set, are the base URLs of running service instances
	// over one store, which the workers address in turn; Run then starts
	// no service of its own. Default: Run serves the store itself.
	Services []string

	// Command returns the command that runs a worker with args. Default:
	// this executable with the "worker" subcommand.
	Command func(args []string) *exec.Cmd

	// Log receives the service's logs. Default: discarded.
	Log *slog.Logger
	// Progress receives the story of a run as it happens. Default: none.
	Progress io.Writer
	// WorkerLogs receives the workers' standard error. Default: kept in
	// the [Result] only.
	WorkerLogs io.Writer
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Stock <= 0 {
		o.Stock = 30
	}
	def(&o.TTL, worker.DefaultTTL)
	if o.Work <= 0 {
		o.Work = worker.DefaultWork
	}
	def(&o.Pause, 3500*time.Millisecond)
	def(&o.MaxPause, 30*time.Second)
	if o.FreezeAfter <= 0 {
		o.FreezeAfter = 3
	}
	def(&o.RunTimeout, 60*time.Second)
	if o.Command == nil {
		o.Command = selfCommand
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	if o.Workers < 2 {
		return errors.New("demo: at least 2 workers: one to freeze, one to take over")
	}
	if o.Pause <= o.TTL {
		return fmt.Errorf("demo: the pause (%v) must be longer than the lease TTL (%v)", o.Pause, o.TTL)
	}
	if o.FreezeAfter >= o.Stock {
		return fmt.Errorf("demo: %d units in stock leave nothing to sell after the first %d", o.Stock, o.FreezeAfter)
	}
	return o.Lock.Validate(true)
}

// selfCommand re-executes this program as a worker.
func selfCommand(args []string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return exec.Command(exe, append([]string{"worker"}, args...)...)
}

// victim is the worker the demo freezes.
const victim = 1

// Result is what one run did.
type Result struct {
	Fenced   bool
	SKU      string
	TTL      time.Duration
	Initial  int       // stock at the start
	Final    int       // stock at the end
	Sold     int       // accepted writes: units the workers sold
	Rejected int       // writes refused with a stale token
	Start    time.Time // workers started
	End      time.Time // last worker exited
	Events   []worker.Event
	Freeze   Freeze
	Story    []string           // what happened, as printed
	Counters map[string]float64 // fenceguard_* counters of the workers and the service, summed
	Workers  []Proc
}

// Oversold is how many units were sold beyond what left the stock.
func (r *Result) Oversold() int { return r.Sold - (r.Initial - r.Final) }

// Throughput is units sold per second, from the first grant to the last sale.
func (r *Result) Throughput() float64 {
	var first, last time.Time
	for _, e := range r.Events {
		if e.Kind == worker.Acquired && first.IsZero() {
			first = e.Time
		}
		if e.Kind == worker.Wrote {
			last = e.Time
		}
	}
	if d := last.Sub(first).Seconds(); d > 0 {
		return float64(r.Sold) / d
	}
	return 0
}

// Freeze is the pause injected into the victim.
type Freeze struct {
	Worker    int
	PID       int
	Token     token.Token // the victim's lease when frozen
	StockRead int         // what it had read
	Start     time.Time   // SIGSTOP
	End       time.Time   // SIGCONT; zero if it never happened
	Takeover  *worker.Event
	Write     *worker.Event // the victim's write after the pause: Wrote or Refused
	Undone    int           // others' sales between the victim's read and its write
}

// Proc is one worker process.
type Proc struct {
	ID     int
	PID    int
	Err    error  // how it exited, nil for success
	Stderr string // the tail of its standard error
}

// Run runs the workers once against a service on store with fencing on or
// off, freezes the victim, and reports. The item sku is created with the
// initial stock through the admin API. Every worker process has ended when
// Run returns.
//
// With o.Services set, Run starts no service and store is unused: the
// workers address those instances in turn (each request to the next), which
// must be fenced or not as fenced says, and share one store; Run seeds and
// reads the item through the first and sums the counters of all.
func Run(ctx context.Context, store service.Store, fenced bool, sku string, o Options) (*Result, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	var (
		bases    = o.Services
		counters func(context.Context) (map[string]float64, error)
	)
	if len(bases) == 0 {
		reg := prometheus.NewRegistry()
		// The service asks the workers' lock service which token the current
		// grant carries, and refuses anything above it (made-up tokens).
		seq, closeSeq, err := backend.OpenSequencer(ctx, o.Lock, o.Log)
		if err != nil {
			return nil, fmt.Errorf("demo: the lock service's sequencer: %w", err)
		}
		defer closeSeq()
		h, err := service.New(service.Options{Store: store, Unfenced: !fenced, Registry: reg, Logger: o.Log, Sequencer: seq})
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			srv.Serve(ln)
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
			<-served
		}()
		bases = []string{"http://" + ln.Addr().String()}
		counters = func(context.Context) (map[string]float64, error) { return service.Counters(reg) }
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	if counters == nil {
		counters = func(ctx context.Context) (map[string]float64, error) { return scrapeCounters(ctx, hc, bases) }
	}
	client := &service.Client{Base: bases[0], HTTP: hc}
	if _, err := client.AdminPut(ctx, sku, o.Stock); err != nil {
		return nil, fmt.Errorf("demo: seeding %s: %w", sku, err)
	}

	r := &runner{o: o, res: &Result{Fenced: fenced, SKU: sku, TTL: o.TTL, Initial: o.Stock, Counters: map[string]float64{}}}
	runErr := r.run(ctx, strings.Join(bases, ","), sku)

	// The final stock and the service's counters, whatever happened.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	it, err := client.AdminGet(fctx, sku)
	if err != nil {
		return r.res, errors.Join(runErr, fmt.Errorf("demo: reading the final stock: %w", err))
	}
	r.res.Final = it.Stock
	sc, err := counters(fctx)
	for k, v := range sc {
		r.res.Counters[k] += v
	}
	return r.res, errors.Join(runErr, err)
}

// scrapeCounters sums the fenceguard_* counters the services' /metrics
// show, keyed as [service.Counters] keys them (labels sorted by name, as
// the exposition format writes them).
func scrapeCounters(ctx context.Context, hc *http.Client, bases []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, base := range bases {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
		if err != nil {
			return out, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return out, err
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "fenceguard_") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			name := line[:i]
			if n, _, _ := strings.Cut(name, "{"); !strings.HasSuffix(n, "_total") {
				continue
			}
			var v float64
			if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
				out[name] += v
			}
		}
		resp.Body.Close()
		if err := sc.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// runner is one run's orchestration. It is used by one goroutine, run's.
type runner struct {
	o           Options
	res         *Result
	procs       map[int]*proc
	msgs        chan msg
	logs        io.Writer // the workers' stderr copies go here too, serialized
	soldOutSaid bool

	phase     phase
	pauseOver bool         // the victim has been frozen for Pause
	inside    map[int]bool // workers let into their critical section and not yet out
	held      []int        // workers granted the lock, waiting for the victim's write
	stock     int          // the stock the others' last sale left

	ready []int // workers up and waiting to start, until all are (see begin)
	begun bool  // every worker started running was let go
}

type proc struct {
	id     int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	exited bool
}

// msg is what a worker's reader goroutine sends: an event, a line that is
// no event, or, last of all, the process's exit.
type msg struct {
	id     int
	ev     *worker.Event
	junk   string
	exited bool
	err    error
}

// phase is where a run stands in the schedule (see the package doc).
type phase int

const (
	selling  phase = iota // before the freeze: every gate is acknowledged at once
	frozen                // the victim is stopped; the others take over
	draining              // the pause is over: new grants wait; the victim resumes once no other holder is inside its critical section
	resumed               // the victim runs again; new grants wait until its write is answered
	settled               // the interleaving has happened: every gate is acknowledged at once
)

func (r *runner) run(ctx context.Context, base, sku string) (err error) {
	r.procs = map[int]*proc{}
	r.msgs = make(chan msg)
	r.inside = map[int]bool{}
	if r.o.WorkerLogs != nil {
		r.logs = &locked{w: r.o.WorkerLogs}
	}
	r.res.Start = time.Now()
	defer func() { r.stopAll(); r.res.End = time.Now() }()
	for id := 1; id <= r.o.Workers; id++ {
		if err := r.start(id, base, sku); err != nil {
			return err
		}
	}
	var (
		pauseOver <-chan time.Time
		pauseLong <-chan time.Time
		timeout   = time.After(r.o.RunTimeout)
		alive     = len(r.procs)
	)
	for alive > 0 {
		select {
		case m := <-r.msgs:
			switch {
			case m.exited:
				alive--
				r.exited(m)
				r.begin(alive)
			case m.junk != "":
				r.o.Log.Debug("worker wrote a line that is no event", "worker", m.id, "line", m.junk)
			default:
				r.res.Events = append(r.res.Events, *m.ev)
				if err := r.handle(*m.ev); err != nil {
					return err
				}
				r.begin(alive)
				if r.phase == frozen && pauseOver == nil && !r.pauseOver {
					pauseOver = time.After(r.o.Pause)
					pauseLong = time.After(r.o.MaxPause)
				}
			}
		case <-pauseOver:
			pauseOver, r.pauseOver = nil, true
		case <-pauseLong:
			pauseLong = nil
			if r.phase == frozen {
				r.sayAt(time.Now(), "nobody sold while w%d was frozen for %v: resuming it anyway", victim, r.o.MaxPause)
				r.phase = draining
			}
		case <-timeout:
			return fmt.Errorf("demo: the run did not sell out within %v", r.o.RunTimeout)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := r.advance(); err != nil {
			return err
		}
	}
	if r.res.Freeze.Start.IsZero() {
		return fmt.Errorf("demo: w%d was never frozen (sold out before it read again?)", victim)
	}
	return nil
}

// begin lets the workers go once every one still running is up: they
// queue for the lock together, so none is still starting (a process start
// can take seconds on a loaded machine) while the others sell the stock
// out before the victim has read.
func (r *runner) begin(alive int) {
	if r.begun || len(r.ready) < alive {
		return
	}
	r.begun = true
	for _, id := range r.ready {
		r.ack(id)
	}
	r.ready = nil
}

// advance moves the schedule on when its condition holds.
func (r *runner) advance() error {
	f := &r.res.Freeze
	if r.phase == frozen && r.pauseOver && r.soldSince(f.Start) > 0 {
		r.phase = draining // the interleaving has happened: someone sold meanwhile
	}
	if r.phase == draining && !r.othersInside() {
		if err := r.resume(); err != nil {
			return err
		}
		r.phase = resumed
	}
	return nil
}

// handle reacts to one event: the gates, the freeze and the story.
func (r *runner) handle(e worker.Event) error {
	f := &r.res.Freeze
	switch e.Kind {
	case worker.Ready:
		if r.begun {
			r.ack(e.Worker)
		} else {
			r.ready = append(r.ready, e.Worker)
		}
	case worker.Acquired:
		if r.phase == frozen && e.Worker != victim && f.Takeover == nil {
			ev := e
			f.Takeover = &ev
			r.sayAt(e.Time, "w%d's lease has expired: w%d is granted the lock, token %s", victim, e.Worker, e.Token)
		}
		if e.Gate {
			if e.Worker != victim && (r.phase == draining || r.phase == resumed) {
				r.held = append(r.held, e.Worker) // enters once the victim's write is answered
			} else {
				r.inside[e.Worker] = true
				r.ack(e.Worker)
			}
		}
	case worker.Read:
		if e.Worker == victim && r.phase == selling && e.Stock > 0 && r.res.Sold >= r.o.FreezeAfter {
			if err := r.freeze(e); err != nil {
				return err
			}
			r.phase = frozen
		}
		if e.Gate {
			r.ack(e.Worker) // the frozen victim's ack waits in its pipe until it resumes
		}
	case worker.Wrote:
		r.res.Sold++
		if e.Worker != victim {
			r.stock = e.Stock
		}
	case worker.Refused:
		if e.Op == "write" {
			r.res.Rejected++
		}
	case worker.Released, worker.Lost:
		delete(r.inside, e.Worker)
	case worker.SoldOut:
		if !r.soldOutSaid {
			r.soldOutSaid = true
			r.sayAt(e.Time, "w%d reads stock 0: sold out", e.Worker)
		}
	case worker.Counters:
		for k, v := range e.Counters {
			r.res.Counters[k] += v
		}
	}
	if e.Worker == victim && r.phase == resumed {
		r.victimAfterPause(e)
	}
	return nil
}

// victimAfterPause records the victim's write after the pause and lets the
// held grants go on once it is answered (or the victim's critical section
// ended without one).
func (r *runner) victimAfterPause(e worker.Event) {
	f := &r.res.Freeze
	switch e.Kind {
	case worker.Wrote:
		ev := e
		f.Write = &ev
		f.Undone = r.soldBetween(f.Start, e.Time)
		r.sayAt(e.Time, "w%d writes stock %d with its old token %s: ACCEPTED, undoing the %d sales made meanwhile",
			victim, e.Stock, e.Token, f.Undone)
	case worker.Refused:
		ev := e
		f.Write = &ev
		r.sayAt(e.Time, "w%d writes stock %d with its old token %s: REFUSED, 409 stale-token (the item has seen %s)",
			victim, f.StockRead-1, e.Token, e.Current)
	case worker.Released, worker.Lost, worker.Failed:
	default:
		return
	}
	r.phase = settled
	for _, id := range r.held {
		r.inside[id] = true
		r.ack(id)
	}
	r.held = nil
}

func (r *runner) othersInside() bool {
	for id := range r.inside {
		if id != victim && !r.procs[id].exited {
			return true
		}
	}
	return false
}

func (r *runner) exited(m msg) {
	p := r.procs[m.id]
	p.exited = true
	delete(r.inside, m.id)
	r.res.Workers = append(r.res.Workers, Proc{ID: m.id, PID: p.cmd.Process.Pid, Err: m.err, Stderr: p.stderr.String()})
	if m.id == victim && (r.phase == frozen || r.phase == draining || r.phase == resumed) {
		r.victimAfterPause(worker.Event{Kind: worker.Failed})
	}
}

// soldSince counts other workers' sales reported after t.
func (r *runner) soldSince(t time.Time) int { return r.soldBetween(t, time.Time{}) }

// soldBetween counts other workers' sales in (from, to]; a zero to is open.
func (r *runner) soldBetween(from, to time.Time) int {
	n := 0
	for _, e := range r.res.Events {
		if e.Kind == worker.Wrote && e.Worker != victim && e.Time.After(from) && (to.IsZero() || !e.Time.After(to)) {
			n++
		}
	}
	return n
}

// freeze stops the victim right after its read. The worker waits for its
// ack there, so it cannot have gone on to write.
func (r *runner) freeze(e worker.Event) error {
	f := &r.res.Freeze
	p := r.procs[victim]
	if err := p.cmd.Process.Signal(sigStop); err != nil {
		return fmt.Errorf("demo: SIGSTOP w%d: %w", victim, err)
	}
	f.Start = time.Now()
	for deadline := f.Start.Add(2 * time.Second); !stopped(p.cmd.Process.Pid); {
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: w%d (pid %d) did not stop", victim, p.cmd.Process.Pid)
		}
		time.Sleep(time.Millisecond) // polling the kernel's view; no event to wait on
	}
	f.Worker, f.PID, f.Token, f.StockRead = victim, p.cmd.Process.Pid, e.Token, e.Stock
	r.sayAt(e.Time, "w%d holds the lock (token %s) and reads stock %d", victim, e.Token, e.Stock)
	r.sayAt(f.Start, "w%d (pid %d) frozen with SIGSTOP before it writes; its lease TTL is %v", victim, f.PID, r.o.TTL)
	return nil
}

func (r *runner) resume() error {
	f := &r.res.Freeze
	p := r.procs[victim]
	if p.exited {
		return nil
	}
	if err := p.cmd.Process.Signal(sigCont); err != nil {
		return fmt.Errorf("demo: SIGCONT w%d: %w", victim, err)
	}
	f.End = time.Now()
	r.sayAt(f.End, "w%d resumed with SIGCONT after %.1fs, between two sales; the others sold %d, stock is %d",
		victim, f.End.Sub(f.Start).Seconds(), r.soldSince(f.Start), r.stock)
	return nil
}

func (r *runner) ack(id int) {
	if p := r.procs[id]; p != nil && !p.exited {
		io.WriteString(p.stdin, "\n") // a dead worker's EPIPE changes nothing
	}
}

func (r *runner) sayAt(t time.Time, format string, args ...any) {
	line := fmt.Sprintf("%6.2fs  ", t.Sub(r.res.Start).Seconds()) + fmt.Sprintf(format, args...)
	r.res.Story = append(r.res.Story, line)
	if r.o.Progress != nil {
		fmt.Fprintln(r.o.Progress, "  "+line)
	}
}

// start runs worker id and its reader goroutine.
func (r *runner) start(id int, base, sku string) error {
	cfg := worker.Config{ID: id, Service: base, SKU: sku, TTL: r.o.TTL, Work: r.o.Work, Gate: true, Lock: r.o.Lock}
	cmd := r.o.Command(cfg.Args())
	child.Prepare(cmd, true)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p := &proc{id: id, cmd: cmd, stdin: stdin, stderr: &tailBuffer{max: 16 << 10}}
	cmd.Stderr = p.stderr
	if r.logs != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, r.logs)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("demo: starting worker %d: %w", id, err)
	}
	r.procs[id] = p
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e worker.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Kind == "" {
				r.msgs <- msg{id: id, junk: sc.Text()}
				continue
			}
			e.Worker = id // trust the demo's numbering, not the line
			r.msgs <- msg{id: id, ev: &e}
		}
		io.Copy(io.Discard, stdout) // after a scanner error: drain, so Wait may run
		r.msgs <- msg{id: id, exited: true, err: cmd.Wait()}
	}()
	return nil
}

// stopAll ends every worker still running — resumed first, so a frozen one
// can act on SIGTERM — and waits for all of them, reading their last
// messages so no reader goroutine is left behind.
func (r *runner) stopAll() {
	running := 0
	for _, p := range r.procs {
		if !p.exited {
			running++
			p.cmd.Process.Signal(sigCont)
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.stdin.Close()
		}
	}
	kill := time.After(3 * time.Second)
	for running > 0 {
		select {
		case m := <-r.msgs:
			if m.exited {
				running--
				r.exited(m)
			} else if m.ev != nil {
				r.res.Events = append(r.res.Events, *m.ev)
			}
		case <-kill:
			for _, p := range r.procs {
				if !p.exited {
					p.cmd.Process.Kill()
				}
			}
		}
	}
	for _, p := range r.procs {
		p.stdin.Close()
	}
}

// tailBuffer keeps the last max bytes written to it. It is safe for
// concurrent use (exec copies stderr from a goroutine).
type tailBuffer struct {
	max int
	mu  sync.Mutex
	b   []byte // guarded by mu
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimRight(string(t.b), "\n")
}

// locked serializes writes to w: each worker's standard error is copied by
// a goroutine of its own.
type locked struct {
	mu sync.Mutex
	w  io.Writer // guarded by mu
}

func (l *locked) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
