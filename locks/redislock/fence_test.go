package redislock_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// A client that reaches a replica (pointed there, or a replica that lags)
// must not accept an equal token from the replica's stale copy: claim 5 on
// the master, replicated; replication cut; claim 6 on the master; claim 5
// through the replica. Before the fix the replica's script saw its mark 5,
// equal, wrote nothing and accepted.
func TestFenceOnReplicaFailsClosed(t *testing.T) {
	t.Parallel()
	r := redisserver.NewReplica(t, redisserver.New(t))
	ctx := ctxFor(t, time.Minute)
	master := redislock.NewFence(newClient(t, r.Master.Addr()), redislock.FenceOptions{})
	replica := redislock.NewFence(newClient(t, r.Replica.Addr()), redislock.FenceOptions{})
	if err := master.Claim(ctx, "r", 5); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	if err := master.Claim(ctx, "r", 6); err != nil {
		t.Fatal(err)
	}
	if hw, err := replica.HighWater(ctx, "r"); err != nil || hw != 5 {
		t.Fatalf("the replica's copy is %d, %v; the test needs it behind, at 5", hw, err)
	}
	for _, tok := range []token.Token{5, 6, 7} {
		err := replica.Claim(ctx, "r", tok)
		if err == nil || errors.Is(err, token.ErrStale) {
			t.Errorf("Claim(%d) through the replica = %v, want an error (READONLY)", tok, err)
		} else if !strings.Contains(err.Error(), "READONLY") {
			t.Errorf("Claim(%d) through the replica = %v, want READONLY", tok, err)
		}
	}
	// Lower than the replica's copy: refused (the master's mark is higher
	// still).
	if err := replica.Claim(ctx, "r", 4); !errors.Is(err, token.ErrStale) {
		t.Errorf("Claim(4) through the replica = %v, want stale", err)
	}
	// The same with Replicas set: WAIT is an error on a replica, and the
	// refusal stands (it is no less true for that).
	waiting := redislock.NewFence(newClient(t, r.Replica.Addr()), redislock.FenceOptions{Replicas: 1, ReplicaTimeout: 200 * time.Millisecond})
	if err := waiting.Claim(ctx, "r", 4); !errors.Is(err, token.ErrStale) {
		t.Errorf("Claim(4) through the replica, Replicas 1 = %v, want stale", err)
	}
	if err := waiting.Claim(ctx, "r", 7); err == nil || errors.Is(err, token.ErrStale) || !strings.Contains(err.Error(), "READONLY") {
		t.Errorf("Claim(7) through the replica, Replicas 1 = %v, want READONLY", err)
	}
	if hw, err := master.HighWater(ctx, "r"); err != nil || hw != 6 {
		t.Errorf("master's mark %d, %v; want 6", hw, err)
	}
}

// waitClient is a client whose reads outlast a WAIT of the default
// ReplicaTimeout (1s), under load too.
func waitClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// history records the claims a fence acknowledged and checks that none was
// accepted below one acknowledged before it.
type history struct {
	mu    sync.Mutex
	acked token.Token // highest acknowledged so far
	bad   []string
}

func (h *history) claim(t *testing.T, f *redislock.Fence, where string, tok token.Token) error {
	t.Helper()
	err := f.Claim(ctxFor(t, time.Minute), "r", tok)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if tok < h.acked {
			h.bad = append(h.bad, fmt.Sprintf("claim %d accepted %s after %d was acknowledged", tok, where, h.acked))
		}
		h.acked = max(h.acked, tok)
	}
	return err
}

// failover: claim 5 (replicated), cut replication, claim 6 on the master,
// promote the replica (the master is gone, as far as clients know), claim
// 5 on the new master. With Replicas 0 — the behaviour before the fix, and
// still the default — the claim of 6 is acknowledged and lost: 5 is
// accepted after it. With Replicas 1 the claim of 6 fails while the
// replica is cut off, so no acknowledged claim is lost.
func TestFenceFailover(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, replicas int) (*history, error) {
		r := redisserver.NewReplica(t, redisserver.New(t))
		master := redislock.NewFence(waitClient(t, r.Master.Addr()), redislock.FenceOptions{Replicas: replicas})
		var h history
		if err := h.claim(t, master, "on the master", 5); err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, time.Minute)
		if err := r.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Link.Cut(); err != nil {
			t.Fatal(err)
		}
		err6 := h.claim(t, master, "on the master", 6)
		if err := r.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		// The promoted replica has no replicas of its own: claims there
		// go without WAIT.
		promoted := redislock.NewFence(newClient(t, r.Replica.Addr()), redislock.FenceOptions{})
		if err := h.claim(t, promoted, "after the failover", 5); err != nil {
			t.Fatalf("Claim(5) on the promoted replica: %v", err)
		}
		return &h, err6
	}
	t.Run("Replicas=0", func(t *testing.T) {
		h, err6 := run(t, 0)
		if err6 != nil {
			t.Fatalf("Claim(6) with the replica cut, no replicas asked for: %v", err6)
		}
		if len(h.bad) == 0 {
			t.Fatal("the claim of 6 survived the failover: the control did not bite")
		}
		t.Logf("as documented, without Replicas: %s", h.bad[0])
	})
	t.Run("Replicas=1", func(t *testing.T) {
		h, err6 := run(t, 1)
		var re *redislock.ReplicaError
		if !errors.As(err6, &re) || !errors.Is(err6, redislock.ErrNotReplicated) || re.Acked != 0 || re.Wanted != 1 || re.Token != 6 {
			t.Fatalf("Claim(6) with the replica cut = %v, want a ReplicaError (0 of 1)", err6)
		}
		if len(h.bad) > 0 {
			t.Fatal(h.bad[0])
		}
	})
}

