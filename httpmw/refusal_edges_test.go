package httpmw_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// A stale refusal without a mark (a store error that is only ErrStale, or
// a StaleError whose Current is unknown) still comes back from the
// Transport as a *token.StaleError, with Current 0.
func TestStaleWithoutMarkReachesTheClient(t *testing.T) {
	for name, err := range map[string]error{
		"sentinel":     fmt.Errorf("row fenced: %w", token.ErrStale),
		"no current":   &token.StaleError{Resource: "sku:7", Presented: 7},
		"typed nil":    fmt.Errorf("w: %w", (*token.StaleError)(nil)),
		"bare nil ptr": (*token.StaleError)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			srv := newStoreServer(t, err, nil)
			_, cerr := srv.put(token.NewContext(context.Background(), "sku:7", 7))
			var se *token.StaleError
			if !errors.As(cerr, &se) || se.Presented != 7 || se.Current != 0 || se.Resource != "sku:7" {
				t.Fatalf("client error %v; want a stale error for sku:7, presented 7, no mark", cerr)
			}
		})
	}
}

// WriteError, WriteStale and WriteProblem never panic, whatever nil they
// are given.
func TestRefusalWritersTakeNils(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/sku/42", nil)
	for name, err := range map[string]error{
		"nil":                nil,
		"nil stale":          (*token.StaleError)(nil),
		"nil forged":         (*token.ForgedError)(nil),
		"wrapped nil forged": fmt.Errorf("w: %w", (*token.ForgedError)(nil)),
	} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			p := httpmw.WriteError(rec, req, err)
			if rec.Code < 400 || rec.Code != p.Status {
				t.Errorf("status %d, problem %d", rec.Code, p.Status)
			}
			httpmw.WriteStale(httptest.NewRecorder(), err)
		})
	}
	rec := httptest.NewRecorder()
	httpmw.WriteProblem(rec, nil)
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("WriteProblem(nil): %d, want 500", rec.Code)
	}
	if s := (*httpmw.Problem)(nil).Error(); s == "" {
		t.Error("nil Problem has no message")
	}
}

// A problem is an error: a status that is not one is written as 500, in
// the status line and the body alike.
func TestWriteProblemWritesOnlyErrorStatuses(t *testing.T) {
	for _, status := range []int{-1, 0, 100, 103, 200, 204, 304, 600, 1000} {
		rec := httptest.NewRecorder()
		httpmw.WriteProblem(rec, &httpmw.Problem{Type: httpmw.TypeCondition, Title: "t", Status: status})
		if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"status":500`) {
			t.Errorf("status %d written as %d, body %s; want 500 in both", status, rec.Code, rec.Body)
		}
	}
}

// Headers a handler set for its own body do not describe the problem: a
// refusal after Content-Encoding: gzip still reaches the client.
func TestWriteErrorDropsRepresentationHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("ETag", `"v1"`)
		httpmw.WriteError(w, r, &token.StaleError{Resource: "sku:42", Presented: 5, Current: 9})
	}))
	defer srv.Close()
	c := &http.Client{Transport: &httpmw.Transport{Base: srv.Client().Transport, Key: skuKey}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(token.NewContext(context.Background(), "sku:42", 5), http.MethodPut, srv.URL+"/sku/42", nil)
	_, err := c.Do(req)
	var se *token.StaleError
	if !errors.As(err, &se) || se.Current != 9 {
		t.Fatalf("client error %v; want stale below 9", err)
	}
}

// A key mismatch is a bug of the server, and wins over what else the error
// says.
func TestWriteErrorKeyMismatchWins(t *testing.T) {
	p := httpmw.WriteError(httptest.NewRecorder(), httptest.NewRequest("PUT", "/sku/7", nil),
		errors.Join(token.ErrNotFound, httpmw.ErrKeyMismatch))
	if p.Type != httpmw.TypeKeyMismatch || p.Status != 500 {
		t.Errorf("got %d %s; want 500 %s", p.Status, p.Type, httpmw.TypeKeyMismatch)
	}
}

// The server's title and detail cannot forge lines or terminal colours in
// a client's log.
func TestProblemErrorIsPrintable(t *testing.T) {
	p := &httpmw.Problem{Status: 409, Title: "Stale\r\nlevel=error msg=forged", Detail: "\x1b[31mred\u202e"}
	s := p.Error()
	if strings.ContainsAny(s, "\r\n\x1b\u202e") {
		t.Errorf("Error() = %q: carries control or bidi characters", s)
	}
}

// The token goes only where ServeMux would route: not with a URL.Opaque
// that sends another path, not with the caller's own header to another
// host on a redirect.
func TestTokenDoesNotLeaveItsResource(t *testing.T) {
	var got []string
	record := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = append(got, name+" "+r.URL.Path+" "+r.Header.Get(token.Header))
			if r.URL.Path == "/sku/42/moved" {
				http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
			}
		})
	}
	other := httptest.NewServer(record("other"))
	defer other.Close()
	srv := httptest.NewServer(record("srv"))
	defer srv.Close()
	key := mustRouteKey("sku", "/sku/{sku}", "/sku/{sku}/moved")
	c := &http.Client{Transport: &httpmw.Transport{Key: key}}
	defer c.CloseIdleConnections()
	ctx := token.NewContext(context.Background(), "sku:42", 5)

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/sku/42", nil)
	req.URL.Opaque = "/sku/43"
	do(t, c, req)

	req, _ = http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/sku/42/moved?to="+other.URL+"/sku/43", nil)
	req.Header.Set(token.Header, "5")
	do(t, c, req)

	want := []string{"srv /sku/43 ", "srv /sku/42/moved 5", "other /sku/43 "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests seen %q; want %q", got, want)
	}
}

// A caller's header under a non-canonical key is the caller's own: the
// Transport does not add a second value.
func TestTransportSeesOwnHeaderInAnyCase(t *testing.T) {
	base := &fakeBase{status: http.StatusNoContent}
	req := newReq(t, token.NewContext(context.Background(), "sku:42", 5))
	req.Header["x-fencing-token"] = []string{"5"}
	if _, err := (&httpmw.Transport{Base: base, Key: skuKey}).RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range base.got.Header {
		if strings.EqualFold(k, token.Header) {
			n += len(v)
		}
	}
	if n != 1 {
		t.Errorf("%d token values sent: %v", n, base.got.Header)
	}
}

func do(t *testing.T, c *http.Client, req *http.Request) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
