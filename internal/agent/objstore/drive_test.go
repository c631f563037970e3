package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/capstan-dev/capstan/internal/agent/objstore"
	"github.com/capstan-dev/capstan/internal/testlab"
)

func openDrive(t *testing.T, d *testlab.CloudDrive, folder string) *objstore.Drive {
	t.Helper()
	s, err := objstore.OpenDrive(context.Background(), objstore.DriveConfig{APIURL: d.URL, Token: d.AccessToken(), Folder: folder,
		ChunkSize: objstore.DriveChunkUnit, Tries: 4, Client: d.Client})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// content is n pseudo-random bytes, with their hex SHA-256.
func content(n int, seed uint64) ([]byte, string) {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed)})
	r.Read(b) //nolint:errcheck // never fails
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// onlyReader hides bytes.Reader's other methods, so the store sees a
// plain stream.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func checkObject(t *testing.T, what string, o objstore.Object, key string, size int, sum string) {
	t.Helper()
	if o.Key != key || o.Size != int64(size) || o.SHA256 != sum || o.Modified.IsZero() {
		t.Fatalf("%s: got %+v, want key %s, size %d, sha256 %s and a modification time", what, o, key, size, sum)
	}
}

// TestDrivePutSurvivesDroppedConnection uploads in 256 KiB chunks while
// the stand-in cuts the connection in the middle of a chunk: the store
// asks the session how much arrived, goes on from there, and the file
// holds exactly the bytes sent, with the size and SHA-256 read back. It
// does so with the length announced and with it unknown.
func TestDrivePutSurvivesDroppedConnection(t *testing.T) {
	d := testlab.StartCloudDrive(t)
	s := openDrive(t, d, "Capstan backups")
	ctx := context.Background()
	for i, size := range []int64{-1, 0} {
		data, sum := content(5*objstore.DriveChunkUnit+12345, uint64(i))
		if size == 0 {
			size = int64(len(data))
		}
		key := fmt.Sprintf("db_1/run_%d.sql.gz.age", i)
		// The middle of the third chunk: two and a half chunks arrive,
		// two are kept.
		d.DropUploadAt(2*objstore.DriveChunkUnit + objstore.DriveChunkUnit/2)
		drops := d.Drops()
		o, err := s.Put(ctx, key, onlyReader{bytes.NewReader(data)}, size)
		if err != nil {
			t.Fatalf("put (size %d): %v", size, err)
		}
		if got, want := d.Drops(), drops+1; got != want {
			t.Fatalf("connections dropped: %d, want %d", got, want)
		}
		checkObject(t, "put", o, key, len(data), sum)
		stored, ok := d.FileContent(s.FolderID(), key)
		if !ok || !bytes.Equal(stored, data) {
			t.Fatalf("the stored file (found %v, %d bytes) differs from the %d bytes sent", ok, len(stored), len(data))
		}
		st, err := s.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		checkObject(t, "stat", st, key, len(data), sum)
		rc, g, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get: %d bytes (err %v), want the %d sent", len(got), err, len(data))
		}
		checkObject(t, "get", g, key, len(data), sum)
	}
}

// TestDriveStore: a key's second put replaces its content; empty objects;
// listing by prefix across pages in key order; deleting; missing keys are
// ErrNotFound; a content shorter than announced fails; the folder is found
// again by name; a refused token gives the API's message.
func TestDriveStore(t *testing.T) {
	d := testlab.StartCloudDrive(t)
	s := openDrive(t, d, "Capstan backups")
	s.SetPageSize(2)
	ctx := context.Background()
	put := func(key string, data []byte) objstore.Object {
		t.Helper()
		o, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return o
	}
	for _, k := range []string{"b/2", "a/1", "b/1", "c'quote\\1", "b/3"} {
		put(k, []byte("first "+k))
	}
	data, sum := content(objstore.DriveChunkUnit+1, 9)
	checkObject(t, "replacement", put("b/2", data), "b/2", len(data), sum)
	empty := sha256.Sum256(nil)
	checkObject(t, "empty", put("b/0", nil), "b/0", 0, hex.EncodeToString(empty[:]))

	list, err := s.List(ctx, "b/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range list {
		keys = append(keys, o.Key)
	}
	if got, want := fmt.Sprint(keys), "[b/0 b/1 b/2 b/3]"; got != want {
		t.Fatalf("list b/: got %s, want %s", got, want)
	}
	if list[2].Size != int64(len(data)) || list[2].SHA256 != sum {
		t.Fatalf("list: b/2 is %+v, want the replacement's size and checksum", list[2])
	}
	all, err := s.List(ctx, "")
	if err != nil || len(all) != 6 {
		t.Fatalf("list all: %d objects (err %v), want 6", len(all), err)
	}
	if o, err := s.Stat(ctx, "c'quote\\1"); err != nil || o.Size != int64(len("first c'quote\\1")) {
		t.Fatalf("stat of a key with a quote and a backslash: %+v, %v", o, err)
	}

	if err := s.Delete(ctx, "b/2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "b/2"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	if _, err := s.Stat(ctx, "b/2"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat after delete: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx, "b/2"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}

	if _, err := s.Put(ctx, "short", bytes.NewReader([]byte("abc")), 10); err == nil {
		t.Fatal("a content shorter than announced was stored")
	}

	again := openDrive(t, d, "Capstan backups")
	if again.FolderID() != s.FolderID() {
		t.Fatalf("the folder was made again: %s, then %s", s.FolderID(), again.FolderID())
	}

	bad, err := objstore.OpenDrive(ctx, objstore.DriveConfig{APIURL: d.URL, Token: "ya29.not-issued", FolderID: s.FolderID(), Client: d.Client})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Stat(ctx, "a/1")
	var de *objstore.DriveError
	if !errors.As(err, &de) || de.Status != http.StatusUnauthorized || de.Message == "" {
		t.Fatalf("a refused token: got %v, want a DriveError 401 with the API's message", err)
	}
}
