// SPDX-License-Identifier: Apache-2.0

package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	reqs := []Request{
		{ID: 1, Shell: "echo hi", Env: []string{"A=b"}, Dir: "/root", TimeoutMS: 5000},
		{ID: 2, Argv: []string{"dmsetup", "version"}},
		{ID: 3, Op: OpCancel, Target: 1},
	}
	for _, r := range reqs {
		if err := Encode(&buf, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "\n"); n != len(reqs) {
		t.Fatalf("want %d lines, got %d: %q", len(reqs), n, buf.String())
	}
	dec := NewDecoder(&buf)
	for _, want := range reqs {
		var got Request
		if err := dec.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
		if err := got.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := dec.Decode(&Request{}); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestResponseBinaryAndFieldNames(t *testing.T) {
	out := []byte{0, 0xff, '\n', 'x'}
	var buf bytes.Buffer
	if err := Encode(&buf, Response{ID: 7, ExitCode: 3, Stdout: out, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"id":7`, `"exit_code":3`, `"stdout":`, `"error":"boom"`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("encoding %s lacks %s", buf.String(), key)
		}
	}
	var got Response
	if err := NewDecoder(&buf).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Stdout, out) || got.ExitCode != 3 || got.Error != "boom" {
		t.Fatalf("got %+v", got)
	}
}

func TestDecodeBadLineThenGood(t *testing.T) {
	dec := NewDecoder(strings.NewReader("\n{not json\n{\"id\":4,\"exit_code\":0}\n{\"id\":5"))
	var r Response
	if err := dec.Decode(&r); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("bad line: want ErrBadMessage, got %v", err)
	}
	if err := dec.Decode(&r); err != nil || r.ID != 4 {
		t.Fatalf("got %+v, %v", r, err)
	}
	if err := dec.Decode(&r); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated line: want ErrUnexpectedEOF, got %v", err)
	}
}

func TestValidate(t *testing.T) {
	bad := []Request{
		{Shell: "true"},
		{ID: 1},
		{ID: 1, Shell: "true", Argv: []string{"true"}},
		{ID: 1, Op: OpCancel},
		{ID: 1, Op: "reboot"},
		{ID: 1, Shell: "true", TimeoutMS: -1},
	}
	for _, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: no error", r)
		}
	}
	for _, r := range []Request{{ID: 1, Op: OpPing}, {ID: 2, Op: OpPoweroff}, {ID: 3, Op: OpRun, Shell: "x"}} {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	got := ParseCmdline("console=ttyS0 quiet tc.agent=/work/a/agent tc.addr=10.0.0.1/24 x=1 x=2\n")
	want := map[string]string{"console": "ttyS0", "quiet": "", ParamAgent: "/work/a/agent", ParamAddr: "10.0.0.1/24", "x": "2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
