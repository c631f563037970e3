package database_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/database"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// events drops a job's events.
type events struct{}

func (events) Emit(string, string, any) {}

// outcome is what a job ended with: its data as JSON and its error.
type outcome struct {
	data []byte
	err  error
}

// runJob runs a database job through its executor as the agent would,
// with password as the job's secret.
func runJob(t *testing.T, jobType string, payload any, password string) outcome {
	t.Helper()
	return runJobSecrets(t, jobType, payload, map[string]string{agentproto.SecretDBPassword: password})
}

// runJobSecrets runs a database job through its executor with secrets.
func runJobSecrets(t *testing.T, jobType string, payload any, secrets map[string]string) outcome {
	t.Helper()
	r := agent.Registry{}
	database.Executors{}.Register(r)
	pl, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, _, err := r[jobType].Run(ctx, agentproto.Job{ID: "job_test", Type: jobType, Payload: pl},
		secrets, events{})
	b, jerr := json.Marshal(data)
	if jerr != nil {
		t.Fatal(jerr)
	}
	return outcome{data: b, err: err}
}

// ok decodes a job's data into v, failing the test if the job failed.
func (o outcome) ok(t *testing.T, v any) {
	t.Helper()
	if o.err != nil {
		t.Fatalf("job failed: %v; data %s", o.err, o.data)
	}
	// Numbers stay as the engine wrote them (12.50, not 12.5).
	d := json.NewDecoder(bytes.NewReader(o.data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatal(err)
	}
}

// failure is the DBFailure of a failed job.
func (o outcome) failure(t *testing.T) agentproto.DBError {
	t.Helper()
	if o.err == nil {
		t.Fatalf("job succeeded, want it to fail; data %s", o.data)
	}
	var f agentproto.DBFailure
	if err := json.Unmarshal(o.data, &f); err != nil {
		t.Fatalf("data %s: %v", o.data, err)
	}
	if f.Error.Message == "" || f.Error.Message != o.err.Error() {
		t.Fatalf("failure %+v with job error %q: want the job's error as the failure's message", f.Error, o.err)
	}
	return f.Error
}

// query runs one db.query.
func query(t *testing.T, target agentproto.DBTarget, password, sql string, readonly bool, maxRows, timeoutMS int) outcome {
	t.Helper()
	return runJob(t, agentproto.JobDBQuery, agentproto.DBQueryPayload{Target: target, SQL: sql, ReadOnly: readonly, MaxRows: maxRows, TimeoutMS: timeoutMS}, password)
}

// rowsJSON is a result's rows as JSON.
func rowsJSON(t *testing.T, res agentproto.DBQueryResult) string {
	t.Helper()
	b, err := json.Marshal(res.Rows)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// postgresTarget is the target of a PostgreSQL URL and its password.
func postgresTarget(t *testing.T, rawURL string) (agentproto.DBTarget, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	pw, _ := u.User.Password()
	return agentproto.DBTarget{InstanceID: "db_test", Engine: agentproto.EnginePostgres, Host: u.Hostname(), Port: port,
		Username: u.User.Username(), Database: u.Path[1:]}, pw
}

// text is the job's data as text.
func (o outcome) text() string { return string(o.data) }
