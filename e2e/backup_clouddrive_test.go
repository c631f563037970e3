package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestBackupCloudDrive stores backups in the connected cloud drive (the
// stand-in over HTTPS): the settings name a folder; the storage test, a
// backup and its verification run from a real agent succeed with the
// drive's own read-back. The agent holds no token of the drive: its
// uploads go to sessions the control plane opened, without a token, and
// its reads come through the control plane; the refresh token is in no
// answer, job payload or log line.
func TestBackupCloudDrive(t *testing.T) {
	drive := testlab.StartCloudDrive(t)
	opts := cloudDriveOptions(store.SQLite, drive)
	testlab.Docker(t)
	opts.Args = append(opts.Args, "--backup-local-keep", "0", "--database-images",
		databaseImagesFile(t, map[string]map[string]string{"postgres": {"15": testlab.EngineImage(t, "postgres")}}))
	f := newFleet(t, opts)
	e, config := f.enrollServer(t, "db-host")
	r := &backupRig{dbRig: &dbRig{Fleet: f, serverID: e.Server.ID,
		agent: startAgentWith(t, config, []string{"SSL_CERT_FILE=" + drive.CAFile})}}

	// Before a drive is connected, the test cannot get a token.
	expectStatus(t, r.putSettings(t, map[string]any{"provider": "clouddrive", "folder": "Capstan backups"}), http.StatusOK)
	expectProblem(t, r.Post(t, "/api/v1/backups/settings/test?server_id="+r.serverID, r.Token, nil), http.StatusConflict,
		"clouddrive-not-connected")
	flow := &driveFlow{cp: r.ControlPlane, drive: drive}
	in := flow.start(t, r.Token)
	expectStatus(t, flow.finish(t, in.callback, in.cookie), http.StatusOK)

	for _, bad := range []map[string]any{{"provider": "clouddrive"}, {"provider": "clouddrive", "folder": "a/b"},
		{"provider": "clouddrive", "folder": "x", "bucket": "b"}} {
		expectProblem(t, r.putSettings(t, bad), http.StatusUnprocessableEntity, "validation-failed")
	}
	s := r.settings(t)
	if s.Provider != "clouddrive" || s.Endpoint != "" || s.AccessKeyIDSet {
		t.Fatalf("settings: %+v", s)
	}

	j, res := r.testStorage(t)
	if j.Status != "succeeded" || len(res.Steps) != 4 {
		t.Fatalf("storage test on the drive: %s %s: %+v\nagent log:\n%s", j.Status, deref(j.Error), res.Steps, r.agent.Logs())
	}

	pg, _ := r.registerPostgres(t, "pg", "CREATE TABLE kept (id int)")
	run, j := r.backup(t, pg.ID, "")
	if j.Status != "succeeded" || run.Status != "succeeded" || run.Size <= 0 || run.Locations.Local != "" {
		t.Fatalf("backup to the drive: job %s (%s), run %+v\nagent log:\n%s", j.Status, deref(j.Error), run, r.agent.Logs())
	}
	uploads := 0
	for _, req := range drive.Requests() {
		if strings.HasPrefix(req, "POST /upload/drive/v3/files") || strings.HasPrefix(req, "PUT /upload/drive/v3/files") {
			uploads++
		}
	}
	if uploads == 0 {
		t.Fatalf("nothing was uploaded to the drive: %v", drive.Requests())
	}
	if vj := r.post(t, "/api/v1/backups/"+run.ID+"/verify", nil); vj.Status != "succeeded" {
		t.Fatalf("verify from the drive: %s %s\nagent log:\n%s", vj.Status, deref(vj.Error), r.agent.Logs())
	}
	// The agent's requests are the session's chunks, with no token; every
	// other request (the control plane's) carries one.
	chunks := 0
	for _, req := range drive.TokenlessRequests() {
		switch {
		case strings.HasPrefix(req, "PUT /upload/drive/v3/files"):
			chunks++
		case strings.Contains(req, " /drive/v3/") || strings.Contains(req, " /upload/"):
			t.Fatalf("a request to the drive without a token that is not an upload's chunk: %s", req)
		}
	}
	if chunks == 0 {
		t.Fatal("every upload to the drive carried a token: the agent held one")
	}

	jobsList := r.Get(t, "/api/v1/jobs?limit=100", r.Token)
	expectStatus(t, jobsList, http.StatusOK)
	for _, tok := range drive.RefreshTokens() {
		for what, text := range map[string]string{"jobs": string(jobsList.Body), "control plane log": r.ControlPlane.Logs(),
			"agent log": r.agent.Logs(), "settings": string(r.Get(t, "/api/v1/backups/settings", r.Token).Body)} {
			if strings.Contains(text, tok) {
				t.Errorf("the %s holds the drive's refresh token", what)
			}
		}
	}
}
