package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// presigner grants the requests of one job as the control plane does:
// presigned with the bucket's key pair, for the job's key and its
// sidecar only, valid for life.
type presigner struct {
	t      *testing.T
	srv    *testlab.S3
	prefix string
	keys   []string
	life   time.Duration
	secret string // "" is the server's

	mu     sync.Mutex // guards ops
	ops    []string
	denied int
}

func (p *presigner) StorageGrant(ctx context.Context, jobID string, req agentproto.StorageGrantRequest) (agentproto.StorageGrant, error) {
	p.mu.Lock()
	p.ops = append(p.ops, req.Op)
	if !slices.Contains(p.keys, req.Key) {
		p.denied++
		p.mu.Unlock()
		return agentproto.StorageGrant{}, fmt.Errorf("the key %q is not one of the job's objects", req.Key)
	}
	p.mu.Unlock()
	secret := p.secret
	if secret == "" {
		secret = p.srv.SecretAccessKey
	}
	cli, err := minio.New(p.srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(p.srv.AccessKeyID, secret, ""), Secure: true,
		Region: p.srv.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	method, name, q := req.S3Request(p.prefix)
	u, err := cli.Presign(ctx, method, p.srv.Bucket, name, p.life, q)
	if err != nil {
		return agentproto.StorageGrant{}, err
	}
	return agentproto.StorageGrant{Method: method, URL: u.String()}, nil
}

func (p *presigner) StorageObject(context.Context, string, string) (io.ReadCloser, int64, error) {
	return nil, 0, errors.New("S3 objects are not streamed through the control plane")
}

func grantedLab(t *testing.T, key string) (*testlab.S3, *presigner, objstore.Store) {
	t.Helper()
	srv := testlab.StartS3(t)
	g := &presigner{t: t, srv: srv, prefix: "capstan/", keys: []string{key, key + objstore.SidecarSuffix}, life: time.Hour}
	st, err := objstore.Opener{Grants: g}.Open(context.Background(), agentproto.BackupStorage{Provider: agentproto.BackupProviderS3,
		Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "capstan/", PathStyle: true, TLS: true, CA: srv.CA.PEM, GrantJobID: "job_1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, g, st
}

// TestGrantedS3: a store with no credential puts (in parts), reads,
// lists, stats and deletes its one object through presigned requests
// alone, which the server checks as AWS does.
func TestGrantedS3(t *testing.T) {
	const key = "runs/a.bin"
	srv, g, st := grantedLab(t, key)
	ctx := context.Background()
	content := make([]byte, 2*objstore.S3PartSize+123457)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	want := hex.EncodeToString(sum[:])
	o, err := st.Put(ctx, key, bytes.NewReader(content), -1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != int64(len(content)) || o.SHA256 != want || o.Key != key {
		t.Fatalf("Put read back %+v, want size %d sha256 %s", o, len(content), want)
	}
	if got := srv.Keys(t, ""); strings.Join(got, ",") != "capstan/runs/a.bin,capstan/runs/a.bin.sha256" {
		t.Fatalf("bucket holds %v, want the object and its sidecar under the prefix", got)
	}
	if got := srv.Object(t, "capstan/"+key); !bytes.Equal(got, content) {
		t.Fatalf("the bucket holds %d bytes, not the %d uploaded", len(got), len(content))
	}
	if parts := strings.Count(strings.Join(g.ops, " "), agentproto.StorageOpUploadPart); parts != 3 {
		t.Fatalf("%d parts granted, want 3 (%v)", parts, g.ops)
	}
	rc, got, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	read, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(read, content) || got.SHA256 != want || got.Size != int64(len(content)) {
		t.Fatalf("Get: %d bytes, %+v, err %v; want the content uploaded", len(read), got, err)
	}
	srv.Put(t, "capstan/runs/a.bin.other", []byte("another job's object"))
	list, err := st.List(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != key || list[0].Size != int64(len(content)) || list[1].Key != key+".other" {
		t.Fatalf("List = %+v, want the object and the other one its key prefixes, without the sidecar", list)
	}
	// A small object goes in one request.
	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := srv.Keys(t, "capstan/runs/a.bin"); strings.Join(got, ",") != "capstan/runs/a.bin.other" {
		t.Fatalf("after Delete the bucket holds %v", got)
	}
	if _, err := st.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat of a deleted object: %v, want ErrNotFound", err)
	}
	if _, err := st.Put(ctx, key, strings.NewReader("small"), 5); err != nil {
		t.Fatal(err)
	}
	if got := string(srv.Object(t, "capstan/"+key)); got != "small" {
		t.Fatalf("the small object is %q", got)
	}
	if _, err := st.Stat(ctx, "runs/b.bin"); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat of another key: %v, want the control plane's refusal", err)
	}
	if srv.HeaderSigned() != 0 || srv.QuerySigned() == 0 || srv.Denied() != 0 {
		t.Fatalf("the server served %d header-signed and %d presigned requests, refused %d; want only presigned ones",
			srv.HeaderSigned(), srv.QuerySigned(), srv.Denied())
	}
}

// TestPresignedRefusals: a presigned URL works for its own request only:
// not for another key, not past its expiry, not signed with another
// secret; an upload cut off is aborted and leaves nothing.
func TestPresignedRefusals(t *testing.T) {
	const key = "runs/a.bin"
	srv, g, st := grantedLab(t, key)
	ctx := context.Background()
	if _, err := st.Put(ctx, key, strings.NewReader("content"), 7); err != nil {
		t.Fatal(err)
	}
	srv.Put(t, "capstan/runs/b.bin", []byte("another server's backup"))
	hc := srv.Client()
	send := func(method, u string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, op := range []string{agentproto.StorageOpGet, agentproto.StorageOpDelete} {
		gr, err := g.StorageGrant(ctx, "job_1", agentproto.StorageGrantRequest{Op: op, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		other := strings.Replace(gr.URL, "/runs/a.bin?", "/runs/b.bin?", 1)
		if status, body := send(gr.Method, other); status != http.StatusForbidden || !strings.Contains(body, "SignatureDoesNotMatch") {
			t.Fatalf("%s of another key with the grant of %s: %d %s, want 403 SignatureDoesNotMatch", op, key, status, body)
		}
		// The grant's method is signed too.
		if op == agentproto.StorageOpGet {
			if status, body := send(http.MethodDelete, gr.URL); status != http.StatusForbidden || !strings.Contains(body, "SignatureDoesNotMatch") {
				t.Fatalf("DELETE with a GET grant: %d %s, want 403", status, body)
			}
		}
	}
	if srv.Object(t, "capstan/runs/b.bin") == nil {
		t.Fatal("the other object was deleted")
	}
	// The signed query cannot be widened either.
	gr, err := g.StorageGrant(ctx, "job_1", agentproto.StorageGrantRequest{Op: agentproto.StorageOpList, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	wider := strings.Replace(gr.URL, "prefix=capstan%2Fruns%2Fa.bin", "prefix=capstan%2F", 1)
	if status, body := send(http.MethodGet, wider); wider == gr.URL || status != http.StatusForbidden {
		t.Fatalf("a listing with a wider prefix: %d %s, want 403", status, body)
	}

	// Past its expiry a grant is refused.
	g.life = time.Minute
	gr, err = g.StorageGrant(ctx, "job_1", agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := send(gr.Method, gr.URL); status != http.StatusOK {
		t.Fatalf("a fresh grant: %d", status)
	}
	srv.Skew(2 * time.Minute)
	if status, body := send(gr.Method, gr.URL); status != http.StatusForbidden || !strings.Contains(body, "expired") {
		t.Fatalf("an expired grant: %d %s, want 403 expired", status, body)
	}
	srv.Skew(0)
	g.life = time.Hour

	// Signed with another secret.
	g.secret = "not-" + srv.SecretAccessKey
	if _, _, err := st.Get(ctx, key); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("Get with grants of the wrong secret: %v, want 403", err)
	}
	gr, err = g.StorageGrant(ctx, "job_1", agentproto.StorageGrantRequest{Op: agentproto.StorageOpGet, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := send(gr.Method, gr.URL); status != http.StatusForbidden || !strings.Contains(body, "SignatureDoesNotMatch") {
		t.Fatalf("a grant of the wrong secret: %d %s, want 403 SignatureDoesNotMatch", status, body)
	}
	g.secret = ""

	// A connection dropped once: the part is sent again, with the same
	// grant.
	content := make([]byte, objstore.S3PartSize+1)
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	cuts := srv.Cuts()
	srv.CutNextUploads(1)
	if _, err := st.Put(ctx, key, bytes.NewReader(content), -1); err != nil {
		t.Fatalf("Put through one dropped connection: %v", err)
	}
	if srv.Cuts() != cuts+1 || !bytes.Equal(srv.Object(t, "capstan/"+key), content) {
		t.Fatalf("%d cuts, want 1; the object is whole: %v", srv.Cuts()-cuts, bytes.Equal(srv.Object(t, "capstan/"+key), content))
	}

	// Cut off mid-upload: aborted, nothing stored.
	if err := st.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	srv.FailUploadsAfter(1 << 20)
	if _, err := st.Put(ctx, key, io.LimitReader(rand.Reader, 2*objstore.S3PartSize+1), -1); err == nil {
		t.Fatal("Put succeeded through a cut-off connection")
	}
	srv.FailUploadsAfter(-1)
	if !slices.Contains(g.ops, agentproto.StorageOpAbortUpload) {
		t.Fatalf("the upload was not aborted: %v", g.ops)
	}
	if got := srv.Keys(t, "capstan/runs/a"); len(got) != 0 {
		t.Fatalf("a cut-off upload left %v", got)
	}
	if srv.HeaderSigned() != 0 {
		t.Fatalf("%d header-signed requests, want none", srv.HeaderSigned())
	}
}
