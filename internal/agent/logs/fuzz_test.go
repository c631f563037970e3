package logs

import (
	"context"
	"testing"
	"unicode/utf8"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// recorder is a Reader that keeps the payload it was given.
type recorder struct{ got *agentproto.LogsReadPayload }

func (r recorder) ReadLogs(_ context.Context, p agentproto.LogsReadPayload, _ agent.EventSink) (agentproto.LogsResult, error) {
	*r.got = p
	return agentproto.LogsResult{}, nil
}

type noEvents struct{}

func (noEvents) Emit(string, string, any) {}

// FuzzReadPayload runs logs.read on arbitrary payloads with readers that
// only record what reaches them: nothing panics, a reader only ever gets
// its own source and 1 to MaxReadLines lines, and Clip keeps any message
// valid UTF-8 within MaxLineBytes (plus the mark).
func FuzzReadPayload(f *testing.F) {
	for _, s := range []string{
		`{"source":"journal","unit":"ssh.service","lines":10}`,
		`{"source":"container","container":"web","lines":0,"cursor":"stdout=2026-11-22T10:00:00Z~1;stderr=2026-11-22T10:00:00Z~0"}`,
		`{"source":"journal","cursor":"s=1;i=2","priority":3,"lines":5000}`,
		`{"source":"bogus"}`, `{"lines":-1}`, `null`, `{}`, `"x"`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var j, c agentproto.LogsReadPayload
		x := Readers{Journal: recorder{&j}, Container: recorder{&c}}
		_, _, err := executor(x).Run(context.Background(), agentproto.Job{Type: agentproto.JobLogsRead, Payload: payload}, nil, noEvents{})
		if err == nil {
			got := j
			if got.Source == "" {
				got = c
			}
			if got.Lines < 1 || got.Lines > MaxReadLines {
				t.Fatalf("the reader got %d lines", got.Lines)
			}
			if (j.Source != "" && j.Source != agentproto.LogSourceJournal) || (c.Source != "" && c.Source != agentproto.LogSourceContainer) {
				t.Fatalf("a reader got another source: journal %q, container %q", j.Source, c.Source)
			}
		}
		msg := Clip(string(payload))
		if !utf8.ValidString(msg) || len(msg) > MaxLineBytes+len(TruncatedMark) {
			t.Fatalf("Clip gave %d bytes (valid UTF-8: %v)", len(msg), utf8.ValidString(msg))
		}
	})
}
