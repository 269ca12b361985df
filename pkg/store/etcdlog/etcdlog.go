// SPDX-License-Identifier: Apache-2.0

// Package etcdlog turns the zap logs of the etcd client and of the embedded
// etcd server into records of the daemon's log/slog logger.
//
// etcd logs through go.uber.org/zap and builds its own stderr logger when it
// is given none; that logger would interleave JSON lines of a second format
// with the daemon's own log and ignore its level. New returns a *zap.Logger
// whose every entry at or above a level goes to an slog.Handler, so the
// daemon has one log stream and one place to configure it.
//
// It lives beside pkg/store because the store and pkg/etcdserver both hand
// a logger to etcd; it imports no etcd package itself.
package etcdlog

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a zap logger that writes entries at level or above to l, with
// the attribute component=etcd. A nil l discards everything. Zap's fatal and
// panic levels keep their behaviour (exit, panic) after the entry is written.
func New(l *slog.Logger, level zapcore.Level) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	h := l.Handler().WithAttrs([]slog.Attr{slog.String("component", "etcd")})
	return zap.New(&core{h: h, level: level})
}

// core is a zapcore.Core over an slog.Handler.
type core struct {
	h     slog.Handler
	level zapcore.Level
}

func (c *core) Enabled(l zapcore.Level) bool {
	return c.level.Enabled(l) && c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return &core{h: c.h.WithAttrs(attrs(fields)), level: c.level}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(context.Background(), r)
}

func (c *core) Sync() error { return nil }

// attrs converts zap fields to slog attributes in their order. Each field is
// rendered through zap's own map encoder, so errors, durations, arrays and
// objects come out the way zap's JSON encoder would print them.
func attrs(fields []zapcore.Field) []slog.Attr {
	out := make([]slog.Attr, 0, len(fields))
	for _, f := range fields {
		enc := zapcore.NewMapObjectEncoder()
		f.AddTo(enc)
		for k, v := range enc.Fields {
			out = append(out, slog.Any(k, v))
		}
	}
	return out
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
