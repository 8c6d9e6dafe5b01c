package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fenceguard/fenceguard/examples/inventory/internal/backend"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/service"
	"github.com/fenceguard/fenceguard/examples/inventory/internal/worker"
	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/locks/memlock"
	"github.com/fenceguard/fenceguard/token"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo writes a worker's flags with Args; the worker reads them with
// Parse: both sides must agree.
func TestArgsRoundTrip(t *testing.T) {
	c := worker.Config{ID: 3, Service: "http://127.0.0.1:1234", SKU: "lamp-1a2b-on", TTL: 1500 * time.Millisecond,
		Work: 20 * time.Millisecond, Gate: true,
		Lock: backend.LockConfig{Kind: backend.Redlock, Redlock: []string{"a:1", "b:2", "c:3"}, Prefix: "/x/"}}
	got, err := worker.Parse(c.Args())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("Parse(Args()) = %+v, want %+v", got, c)
	}
	for _, bad := range [][]string{
		{"--sku=", "--lock=etcd", "--etcd=a:1"},
		{"--lock=etcd"},                     // no endpoints
		{"--lock=redlock", "--redlock=a:1"}, // too few nodes
		{"--lock=consul"},
		{"--ttl=0s", "--etcd=a:1"},
		{"--etcd=a:1", "extra"},
	} {
		if _, err := worker.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// shop is a fenced in-memory service and what a worker needs to sell there.
type shop struct {
	store  *service.MemoryStore
	client *service.Client
}

func newShop(t *testing.T, stock int) *shop {
	t.Helper()
	store := service.NewMemoryStore()
	h, err := service.New(service.Options{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := &service.Client{Base: srv.URL, HTTP: &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: service.ItemKey}}}
	if _, err := c.AdminPut(context.Background(), "lamp", stock); err != nil {
		t.Fatal(err)
	}
	return &shop{store: store, client: c}
}

func newWorker(t *testing.T, s *shop, id int, out io.Writer, acks <-chan struct{}) *worker.Worker {
	t.Helper()
	g, err := guard.New(memlock.New(), guard.Options{TTL: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &worker.Worker{ID: id, SKU: "lamp", Work: time.Millisecond, Guard: g, Clients: []*service.Client{s.client},
		Events: worker.NewEncoder(out), Acks: acks, Log: slog.New(slog.DiscardHandler)}
}

// events decodes a worker's output as it comes.
func events(t *testing.T, r io.Reader) <-chan worker.Event {
	ch := make(chan worker.Event, 100)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(r)
		for {
			var e worker.Event
			if err := dec.Decode(&e); err != nil {
				return
			}
			ch <- e
		}
	}()
	return ch
}

func next(t *testing.T, ch <-chan worker.Event) worker.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("worker output ended")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	panic("unreachable")
}

// Ungated, a worker sells the whole stock, one unit per lock hold, and says
// so in order.
func TestRunSellsOut(t *testing.T) {
	s := newShop(t, 3)
	pr, pw := io.Pipe()
	ch := events(t, pr)
	w := newWorker(t, s, 7, pw, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var kinds []worker.Kind
	var last token.Token
	for e := range ch {
		kinds = append(kinds, e.Kind)
		if e.Worker != 7 || e.Time.IsZero() {
			t.Errorf("event %+v: worker %d, time %v", e, e.Worker, e.Time)
		}
		if e.Kind == worker.Acquired {
			if e.Token <= last {
				t.Errorf("token %s after %s", e.Token, last)
			}
			last = e.Token
		}
	}
	sale := []worker.Kind{worker.Acquired, worker.Read, worker.Wrote, worker.Released}
	var want []worker.Kind
	for range 3 {
		want = append(want, sale...)
	}
	want = append(want, worker.Acquired, worker.Read, worker.Released, worker.SoldOut)
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("events %v\nwant %v", kinds, want)
	}
	if it, _ := s.store.Get(ctx, "lamp", 0); it.Stock != 0 {
		t.Fatalf("stock %d, want 0", it.Stock)
	}
}

// Gated, a worker stops before its first sale, after the grant and after
// the read until it is acknowledged; a newer holder that claims the item in
// between makes its write come back refused, with the item's mark.
func TestGateAndStaleWrite(t *testing.T) {
	s := newShop(t, 5)
	pr, pw := io.Pipe()
	ch := events(t, pr)
	acks := make(chan struct{})
	w := newWorker(t, s, 1, pw, acks)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	e := next(t, ch)
	if e.Kind != worker.Ready || !e.Gate {
		t.Fatalf("first event %+v, want a gated ready", e)
	}
	select {
	case e := <-ch:
		t.Fatalf("event %+v before the ack", e)
	case <-time.After(100 * time.Millisecond):
	}
	if m, err := s.store.HighWater(ctx, "lamp"); err != nil || m != 0 {
		t.Fatalf("mark %v, %v before the worker's first ack; want 0: it sold nothing yet", m, err)
	}
	acks <- struct{}{}
	e = next(t, ch)
	if e.Kind != worker.Acquired || !e.Gate {
		t.Fatalf("first event %+v, want a gated grant", e)
	}
	held := e.Token
	select {
	case e := <-ch:
		t.Fatalf("event %+v before the ack", e)
	case <-time.After(100 * time.Millisecond):
	}
	acks <- struct{}{}
	if e := next(t, ch); e.Kind != worker.Read || e.Stock != 5 || !e.Gate || e.Token != held {
		t.Fatalf("after the ack: %+v, want a gated read of 5 under %s", e, held)
	}
	// A newer holder claims the item while this one waits at its gate.
	if _, err := s.store.Get(ctx, "lamp", held+1000); err != nil {
		t.Fatal(err)
	}
	acks <- struct{}{}
	e = next(t, ch)
	if e.Kind != worker.Refused || e.Op != "write" || e.Token != held || e.Current != held+1000 {
		t.Fatalf("write after a newer claim: %+v, want refused with current %s", e, held+1000)
	}
	if e := next(t, ch); e.Kind != worker.Released {
		t.Fatalf("after the refusal: %+v, want released", e)
	}
	// Closing the gate ends the worker.
	close(acks)
	if err := <-done; err == nil {
		t.Fatal("Run returned nil after the gate closed")
	}
	pw.Close()
	for range ch {
	}
	if it, _ := s.store.Get(ctx, "lamp", 0); it.Stock != 5 {
		t.Fatalf("stock %d after the refused write, want 5", it.Stock)
	}
}
