package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// s3Lab is the test lab's S3 server and the configuration of a store on
// it, trusting the CA that signed its certificate.
func s3Lab(t *testing.T) (*testlab.S3, objstore.S3Config) {
	t.Helper()
	srv := testlab.StartS3(t)
	return srv, objstore.S3Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket, Prefix: "capstan/",
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey, PathStyle: true, TLS: true, CA: srv.CA.PEM}
}

func TestS3(t *testing.T) {
	srv, cfg := s3Lab(t)
	ctx := context.Background()
	st, err := objstore.NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Three parts: two whole and one short, of unknown total size.
	content := make([]byte, 2*objstore.S3PartSize+123457)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	want := hex.EncodeToString(sum[:])
	o, err := st.Put(ctx, "runs/a.bin", io.MultiReader(bytes.NewReader(content)), -1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != int64(len(content)) || o.SHA256 != want || o.Key != "runs/a.bin" {
		t.Fatalf("Put read back %+v, want size %d sha256 %s", o, len(content), want)
	}
	if got := srv.Keys(t, ""); strings.Join(got, ",") != "capstan/runs/a.bin,capstan/runs/a.bin.sha256" {
		t.Fatalf("bucket holds %v, want the object and its sidecar under the prefix", got)
	}
	if got := srv.Object(t, "capstan/runs/a.bin"); !bytes.Equal(got, content) {
		t.Fatalf("the bucket holds %d bytes, not the %d uploaded", len(got), len(content))
	}
	rc, g, err := st.Get(ctx, "runs/a.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content) || g.SHA256 != want {
		t.Fatalf("Get: %d bytes, sha256 %s, err %v; want the content uploaded", len(got), g.SHA256, err)
	}
	list, err := st.List(ctx, "runs/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Key != "runs/a.bin" || list[0].Size != int64(len(content)) {
		t.Fatalf("List = %+v, want the one object without its sidecar", list)
	}

	// Storage altered after the upload: the size and sidecar tell.
	srv.Corrupt(t, "capstan/runs/a.bin", func(b []byte) []byte { return b[:len(b)-1] })
	if o, err := st.Stat(ctx, "runs/a.bin"); err != nil || o.Size != int64(len(content))-1 || o.SHA256 != want {
		t.Fatalf("Stat after truncation = %+v, %v; want the shorter size and the recorded sha256", o, err)
	}

	if err := st.Delete(ctx, "runs/a.bin"); err != nil {
		t.Fatal(err)
	}
	if got := srv.Keys(t, ""); len(got) != 0 {
		t.Fatalf("after Delete the bucket holds %v", got)
	}
	if _, err := st.Stat(ctx, "runs/a.bin"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat of a deleted object: %v, want ErrNotFound", err)
	}
	if _, _, err := st.Get(ctx, "runs/a.bin"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get of a deleted object: %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, "runs/a.bin"); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
}

func TestS3Refusals(t *testing.T) {
	srv, cfg := s3Lab(t)
	ctx := context.Background()

	bad := cfg
	bad.SecretAccessKey = "not-" + cfg.SecretAccessKey
	st, err := objstore.NewS3(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(ctx, "probe", strings.NewReader("x"), 1); err == nil || !strings.Contains(err.Error(), "SignatureDoesNotMatch") {
		t.Fatalf("Put with a wrong secret: %v, want the provider's SignatureDoesNotMatch", err)
	}
	if _, err := objstore.NewS3(objstore.S3Config{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, TLS: true, CA: "not a certificate"}); err == nil {
		t.Fatal("NewS3 took a CA that is not PEM")
	}
	// Without the CA the certificate is not trusted.
	untrusted := cfg
	untrusted.CA = ""
	st, _ = objstore.NewS3(untrusted)
	if _, err := st.Stat(ctx, "probe"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Stat against an untrusted certificate: %v, want a certificate error", err)
	}
	if srv.Denied() == 0 {
		t.Fatal("the server refused no request")
	}
	bad = cfg
	bad.AccessKeyID = "AKNOTTHEKEY"
	st, _ = objstore.NewS3(bad)
	if _, err := st.List(ctx, ""); err == nil || !strings.Contains(err.Error(), "InvalidAccessKeyId") {
		t.Fatalf("List with a wrong key id: %v, want the provider's InvalidAccessKeyId", err)
	}

	// Cut off mid-upload: an error, and nothing stored.
	st, _ = objstore.NewS3(cfg)
	srv.FailUploadsAfter(1 << 20)
	_, err = st.Put(ctx, "cut.bin", io.LimitReader(rand.Reader, 3<<20), -1)
	if err == nil {
		t.Fatal("Put succeeded through a cut-off connection")
	}
	if srv.Cuts() == 0 {
		t.Fatal("no upload was cut off")
	}
	srv.FailUploadsAfter(-1)
	if got := srv.Requests("DELETE"); got == 0 {
		t.Fatal("the client did not abort the multipart upload")
	}
	if got := srv.Keys(t, ""); len(got) != 0 {
		t.Fatalf("a cut-off upload left %v", got)
	}
}
