package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/procstat"
	"github.com/capstan-dev/capstan/internal/store"
)

// BenchmarkDatabaseExportImport measures the export and import of a
// managed PostgreSQL database through the control plane (agent dump in
// the instance's container, gzip, upload, encryption on arrival; upload,
// encryption, agent download, psql in one transaction) against pg_dump |
// gzip and gunzip | psql run on the same machine, and samples the control
// plane's resident memory while it streams. The database is
// CAPSTAN_BENCH_DB_MB megabytes (default 64); the figures are taken with
// 1024:
//
//	CAPSTAN_BENCH_DB_MB=1024 go test -run '^$' -bench BenchmarkDatabaseExportImport -benchtime 1x -timeout 60m ./e2e/
func BenchmarkDatabaseExportImport(b *testing.B) {
	mb := benchDatabaseMB(b)
	r := newManagedRig(b, store.SQLite)
	tb := b
	pg, j := r.create(tb, map[string]any{"name": "bench-" + r.run, "engine": "postgres", "version": "15", "database": "app"})
	if j.Status != "succeeded" {
		b.Fatalf("create: %s %s", j.Status, deref(j.Error))
	}
	fill(b, r, pg.ID, mb)
	var size struct {
		Rows [][]any `json:"rows"`
	}
	r.call(tb, pg.ID, "query", map[string]any{"sql": "SELECT pg_database_size('app')"}).result(tb, &size)
	dbBytes := int64(size.Rows[0][0].(float64))
	b.Logf("database: %.1f MiB", float64(dbBytes)/(1<<20))

	dir := b.TempDir()
	pid := r.ControlPlane.cmd.Process.Pid
	b.ResetTimer()
	for range b.N {
		// Through the control plane.
		rss := sampleRSS(b, pid)
		start := time.Now()
		resp := r.Post(tb, "/api/v1/databases/"+pg.ID+"/export", r.Token, map[string]any{"database": "app"})
		var a Accepted
		expectJSON(tb, resp, http.StatusAccepted, &a)
		ej := r.waitLong(b, pg.ID, a.JobID)
		exportTime := time.Since(start)
		var res ExportResult
		ej.result(tb, &res)
		file := filepath.Join(dir, "export.sql.gz")
		start = time.Now()
		r.downloadTo(b, "/api/v1/databases/"+pg.ID+"/exports/"+a.JobID, file)
		downloadTime := time.Since(start)
		base, peak := rss()

		var w struct{}
		r.call(tb, pg.ID, "databases", map[string]any{"name": fmt.Sprintf("restored_%d", time.Now().UnixNano())}).result(tb, &w)
		restored := fmt.Sprintf("cp_%d", time.Now().UnixNano())
		r.call(tb, pg.ID, "databases", map[string]any{"name": restored}).result(tb, &w)
		rssImport := sampleRSS(b, pid)
		start = time.Now()
		jobID := r.uploadFrom(b, "/api/v1/databases/"+pg.ID+"/import?database="+restored, file)
		ij := r.waitLong(b, pg.ID, jobID)
		importTime := time.Since(start)
		ij.result(tb, &w)
		importBase, importPeak := rssImport()

		// The same on this machine, without the control plane.
		conn := r.adminConn(b, pg.ID)
		local := filepath.Join(dir, "local.sql.gz")
		start = time.Now()
		shell(b, conn, fmt.Sprintf("/usr/lib/postgresql/15/bin/pg_dump --no-owner --no-privileges -d app | gzip > %s", local))
		localExport := time.Since(start)
		localDB := fmt.Sprintf("local_%d", time.Now().UnixNano())
		r.call(tb, pg.ID, "databases", map[string]any{"name": localDB}).result(tb, &w)
		start = time.Now()
		shell(b, conn, fmt.Sprintf("gunzip -c %s | /usr/lib/postgresql/15/bin/psql -X -q -v ON_ERROR_STOP=1 --single-transaction -d %s >/dev/null", local, localDB))
		localImport := time.Since(start)
		localSize := fileSize(b, local)

		mibps := func(d time.Duration) float64 { return float64(dbBytes) / (1 << 20) / d.Seconds() }
		b.ReportMetric(mibps(exportTime), "export-MiB/s")
		b.ReportMetric(mibps(localExport), "local-export-MiB/s")
		b.ReportMetric(mibps(importTime), "import-MiB/s")
		b.ReportMetric(mibps(localImport), "local-import-MiB/s")
		b.ReportMetric(float64(peak-base)/(1<<20), "export-rss-growth-MiB")
		b.Logf("database %.0f MiB; dump %.0f MiB, .sql.gz %.0f MiB (local gzip -6: %.0f MiB)", float64(dbBytes)/(1<<20),
			float64(res.DumpBytes)/(1<<20), float64(res.Bytes)/(1<<20), float64(localSize)/(1<<20))
		b.Logf("export through the control plane %s (%.1f MiB/s), pg_dump | gzip %s (%.1f MiB/s): %.0f%%; download %s",
			exportTime.Round(time.Millisecond), mibps(exportTime), localExport.Round(time.Millisecond), mibps(localExport),
			100*localExport.Seconds()/exportTime.Seconds(), downloadTime.Round(time.Millisecond))
		b.Logf("import through the control plane %s (%.1f MiB/s), gunzip | psql %s (%.1f MiB/s): %.0f%%",
			importTime.Round(time.Millisecond), mibps(importTime), localImport.Round(time.Millisecond), mibps(localImport),
			100*localImport.Seconds()/importTime.Seconds())
		b.Logf("control plane RSS: export and download %.1f → peak %.1f MiB; import %.1f → peak %.1f MiB",
			float64(base)/(1<<20), float64(peak)/(1<<20), float64(importBase)/(1<<20), float64(importPeak)/(1<<20))
	}
}

