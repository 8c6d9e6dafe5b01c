// Package load is the inventory's load command (`inventory load`): it runs
// `inventory serve` as a child process against PostgreSQL, drives it with
// hostile traffic — valid tokens, stale ones, garbage, forged ones, names
// that are no item — for a fixed time, once with fencing on and once with
// it off (both running, taking the load in turns), and reports what a deployment cares about: throughput, latency,
// the status mix, 5xx, the service's memory and the fencing state it
// keeps, the log volume, and the fenced/unfenced throughput ratio.
//
// It is a bounded command, not a test: docs/load.md records a run.
package load

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/child"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/token"
)

// Config is the load command's configuration.
type Config struct {
	Duration time.Duration // the fenced run
	Control  time.Duration // the unfenced run, in turns with the fenced one; 0 skips it
	Clients  int           // concurrent clients
	Items    int           // real items
	URL      string        // PostgreSQL; empty: a throwaway server
	// CPUProfile, when set, is the prefix of the serve children's CPU
	// profiles: <prefix>-on.prof (fenced) and <prefix>-off.prof.
	CPUProfile string
	// Command runs `inventory` with args (the serve child).
	Command func(args []string) *exec.Cmd
}

// Main parses args and runs the load, writing the report to out.
func Main(ctx context.Context, args []string, command func([]string) *exec.Cmd, out io.Writer) error {
	c := Config{Command: command}
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.DurationVar(&c.Duration, "duration", time.Minute, "how long to load the fenced service")
	fs.DurationVar(&c.Control, "control", -1, "how long to load the unfenced service, in 10 s turns with the fenced one, for the throughput ratio (default: -duration; 0 skips it)")
	fs.IntVar(&c.Clients, "clients", 16, "concurrent clients")
	fs.IntVar(&c.Items, "items", 64, "items in stock")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write CPU profiles of the serve children to <prefix>-on.prof and <prefix>-off.prof (off by default)")
	fs.StringVar(&c.URL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL, else a throwaway local server)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if backend.IsMySQLURL(c.URL) {
		return errors.New("load: runs against PostgreSQL only; a mysql:// database URL is for demo and serve")
	}
	if c.Control < 0 {
		c.Control = c.Duration
	}
	if c.Duration <= 0 || c.Clients <= 0 || c.Items <= 0 {
		return errors.New("load: -duration, -clients and -items must be positive")
	}
	return Run(ctx, c, out)
}

