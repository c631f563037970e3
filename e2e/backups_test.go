package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// BackupSettings is GET /api/v1/backups/settings.
type BackupSettings struct {
	Configured         bool   `json:"configured"`
	Provider           string `json:"provider"`
	Endpoint           string `json:"endpoint"`
	Region             string `json:"region"`
	Bucket             string `json:"bucket"`
	Prefix             string `json:"prefix"`
	PathStyle          bool   `json:"path_style"`
	TLS                bool   `json:"tls"`
	CA                 string `json:"ca"`
	AccessKeyIDSet     bool   `json:"access_key_id_set"`
	SecretAccessKeySet bool   `json:"secret_access_key_set"`
}

// StorageTestResult is the data of backup.storage_test.
type StorageTestResult struct {
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"`
	Steps []struct {
		Step       string `json:"step"`
		OK         bool   `json:"ok"`
		DurationMS int64  `json:"duration_ms"`
		Error      string `json:"error"`
	} `json:"steps"`
}

// backupRig is a control plane with a real agent on one server and an
// S3 server; the agent keeps local copies in localDir.
type backupRig struct {
	*dbRig
	s3       *testlab.S3
	localDir string
}

func newBackupRig(t testing.TB, d store.Dialect, args ...string) *backupRig {
	t.Helper()
	return newBackupRigWith(t, Options{Dialect: d, Args: args})
}

// newBackupRigWith is newBackupRig on a control plane started with opts
// (its arguments after the rig's own).
func newBackupRigWith(t testing.TB, opts Options) *backupRig {
	t.Helper()
	local := t.TempDir()
	opts.Args = append([]string{"--backup-local-dir", local, "--backup-local-keep", "2"}, opts.Args...)
	f := newFleet(t, opts)
	e, config := f.enrollServer(t, "db-host")
	return &backupRig{dbRig: &dbRig{Fleet: f, serverID: e.Server.ID, agent: startAgent(t, config)}, s3: testlab.StartS3(t),
		localDir: local}
}

// writer inserts rows into an instance through query jobs, one after
// the other, until stopped; stop returns how many rows were queued.
func (r *backupRig) writer(instanceID, sql string, rowsPerStatement int64) (stop func() int64) {
	var inserted atomic.Int64
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		body, _ := json.Marshal(map[string]any{"readonly": false, "sql": sql})
		for {
			select {
			case <-quit:
				return
			default:
			}
			req, _ := http.NewRequest(http.MethodPost, r.URL+"/api/v1/databases/"+instanceID+"/query", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+r.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := r.ControlPlane.Client.Do(req)
			if err != nil {
				return
			}
			var a struct {
				JobID string `json:"job_id"`
			}
			err = json.NewDecoder(resp.Body).Decode(&a)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusAccepted {
				return
			}
			inserted.Add(rowsPerStatement)
			req, _ = http.NewRequest(http.MethodGet, r.URL+"/api/v1/databases/"+instanceID+"/jobs/"+a.JobID+"?wait=20", nil)
			req.Header.Set("Authorization", "Bearer "+r.Token)
			if resp, err = r.ControlPlane.Client.Do(req); err != nil {
				return
			}
			resp.Body.Close()
		}
	}()
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(quit); <-done })
		return inserted.Load()
	}
}

// storageSettings is a PUT of the settings of the rig's S3 server.
func (r *backupRig) storageSettings(prefix string) map[string]any {
	body := map[string]any{"provider": "s3", "endpoint": r.s3.Endpoint, "region": r.s3.Region, "bucket": r.s3.Bucket,
		"prefix": prefix, "access_key_id": r.s3.AccessKeyID, "secret_access_key": r.s3.SecretAccessKey, "path_style": true,
		"tls": r.s3.CA != nil}
	if r.s3.CA != nil {
		body["ca"] = r.s3.CA.PEM
	}
	return body
}

func (r *backupRig) putSettings(t testing.TB, body map[string]any) *Response {
	t.Helper()
	return r.Do(t, Req{Method: http.MethodPut, Path: "/api/v1/backups/settings", Token: r.Token, JSON: body})
}

func (r *backupRig) settings(t testing.TB) BackupSettings {
	t.Helper()
	var s BackupSettings
	expectJSON(t, r.Get(t, "/api/v1/backups/settings", r.Token), http.StatusOK, &s)
	return s
}

