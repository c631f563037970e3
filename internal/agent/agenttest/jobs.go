package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Events drops a job's events.
type Events struct{}

func (Events) Emit(string, string, any) {}

// Outcome is what a job ended with: its data as JSON and its error.
type Outcome struct {
	Data []byte
	Err  error
}

// RunJob runs a job of jobType through the executor r holds for it, as
// the agent would, with secrets; the job has two minutes.
func RunJob(t testing.TB, r agent.Registry, jobType string, payload any, secrets map[string]string) Outcome {
	t.Helper()
	pl, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, _, err := r[jobType].Run(ctx, agentproto.Job{ID: "job_test", Type: jobType, Payload: pl}, secrets, Events{})
	b, jerr := json.Marshal(data)
	if jerr != nil {
		t.Fatal(jerr)
	}
	return Outcome{Data: b, Err: err}
}

// OK decodes a job's data into v, failing the test if the job failed.
// Numbers stay as the engine wrote them (12.50, not 12.5).
func (o Outcome) OK(t testing.TB, v any) {
	t.Helper()
	if o.Err != nil {
		t.Fatalf("job failed: %v; data %s", o.Err, o.Data)
	}
	d := json.NewDecoder(bytes.NewReader(o.Data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatal(err)
	}
}

// Failure is the DBFailure of a failed database job; the test fails if
// the job succeeded or its error is not the failure's message.
func (o Outcome) Failure(t testing.TB) agentproto.DBError {
	t.Helper()
	if o.Err == nil {
		t.Fatalf("job succeeded, want it to fail; data %s", o.Data)
	}
	var f agentproto.DBFailure
	if err := json.Unmarshal(o.Data, &f); err != nil {
		t.Fatalf("data %s: %v", o.Data, err)
	}
	if f.Error.Message == "" || f.Error.Message != o.Err.Error() {
		t.Fatalf("failure %+v with job error %q: want the job's error as the failure's message", f.Error, o.Err)
	}
	return f.Error
}

// Text is the job's data as text.
func (o Outcome) Text() string { return string(o.Data) }
