package frozen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// fencedMux mounts h behind a middleware with o on "PUT /sku/{sku}" and
// counts the handler's runs and the middleware's outcomes.
type fencedMux struct {
	http.Handler
	ran      atomic.Int32
	mu       sync.Mutex
	outcomes []httpmw.Outcome
}

func newFencedMux(t *testing.T, o httpmw.Options, h http.HandlerFunc) *fencedMux {
	t.Helper()
	m := &fencedMux{}
	o.Resource = httpmw.PathValue("sku")
	o.Observe = func(r *http.Request, out httpmw.Outcome) {
		m.mu.Lock()
		m.outcomes = append(m.outcomes, out)
		m.mu.Unlock()
	}
	mw, err := httpmw.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.ran.Add(1)
		if h != nil {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	m.Handler = mux
	return m
}

func (m *fencedMux) last() (httpmw.Outcome, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.outcomes) == 0 {
		return httpmw.Outcome{}, 0
	}
	return m.outcomes[len(m.outcomes)-1], len(m.outcomes)
}

// serveWithin serves a fenced request whose context ends after d, on the
// handler directly (the context is the request's, as a server's is once
// the client has gone), and checks that it is answered by the deadline
// with a 503 problem+json and that the handler did not run.
func serveWithin(t *testing.T, m *fencedMux, what string, d time.Duration, tok token.Token) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "PUT", "/sku/42", nil)
	req.Header.Set(token.Header, tok.String())
	rec := httptest.NewRecorder()
	before := m.ran.Load()
	tm := itest.StartTiming(t)
	m.ServeHTTP(rec, req)
	if took, allowed := tm.Stop(d); took > d+allowed {
		t.Errorf("%s: answered %v after a %v request deadline (allowed %v late)", what, took, d, allowed)
	}
	if m.ran.Load() != before {
		t.Errorf("%s: the handler ran although the claim could not be made", what)
	}
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Content-Type") != httpmw.ContentType {
		t.Errorf("%s: %d %q %s, want 503 %s", what, rec.Code, rec.Header().Get("Content-Type"), rec.Body, httpmw.ContentType)
		return
	}
	var p httpmw.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Type != httpmw.TypeUnavailable || p.Status != 503 {
		t.Errorf("%s: body %s (%v), want the fence-unavailable problem", what, rec.Body, err)
	}
}

