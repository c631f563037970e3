package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/capstan-dev/capstan/internal/procstat"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// benchDatabaseMB is the size in megabytes of the database a benchmark
// fills: CAPSTAN_BENCH_DB_MB, 64 by default.
func benchDatabaseMB(b *testing.B) int {
	b.Helper()
	v := os.Getenv("CAPSTAN_BENCH_DB_MB")
	if v == "" {
		return 64
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("CAPSTAN_BENCH_DB_MB=%q", v)
	}
	return n
}

// BenchmarkBackupPostgres measures a backup of a PostgreSQL database of
// CAPSTAN_BENCH_DB_MB megabytes (default 64; the figures are taken with
// 1024) through Capstan end to end (POST /api/v1/backups/run until its
// job finished: pg_dump in an exported snapshot, the manifest, gzip, age
// on the server, upload to an S3 server over TLS, read-back) against the
// shell pipeline
//
//	pg_dump | gzip -1 | age -r RECIPIENT | S3-PUT
//
// to the same S3 server, with the same pg_dump and gzip's fastest level
// as Capstan uses. S3-PUT is this test binary run as an uploader
// (s3Put): minio-go's PutObject from its standard input, a multipart
// upload in 16 MiB parts, as `mc pipe` or `aws s3 cp -` stream one (S3
// refuses a PUT of unknown length); it reads nothing back and takes no
// manifest. It also times the verification of the
// backup (fetch, check, restore into a throwaway database, compare) and
// samples the agent's resident memory during the backup and the
// verification.
//
//	CAPSTAN_BENCH_DB_MB=1024 go test -run '^$' -bench BenchmarkBackupPostgres -benchtime 1x -timeout 60m ./e2e/
//
// With CAPSTAN_BENCH_HOLD=DIR it measures nothing itself: it keeps
// everything running and writes three scripts into DIR for an outside timer: capstan-backup.sh
// (one backup through the API, exit 0 when it succeeded),
// shell-pipeline.sh (the pipeline above) and capstan-verify.sh (a
// verification of the newest backup), and keeps the agent's peak
// resident memory in DIR/agent-rss (see holdForTimer). It stops when
// DIR/done exists (or after an hour).
func BenchmarkBackupPostgres(b *testing.B) {
	mb := benchDatabaseMB(b)
	testlab.Docker(b)
	pgDump := newestPgDump(b)
	r := newImagesRig(b, map[string]map[string]string{"postgres": {"15": testlab.EngineImage(b, "postgres")}})
	expectStatus(b, r.putSettings(b, r.storageSettings("bench")), http.StatusOK)
	pg := testlab.StartPostgresServer(b, nil)
	db, err := sql.Open("pgx", pg.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE bench"); err != nil {
		b.Fatal(err)
	}
	dbBytes := fillBench(b, pg.URL("bench"), mb)
	inst := r.registerPostgresOn(b, "bench", pg, "bench")
	b.Logf("database: %.1f MiB", float64(dbBytes)/(1<<20))

	recipient := backupIdentity(b, r.DataDir, "inst-v1:"+inst.ID).Recipient().String()
	dir := b.TempDir()
	if hold := os.Getenv("CAPSTAN_BENCH_HOLD"); hold != "" {
		dir = hold
	}
	pipeline := filepath.Join(dir, "shell-pipeline.sh")
	writeScript(b, pipeline, fmt.Sprintf(`#!/bin/bash
set -eo pipefail
export PGHOST=127.0.0.1 PGPORT=%d PGUSER=%s PGPASSWORD='%s' PGSSLMODE=disable
%s --no-password --no-owner --no-privileges --format=plain --dbname=bench | gzip -1 | age -r %s |
	AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' SSL_CERT_FILE='%s' %s='%s %s %s shell/bench.sql.gz.age' '%s'
`, pg.Port, pg.User, pg.Password, pgDump, recipient, r.s3.AccessKeyID, r.s3.SecretAccessKey, r.s3.CAFile, s3PutEnv, r.s3.Endpoint,
		r.s3.Region, r.s3.Bucket, testBinary(b)))
	pid := r.agent.cmd.Process.Pid
	if os.Getenv("CAPSTAN_BENCH_HOLD") != "" {
		r.holdForTimer(b, dir, inst.ID, pid)
		return
	}

	b.ResetTimer()
	for range b.N {
		rss := sampleRSS(b, pid)
		start := time.Now()
		run, j := r.backup(b, inst.ID, "")
		backupTime := time.Since(start)
		base, peak := rss()
		if run.Status != "succeeded" {
			b.Fatalf("backup: %s %s: %s", j.Status, deref(j.Error), run.Error)
		}

		rss = sampleRSS(b, pid)
		start = time.Now()
		var a Accepted
		expectJSON(b, r.Post(b, "/api/v1/backups/"+run.ID+"/verify", r.Token, nil), http.StatusAccepted, &a)
		vj := r.backupJob(b, a.JobID)
		verifyTime := time.Since(start)
		vbase, vpeak := rss()
		if vj.Status != "succeeded" {
			b.Fatalf("verify: %s: %s", vj.Status, deref(vj.Error))
		}

		start = time.Now()
		if out, err := exec.Command("bash", pipeline).CombinedOutput(); err != nil {
			b.Fatalf("shell pipeline: %v\n%s", err, out)
		}
		shellTime := time.Since(start)
		shellSize := int64(len(r.s3.Object(b, "shell/bench.sql.gz.age")))

		mibps := func(d time.Duration) float64 { return float64(dbBytes) / (1 << 20) / d.Seconds() }
		b.ReportMetric(mibps(backupTime), "backup-MiB/s")
		b.ReportMetric(mibps(shellTime), "shell-MiB/s")
		b.ReportMetric(verifyTime.Seconds(), "verify-s")
		b.ReportMetric(float64(peak)/(1<<20), "agent-peak-rss-MiB")
		b.Logf("backup through Capstan %s (%.1f MiB/s), shell pipeline %s (%.1f MiB/s): %.0f%% of its throughput",
			backupTime.Round(time.Millisecond), mibps(backupTime), shellTime.Round(time.Millisecond), mibps(shellTime),
			100*shellTime.Seconds()/backupTime.Seconds())
		b.Logf("object %.1f MiB (shell %.1f MiB); verification %s", float64(run.Size)/(1<<20), float64(shellSize)/(1<<20),
			verifyTime.Round(time.Millisecond))
		b.Logf("agent RSS: backup %.1f → peak %.1f MiB; verification %.1f → peak %.1f MiB; VmHWM %.1f MiB", float64(base)/(1<<20),
			float64(peak)/(1<<20), float64(vbase)/(1<<20), float64(vpeak)/(1<<20), float64(procStatus(b, pid, "VmHWM"))/(1<<20))
	}
}

