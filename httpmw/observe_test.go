package httpmw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/httpmw"
	"github.com/fenceguard/fenceguard/token"
)

// outcomes records what Observe saw.
type outcomes struct {
	mu  sync.Mutex
	all []httpmw.Outcome
}

func (o *outcomes) observe(_ *http.Request, out httpmw.Outcome) {
	o.mu.Lock()
	o.all = append(o.all, out)
	o.mu.Unlock()
}

func (o *outcomes) last(t *testing.T) httpmw.Outcome {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.all) == 0 {
		t.Fatal("Observe was not called")
	}
	return o.all[len(o.all)-1]
}

// Every decision reaches Observe exactly once, with its result and
// status — the header-level refusals that no Check or Fence sees too.
func TestObserveEveryOutcome(t *testing.T) {
	var fence token.MemoryFence
	var seen seen
	var obs outcomes
	mw := newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Observe: obs.observe})
	h := muxRoute(mw, seen.handler())
	var down failingFence
	hDown := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &down, Observe: obs.observe}), seen.handler())
	if err := fence.Claim(context.Background(), "sku:1", 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		h        http.Handler
		method   string
		target   string
		vals     []string
		result   httpmw.Result
		status   int
		resource string
	}{
		{"accepted", h, "PUT", "/sku/1", []string{"11"}, httpmw.ResultAccepted, 0, "sku:1"},
		{"unfenced read", h, "GET", "/sku/1", nil, httpmw.ResultUnfenced, 0, ""},
		{"missing", h, "PUT", "/sku/1", nil, httpmw.ResultMissing, 428, ""},
		{"malformed", h, "PUT", "/sku/1", []string{"abc"}, httpmw.ResultInvalid, 400, ""},
		{"too long", h, "PUT", "/sku/1", []string{strings.Repeat("9", 300)}, httpmw.ResultInvalid, 400, ""},
		{"two headers", h, "PUT", "/sku/1", []string{"11", "12"}, httpmw.ResultInvalid, 400, ""},
		{"no resource", h, "PUT", "/sku/%01", []string{"11"}, httpmw.ResultNoResource, 404, ""},
		{"forged", h, "PUT", "/sku/1", []string{"18446744073709551615"}, httpmw.ResultForged, 403, "sku:1"},
		{"stale", h, "PUT", "/sku/1", []string{"9"}, httpmw.ResultStale, 409, "sku:1"},
		{"unavailable", hDown, "PUT", "/sku/1", []string{"11"}, httpmw.ResultUnavailable, 503, "sku:1"},
	} {
		obs.mu.Lock()
		before := len(obs.all)
		obs.mu.Unlock()
		w := serve(t, c.h, c.method, c.target, c.vals...)
		obs.mu.Lock()
		n := len(obs.all) - before
		obs.mu.Unlock()
		if n != 1 {
			t.Fatalf("%s: Observe called %d times, want once", c.name, n)
		}
		o := obs.last(t)
		if o.Result != c.result || o.Status != c.status || o.Resource != c.resource {
			t.Errorf("%s: outcome %s %d %q, want %s %d %q", c.name, o.Result, o.Status, o.Resource, c.result, c.status, c.resource)
		}
		if c.status != 0 && (w.Code != c.status || o.Problem == nil || o.Problem.Status != c.status) {
			t.Errorf("%s: answered %d, outcome's problem %+v", c.name, w.Code, o.Problem)
		}
	}
}

// logRecords decodes a JSON handler's output.
func logRecords(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// A flood of refusals writes a few records per result per interval: the
// first of each result is visible, the rest are counted, and the count
// comes with the next record.
func TestRefusalLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil)) // Info: no Debug records
	rl := httpmw.NewRefusalLog(logger, 3, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	httpmw.SetLogClock(rl, func() time.Time { return now })
	var fence token.MemoryFence
	if err := fence.Claim(context.Background(), "sku:1", 10); err != nil {
		t.Fatal(err)
	}
	h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Log: rl}), (&seen{}).handler())
	const flood = 1000
	for range flood {
		serve(t, h, "PUT", "/sku/1", "garbage-"+strings.Repeat("x", 100))
		serve(t, h, "PUT", "/sku/1", "9")
	}
	serve(t, h, "PUT", "/sku/1") // one missing token among them
	recs := logRecords(t, &buf)
	count := map[string]int{}
	for _, r := range recs {
		count[r["result"].(string)]++
		if r["level"] != "INFO" {
			t.Errorf("record at %v: %v", r["level"], r)
		}
	}
	if count["invalid"] != 3 || count["stale"] != 3 || count["missing"] != 1 || len(recs) != 7 {
		t.Fatalf("records per result %v (%d in all), want 3 invalid, 3 stale, 1 missing", count, len(recs))
	}
	bytesFlood := buf.Len()
	t.Logf("%d refusals: %d records, %d bytes", 2*flood+1, len(recs), bytesFlood)
	if bytesFlood > 4096 {
		t.Fatalf("%d bytes of log for a flood", bytesFlood)
	}
	for _, r := range recs {
		if r["result"] == "stale" && (r["resource"] != "sku:1" || r["token"] != "9" || r["status"] != 409.0) {
			t.Fatalf("stale record lacks its details: %v", r)
		}
	}
	// The next interval: the first record carries the count left out.
	now = now.Add(time.Minute)
	buf.Reset()
	serve(t, h, "PUT", "/sku/1", "9")
	recs = logRecords(t, &buf)
	if len(recs) != 1 || recs[0]["suppressed"] != float64(flood-3) {
		t.Fatalf("records %v, want one with suppressed %d", recs, flood-3)
	}

	// With Debug enabled, the refusals over the limit are at Debug.
	buf.Reset()
	dbg := httpmw.NewRefusalLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), 1, time.Hour)
	h = muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Log: dbg}), (&seen{}).handler())
	for range 3 {
		serve(t, h, "PUT", "/sku/1", "9")
	}
	levels := []string{}
	for _, r := range logRecords(t, &buf) {
		levels = append(levels, r["level"].(string))
	}
	if strings.Join(levels, " ") != "INFO DEBUG DEBUG" {
		t.Fatalf("levels %v, want INFO DEBUG DEBUG", levels)
	}
}

