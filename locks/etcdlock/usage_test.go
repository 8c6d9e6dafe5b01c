package etcdlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

// An ordinary life — acquires, a contended wait, a held TryAcquire, a
// waiter giving up, guard.Do with its loss watch, releases, Close — makes
// the etcd client log no warning: etcdlock cuts none of its own requests
// short (the client warns of each such one).
func TestOrdinaryUseLogsNoClientWarnings(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	core, logs := observer.New(zapcore.WarnLevel)
	cli, err := clientv3.New(clientv3.Config{Endpoints: d.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := etcdlock.New(cli, etcdlock.Options{Prefix: d.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	for range 3 {
		a, err := l.Acquire(ctx, "k", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.(locks.LossNotifier).Lost() // starts the loss watch, as guard does
		got := make(chan locks.Lease, 1)
		go func() {
			b, err := l.Acquire(ctx, "k", 5*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- b
		}()
		if _, err := l.TryAcquire(ctx, "k", 5*time.Second); !errors.Is(err, locks.ErrNotObtained) {
			t.Fatalf("TryAcquire of a held key: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if _, err := l.Acquire(wctx, "k", 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire given up: %v", err)
		}
		cancel()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if b := <-got; b != nil {
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A release right after the loss watch started, its first read
	// perhaps still on its way.
	for range 20 {
		a, err := l.Acquire(ctx, "k", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = a.(locks.LossNotifier).Lost()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g, err := guard.New(l, guard.Options{TTL: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := g.Do(ctx, "k", func(context.Context, token.Token) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.All() {
		t.Errorf("the etcd client logged at %v: %s %v", e.Level, e.Message, e.ContextMap())
	}
}

// ClientLogger routes the etcd client's lines through slog, and a request
// cut short by its own context — the caller has its error — at Debug.
func TestClientLogger(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedBuf{mu: &mu, b: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cli, err := clientv3.New(clientv3.Config{Endpoints: d.Endpoints, DialTimeout: 5 * time.Second, Logger: etcdlock.ClientLogger(logger)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cli.Get(ctx, d.Prefix+"x"); err == nil {
		t.Fatal("Get with a cancelled context succeeded")
	}
	etcdlock.ClientLogger(logger).Warn("something else", zap.String("k", "v"))
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, `level=DEBUG msg="retrying of unary invoker failed"`) {
		t.Errorf("no Debug line for the cancelled request:\n%s", out)
	}
	if strings.Contains(out, `level=WARN msg="retrying`) {
		t.Errorf("a cancelled request logged a warning:\n%s", out)
	}
	if !strings.Contains(out, `level=WARN msg="something else" k=v`) {
		t.Errorf("other warnings are not passed on at Warn with their fields:\n%s", out)
	}
	// Quiet at Info: the cancelled request logs nothing.
	buf.Reset()
	quiet := slog.New(slog.NewTextHandler(&lockedBuf{mu: &mu, b: &buf}, nil))
	etcdlock.ClientLogger(quiet).Warn("retrying of unary invoker failed", zap.Error(context.Canceled))
	if buf.Len() != 0 {
		t.Errorf("at Info, a cancelled request logged: %s", buf.String())
	}
}

type lockedBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// A user's own etcd transaction guarded by the grant's IsOwner, reached
// through guard's Lease.Unwrap, commits while the lock is held and not
// after it moved on.
func TestIsOwnerFencesOwnTransaction(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	cli := newClient(t, d.Endpoints)
	l := newLocker(t, cli, d.Prefix)
	g, err := guard.New(l, guard.Options{TTL: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, time.Minute)
	res := d.Prefix + "resource"
	put := func(el *etcdlock.Lease, v string) bool {
		t.Helper()
		resp, err := cli.Txn(ctx).If(el.IsOwner()).Then(clientv3.OpPut(res, v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	first, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	el, ok := locks.LeaseAs[*etcdlock.Lease](first.Unwrap())
	if !ok {
		t.Fatalf("Unwrap = %T, want an *etcdlock.Lease", first.Unwrap())
	}
	own, err := cli.Get(ctx, el.OwnKey())
	if err != nil || len(own.Kvs) != 1 || token.Token(own.Kvs[0].CreateRevision) != first.Token() || !strings.HasPrefix(el.OwnKey(), d.Prefix) {
		t.Fatalf("OwnKey %q: %v %v, want its create revision to be the token %d", el.OwnKey(), own, err, first.Token())
	}
	if !put(el, "first") {
		t.Fatal("the holder's own transaction failed while it held the lock")
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := g.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if put(el, "stale") {
		t.Fatal("the old holder's transaction committed after the lock moved on")
	}
	el2, _ := locks.LeaseAs[*etcdlock.Lease](second.Unwrap())
	if !put(el2, "second") {
		t.Fatal("the new holder's transaction failed")
	}
	resp, err := cli.Get(ctx, res)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.Kvs[0].Value); got != "second" {
		t.Fatalf("resource = %q, want %q", got, "second")
	}
}

// guard.New refuses a TTL etcdlock cannot grant (below a second), at once.
func TestGuardRefusesTTLBelowMinimum(t *testing.T) {
	t.Parallel()
	d := etcdserver.Shared(t)
	l := newLocker(t, newClient(t, d.Endpoints), d.Prefix)
	_, err := guard.New(l, guard.Options{TTL: 500 * time.Millisecond})
	if !errors.Is(err, locks.ErrInvalidArgument) || !strings.Contains(err.Error(), "minimum "+etcdlock.MinTTL.String()) {
		t.Fatalf("guard.New with a 500ms TTL = %v, want locks.ErrInvalidArgument naming the minimum %v", err, etcdlock.MinTTL)
	}
}
