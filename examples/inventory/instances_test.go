package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/demo"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/token"
)

// syncBuffer is a bytes.Buffer safe for a child's stderr and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// instance is one `serve` process.
type instance struct {
	base string
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{} // closed when the process has exited, err then set
	err  error
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServe starts `serve` with args on a free port, without waiting for
// it to answer (see ready). The process is killed when the test ends, if
// it is still running.
func startServe(t *testing.T, args ...string) *instance {
	t.Helper()
	addr := freeAddr(t)
	cmd := command(context.Background(), append([]string{"serve", "--addr=" + addr}, args...)...)
	in := &instance{base: "http://" + addr, cmd: cmd, logs: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = in.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { in.err = cmd.Wait(); close(in.done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-in.done:
		case <-time.After(10 * time.Second):
		}
	})
	return in
}

// ready waits for /healthz to answer 200.
func (in *instance) ready(t *testing.T) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(in.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer /healthz: %v\n%s", in.base, err, in.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Three `serve` processes over one database, PostgreSQL or MariaDB, the
// workers addressing them in turn (a critical section's read and write go
// to different instances): the demo's guarantees are those of one
// instance — the control run oversells, the fenced run never does, and
// the frozen holder's late write is refused by whichever instance it
// reaches.
func TestSeveralInstances(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			severalInstances(t, d.url(t))
		})
	}
}