// backupJob reads a backup job with ?wait= until it is finished.
func (r *backupRig) backupJob(t testing.TB, jobID string) JobInfo {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var j JobInfo
		expectJSON(t, r.Get(t, "/api/v1/backups/jobs/"+jobID+"?wait=20", r.Token), http.StatusOK, &j)
		switch j.Status {
		case "succeeded", "failed", "cancelled":
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after 3 minutes\nagent log:\n%s", jobID, j.Status, r.agent.Logs())
		}
	}
}

// testStorage runs the storage test on the rig's server.
func (r *backupRig) testStorage(t testing.TB) (JobInfo, StorageTestResult) {
	t.Helper()
	resp := r.Post(t, "/api/v1/backups/settings/test?server_id="+r.serverID, r.Token, nil)
	var a Accepted
	expectJSON(t, resp, http.StatusAccepted, &a)
	if got, want := resp.Header.Get("Location"), "/api/v1/backups/jobs/"+a.JobID; got != want {
		t.Fatalf("Location %q, want %q", got, want)
	}
	j := r.backupJob(t, a.JobID)
	var res StorageTestResult
	if err := json.Unmarshal(j.Data, &res); err != nil {
		t.Fatalf("storage test data: %v: %s", err, j.Data)
	}
	return j, res
}

