package dump

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

type nopEvents struct{}

func (nopEvents) Emit(string, string, any) {}

// fakeControlPlane takes uploads as the control plane would: whole, or
// refused after some bytes.
type fakeControlPlane struct {
	got      bytes.Buffer
	refuseAt int // > 0: fail the upload after this many bytes
	bodyErr  error
}

func (f *fakeControlPlane) UploadArtifact(_ context.Context, _ string, body io.Reader) (agentproto.ArtifactReceipt, error) {
	h := NewHasher(body)
	var err error
	if f.refuseAt > 0 {
		_, err = io.CopyN(&f.got, h, int64(f.refuseAt))
		if err == nil {
			return agentproto.ArtifactReceipt{}, errors.New("PUT /jobs/job_1/artifact: 413 Request Entity Too Large")
		}
	} else {
		_, err = io.Copy(&f.got, h)
	}
	if err != nil {
		f.bodyErr = err
		return agentproto.ArtifactReceipt{}, err
	}
	return agentproto.ArtifactReceipt{Bytes: h.N, SHA256: h.Sum()}, nil
}

func (f *fakeControlPlane) DownloadArtifact(context.Context, string) (io.ReadCloser, int64, error) {
	return nil, 0, errors.New("no download here")
}

// toolDir makes a directory with a pg_dump script that reports version
// 15.4 and runs body.
func toolDir(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'pg_dump (PostgreSQL) 15.4 (Debian 15.4-1)'; exit 0; fi\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, "pg_dump"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func exportJob(t *testing.T, tr *Transfer, version string) (agentproto.DBExportResult, agentproto.DBFailure, error) {
	t.Helper()
	p := agentproto.DBExportPayload{Target: agentproto.DBTarget{InstanceID: "db_1", Engine: agentproto.EnginePostgres, Host: "127.0.0.1",
		Port: 5432, Username: "app", Database: "app"}, Source: agentproto.DBArtifactSource{Version: version}, Database: "app"}
	b, _ := json.Marshal(p)
	r := agent.Registry{}
	tr.Register(r)
	data, _, err := r[agentproto.JobDBExport].Run(context.Background(), agentproto.Job{ID: "job_1", Type: agentproto.JobDBExport, Payload: b},
		map[string]string{agentproto.SecretDBPassword: "s3cret pw"}, nopEvents{})
	var res agentproto.DBExportResult
	var fail agentproto.DBFailure
	switch d := data.(type) {
	case agentproto.DBExportResult:
		res = d
	case agentproto.DBFailure:
		fail = d
	}
	return res, fail, err
}

// TestExportHostTool runs an export with a host pg_dump of the instance's
// major: the password is in its environment, not its arguments; what is
// uploaded is the gzip of its output, with the size and SHA-256 the
// control plane answered.
func TestExportHostTool(t *testing.T) {
	dir := toolDir(t, `echo "-- args: $*"; echo "-- password set: ${PGPASSWORD:+yes}"; seq 1 20000`)
	cp := &fakeControlPlane{}
	res, _, err := exportJob(t, &Transfer{Artifacts: cp, ToolDirs: []string{dir}}, "15")
	if err != nil {
		t.Fatal(err)
	}
	if res.Tool != agentproto.DBToolHost || !strings.HasPrefix(res.ToolVersion, "pg_dump (PostgreSQL) 15.4") || res.Bytes != int64(cp.got.Len()) {
		t.Fatalf("result %+v (uploaded %d)", res, cp.got.Len())
	}
	zr, err := gzip.NewReader(&cp.got)
	if err != nil {
		t.Fatal(err)
	}
	dump, _ := io.ReadAll(zr)
	if int64(len(dump)) != res.DumpBytes || !bytes.Contains(dump, []byte("-- password set: yes\n1\n2\n")) ||
		!bytes.Contains(dump, []byte("--no-owner --no-privileges --format=plain --dbname=app")) || bytes.Contains(dump, []byte("s3cret")) {
		t.Fatalf("dump:\n%.300s", dump)
	}
}

// TestExportFailures: a dump that fails part way fails the job with the
// tool's message and never completes the upload; an upload the control
// plane refuses fails the job with its answer; a host tool of another
// major is not used (and with no image there is nothing to run it in).
func TestExportFailures(t *testing.T) {
	dir := toolDir(t, `seq 1 100000; echo 'pg_dump: error: query failed: ERROR:  permission denied for table secrets' >&2; exit 1`)
	cp := &fakeControlPlane{}
	_, fail, err := exportJob(t, &Transfer{Artifacts: cp, ToolDirs: []string{dir}}, "15")
	if err == nil || !strings.Contains(fail.Error.Message, "permission denied for table secrets") {
		t.Fatalf("failing dump: %v %+v", err, fail)
	}
	if cp.bodyErr == nil {
		t.Fatal("the upload of a failed dump ended as if it were whole")
	}

	cp = &fakeControlPlane{refuseAt: 10}
	_, _, err = exportJob(t, &Transfer{Artifacts: cp, ToolDirs: []string{toolDir(t, "seq 1 1000000")}}, "15")
	if err == nil || !strings.Contains(err.Error(), "413") {
		t.Fatalf("refused upload: %v", err)
	}

	_, _, err = exportJob(t, &Transfer{Artifacts: &fakeControlPlane{}, ToolDirs: []string{toolDir(t, "true")}}, "16")
	if err == nil || !strings.Contains(err.Error(), "no image of postgres 16") {
		t.Fatalf("a host tool of another major: %v", err)
	}
}

func TestToolMajor(t *testing.T) {
	for _, c := range []struct{ engine, out, want string }{
		{agentproto.EnginePostgres, "pg_dump (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)", "15"},
		{agentproto.EnginePostgres, "pg_dump (PostgreSQL) 17.2", "17"},
		{agentproto.EngineMariaDB, "mariadb-dump  Ver 10.19 Distrib 10.11.14-MariaDB, for debian-linux-gnu (x86_64)", "10.11"},
		{agentproto.EngineMariaDB, "mariadb-dump from 11.4.2-MariaDB, client 10.19 for debian-linux-gnu (x86_64)", "11.4"},
		{agentproto.EngineMySQL, "mysqldump  Ver 8.0.36 for Linux on x86_64 (MySQL Community Server - GPL)", "8.0"},
		{agentproto.EngineMySQL, "mysqldump  Ver 10.19 Distrib 10.11.14-MariaDB, for debian-linux-gnu", ""},
		{agentproto.EnginePostgres, "garbage", ""},
	} {
		if got := engine.ToolMajor(c.engine, c.out); got != c.want {
			t.Errorf("engine.ToolMajor(%s, %q) = %q, want %q", c.engine, c.out, got, c.want)
		}
	}
}

// TestToolCalls: passwords only in the environment; names as single
// arguments; MySQL's TLS modes; the load of plain SQL on PostgreSQL stops
// at the first error.
func TestToolCalls(t *testing.T) {
	c := engine.ToolConn{Host: "db.example", Port: 3306, Username: "root", Password: "pw-x", TLSMode: agentproto.DBTLSVerifyFull, CAFile: engine.CAPath}
	for _, call := range []engine.ToolCall{
		engine.DumpCall(agentproto.EngineMySQL, "shop", c), engine.DumpCall(agentproto.EngineMariaDB, "shop", c), engine.DumpCall(agentproto.EnginePostgres, "shop", c),
		engine.LoadCall(agentproto.EngineMySQL, agentproto.DBFormatSQL, "shop", c), engine.LoadCall(agentproto.EnginePostgres, agentproto.DBFormatSQL, "shop", c),
		engine.LoadCall(agentproto.EnginePostgres, agentproto.DBFormatPGCustom, "shop", c),
	} {
		if strings.Contains(strings.Join(call.Args, " "), "pw-x") || !strings.Contains(strings.Join(call.Env, " "), "pw-x") {
			t.Errorf("%v: the password is not (only) in the environment %v", call.Args, call.Env)
		}
	}
	my := strings.Join(engine.DumpCall(agentproto.EngineMySQL, "shop", c).Args, " ")
	if !strings.Contains(my, "--ssl-mode=VERIFY_IDENTITY") || !strings.Contains(my, "--ssl-ca="+engine.CAPath) || !strings.HasSuffix(my, "-- shop") {
		t.Errorf("mysqldump %s", my)
	}
	pg := engine.LoadCall(agentproto.EnginePostgres, agentproto.DBFormatSQL, "shop", c)
	if !strings.Contains(strings.Join(pg.Args, " "), "--set=ON_ERROR_STOP=1") || !strings.Contains(strings.Join(pg.Env, " "), "PGSSLMODE=verify-full") {
		t.Errorf("psql %v %v", pg.Args, pg.Env)
	}
	restore := strings.Join(engine.LoadCall(agentproto.EnginePostgres, agentproto.DBFormatPGCustom, "shop", c).Args, " ")
	if !strings.Contains(restore, "--single-transaction") || !strings.Contains(restore, "--exit-on-error") {
		t.Errorf("pg_restore %s", restore)
	}
	if err := CheckSQLJob(agentproto.EnginePostgres, "--file=/tmp/x"); err == nil {
		t.Error("a database name that reads as an option was taken")
	}
}

// TestVerifier: a download that is not the file the job names ends with
// an error instead of EOF, so the load never sees a clean end.
func TestVerifier(t *testing.T) {
	content := []byte("SELECT 1;\n")
	h := NewHasher(bytes.NewReader(content))
	_, _ = io.ReadAll(h)
	good := &verifier{Hasher: NewHasher(bytes.NewReader(content)), size: int64(len(content)), sha: h.Sum()}
	if b, err := io.ReadAll(bufio.NewReader(good)); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("intact file: %q %v", b, err)
	}
	bad := &verifier{Hasher: NewHasher(bytes.NewReader(content[:5])), size: int64(len(content)), sha: h.Sum()}
	if _, err := io.ReadAll(bad); err == nil || !strings.Contains(err.Error(), "arrived altered") {
		t.Fatalf("short file: %v", err)
	}
}
