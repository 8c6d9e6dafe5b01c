package grpcmw_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// With ClaimInStore the store decides, so Observe and Log must see the
// store's verdict: one outcome per call, the store's refusal when the
// handler answers with Error, the acceptance otherwise.
func TestClaimInStoreReportsTheStoresVerdict(t *testing.T) {
	var mu sync.Mutex
	var seenOutcomes []grpcmw.Outcome
	var logged bytes.Buffer
	o := testOptions(grpcmw.ClaimInStore)
	o.Observe = func(_ context.Context, _ string, oc grpcmw.Outcome) {
		mu.Lock()
		defer mu.Unlock()
		seenOutcomes = append(seenOutcomes, oc)
	}
	o.Log = grpcmw.NewRefusalLog(slog.New(slog.NewTextHandler(&syncWriter{w: &logged, mu: &mu}, nil)), 10, time.Minute)
	s := startServer(t, o)
	store := new(token.MemoryFence)
	var condition atomic.Bool
	s.stock.hook = func(ctx context.Context) error {
		key, tok, _ := token.FromContext(ctx)
		if condition.Load() {
			return grpcmw.Error(ctx, token.ErrCondition)
		}
		if err := store.Claim(ctx, key, tok); err != nil {
			// The handler may answer twice; the call is still one decision.
			_ = grpcmw.Error(ctx, err)
			return grpcmw.Error(ctx, err)
		}
		return nil
	}
	ctx := context.Background()
	take := func(tok token.Token) error {
		_, err := call(loopWithToken(ctx, tok), s.conn, methodTake, "x")
		return err
	}
	last := func() grpcmw.Outcome {
		mu.Lock()
		defer mu.Unlock()
		return seenOutcomes[len(seenOutcomes)-1]
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seenOutcomes)
	}

	if err := take(7); err != nil {
		t.Fatalf("token 7: %v", err)
	}
	if n, oc := count(), last(); n != 1 || oc.Result != grpcmw.ResultAccepted || oc.Resource != "sku:x" || oc.Token != 7 {
		t.Fatalf("after an accepted write: %d outcomes, last %+v; want one, accepted for sku:x=7", n, oc)
	}
	err := take(5)
	if codeOf(err) != codes.Aborted {
		t.Fatalf("token 5 after 7: %v, want ABORTED", err)
	}
	if n, oc := count(), last(); n != 2 || oc.Result != grpcmw.ResultStale || oc.Code != codes.Aborted || oc.Resource != "sku:x" || oc.Token != 5 {
		t.Fatalf("after the store's stale refusal: %d outcomes, last %+v; want two, the last stale (ABORTED) for sku:x=5", n, oc)
	}
	mu.Lock()
	log := logged.String()
	mu.Unlock()
	if !strings.Contains(log, "stale") || strings.Count(log, "\n") != 1 {
		t.Fatalf("refusal log = %q, want one line for the stale refusal", log)
	}
	condition.Store(true)
	if err := take(8); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("a false condition: %v, want FAILED_PRECONDITION", err)
	}
	if n, oc := count(), last(); n != 3 || oc.Result != grpcmw.ResultAccepted {
		t.Fatalf("after a false condition: %d outcomes, last %+v; want three, the last accepted (the token was not refused)", n, oc)
	}
}

type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