// TestBackupStorageSettings saves S3 settings (bad ones are refused with
// field errors and change nothing), never shows the access key pair, and
// tests the storage from a real agent: every step passes against the
// right key pair; with a wrong secret the write fails with the
// provider's error. The key pair appears in no response, job payload or
// log line.
func TestBackupStorageSettings(t *testing.T) {
	r := newBackupRig(t, store.SQLite)

	if s := r.settings(t); s.Configured || s.AccessKeyIDSet || s.SecretAccessKeySet {
		t.Fatalf("settings before any save: %+v", s)
	}
	expectProblem(t, r.Post(t, "/api/v1/backups/settings/test?server_id="+r.serverID, r.Token, nil), http.StatusConflict,
		"storage-not-configured")

	// Invalid settings: each field named, nothing saved.
	bad := r.storageSettings("")
	bad["endpoint"] = "https://" + r.s3.Endpoint
	bad["bucket"] = "No_Such"
	bad["prefix"] = "/abs/../x"
	bad["ca"] = "not a certificate"
	bad["secret_access_key"] = "two words"
	p := expectProblem(t, r.putSettings(t, bad), http.StatusUnprocessableEntity, "validation-failed")
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
	}
	slices.Sort(fields)
	if got, want := strings.Join(fields, ","), "bucket,ca,endpoint,prefix,secret_access_key"; got != want {
		t.Fatalf("field errors on %s, want %s: %+v", got, want, p.Errors)
	}
	noKeys := r.storageSettings("")
	delete(noKeys, "access_key_id")
	delete(noKeys, "secret_access_key")
	expectProblem(t, r.putSettings(t, noKeys), http.StatusUnprocessableEntity, "validation-failed")
	cloud := map[string]any{"provider": "clouddrive", "folder": "Backups"}
	expectProblem(t, r.putSettings(t, cloud), http.StatusUnprocessableEntity, "validation-failed")
	if s := r.settings(t); s.Configured {
		t.Fatalf("refused settings were saved: %+v", s)
	}

	resp := r.putSettings(t, r.storageSettings("fleet"))
	expectStatus(t, resp, http.StatusOK)
	var saved BackupSettings
	resp.JSON(t, &saved)
	if !saved.Configured || saved.Prefix != "fleet/" || !saved.AccessKeyIDSet || !saved.SecretAccessKeySet || saved.Endpoint != r.s3.Endpoint {
		t.Fatalf("saved settings: %s", resp.Body)
	}
	if got := r.settings(t); got != saved {
		t.Fatalf("GET %+v, PUT answered %+v", got, saved)
	}
	expectProblem(t, r.Post(t, "/api/v1/backups/settings/test?server_id=srv_none", r.Token, nil), http.StatusUnprocessableEntity,
		"validation-failed")

	// Every step passes, and the probe is gone afterwards.
	j, res := r.testStorage(t)
	if j.Status != "succeeded" {
		t.Fatalf("storage test %s: %s: %s\nagent log:\n%s", j.Status, deref(j.Error), j.Data, r.agent.Logs())
	}
	var steps []string
	for _, s := range res.Steps {
		if !s.OK || s.Error != "" {
			t.Errorf("step %+v", s)
		}
		steps = append(steps, s.Step)
	}
	if got, want := strings.Join(steps, ","), "write,read,list,delete"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	if !strings.HasPrefix(res.Key, "capstan-probe/") || res.Bytes <= 0 {
		t.Fatalf("probe %q of %d bytes", res.Key, res.Bytes)
	}
	if keys := r.s3.Keys(t, ""); len(keys) != 0 {
		t.Fatalf("the probe stayed: %v", keys)
	}
	if r.s3.Requests(http.MethodPut) < 2 {
		t.Fatalf("the agent wrote nothing to the S3 server")
	}

	// Saving without the key pair keeps it while the endpoint stays.
	keep := r.storageSettings("other")
	delete(keep, "access_key_id")
	delete(keep, "secret_access_key")
	expectStatus(t, r.putSettings(t, keep), http.StatusOK)
	if j, _ := r.testStorage(t); j.Status != "succeeded" {
		t.Fatalf("storage test with the kept key pair %s: %s", j.Status, deref(j.Error))
	}
	moved := r.storageSettings("other")
	moved["endpoint"] = "s3.example.net"
	delete(moved, "secret_access_key")
	p = expectProblem(t, r.putSettings(t, moved), http.StatusUnprocessableEntity, "validation-failed")
	if len(p.Errors) != 1 || p.Errors[0].Field != "secret_access_key" {
		t.Fatalf("moving the endpoint without the secret: %+v", p.Errors)
	}

	// A wrong secret: the write fails with the provider's error.
	wrong := r.storageSettings("fleet")
	wrongSecret := "wrong-" + r.s3.SecretAccessKey
	wrong["secret_access_key"] = wrongSecret
	expectStatus(t, r.putSettings(t, wrong), http.StatusOK)
	denied := r.s3.Denied()
	j, res = r.testStorage(t)
	if j.Status != "failed" || !strings.Contains(deref(j.Error), "SignatureDoesNotMatch") {
		t.Fatalf("storage test with a wrong secret: %s: %s", j.Status, deref(j.Error))
	}
	if len(res.Steps) != 1 || res.Steps[0].Step != "write" || res.Steps[0].OK || !strings.Contains(res.Steps[0].Error, "SignatureDoesNotMatch") {
		t.Fatalf("steps with a wrong secret: %+v", res.Steps)
	}
	if r.s3.Denied() == denied {
		t.Fatal("the S3 server refused nothing")
	}

	// The key pair is in no answer, no job payload and no log line.
	resp = r.Get(t, "/api/v1/jobs?limit=100", r.Token)
	expectStatus(t, resp, http.StatusOK)
	audit := r.Get(t, "/api/v1/audit-logs", r.Token)
	expectStatus(t, audit, http.StatusOK)
	if !strings.Contains(string(audit.Body), "backup.settings.updated") {
		t.Fatalf("the audit log holds no settings change: %s", audit.Body)
	}
	for _, secret := range []string{r.s3.SecretAccessKey, r.s3.AccessKeyID, wrongSecret} {
		for what, text := range map[string]string{"jobs": string(resp.Body), "audit log": string(audit.Body),
			"settings": string(r.Get(t, "/api/v1/backups/settings", r.Token).Body), "control plane log": r.ControlPlane.Logs(),
			"agent log": r.agent.Logs()} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds a storage credential", what)
			}
		}
	}
}

// TestBackupSettingsConcurrentSaves fires saves at once: each applies
// whole (its bucket with its own key pair), one after another.
func TestBackupSettingsConcurrentSaves(t *testing.T) {
	r := newBackupRig(t, store.Postgres)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			body := r.storageSettings(fmt.Sprintf("p%d", i))
			body["bucket"] = fmt.Sprintf("bucket-%d", i)
			resp := r.putSettings(t, body)
			if resp.Status != http.StatusOK {
				t.Errorf("save %d: %d %s", i, resp.Status, resp.Body)
			}
		})
	}
	wg.Wait()
	s := r.settings(t)
	if !strings.HasPrefix(s.Bucket, "bucket-") || s.Prefix != "p"+strings.TrimPrefix(s.Bucket, "bucket-")+"/" {
		t.Fatalf("settings mix saves: %+v", s)
	}
	resp := r.Get(t, "/api/v1/audit-logs?action=backup.settings.updated", r.Token)
	expectStatus(t, resp, http.StatusOK)
	if n := strings.Count(string(resp.Body), `"backup.settings.updated"`); n != 8 {
		t.Fatalf("%d settings changes audited, want 8", n)
	}
}