// Run runs the fenced load, then the unfenced one, and reports both.
func Run(ctx context.Context, c Config, out io.Writer) error {
	dsn := c.URL
	desc := "PostgreSQL from the database URL"
	if dsn == "" {
		srv, err := pgserver.Start(ctx)
		if err != nil {
			return fmt.Errorf("load: no database URL, and a throwaway PostgreSQL did not start: %w", err)
		}
		defer srv.Close()
		dsn = pgserver.DSN(srv)
		desc = "throwaway PostgreSQL"
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err == nil {
		desc = "PostgreSQL " + strings.Fields(version)[0] + ", " + strings.TrimPrefix(desc, "PostgreSQL ")
	}
	fmt.Fprintf(out, "inventory load: %d clients, %d items, %s\n", c.Clients, c.Items, desc)
	fmt.Fprintf(out, "mix: %s\n\n", mixDesc())

	// Both services run at once and take the load in turn, in slices,
	// while the unfenced one has time left: whatever else the machine does
	// then slows both alike, and the ratio compares like with like.
	on, err := c.start(ctx, pool, dsn, true)
	if err != nil {
		return err
	}
	defer on.close()
	var off *target
	if c.Control > 0 {
		if off, err = c.start(ctx, pool, dsn, false); err != nil {
			return err
		}
		defer off.close()
	}
	for _, t := range []*target{on, off} {
		if t != nil {
			if err := t.begin(ctx, pool); err != nil {
				return err
			}
		}
	}
	const slice = 10 * time.Second
	for on.res.dur < c.Duration || (off != nil && off.res.dur < c.Control) {
		paired := off != nil && off.res.dur < c.Control
		if on.res.dur < c.Duration {
			n, d := on.res.requests, on.res.dur
			c.measure(ctx, on, min(slice, c.Duration-on.res.dur))
			if paired {
				on.pairedReq += on.res.requests - n
				on.pairedDur += on.res.dur - d
			}
		}
		if paired {
			c.measure(ctx, off, min(slice, c.Control-off.res.dur))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for _, t := range []*target{on, off} {
		if t != nil {
			if err := t.end(ctx, pool); err != nil {
				return err
			}
		}
	}
	on.res.write(out)
	if off != nil {
		fmt.Fprintln(out)
		off.res.write(out)
		pairedRPS := float64(on.pairedReq) / on.pairedDur.Seconds()
		fmt.Fprintf(out, "\nthroughput fenced / unfenced: %.2f (%.0f / %.0f requests/s, over the %v each took the load in turn)\n",
			pairedRPS/off.res.rps(), pairedRPS, off.res.rps(), off.res.dur.Round(time.Second))
	}
	if n := on.res.status5xx(); n > 0 {
		return fmt.Errorf("load: %d 5xx answers from the fenced service", n)
	}
	return nil
}

// kinds of request, with their weights in the mix.
type kind int

const (
	sell      kind = iota // POST sell, a holder's token
	read                  // GET, a holder's token
	restock               // PUT stock, a holder's token
	stale                 // a token a minute old
	garbage               // not a token
	forged                // 2^64-1 or an hour ahead
	randomSKU             // a valid token for a name that is no item
	noToken               // a write without a token
	nKinds
)

var (
	kindNames = [nKinds]string{"sell", "read", "restock", "stale", "garbage", "forged", "random-sku", "no-token"}
	weights   = [nKinds]int{30, 15, 5, 10, 10, 5, 20, 5}
)

func mixDesc() string {
	var parts []string
	for k := range nKinds {
		parts = append(parts, fmt.Sprintf("%s %d%%", kindNames[k], weights[k]))
	}
	return strings.Join(parts, ", ")
}

func pick(r *mrand.Rand) kind {
	n := r.IntN(100)
	for k := range nKinds {
		if n < weights[k] {
			return k
		}
		n -= weights[k]
	}
	return sell
}

var garbageTokens = []string{"abc", "-1", "007", "0", "1 2", "99999999999999999999999", "１２３", "0x10", ""}

// result is one run's figures.
type result struct {
	fenced            bool
	dur               time.Duration
	requests          int
	statuses          map[int]int
	byKind            [nKinds]map[int]int
	errors            int // no answer
	lat               []time.Duration
	rssStart, rssEnd  int64 // kB
	rssMax            int64
	marksStart        int64 // fence_tokens rows
	marksEnd          int64
	itemMarksEnd      int64 // items rows with a mark
	itemsStart        int64
	itemsEnd          int64
	logBytes          int64 // during the run
	logTotal          int64 // since serve started
	distinctRandomSKU int
	names             map[string]bool // the unknown names requested
}

func (r *result) rps() float64 { return float64(r.requests) / r.dur.Seconds() }

func (r *result) status5xx() int {
	n := 0
	for s, c := range r.statuses {
		if s >= 500 {
			n += c
		}
	}
	return n
}

func (r *result) pct(p float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(r.lat)))) - 1
	return r.lat[max(0, min(i, len(r.lat)-1))]
}

func (r *result) write(w io.Writer) {
	name := "fencing ON"
	if !r.fenced {
		name = "fencing OFF (--unfenced: tokens ignored)"
	}
	fmt.Fprintf(w, "%s, %v\n", name, r.dur.Round(time.Second))
	fmt.Fprintf(w, "  requests        %d (%.0f/s), %d without an answer\n", r.requests, r.rps(), r.errors)
	fmt.Fprintf(w, "  latency         p50 %v  p99 %v  max %v\n", r.pct(0.50).Round(10*time.Microsecond), r.pct(0.99).Round(10*time.Microsecond), r.pct(1).Round(10*time.Microsecond))
	fmt.Fprintf(w, "  statuses        %s\n", statusLine(r.statuses))
	fmt.Fprintf(w, "  5xx             %d\n", r.status5xx())
	for k := range nKinds {
		fmt.Fprintf(w, "    %-11s   %s\n", kindNames[k], statusLine(r.byKind[k]))
	}
	fmt.Fprintf(w, "  service RSS     start %.1f MB, end %.1f MB, max %.1f MB\n", mb(r.rssStart), mb(r.rssEnd), mb(r.rssMax))
	fmt.Fprintf(w, "  fence_tokens    start %d rows, end %d rows (%d distinct unknown names requested)\n", r.marksStart, r.marksEnd, r.distinctRandomSKU)
	fmt.Fprintf(w, "  items           start %d rows, end %d rows, %d with a mark\n", r.itemsStart, r.itemsEnd, r.itemMarksEnd)
	fmt.Fprintf(w, "  log written     %d bytes during the run (%d since serve started)\n", r.logBytes, r.logTotal)
}

