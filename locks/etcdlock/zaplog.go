package etcdlock

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClientLogger returns a zap logger for clientv3.Config.Logger that writes
// through log (nil: [slog.Default]), so the etcd client's lines go where
// the rest of the program's go instead of to stderr:
//
//	cli, err := clientv3.New(clientv3.Config{
//		Endpoints: endpoints,
//		Logger:    etcdlock.ClientLogger(logger),
//	})
//
// The client logs a warning, "retrying of unary invoker failed", for every
// request whose context ends — also for an ordinary cancellation, which the
// caller learns of from the request's own error anyway. ClientLogger passes
// those on at Debug, and everything else at its own level (zap's Debug,
// Info, Warn at slog's; Error and above at Error), with its fields as
// attributes. For no client logging at all use zap.NewNop().
func ClientLogger(log *slog.Logger) *zap.Logger {
	if log == nil {
		log = slog.Default()
	}
	return zap.New(&slogCore{h: log.Handler()})
}

// slogCore is a zapcore.Core writing to a slog.Handler.
type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

// Enabled reports whether the handler takes l's level. (Write may pass an
// entry on at a lower level, never a higher one.)
func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// expectedRetryFailure is the client's warning for a request whose context
// ended: not news to anyone but the caller, who has the request's error.
func expectedRetryFailure(msg string, fields []zapcore.Field) bool {
	if msg != "retrying of unary invoker failed" {
		return false
	}
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return true
			}
			switch status.Code(err) {
			case codes.Canceled, codes.DeadlineExceeded:
				return true
			}
		}
	}
	return false
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	level := slogLevel(e.Level)
	all := append(c.fields[:len(c.fields):len(c.fields)], fields...)
	if level > slog.LevelDebug && expectedRetryFailure(e.Message, all) {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !c.h.Enabled(ctx, level) {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range all {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, level, e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		r.AddAttrs(slog.Any(k, enc.Fields[k]))
	}
	return c.h.Handle(ctx, r)
}

func (c *slogCore) Sync() error { return nil }

var _ zapcore.Core = (*slogCore)(nil)
