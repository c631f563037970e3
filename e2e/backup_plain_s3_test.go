package e2e

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestBackupPlainHTTPStorage saves settings of an S3-compatible service
// on plain HTTP ("tls": false) without a region: both round-trip as
// given (tls false, region us-east-1), and the storage test and a real
// backup go to that service.
func TestBackupPlainHTTPStorage(t *testing.T) {
	r := newBackupRig(t, store.SQLite)
	r.s3 = testlab.StartPlainS3(t)

	body := r.storageSettings("plain")
	delete(body, "region")
	resp := r.putSettings(t, body)
	expectStatus(t, resp, http.StatusOK)
	var saved BackupSettings
	resp.JSON(t, &saved)
	if saved.TLS || saved.Region != "us-east-1" {
		t.Fatalf("PUT answered tls %v, region %q; want false, us-east-1: %s", saved.TLS, saved.Region, resp.Body)
	}
	if got := r.settings(t); got != saved {
		t.Fatalf("GET %+v, PUT answered %+v", got, saved)
	}

	if j, _ := r.testStorage(t); j.Status != "succeeded" {
		t.Fatalf("storage test on plain HTTP %s: %s\nagent log:\n%s", j.Status, deref(j.Error), r.agent.Logs())
	}
	pg, _ := r.registerPostgres(t, "pg")
	run, j := r.backup(t, pg.ID, "")
	if j.Status != "succeeded" || run.Status != "succeeded" {
		t.Fatalf("backup: job %s (%s), run %s (%s)\nagent log:\n%s", j.Status, deref(j.Error), run.Status, run.Error, r.agent.Logs())
	}
	if object := r.s3.Object(t, "plain/"+run.Locations.Remote); int64(len(object)) != run.Size ||
		!bytes.HasPrefix(object, []byte("age-encryption.org/v1\n")) {
		t.Fatalf("the plain-HTTP service holds %d bytes for the run of %d", len(object), run.Size)
	}

	// Leaving tls out again means https.
	delete(body, "tls")
	resp = r.putSettings(t, body)
	expectJSON(t, resp, http.StatusOK, &saved)
	if !saved.TLS {
		t.Fatalf("settings without tls: %s", resp.Body)
	}
}