func mb(kb int64) float64 { return float64(kb) / 1024 }

func statusLine(m map[int]int) string {
	var codes []int
	total := 0
	for s, n := range m {
		codes = append(codes, s)
		total += n
	}
	sort.Ints(codes)
	var parts []string
	for _, s := range codes {
		parts = append(parts, fmt.Sprintf("%d: %d (%.1f%%)", s, m[s], 100*float64(m[s])/float64(max(total, 1))))
	}
	return strings.Join(parts, ", ")
}

// countingWriter counts the bytes of the child's log.
type countingWriter struct{ n atomic.Int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// target is one running service under load.
type target struct {
	cmd     *exec.Cmd
	exited  chan error
	hc      *http.Client
	tr      *http.Transport
	base    string
	skus    []string
	logs    *countingWriter
	res     *result
	rssMax  atomic.Int64
	stopRSS chan struct{}
	sampled chan struct{}
	logFrom int64

	pairedReq int           // requests while the other service also took slices
	pairedDur time.Duration // and their time
}

// start runs serve, seeds its items and warms it up.
func (c Config) start(ctx context.Context, pool *pgxpool.Pool, dsn string, fenced bool) (*target, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	args := []string{"serve", "--store=postgres", "--database-url=" + dsn, "--addr=" + addr}
	if !fenced {
		args = append(args, "--unfenced")
	}
	if c.CPUProfile != "" {
		args = append(args, "--cpuprofile="+c.CPUProfile+map[bool]string{true: "-on.prof", false: "-off.prof"}[fenced])
	}
	t := &target{cmd: c.Command(args), exited: make(chan error, 1), base: "http://" + addr, logs: &countingWriter{}}
	t.cmd.Stderr = t.logs
	child.Prepare(t.cmd, false)
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { t.exited <- t.cmd.Wait() }()
	t.tr = &http.Transport{MaxIdleConnsPerHost: c.Clients, MaxConnsPerHost: c.Clients}
	t.hc = &http.Client{Transport: t.tr, Timeout: 30 * time.Second}
	if err := waitReady(ctx, t.hc, t.base, t.exited); err != nil {
		t.close()
		return nil, err
	}
	prefix := "load-" + map[bool]string{true: "on", false: "off"}[fenced] + "-"
	t.skus = make([]string, c.Items)
	for i := range t.skus {
		t.skus[i] = prefix + strconv.Itoa(i)
		req, _ := http.NewRequestWithContext(ctx, "PUT", t.base+"/admin/items/"+t.skus[i], strings.NewReader(`{"stock":1000000}`))
		resp, err := t.hc.Do(req)
		if err != nil {
			t.close()
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.close()
			return nil, fmt.Errorf("load: seeding %s: %s", t.skus[i], resp.Status)
		}
	}
	// A short warm-up, so the start figures are those of a running service.
	warm, cancel := context.WithTimeout(ctx, min(2*time.Second, max(c.Duration/10, 100*time.Millisecond)))
	c.drive(warm, t, nil)
	cancel()
	t.res = &result{fenced: fenced, statuses: map[int]int{}, names: map[string]bool{}}
	for k := range nKinds {
		t.res.byKind[k] = map[int]int{}
	}
	return t, nil
}

// begin takes the start figures and starts sampling the RSS.
func (t *target) begin(ctx context.Context, pool *pgxpool.Pool) error {
	t.res.rssStart = rss(t.cmd.Process.Pid)
	t.rssMax.Store(t.res.rssStart)
	if err := counts(ctx, pool, &t.res.marksStart, &t.res.itemsStart, nil); err != nil {
		return err
	}
	t.logFrom = t.logs.n.Load()
	t.stopRSS, t.sampled = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(t.sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-t.stopRSS:
				return
			case <-tick.C:
				if n := rss(t.cmd.Process.Pid); n > t.rssMax.Load() {
					t.rssMax.Store(n)
				}
			}
		}
	}()
	return nil
}

// measure loads t for d.
func (c Config) measure(ctx context.Context, t *target, d time.Duration) {
	mctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	begin := time.Now()
	c.drive(mctx, t, t.res)
	t.res.dur += time.Since(begin)
}