// fill grows the table big to about mb megabytes, in steps the query
// console's statement timeout allows.
func fill(b *testing.B, r *managedRig, id string, mb int) {
	tb := b
	var w struct{}
	r.call(tb, id, "query", map[string]any{"sql": `CREATE TABLE big (id bigint PRIMARY KEY, name text NOT NULL, body text, n numeric,
		at timestamptz)`, "readonly": false}).result(tb, &w)
	// About 200 bytes a row on disk, with its index.
	rows := mb * (1 << 20) / 200
	const step = 500_000
	for from := 1; from <= rows; from += step {
		to := min(from+step-1, rows)
		r.call(tb, id, "query", map[string]any{"readonly": false, "timeout_seconds": 300, "sql": fmt.Sprintf(`INSERT INTO big
			SELECT g, 'row ' || g, md5(g::text) || ' ' || repeat(chr(97 + g %% 26), 40) || ' ' || md5((g * 7)::text), g * 1.5,
			'2026-01-01T00:00:00Z'::timestamptz + g * interval '1 second' FROM generate_series(%d, %d) g`, from, to)}).result(tb, &w)
	}
}

// waitLong waits for a long database job.
func (r *dbRig) waitLong(b *testing.B, id, jobID string) DatabaseJob {
	tb := b
	deadline := time.Now().Add(time.Hour)
	for time.Now().Before(deadline) {
		var j DatabaseJob
		expectJSON(tb, r.Get(tb, "/api/v1/databases/"+id+"/jobs/"+jobID+"?wait=20", r.Token), http.StatusOK, &j)
		if j.Status == "succeeded" || j.Status == "failed" || j.Status == "cancelled" {
			return j
		}
	}
	b.Fatalf("job %s still running after an hour", jobID)
	return DatabaseJob{}
}

// downloadTo streams a GET to a file.
func (r *dbRig) downloadTo(b *testing.B, path, file string) {
	req, err := http.NewRequest(http.MethodGet, r.URL+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	resp, err := r.Client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Fatal(err)
	}
}

// uploadFrom streams a file as a POST body and returns the job id.
func (r *dbRig) uploadFrom(b *testing.B, path, file string) string {
	f, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	req, err := http.NewRequest(http.MethodPost, r.URL+path, f)
	if err != nil {
		b.Fatal(err)
	}
	req.ContentLength = fileSize(b, file)
	req.Header.Set("Authorization", "Bearer "+r.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := r.Client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		b.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
	}
	res := &Response{Status: resp.StatusCode, Body: body}
	var a Accepted
	res.JSON(b, &a)
	return a.JobID
}

// adminConn is the libpq environment of the instance's admin login.
func (r *dbRig) adminConn(b *testing.B, id string) []string {
	resp := r.Get(b, "/api/v1/databases/"+id+"/connection", r.Token)
	var c DatabaseConnection
	resp.JSON(b, &c)
	return []string{"PGHOST=" + c.Host, "PGPORT=" + strconv.Itoa(c.Port), "PGUSER=" + c.Logins[0].Username,
		"PGPASSWORD=" + c.Logins[0].Password, "PGSSLMODE=disable"}
}

func shell(b *testing.B, env []string, script string) {
	cmd := exec.Command("bash", "-o", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", script, err, out)
	}
}

func fileSize(b *testing.B, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// sampleRSS samples a process's VmRSS every 20 ms until the returned
// function is called, which returns the first sample and the largest.
func sampleRSS(b *testing.B, pid int) func() (first, peak int64) {
	read := func() int64 {
		st, err := procstat.Status(strconv.Itoa(pid))
		if err != nil {
			return 0
		}
		return st["VmRSS"] << 10
	}
	first := read()
	if first == 0 {
		b.Fatalf("no VmRSS for pid %d", pid)
	}
	var mu sync.Mutex
	peak := first
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if v := read(); v > 0 {
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	}()
	return func() (int64, int64) {
		close(done)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		return first, peak
	}
}
