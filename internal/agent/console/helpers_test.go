package console_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agent/console"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// runJob runs a console job through its executor as the agent would,
// with password as the job's secret.
func runJob(t *testing.T, jobType string, payload any, password string) agenttest.Outcome {
	t.Helper()
	return runJobSecrets(t, jobType, payload, map[string]string{agentproto.SecretDBPassword: password})
}

// runJobSecrets runs a console job through its executor with secrets.
func runJobSecrets(t *testing.T, jobType string, payload any, secrets map[string]string) agenttest.Outcome {
	t.Helper()
	r := agent.Registry{}
	console.Executors{}.Register(r)
	return agenttest.RunJob(t, r, jobType, payload, secrets)
}

// query runs one db.query.
func query(t *testing.T, target agentproto.DBTarget, password, sql string, readonly bool, maxRows, timeoutMS int) agenttest.Outcome {
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