// With the replicas connected, claims wait for them and are accepted,
// equal ones too; stale ones are refused.
func TestFenceReplicasAcknowledge(t *testing.T) {
	t.Parallel()
	r := redisserver.NewReplica(t, redisserver.New(t))
	ctx := ctxFor(t, time.Minute)
	f := redislock.NewFence(waitClient(t, r.Master.Addr()), redislock.FenceOptions{Replicas: 1, Logger: discard})
	replica := redislock.NewFence(newClient(t, r.Replica.Addr()), redislock.FenceOptions{})
	for range 2 {
		if err := f.Claim(ctx, "r", 5); err != nil {
			t.Fatalf("Claim(5) = %v", err)
		}
	}
	if err := f.Claim(ctx, "r", 1<<64-2); !errors.Is(err, token.ErrForged) {
		t.Fatalf("Claim(2^64-2) = %v, want the default check's ErrForged", err)
	}
	if hw, err := replica.HighWater(ctx, "r"); err != nil || hw != 5 {
		t.Fatalf("the replica has %d, %v right after the acknowledged claim; want 5", hw, err)
	}
	if err := f.Claim(ctx, "r", 4); !errors.Is(err, token.ErrStale) {
		t.Fatalf("Claim(4) = %v, want stale", err)
	}
	if prev, err := f.Reset(ctx, "r", 3); err != nil || prev != 5 {
		t.Fatalf("Reset(r, 3) = %d, %v", prev, err)
	}
	if hw, err := replica.HighWater(ctx, "r"); err != nil || hw != 3 {
		t.Fatalf("the replica has %d, %v right after the acknowledged reset; want 3", hw, err)
	}
	if err := r.Link.Cut(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, "r", 4); !errors.Is(err, redislock.ErrNotReplicated) {
		t.Fatalf("Reset with the replica cut = %v, want ErrNotReplicated", err)
	}
}

// Every reset is logged at Warn with the resource and both marks, through
// the fence's logger; a claim writes no log.
func TestFenceResetIsAudited(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	f := redislock.NewFence(newClient(t, db.Addr), redislock.FenceOptions{Prefix: db.Prefix, Logger: logger})
	if err := f.Claim(ctx, "sku:1", 40); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Reset(ctx, "sku:1", 12); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"level=WARN", "fencing mark reset by hand", "store=redis", "resource=sku:1", "from=40", "to=12"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit record %q lacks %q", out, want)
		}
	}
	if n := strings.Count(out, "\n"); n != 1 {
		t.Errorf("%d log lines, want the one reset:\n%s", n, out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// A mark that holds something else than a token (written by hand) refuses
// every claim and is left as it is; Reset replaces it.
func TestFenceCorruptMark(t *testing.T) {
	t.Parallel()
	db := redisserver.Shared(t)
	ctx := ctxFor(t, time.Minute)
	c := newClient(t, db.Addr)
	f := redislock.NewFence(c, redislock.FenceOptions{Prefix: db.Prefix, Logger: discard})
	for _, bad := range []string{"abc", "-1", "0", "0012", "18446744073709551616", "5 "} {
		c.Set(ctx, db.Prefix+"{r}", bad, 0)
		if err := f.Claim(ctx, "r", 7); err == nil || errors.Is(err, token.ErrStale) {
			t.Errorf("Claim over the mark %q = %v, want an error", bad, err)
		}
		if got := c.Get(ctx, db.Prefix+"{r}").Val(); got != bad {
			t.Errorf("the mark %q became %q", bad, got)
		}
	}
	if _, err := f.Reset(ctx, "r", 9); err == nil {
		t.Error("Reset over a corrupt mark reported no error")
	}
	if err := f.Claim(ctx, "r", 9); err != nil {
		t.Errorf("Claim(9) after the reset: %v", err)
	}
}
