package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// safeToRetry is an error as pgx reports one that was not sent.
type safeToRetry struct{}

func (safeToRetry) Error() string     { return "conn busy" }
func (safeToRetry) SafeToRetry() bool { return true }

// Every error WriteError maps comes back from the Transport as an error
// matching the same sentinel, in a Problem with the status and type
// WriteError wrote; the server's error text never reaches the body.
func TestWriteErrorRoundTrip(t *testing.T) {
	const secret = "db.internal:5432"
	cases := []struct {
		name   string
		err    error // what the handler's store returned
		status int
		typ    string
		want   error // what the client's error matches
	}{
		{"stale", fmt.Errorf("%s: %w", secret, &token.StaleError{Resource: "items/7", Presented: 7, Current: 9}), 409, httpmw.TypeStale, token.ErrStale},
		{"condition", fmt.Errorf("%s: %w", secret, token.ErrCondition), 409, httpmw.TypeCondition, token.ErrCondition},
		{"no such row", fmt.Errorf("%s: %w", secret, token.ErrNotFound), 404, httpmw.TypeNoResource, token.ErrNotFound},
		{"forged", fmt.Errorf("%s: %w", secret, &token.ForgedError{Resource: "items/7", Presented: 7, Bound: 5, By: "sequencer"}), 403, httpmw.TypeForged, token.ErrForged},
		{"beyond the store", fmt.Errorf("%s: %w (%w)", secret, &token.RangeError{What: "bigint", Token: 7, Max: 5}, token.ErrInvalid), 400, httpmw.TypeInvalid, token.ErrInvalid},
		{"another lock's key", fmt.Errorf("%s: %w for \"items/8\"", secret, token.ErrMissing), 500, httpmw.TypeKeyMismatch, httpmw.ErrKeyMismatch},
		{"a service's own mismatch", fmt.Errorf("%s: %w", secret, httpmw.ErrKeyMismatch), 500, httpmw.TypeKeyMismatch, httpmw.ErrKeyMismatch},
		{"unreachable", fmt.Errorf("%s: %w", secret, &net.OpError{Op: "dial", Err: errors.New("connection refused")}), 503, httpmw.TypeUnavailable, httpmw.ErrUnavailable},
		{"timed out", fmt.Errorf("%s: %w", secret, context.DeadlineExceeded), 503, httpmw.TypeUnavailable, httpmw.ErrUnavailable},
		{"not sent", fmt.Errorf("%s: %w", secret, safeToRetry{}), 503, httpmw.TypeUnavailable, httpmw.ErrUnavailable},
		{"a service's own unavailable", fmt.Errorf("%s: %w", secret, httpmw.ErrUnavailable), 503, httpmw.TypeUnavailable, httpmw.ErrUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body string
			srv := newStoreServer(t, c.err, &body)
			_, err := srv.put(token.NewContext(context.Background(), "sku:7", 7))
			var p *httpmw.Problem
			if !errors.As(err, &p) || p.Status != c.status || p.Type != c.typ {
				t.Fatalf("client error %v, want a %d %s problem; body %s", err, c.status, c.typ, body)
			}
			// The store's errors match the token sentinels; the kinds a
			// store has no sentinel for match httpmw's on the client only.
			bySentinel := c.want != httpmw.ErrKeyMismatch && c.want != httpmw.ErrUnavailable
			if !errors.Is(err, c.want) || bySentinel && !errors.Is(c.err, c.want) {
				t.Errorf("client error %v, server error %v: want both to match %v", err, c.err, c.want)
			}
			if strings.Contains(body, secret) {
				t.Errorf("the body carries the server's error: %s", body)
			}
		})
	}
}

// Details only the typed errors carry survive the round trip.
func TestWriteErrorRoundTripCarriesTokens(t *testing.T) {
	ctx := token.NewContext(context.Background(), "sku:7", 7)
	srv := newStoreServer(t, &token.StaleError{Resource: "items/7", Presented: 7, Current: 9}, nil)
	_, err := srv.put(ctx)
	var se *token.StaleError
	if !errors.As(err, &se) || se.Resource != "items/7" || se.Presented != 7 || se.Current != 9 {
		t.Errorf("stale: %v, want items/7, 7 below 9", err)
	}
	srv = newStoreServer(t, &token.ForgedError{Resource: "items/7", Presented: 7, Bound: 5}, nil)
	_, err = srv.put(ctx)
	var fe *token.ForgedError
	if !errors.As(err, &fe) || fe.Resource != "sku:7" || fe.Presented != 7 || fe.Bound != 5 {
		t.Errorf("forged: %v, want sku:7, 7 above 5", err)
	}
}

// Without a token in the request, a store that needed one answers 428; an
// error WriteError does not know answers 500 about:blank, which the
// Transport hands back as a response.
func TestWriteErrorWithoutTokenAndUnknown(t *testing.T) {
	srv := newStoreServer(t, fmt.Errorf("claim: %w", token.ErrMissing), nil)
	if _, err := srv.put(context.Background()); !errors.Is(err, token.ErrMissing) {
		t.Errorf("tokenless: %v, want ErrMissing", err)
	}
	var body string
	srv = newStoreServer(t, errors.New("disk full"), &body)
	resp, err := srv.put(token.NewContext(context.Background(), "sku:7", 7))
	if err != nil || resp.StatusCode != 500 || !strings.Contains(body, `"type":"about:blank"`) || strings.Contains(body, "disk") {
		t.Errorf("unknown error: %v, %v, body %s; want a 500 about:blank response without the cause", resp, err, body)
	}
}

// The problem types are distinct identifiers under one base that names no
// branch or version, so they do not change when the repository does.
func TestProblemTypesNameNoBranch(t *testing.T) {
	seen := map[string]bool{}
	for _, typ := range []string{httpmw.TypeMissing, httpmw.TypeInvalid, httpmw.TypeNoResource, httpmw.TypeForged,
		httpmw.TypeStale, httpmw.TypeCondition, httpmw.TypeKeyMismatch, httpmw.TypeUnavailable} {
		rest, ok := strings.CutPrefix(typ, "https://pkg.go.dev/github.com/fenceguard/fenceguard/httpmw#")
		if !ok || rest == "" || seen[rest] || strings.ContainsAny(rest, "/#") {
			t.Errorf("type %q: want a distinct fragment of the package's pkg.go.dev address", typ)
		}
		seen[rest] = true
	}
}

// storeServer serves PUT /sku/{sku} behind the middleware, with a handler
// whose store returns err, answered by WriteError.
type storeServer struct {
	url    string
	client *http.Client
	body   *string
}

func newStoreServer(t *testing.T, err error, body *string) *storeServer {
	t.Helper()
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: httpmw.ClaimInStore, Require: func(*http.Request) bool { return false }})
	mux := http.NewServeMux()
	mux.Handle("PUT /sku/{sku}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpmw.WriteError(w, r, err)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.Client().Transport
	if body != nil { // record the body the server sent
		base = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := srv.Client().Transport.RoundTrip(r)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				*body = string(b)
				resp.Body = io.NopCloser(strings.NewReader(*body))
			}
			return resp, err
		})
	}
	c := &http.Client{Transport: &httpmw.Transport{Base: base, Key: skuKey}}
	t.Cleanup(c.CloseIdleConnections)
	return &storeServer{url: srv.URL, client: c, body: body}
}

func (s *storeServer) put(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.url+"/sku/7", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}
