package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestFetchChecked: an object is fetched to the staging directory (0600)
// and handed on only when its size and SHA-256 are the job's; one the
// bucket replaced, with the checksum sidecar beside it still saying the
// original's, or one longer than the backup, is a checksum mismatch and
// leaves no file.
func TestFetchChecked(t *testing.T) {
	srv := testlab.StartS3(t)
	st, err := objstore.NewS3(objstore.S3Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey, PathStyle: true, TLS: true, CA: srv.CA.PEM})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	content := bytes.Repeat([]byte("ciphertext of the backup\n"), 10_000)
	obj, err := st.Put(ctx, "db_1/run_1.sql.gz.age", bytes.NewReader(content), int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	p := agentproto.BackupRestorePayload{Key: "db_1/run_1.sql.gz.age", Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])}
	if obj.SHA256 != p.SHA256 {
		t.Fatalf("stored sha256 %s, want %s", obj.SHA256, p.SHA256)
	}
	dir := t.TempDir()
	b := &Backups{StagingDir: dir}
	empty := func() {
		t.Helper()
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Fatalf("staging directory after the fetch: %v (%v)", entries, err)
		}
	}

	var res agentproto.BackupVerifyResult
	f, err := b.fetchChecked(ctx, st, p, &res)
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	if !bytes.Equal(got, content) || info.Mode().Perm() != 0o600 || !res.ChecksumOK || res.SHA256 != p.SHA256 {
		t.Fatalf("fetched %d bytes, mode %v, result %+v", len(got), info.Mode().Perm(), res)
	}
	removeStaged(f)
	empty()

	// Replaced in the bucket by one of the same size; the sidecar still
	// holds the original's checksum (a bucket writer can keep or forge it).
	forged := bytes.Repeat([]byte("CREATE TABLE forged_marker (x int);\n"), len(content)/36+1)[:len(content)]
	srv.Put(t, p.Key, forged)
	if side := srv.Object(t, p.Key+objstore.SidecarSuffix); !bytes.Contains(side, []byte(p.SHA256)) {
		t.Fatalf("sidecar %q does not hold the original's checksum", side)
	}
	for name, object := range map[string][]byte{"forged": forged, "longer": append(append([]byte{}, content...), 'x')} {
		srv.Put(t, p.Key, object)
		res = agentproto.BackupVerifyResult{}
		if f, err := b.fetchChecked(ctx, st, p, &res); !errors.Is(err, errChecksum) || f != nil || res.ChecksumOK {
			t.Fatalf("%s object: %v (result %+v)", name, err, res)
		}
		empty()
	}
}