// holdForTimer writes the scripts an outside timer runs and waits for
// DIR/done.
func (r *backupRig) holdForTimer(b *testing.B, dir, instanceID string, pid int) {
	// Access tokens expire: the scripts read the one kept fresh in
	// DIR/token.
	tokenFile := filepath.Join(dir, "token")
	refresh := func() {
		s := signInUser(b, r.ControlPlane, r.Admin)
		if err := os.WriteFile(tokenFile, []byte(s.AccessToken), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	refresh()
	auth := fmt.Sprintf(`-H "Authorization: Bearer $(cat '%s')"`, tokenFile)
	wait := fmt.Sprintf(`while :; do
	job=$(curl -sSf %s "%s/api/v1/backups/jobs/$id?wait=30")
	case "$job" in
	*'"status":"succeeded"'*) exit 0 ;;
	*'"status":"failed"'*|*'"status":"cancelled"'*) echo "$job" >&2; exit 1 ;;
	esac
done
`, auth, r.URL)
	writeScript(b, filepath.Join(dir, "capstan-backup.sh"), fmt.Sprintf(`#!/bin/bash
set -eo pipefail
out=$(curl -sSf %s -H 'Content-Type: application/json' -d '{"instance_id":"%s"}' %s/api/v1/backups/run)
id=$(printf '%%s' "$out" | sed -n 's/^{"job_id":"\([^"]*\)".*/\1/p')
%s`, auth, instanceID, r.URL, wait))
	writeScript(b, filepath.Join(dir, "capstan-verify.sh"), fmt.Sprintf(`#!/bin/bash
set -eo pipefail
run=$(curl -sSf %s "%s/api/v1/backups?status=succeeded&limit=1" | sed -n 's/^{"runs":\[{"id":"\([^"]*\)".*/\1/p')
out=$(curl -sSf %s -X POST %s/api/v1/backups/$run/verify)
id=$(printf '%%s' "$out" | sed -n 's/^{"job_id":"\([^"]*\)".*/\1/p')
%s`, auth, r.URL, auth, r.URL, wait))
	if err := os.WriteFile(filepath.Join(dir, "agent.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	// The agent's resident memory is sampled all along: DIR/agent-rss
	// holds the largest VmRSS since DIR/agent-rss-reset was last
	// created (the file is then removed).
	b.Logf("holding: scripts in %s; touch %s/done to stop", dir, dir)
	var peak int64
	refreshed := time.Now()
	deadline := time.Now().Add(time.Hour)
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
			break
		}
		if err := os.Remove(filepath.Join(dir, "agent-rss-reset")); err == nil {
			peak = 0
		}
		peak = max(peak, procStatus(b, pid, "VmRSS"))
		if i%10 == 0 {
			_ = os.WriteFile(filepath.Join(dir, "agent-rss"), []byte(fmt.Sprintf("%.1f MiB\n", float64(peak)/(1<<20))), 0o600)
		}
		if time.Since(refreshed) > 5*time.Minute {
			refresh()
			refreshed = time.Now()
		}
		time.Sleep(50 * time.Millisecond) // sampling; no condition to wait on
	}
	b.Logf("agent VmHWM at the end: %.1f MiB", float64(procStatus(b, pid, "VmHWM"))/(1<<20))
}

// s3PutEnv, set to "ENDPOINT REGION BUCKET KEY", makes the test binary
// upload its standard input to that object over TLS and exit (the
// credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the CA in
// SSL_CERT_FILE).
const s3PutEnv = "CAPSTAN_BENCH_S3_PUT"

func s3Put(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "%s: want ENDPOINT REGION BUCKET KEY\n", s3PutEnv)
		return 2
	}
	cli, err := minio.New(f[0], &minio.Options{Creds: credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"),
		os.Getenv("AWS_SECRET_ACCESS_KEY"), ""), Secure: true, Region: f[1], BucketLookup: minio.BucketLookupPath})
	if err == nil {
		_, err = cli.PutObject(context.Background(), f[2], f[3], os.Stdin, -1, minio.PutObjectOptions{
			ContentType: "application/octet-stream", PartSize: 16 << 20})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "upload:", err)
		return 1
	}
	return 0
}

