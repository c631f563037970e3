package logs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

func TestLines(t *testing.T) {
	for in, want := range map[int]int{0: DefaultLines, 1: 1, 500: 500} {
		if got, err := Lines(in); err != nil || got != want {
			t.Errorf("Lines(%d) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []int{-1, 501} {
		if _, err := Lines(in); err == nil {
			t.Errorf("Lines(%d): no error", in)
		}
	}
	if n, err := ReadLines(1000); n != 1000 || err != nil {
		t.Errorf("ReadLines(1000) = %d, %v", n, err)
	}
	if _, err := ReadLines(1001); err == nil {
		t.Error("ReadLines(1001): no error")
	}
}

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	if got := Clip("caf\xe9"); got != "caf\uFFFD" {
		t.Errorf("Clip(invalid UTF-8) = %q", got)
	}
	long := strings.Repeat("a", MaxLineBytes-1) + "€€"
	got := Clip(long)
	if got != strings.Repeat("a", MaxLineBytes-1)+TruncatedMark {
		t.Errorf("Clip cut at %d bytes, not at the rune boundary", len(got)-len(TruncatedMark))
	}
}

func TestFit(t *testing.T) {
	big := strings.Repeat("x", MaxResultBytes/4)
	lines := make([]agentproto.LogLine, 6)
	for i := range lines {
		lines[i].Message = big
		lines[i].Priority = i
	}
	newest := Fit(lines, true)
	if len(newest) != 3 || newest[len(newest)-1].Priority != 5 {
		t.Errorf("Fit(keepNewest) kept %d lines ending at %d", len(newest), newest[len(newest)-1].Priority)
	}
	oldest := Fit(lines, false)
	if len(oldest) != 3 || oldest[0].Priority != 0 {
		t.Errorf("Fit(keepOldest) kept %d lines starting at %d", len(oldest), oldest[0].Priority)
	}
	small := lines[:2]
	if len(Fit(small, true)) != 2 || len(Fit(small, false)) != 2 {
		t.Error("Fit dropped lines within the budget")
	}
}

type nopSink struct{}

func (nopSink) Emit(string, string, any) {}

type fakeReader struct {
	got agentproto.LogsReadPayload
}

func (f *fakeReader) ReadLogs(_ context.Context, p agentproto.LogsReadPayload, _ agent.EventSink) (agentproto.LogsResult, error) {
	f.got = p
	return agentproto.LogsResult{Cursor: "c-" + p.Source}, nil
}

func TestReaders(t *testing.T) {
	j, c := &fakeReader{}, &fakeReader{}
	x := Readers{Journal: j, Container: c}
	run := func(payload string) (agentproto.LogsResult, error) {
		data, _, err := executor(x).Run(context.Background(), agentproto.Job{Type: agentproto.JobLogsRead, Payload: json.RawMessage(payload)}, nil, nopSink{})
		if err != nil {
			return agentproto.LogsResult{}, err
		}
		return data.(agentproto.LogsResult), nil
	}
	res, err := run(`{"source":"journal","unit":"a.service","lines":0}`)
	if err != nil || res.Cursor != "c-journal" || j.got.Lines != DefaultLines || res.Lines == nil {
		t.Errorf("journal read: %+v, %v (payload %+v)", res, err, j.got)
	}
	res, err = run(`{"source":"container","container":"web","lines":7,"future_field":1}`)
	if err != nil || res.Cursor != "c-container" || c.got.Lines != 7 || c.got.Container != "web" {
		t.Errorf("container read: %+v, %v (payload %+v)", res, err, c.got)
	}
	for payload, want := range map[string]string{
		``:                                  "missing",
		`[]`:                                "invalid logs.read payload",
		`{"unit":"a.service"}`:              "source is required",
		`{"source":"syslog"}`:               `unknown source "syslog"`,
		`{"source":"journal","lines":1001}`: "lines must be between 1 and 1000",
	} {
		if _, err := run(payload); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("payload %q: error %v, want it to mention %q", payload, err, want)
		}
	}
	_, _, err = executor(Readers{}).Run(context.Background(), agentproto.Job{Type: agentproto.JobLogsRead,
		Payload: json.RawMessage(`{"source":"container","container":"x"}`)}, nil, nopSink{})
	if err == nil || !strings.Contains(err.Error(), "cannot read container logs") {
		t.Errorf("no container reader: %v", err)
	}
}

// executor is the agent's executor of logs.read with x's readers.
func executor(x Readers) agent.Executor {
	r := agent.Registry{}
	x.Register(r)
	return r[agentproto.JobLogsRead]
}