// TestHTTPFenceFrozen: the middleware's Fence (Redis, PostgreSQL,
// etcd, ZooKeeper) frozen while a request's claim is in flight: the request
// ending is answered 503 problem+json by its deadline, the handler never
// runs, nothing panics; after the thaw the claim works again.
func TestHTTPFenceFrozen(t *testing.T) {
	t.Parallel()
	type fenceSrv struct {
		name  string
		start func(t *testing.T) (token.Fence, *harness.Server)
	}
	fences := []fenceSrv{
		{"redis", func(t *testing.T) (token.Fence, *harness.Server) {
			srv := redisserver.New(t)
			return redislock.NewFence(redisClient(t, srv.Addr()), redislock.FenceOptions{}), srv
		}},
		{"postgres", func(t *testing.T) (token.Fence, *harness.Server) {
			e := newPG(t)
			return e.k.Fence(e.pool), e.srv
		}},
		{"etcd", func(t *testing.T) (token.Fence, *harness.Server) {
			srv := etcdserver.New(t)
			return etcdlock.NewFence(etcdClient(t, srv.Addr()), etcdlock.FenceOptions{Check: token.NoCheck()}), srv
		}},
		{"zookeeper", func(t *testing.T) (token.Fence, *harness.Server) {
			srv := zkserver.New(t)
			return zklock.NewFence(zkConn(t, srv.Addr()), zklock.FenceOptions{Check: token.NoCheck()}), srv
		}},
	}
	for _, fs := range fences {
		t.Run(fs.name, func(t *testing.T) {
			t.Parallel()
			f, srv := fs.start(t)
			m := newFencedMux(t, httpmw.Options{Fence: f, Check: token.NoCheck()}, nil)
			tok := token.Token(time.Now().UnixMicro())
			ctx := itest.Ctx(t, 20*time.Second)
			if err := f.Claim(ctx, "sku:42", tok); err != nil {
				t.Fatal(err)
			}
			itest.Pause(t, srv)
			for _, d := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
				serveWithin(t, m, fs.name+" frozen, deadline "+d.String(), d, tok)
			}
			itest.Resume(t, srv)
			// Back to normal (zookeeper may take a moment to reconnect).
			deadline := time.Now().Add(15 * time.Second)
			for {
				rec := httptest.NewRecorder()
				req := httptest.NewRequestWithContext(itest.Ctx(t, 5*time.Second), "PUT", "/sku/42", nil)
				req.Header.Set(token.Header, tok.String())
				m.ServeHTTP(rec, req)
				if rec.Code == http.StatusNoContent {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the thaw: %d %s", rec.Code, rec.Body)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestHTTPClientGoneWhileClaiming: over a real HTTP server, the client
// gives up while the claim waits on a frozen PostgreSQL Fence: the
// middleware's claim ends with the request (503 unavailable observed), the
// handler never runs, even after the thaw.
func TestHTTPClientGoneWhileClaiming(t *testing.T) {
	t.Parallel()
	e := newPG(t)
	clientGone(t, e.k.Fence(e.pool), e.srv)
}

// TestHTTPClientGoneRedisFence is the same over the Redis Fence: the
// server's request context is cancelled, without a deadline, when the
// client goes, and the claim ends with it (503 unavailable observed), not
// at go-redis's ReadTimeout (ContextTimeoutEnabled bounds only by the
// deadline); the handler never runs, even after the thaw.
func TestHTTPClientGoneRedisFence(t *testing.T) {
	t.Parallel()
	srv := redisserver.New(t)
	clientGone(t, redislock.NewFence(redisClient(t, srv.Addr()), redislock.FenceOptions{Check: token.NoCheck()}), srv)
}

func clientGone(t *testing.T, f token.Fence, srv *harness.Server) {
	m := newFencedMux(t, httpmw.Options{Fence: f, Check: token.NoCheck()}, nil)
	ts := httptest.NewServer(m)
	defer ts.Close()
	// Warm the client's connection.
	if err := f.Claim(itest.Ctx(t, 10*time.Second), "warm", 1); err != nil {
		t.Fatal(err)
	}
	itest.Pause(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "PUT", ts.URL+"/sku/42", nil)
	req.Header.Set(token.Header, "77")
	if resp, err := ts.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("request answered %d with the fence frozen", resp.StatusCode)
	}
	cancel()
	tm := itest.StartTiming(t)
	start := time.Now()
	for {
		if out, n := m.last(); n > 0 {
			if out.Result != httpmw.ResultUnavailable || out.Status != 503 {
				t.Errorf("outcome %+v, want 503 unavailable", out)
			}
			if took, allowed := tm.Stop(0); took > allowed {
				t.Errorf("the claim outlived the client by %v (allowed %v)", took, allowed)
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("no outcome 10s after the client went")
		}
		time.Sleep(5 * time.Millisecond)
	}
	itest.Resume(t, srv)
	time.Sleep(300 * time.Millisecond)
	if n := m.ran.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

// TestHTTPSerializeAndSequencerFrozen: a request waiting its turn
// under SerializePerKey, and one whose SequencerCheck asks a frozen lock
// service (redislock, etcdlock, zklock sequencers), are answered 503
// problem+json by the request's deadline; the handler does not run.
func TestHTTPSerializeAndSequencerFrozen(t *testing.T) {
	t.Parallel()
	t.Run("SerializePerKey", func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan struct{}, 1)
		var mf token.MemoryFence
		mf.Check = token.NoCheck()
		m := newFencedMux(t, httpmw.Options{Fence: &mf, Check: token.NoCheck(), SerializePerKey: true}, func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
			w.WriteHeader(http.StatusNoContent)
		})
		done := make(chan int)
		go func() {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("PUT", "/sku/42", nil)
			req.Header.Set(token.Header, "5")
			m.ServeHTTP(rec, req)
			done <- rec.Code
		}()
		<-entered
		serveWithin(t, m, "waiting its turn", 200*time.Millisecond, 5)
		close(release)
		if code := <-done; code != http.StatusNoContent {
			t.Errorf("first request: %d", code)
		}
	})
	type seqSrv struct {
		name  string
		start func(t *testing.T) (token.Sequencer, *harness.Server)
	}
	seqs := []seqSrv{
		{"redislock", func(t *testing.T) (token.Sequencer, *harness.Server) {
			srv := redisserver.New(t)
			return redislock.NewSequencer(redisClient(t, srv.Addr()), ""), srv
		}},
		{"etcdlock", func(t *testing.T) (token.Sequencer, *harness.Server) {
			srv := etcdserver.New(t)
			return etcdlock.NewSequencer(etcdClient(t, srv.Addr()), ""), srv
		}},
		{"zklock", func(t *testing.T) (token.Sequencer, *harness.Server) {
			srv := zkserver.New(t)
			return zklock.NewSequencer(zkConn(t, srv.Addr()), ""), srv
		}},
	}
	for _, s := range seqs {
		t.Run("SequencerCheck/"+s.name, func(t *testing.T) {
			t.Parallel()
			seq, srv := s.start(t)
			if _, err := seq.Current(itest.Ctx(t, 10*time.Second), "sku:42"); err != nil {
				t.Logf("warm-up Current: %v", err)
			}
			var mf token.MemoryFence
			mf.Check = token.NoCheck()
			check := token.SequencerCheck(seq, token.SequencerOptions{CacheSize: -1})
			m := newFencedMux(t, httpmw.Options{Fence: &mf, Check: check}, nil)
			itest.Pause(t, srv)
			for i, d := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
				serveWithin(t, m, s.name+" sequencer frozen #"+strconv.Itoa(i), d, 3)
			}
			itest.Resume(t, srv)
		})
	}
}
