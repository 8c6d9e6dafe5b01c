package grpcmw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/grpcmw"
	"github.com/fenceguard/fenceguard/token"
)

// records decodes the JSON log lines in buf.
func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}

// A flood of refusals writes Burst records per result and interval; the
// next record after the window carries the count it suppressed, and a
// flood of one result does not hide another.
func TestRefusalLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	rl := grpcmw.NewRefusalLog(slog.New(slog.NewJSONHandler(&buf, nil)), 3, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	grpcmw.SetLogClock(rl, func() time.Time { return now })
	o := testOptions(&token.MemoryFence{})
	o.Log = rl
	s := startServer(t, o)
	ctx := context.Background()
	for range 20 {
		_, _ = call(ctx, s.conn, methodTake, "1") // missing
	}
	_, _ = call(withToken(ctx, "x"), s.conn, methodTake, "1") // invalid
	recs := records(t, &buf)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 3 missing and 1 invalid: %v", len(recs), recs)
	}
	if recs[0]["result"] != "missing" || recs[0]["code"] != "FailedPrecondition" || recs[0]["method"] != methodTake || recs[3]["result"] != "invalid" {
		t.Errorf("records = %v", recs)
	}
	buf.Reset()
	now = now.Add(time.Minute)
	_, _ = call(ctx, s.conn, methodTake, "1")
	recs = records(t, &buf)
	if len(recs) != 1 || recs[0]["suppressed"] != float64(17) {
		t.Fatalf("after the window: %v, want one record with suppressed 17", recs)
	}
}

// A resource key that is not short, plain ASCII is quoted and cut in a
// record, so that a request cannot forge log lines or fill them.
func TestRefusalLogUnsafeKey(t *testing.T) {
	var buf bytes.Buffer
	o := testOptions(downFence{})
	o.Log = grpcmw.NewRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)), 10, time.Minute)
	s := startServer(t, o)
	sku := "1\u202e" + strings.Repeat("x", 200)
	_, _ = call(withToken(context.Background(), "5"), s.conn, methodTake, sku)
	out := buf.String()
	if strings.Contains(out, "\u202e") || strings.Contains(out, strings.Repeat("x", 100)) || !strings.Contains(out, "bytes)") {
		t.Errorf("record = %q", out)
	}
	if !strings.Contains(out, "level=WARN") {
		t.Errorf("an unavailable fence is not logged at Warn: %q", out)
	}
}
