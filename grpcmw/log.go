package grpcmw

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// Defaults of [NewRefusalLog].
const (
	defaultLogBurst = 5
	defaultLogEvery = time.Minute
)

// maxLogErr bounds the cause's text in a log record: it may carry the
// client's input.
const maxLogErr = 200

// maxLogKey bounds a resource key or method in a log record.
const maxLogKey = 64

// RefusalLog logs the interceptor's refusals ([Options.Log]) without
// letting clients fill the disk through it, as httpmw's RefusalLog does
// for HTTP. A refusal is expected traffic — a stale holder, a client's
// bug, a scan — so records are rate-limited per [Result]: in every
// interval of Every, the first Burst refusals of a result are logged (at
// Info; UNAVAILABLE, which says the fence's store or check failed, at
// Warn), and the rest are only counted. The next record of that result
// logged carries the count in "suppressed". Refusals over the limit are
// still logged at Debug when the logger is enabled for Debug.
//
// A record holds the result, the code, the full method, the resource key
// when derived (quoted and cut to 64 bytes unless short and plain), the
// token presented, and the cause, cut to 200 bytes. Count refusals with
// [Options.Observe]; the log is for reading.
//
// A RefusalLog is safe for concurrent use, and may be shared by several
// Interceptors. It costs one mutex per refusal.
type RefusalLog struct {
	logger *slog.Logger
	burst  int
	every  time.Duration
	now    func() time.Time

	mu    sync.Mutex
	kinds map[Result]*logWindow // guarded by mu
}

type logWindow struct {
	start      time.Time
	n          int   // records logged in this window
	suppressed int64 // refusals not logged since the last record
}

// NewRefusalLog returns a RefusalLog writing to l (nil: slog.Default())
// at most burst records per result every interval; burst ≤ 0 is 5,
// every ≤ 0 one minute.
func NewRefusalLog(l *slog.Logger, burst int, every time.Duration) *RefusalLog {
	if l == nil {
		l = slog.Default()
	}
	if burst <= 0 {
		burst = defaultLogBurst
	}
	if every <= 0 {
		every = defaultLogEvery
	}
	return &RefusalLog{logger: l, burst: burst, every: every, now: time.Now, kinds: map[Result]*logWindow{}}
}

// Log records the refusal o of a call to method, within the limit.
func (l *RefusalLog) Log(ctx context.Context, method string, o Outcome) {
	level := slog.LevelInfo
	if o.Code == codes.Unavailable {
		level = slog.LevelWarn
	}
	l.mu.Lock()
	w := l.kinds[o.Result]
	if w == nil {
		w = &logWindow{}
		l.kinds[o.Result] = w
	}
	if now := l.now(); now.Sub(w.start) >= l.every || now.Before(w.start) {
		w.start, w.n = now, 0
	}
	var suppressed int64
	if w.n < l.burst {
		w.n++
		suppressed, w.suppressed = w.suppressed, 0
	} else {
		w.suppressed++
		level = slog.LevelDebug
	}
	l.mu.Unlock()
	if !l.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("result", string(o.Result)), slog.String("code", o.Code.String()),
		slog.String("method", logSafe(method, maxLogKey)))
	if o.Resource != "" {
		attrs = append(attrs, slog.String("resource", logSafe(o.Resource, maxLogKey)))
	}
	if !o.Token.IsZero() {
		attrs = append(attrs, slog.String("token", o.Token.String()))
	}
	if o.Err != nil {
		attrs = append(attrs, slog.String("err", logSafe(o.Err.Error(), maxLogErr)))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	l.logger.LogAttrs(ctx, level, "fenceguard: call refused", attrs...)
}

// logSafe returns s as is when it is short and visible ASCII, otherwise
// its first max bytes quoted in ASCII (control, format and bidirectional
// characters escaped), with the full length.
func logSafe(s string, max int) string {
	if len(s) <= max && echoKey(s) == s && s != "" {
		return s
	}
	cut := s
	if len(cut) > max {
		cut = cut[:max]
	}
	q := strconv.QuoteToASCII(cut)
	if len(s) > max {
		q += "…(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return q
}