func severalInstances(t *testing.T, dbURL string) {
	etcd := etcdserver.Shared(t)
	lock := backend.LockConfig{Kind: backend.Etcd, Etcd: etcd.Endpoints, Prefix: etcd.Prefix}
	const n = 3
	start := func(extra ...string) []*instance {
		var ins []*instance
		for range n { // all at once: their migrations must queue, not race
			ins = append(ins, startServe(t, append(append([]string{"--database-url=" + dbURL}, lock.Args()...), extra...)...))
		}
		for _, in := range ins {
			in.ready(t)
		}
		return ins
	}
	bases := func(ins []*instance) []string {
		var out []string
		for _, in := range ins {
			out = append(out, in.base)
		}
		return out
	}
	off, on := start("--unfenced"), start()
	o := demo.Options{
		Workers:     4,
		Stock:       10,
		TTL:         2 * time.Second,
		Work:        20 * time.Millisecond,
		Pause:       2200 * time.Millisecond,
		FreezeAfter: 2,
		RunTimeout:  40 * time.Second,
		Lock:        lock,
		Command: func(args []string) *exec.Cmd {
			return command(context.Background(), append([]string{"worker"}, args...)...)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results := map[bool]*demo.Result{}
	for fenced, ins := range map[bool][]*instance{false: off, true: on} {
		ro := o
		ro.Services = bases(ins)
		res, err := demo.Run(ctx, nil, fenced, "lamp-multi-"+strconv.FormatBool(fenced), ro)
		if err != nil {
			if res != nil {
				t.Logf("story:\n%s", strings.Join(res.Story, "\n"))
			}
			for _, in := range ins {
				t.Logf("%s:\n%s", in.base, in.logs.String())
			}
			t.Fatalf("run fenced=%v: %v", fenced, err)
		}
		results[fenced] = res
	}
	if n := results[false].Oversold(); n <= 0 {
		t.Errorf("control over %d instances: oversold %d, want > 0", len(off), n)
	}
	if n := results[true].Oversold(); n != 0 {
		t.Errorf("fenced over %d instances: oversold %d", len(on), n)
	}
	if f := results[true].Freeze; f.Write == nil || f.Write.Kind != "refused" {
		t.Errorf("fenced: the frozen holder's late write was not refused: %+v", f.Write)
	}
	// Every fenced instance served claims: the load was spread.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, in := range on {
		resp, err := client.Get(in.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `fenceguard_claims_total{class="items",result="accepted"}`) {
			t.Errorf("%s claimed nothing", in.base)
		}
	}
	t.Logf("control: sold %d of %d (oversold %d); fenced: sold %d of %d, %d stale writes refused",
		results[false].Sold, o.Stock, results[false].Oversold(), results[true].Sold, o.Stock, results[true].Rejected)
}

// sellResult is what one client saw of its sales.
type sellResult struct {
	ok, other, failed int // 204s; other statuses (409 sold out, ...); no response at all
	bad               []string
}

// hammer sells from clients goroutines until stop is closed.
func hammer(base string, tok token.Token, clients int, stop <-chan struct{}) func() sellResult {
	var (
		mu  sync.Mutex
		all sellResult
		wg  sync.WaitGroup
	)
	for range clients {
		wg.Go(func() {
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			var r sellResult
			for {
				select {
				case <-stop:
					mu.Lock()
					all.ok, all.other, all.failed = all.ok+r.ok, all.other+r.other, all.failed+r.failed
					all.bad = append(all.bad, r.bad...)
					mu.Unlock()
					return
				default:
				}
				req, _ := http.NewRequest("POST", base+"/items/lamp/sell", nil)
				req.Header.Set(token.Header, tok.String())
				resp, err := hc.Do(req)
				if err != nil {
					var op *net.OpError
					if errors.As(err, &op) && op.Op == "dial" {
						time.Sleep(10 * time.Millisecond) // not accepting: nothing was sent
						continue
					}
					r.failed++
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					r.bad = append(r.bad, "torn body: "+err.Error())
				case resp.StatusCode == 204 && len(b) == 0:
					r.ok++
				case resp.StatusCode >= 500 || resp.StatusCode == 204:
					r.bad = append(r.bad, resp.Status+" "+string(b))
				default:
					r.other++
				}
			}
		})
	}
	return func() sellResult { wg.Wait(); return all }
}

// SIGTERM under load: serve stops accepting, lets the sales in flight
// finish — held up here on the row's lock, so they are certainly in flight
// when the signal comes — and exits 0; every sale a client saw answered
// 204 is in the stock, and no sale is in the stock that no client saw
// answered. Past the grace (second part), the requests still running are
// cancelled, serve exits non-zero at once, and a cancelled sale is
// applied whole or not at all.
func TestServeGracefulShutdown(t *testing.T) {
	pg := pgserver.Shared(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, c := range []struct {
		name    string
		grace   time.Duration
		release bool // let the held-up sales through while serve waits
	}{
		{"in flight finish", 20 * time.Second, true},
		{"past the grace", 500 * time.Millisecond, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := startServe(t, "--store=postgres", "--database-url="+pg.DSN, "--shutdown-timeout="+c.grace.String())
			in.ready(t)
			const initial = 1_000_000
			req, _ := http.NewRequest("PUT", in.base+"/admin/items/lamp", strings.NewReader(`{"stock":1000000}`))
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
				t.Fatalf("seeding: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
			tok := token.Token(time.Now().UnixMicro())
			stop := make(chan struct{})
			wait := hammer(in.base, tok, 8, stop)
			time.Sleep(300 * time.Millisecond)

			// Hold the row: every sale from now on waits in flight.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SELECT stock FROM items WHERE sku = 'lamp' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			var exitErr error
			if c.release {
				select {
				case <-in.done:
					t.Fatalf("serve exited with sales in flight: %v\n%s", in.err, in.logs.String())
				case <-time.After(500 * time.Millisecond):
				}
				if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(in.base, "http://"), time.Second); err == nil {
					conn.Close()
					t.Errorf("serve still accepts connections after SIGTERM")
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case <-in.done:
					exitErr = in.err
				case <-time.After(15 * time.Second):
					t.Fatalf("serve did not exit after its sales finished\n%s", in.logs.String())
				}
				if exitErr != nil {
					t.Errorf("serve after SIGTERM: %v\n%s", exitErr, in.logs.String())
				}
			} else {
				begin := time.Now()
				select {
				case <-in.done:
					exitErr = in.err
				case <-time.After(c.grace + 5*time.Second):
					t.Fatalf("serve did not exit past its grace\n%s", in.logs.String())
				}
				if exitErr == nil || !strings.Contains(in.logs.String(), "still running") {
					t.Errorf("serve past its grace: exit %v, want non-zero and said so\n%s", exitErr, in.logs.String())
				}
				t.Logf("exited %v after SIGTERM (grace %v)", time.Since(begin).Round(time.Millisecond), c.grace)
				tx.Rollback(ctx)
			}
			close(stop)
			r := wait()
			for _, b := range r.bad {
				t.Errorf("torn or failed answer: %s", b)
			}
			var stock int
			if err := pool.QueryRow(ctx, `SELECT stock FROM items WHERE sku = 'lamp'`).Scan(&stock); err != nil {
				t.Fatal(err)
			}
			sold := initial - stock
			t.Logf("204s %d, other answers %d, no answer %d; units gone from the stock %d", r.ok, r.other, r.failed, sold)
			if c.release {
				if sold != r.ok || r.failed != 0 {
					t.Errorf("stock went down by %d, clients saw %d sales answered and %d requests unanswered: want equal and 0", sold, r.ok, r.failed)
				}
			} else if sold < r.ok || sold > r.ok+r.failed {
				t.Errorf("stock went down by %d; clients saw %d sales answered, %d unanswered", sold, r.ok, r.failed)
			}
		})
	}
}