// Keys in log records are plain only when short and plain; others are
// quoted in ASCII and cut.
func TestRefusalLogUnsafeKey(t *testing.T) {
	var buf bytes.Buffer
	rl := httpmw.NewRefusalLog(slog.New(slog.NewJSONHandler(&buf, nil)), 10, time.Minute)
	var fence token.MemoryFence
	h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence, Log: rl}), (&seen{}).handler())
	long := strings.Repeat("a", 300)
	for _, k := range []string{long, "ab\u202ecd"} {
		if err := fence.Claim(context.Background(), "sku:"+k, 10); err != nil {
			t.Fatal(err)
		}
		serve(t, h, "PUT", "/sku/"+k, "9")
	}
	recs := logRecords(t, &buf)
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	if r := recs[0]["resource"].(string); len(r) > 100 || !strings.Contains(r, "304 bytes") {
		t.Errorf("long key logged as %q", r)
	}
	if r := recs[1]["resource"].(string); r != `"sku:ab\u202ecd"` {
		t.Errorf("key with U+202E logged as %q", r)
	}
	if strings.ContainsRune(buf.String(), '\u202e') {
		t.Error("the log holds a raw U+202E")
	}
}

// Issue 18 #7: a 409 names the resource only when the key is short
// visible ASCII; a 300-byte key or one with U+202E is left out, and the
// client's Transport still reports the key it sent the token for.
func TestStaleEchoesOnlySafeKeys(t *testing.T) {
	var fence token.MemoryFence
	h := muxRoute(newMW(t, httpmw.Options{Resource: httpmw.PathValue("sku"), Fence: &fence}), (&seen{}).handler())
	for _, c := range []struct {
		name, param string
		echoed      bool
	}{
		{"plain", "42", true},
		{"64 bytes", strings.Repeat("b", 64-len("sku:")), true},
		{"65 bytes", strings.Repeat("b", 64-len("sku:")+1), false},
		{"300 characters", strings.Repeat("c", 300), false},
		{"U+202E", "ab\u202ecd", false},
		{"space", "a%20b", false},
		{"non-ASCII", "caf%C3%A9", false},
	} {
		p, err := url.PathUnescape(c.param)
		if err != nil {
			t.Fatal(err)
		}
		key := "sku:" + p
		if err := fence.Claim(context.Background(), key, 10); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		w := serve(t, h, "PUT", "/sku/"+c.param, "9")
		body := w.Body.String()
		pr := decodeProblem(t, w, http.StatusConflict)
		switch {
		case c.echoed && pr.Resource != key:
			t.Errorf("%s: resource %q, want %q", c.name, pr.Resource, key)
		case !c.echoed && (pr.Resource != "" || strings.Contains(body, `"resource"`)):
			t.Errorf("%s: echoed %q", c.name, pr.Resource)
		}
		if strings.ContainsRune(body, '\u202e') || len(body) > 400 {
			t.Errorf("%s: body %q", c.name, body)
		}
		if pr.Current != "10" || pr.Presented != "9" {
			t.Errorf("%s: %+v", c.name, pr)
		}
	}
	// The client gets the key it sent the token for, from its own side.
	key := "sku:" + strings.Repeat("c", 300)
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: &httpmw.Transport{Key: func(r *http.Request) (string, bool) {
		return "sku:" + strings.TrimPrefix(r.URL.Path, "/sku/"), true
	}}}
	ctx := token.NewContext(context.Background(), key, 9)
	req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/sku/"+strings.Repeat("c", 300), nil)
	resp, err := client.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	var se *token.StaleError
	if !errors.As(err, &se) || se.Resource != key || se.Current != 10 {
		t.Fatalf("Transport: %v", err)
	}
	client.CloseIdleConnections()
}