// testBinary is the path of the running test binary.
func testBinary(tb testing.TB) string {
	p, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func writeScript(tb testing.TB, path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
		tb.Fatal(err)
	}
}

// procStatus reads a size field (kB) of /proc/PID/status in bytes.
func procStatus(tb testing.TB, pid int, field string) int64 {
	st, err := procstat.Status(strconv.Itoa(pid))
	if err != nil {
		tb.Fatal(err)
	}
	return st[field] << 10
}

// newestPgDump is the newest installed PostgreSQL's pg_dump, the one the
// agent picks for the test lab's newest cluster.
func newestPgDump(tb testing.TB) string {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_dump")
	if len(found) == 0 {
		testlab.Require(tb, "pg_dump (apt-get install postgresql)")
	}
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi < vj
	})
	return found[len(found)-1]
}

// fillBench grows a table in the database at url to about mb megabytes
// and returns the database's size.
func fillBench(tb testing.TB, url string, mb int) int64 {
	db, err := sql.Open("pgx", url)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE big (id bigint PRIMARY KEY, name text NOT NULL, body text, n numeric, at timestamptz)`); err != nil {
		tb.Fatal(err)
	}
	// About 200 bytes a row on disk, with its index.
	rows := mb * (1 << 20) / 200
	const step = 1_000_000
	for from := 1; from <= rows; from += step {
		to := min(from+step-1, rows)
		if _, err := db.Exec(fmt.Sprintf(`INSERT INTO big
			SELECT g, 'row ' || g, md5(g::text) || ' ' || repeat(chr(97 + g %% 26), 40) || ' ' || md5((g * 7)::text), g * 1.5,
			'2026-01-01T00:00:00Z'::timestamptz + g * interval '1 second' FROM generate_series(%d, %d) g`, from, to)); err != nil {
			tb.Fatal(err)
		}
	}
	var size int64
	if err := db.QueryRow("SELECT pg_database_size('bench')").Scan(&size); err != nil {
		tb.Fatal(err)
	}
	return size
}
