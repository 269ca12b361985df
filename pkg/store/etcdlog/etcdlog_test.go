// SPDX-License-Identifier: Apache-2.0

package etcdlog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestNew(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	z := New(l, zapcore.WarnLevel).Named("raft").With(zap.String("member", "m1"))

	z.Info("not shown")
	z.Warn("slow fdatasync", zap.Duration("took", 1500e6), zap.Error(errors.New("disk busy")))
	z.Error("lost leader")

	out := buf.String()
	if strings.Contains(out, "not shown") {
		t.Errorf("info entry passed a warn filter:\n%s", out)
	}
	for _, want := range []string{
		`level=WARN msg="slow fdatasync" component=etcd member=m1 logger=raft took=1.5s error="disk busy"`,
		`level=ERROR msg="lost leader"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestNewNil(t *testing.T) {
	New(nil, zapcore.WarnLevel).Error("dropped") // must not panic
}