// end takes the end figures.
func (t *target) end(ctx context.Context, pool *pgxpool.Pool) error {
	close(t.stopRSS)
	<-t.sampled
	t.stopRSS = nil
	r := t.res
	r.rssEnd = rss(t.cmd.Process.Pid)
	r.rssMax = max(t.rssMax.Load(), r.rssEnd)
	if err := counts(ctx, pool, &r.marksEnd, &r.itemsEnd, &r.itemMarksEnd); err != nil {
		return err
	}
	r.logTotal = t.logs.n.Load()
	r.logBytes = r.logTotal - t.logFrom
	r.distinctRandomSKU = len(r.names)
	slices.Sort(r.lat)
	return nil
}

// close stops serve (SIGTERM, then SIGKILL).
func (t *target) close() {
	if t.stopRSS != nil {
		close(t.stopRSS)
		<-t.sampled
		t.stopRSS = nil
	}
	t.tr.CloseIdleConnections()
	t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.exited:
	case <-time.After(15 * time.Second):
		t.cmd.Process.Kill()
		<-t.exited
	}
}

func waitReady(ctx context.Context, hc *http.Client, base string, exited <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("load: serve exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("load: serve did not answer /healthz: %v", err)
		}
	}
}

func counts(ctx context.Context, pool *pgxpool.Pool, marks, items, itemMarks *int64) error {
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fence_tokens WHERE resource <> ''`).Scan(marks); err != nil {
		return fmt.Errorf("load: counting fence_tokens: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(items); err != nil {
		return err
	}
	if itemMarks != nil {
		return pool.QueryRow(ctx, `SELECT count(*) FROM items WHERE fence_token > 0`).Scan(itemMarks)
	}
	return nil
}

// rss is the process's resident set in kB, 0 if unknown.
func rss(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// drive runs the clients until ctx ends, recording into res (nil: not at all).
func (c Config) drive(ctx context.Context, t *target, res *result) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range c.Clients {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
			var (
				lat      = make([]time.Duration, 0, 1<<14)
				statuses = map[int]int{}
				byKind   [nKinds]map[int]int
				errs     int
				names    []string
			)
			for k := range nKinds {
				byKind[k] = map[int]int{}
			}
			for ctx.Err() == nil {
				k := pick(r)
				req := request(r, k, t.base, t.skus)
				if k == randomSKU && res != nil {
					names = append(names, req.URL.Path)
				}
				t0 := time.Now()
				resp, err := t.hc.Do(req.WithContext(ctx))
				if err != nil {
					if ctx.Err() == nil {
						errs++
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				statuses[resp.StatusCode]++
				byKind[k][resp.StatusCode]++
			}
			if res == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			res.lat = append(res.lat, lat...)
			res.requests += len(lat)
			res.errors += errs
			for s, n := range statuses {
				res.statuses[s] += n
			}
			for k := range nKinds {
				for s, n := range byKind[k] {
					res.byKind[k][s] += n
				}
			}
			for _, n := range names {
				res.names[n] = true
			}
		})
	}
	wg.Wait()
}

// request builds one request of kind k. A holder's token is the clock in
// µs, as clock-floored lockers (memlock, redislock, redlock) grant them:
// concurrent clients on one item overtake each other, and the overtaken
// one's request is stale — as for real holders whose leases ran out.
func request(r *mrand.Rand, k kind, base string, skus []string) *http.Request {
	sku := skus[r.IntN(len(skus))]
	now := token.Token(time.Now().UnixMicro())
	tok := now.String()
	method, path, body := "POST", "/items/"+sku+"/sell", ""
	switch k {
	case read:
		method, path = "GET", "/items/"+sku
	case restock:
		method, path, body = "PUT", "/items/"+sku+"/stock", `{"stock":1000000}`
	case stale:
		tok = (now - token.Token(time.Minute.Microseconds())).String()
	case garbage:
		tok = garbageTokens[r.IntN(len(garbageTokens))]
	case forged:
		tok = token.Token(math.MaxUint64).String()
		if r.IntN(2) == 0 {
			tok = (now + token.Token(time.Hour.Microseconds())).String()
		}
	case randomSKU:
		b := make([]byte, 8)
		rand.Read(b)
		name := "nx-" + hex.EncodeToString(b)
		switch r.IntN(3) {
		case 0:
			method, path = "GET", "/items/"+name
		case 1:
			method, path, body = "PUT", "/items/"+name+"/stock", `{"stock":1}`
		default:
			path = "/items/" + name + "/sell"
		}
	case noToken:
		tok = ""
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if k != noToken {
		req.Header[http.CanonicalHeaderKey(token.Header)] = []string{tok}
		if k == garbage && tok == "" {
			req.Header[http.CanonicalHeaderKey(token.Header)] = []string{"1", "2"} // two headers
		}
	}
	return req
}
