package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// newRedisBackupRig is a backup rig with storage settings and a managed
// Redis instance, and the options of a client of its admin login.
func newRedisBackupRig(t *testing.T) (*backupRig, *managedRig, DatabaseInfo, *redis.Options) {
	t.Helper()
	docker := testlab.Docker(t)
	r := newImagesRig(t, map[string]map[string]string{"redis": {"7.2": testlab.EngineImage(t, "redis")}})
	expectStatus(t, r.putSettings(t, r.storageSettings("kv")), http.StatusOK)
	var b [3]byte
	_, _ = rand.Read(b[:])
	mr := &managedRig{dbRig: r.dbRig, docker: docker, run: hex.EncodeToString(b[:])}
	t.Cleanup(func() { mr.removeLeftovers(t) })
	inst, cj := mr.create(t, map[string]any{"name": "cache-" + mr.run, "engine": "redis", "version": "7.2"})
	if cj.Status != "succeeded" || inst.State != "ready" {
		t.Fatalf("redis: %s %s: %+v\nagent log:\n%s", cj.Status, deref(cj.Error), inst, r.agent.Logs())
	}
	resp := r.Get(t, "/api/v1/databases/"+inst.ID+"/connection", r.Token)
	var conn DatabaseConnection
	expectJSON(t, resp, http.StatusOK, &conn)
	if len(conn.Logins) == 0 {
		t.Fatalf("connection: %s", resp.Body)
	}
	opts := &redis.Options{Addr: net.JoinHostPort(conn.Host, strconv.Itoa(conn.Port)), Password: conn.Logins[0].Password,
		Protocol: 2, DisableIdentity: true}
	if u := conn.Logins[0].Username; u != "default" {
		opts.Username = u
	}
	return r, mr, inst, opts
}

// TestBackupRedis backs up a managed Redis instance (two databases; every value
// type in its compact and its large encodings, a stream with a consumer
// group, expiring keys, names long enough to be compressed) while keys
// are being written: the object is the RDB snapshot, compressed and
// age-encrypted (no plaintext in storage); its manifest counts the keys
// of each database and type. Verify loads it into a throwaway server in
// a container of the engine's image and matches the manifest; an object
// corrupted in storage fails with a checksum error. A restore into a new
// or a named database is refused (422), and so is a database named in a
// run.
func TestBackupRedis(t *testing.T) {
	r, _, inst, opts := newRedisBackupRig(t)
	c := redis.NewClient(opts)
	defer c.Close()
	password := opts.Password
	ctx := context.Background()
	marker := randomMarker(t)
	seed := func(c *redis.Client) {
		t.Helper()
		p := c.Pipeline()
		p.Set(ctx, "marker", marker, 0)
		p.Set(ctx, "compressible:"+strings.Repeat("k", 100), strings.Repeat("v", 2000), 0)
		p.Set(ctx, "counter", 42, 0)
		p.Set(ctx, "expiring", "soon", time.Hour)
		for i := range 300 {
			p.Set(ctx, fmt.Sprintf("s:%d", i), fmt.Sprintf("value %d", i), 0)
		}
		p.HSet(ctx, "h:small", "a", "1", "b", "2")
		for i := range 1000 {
			p.HSet(ctx, "h:big", fmt.Sprintf("f%d", i), strings.Repeat("x", i%50))
			p.RPush(ctx, "l:big", fmt.Sprintf("item %d", i))
			p.SAdd(ctx, "set:strings", fmt.Sprintf("member %d", i))
		}
		p.RPush(ctx, "l:small", "a", "b", "c")
		p.SAdd(ctx, "set:ints", 1, 2, 3, 4)
		p.SAdd(ctx, "set:small", "a", "b")
		for i := range 300 {
			p.ZAdd(ctx, "z:big", redis.Z{Score: float64(i) / 3, Member: fmt.Sprintf("m%d", i)})
		}
		p.ZAdd(ctx, "z:small", redis.Z{Score: 1.5, Member: "a"})
		for i := range 50 {
			p.XAdd(ctx, &redis.XAddArgs{Stream: "events", Values: []any{"n", i}})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.XGroupCreate(ctx, "events", "workers", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w1", Streams: []string{"events", ">"}, Count: 10}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	seed(c)
	opts1 := *opts
	opts1.DB = 1
	c1 := redis.NewClient(&opts1)
	defer c1.Close()
	for i := range 120 {
		if err := c1.Set(ctx, fmt.Sprintf("other:%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// Writes go on while the backup runs.
	var written atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if c.Set(ctx, fmt.Sprintf("late:%d", i), i, 0).Err() != nil {
				return
			}
			written.Add(1)
		}
	}()
	run, j := r.backup(t, inst.ID, "")
	close(stop)
	<-done
	if j.Status != "succeeded" || run.Status != "succeeded" {
		t.Fatalf("backup: job %s (%s), run %s (%s)\nagent log:\n%s", j.Status, deref(j.Error), run.Status, run.Error, r.agent.Logs())
	}
	m := run.Manifest
	rows := map[string]int64{}
	for _, tb := range m.Tables {
		rows[tb.Name] = tb.Rows
	}
	const base = 304 + 2 + 2 + 3 + 2 + 1 // db0's keys before the writes: strings, hashes, lists, sets, zsets, the stream
	late := rows["db0"] - base
	if m.Kind != "kv" || len(rows) != 2 || rows["db1"] != 120 || late < 0 || late > written.Load() || m.Keys["stream"] != 1 ||
		m.Keys["zset"] != 2 || m.Keys["hash"] != 2 || m.Keys["list"] != 2 || m.Keys["set"] != 3 || m.Keys["string"] != 304+late+120 {
		t.Fatalf("manifest (%d keys written during the backup): %+v", written.Load(), m)
	}
	if !strings.HasSuffix(run.Locations.Remote, ".rdb.gz.age") || run.Database != "" {
		t.Fatalf("run: %+v", run)
	}
	object := r.s3.Object(t, "kv/"+run.Locations.Remote)
	if int64(len(object)) != run.Size || bytes.Contains(object, []byte(marker)) ||
		!bytes.HasPrefix(object, []byte("age-encryption.org/v1\n")) {
		t.Fatalf("stored object: %d bytes (run %d): not the encrypted snapshot", len(object), run.Size)
	}
	if rdb := decryptBackup(t, r.DataDir, run.KeyID, object); !bytes.HasPrefix(rdb, []byte("REDIS")) || !bytes.Contains(rdb, []byte(marker)) {
		t.Fatalf("the decrypted backup is not the RDB snapshot: %.40q", rdb)
	}
	t.Logf("%d keys written while the backup ran; the snapshot holds %d in db0", written.Load(), rows["db0"])

	if v := r.verifyOK(t, run.ID); !v.OK || !v.Details.ChecksumOK || len(v.Details.Tables) != 2 {
		t.Fatalf("verified: %+v", v)
	} else if d := v.Details; d.Loader != "image" || d.LoaderVersion != "7.2" || d.LoaderRef != testlab.EngineImage(t, "redis") ||
		d.EngineVersion == "" {
		// The host's Redis (Debian's 7.0) is older than the snapshot's
		// 7.2: the image of 7.2 loads it.
		t.Fatalf("loaded into %q with %s %s %s, want the image of 7.2", d.EngineVersion, d.Loader, d.LoaderVersion, d.LoaderRef)
	}

	// Refused: a restore into a new database or one named (a snapshot
	// replaces the whole instance), a database named in a run.
	for _, body := range []map[string]any{{"mode": "new", "into": "copy"}, {"mode": "replace", "into": "1"}} {
		expectProblem(t, r.Post(t, "/api/v1/backups/"+run.ID+"/restore", r.Token, body), http.StatusUnprocessableEntity,
			"validation-failed")
	}
	expectProblem(t, r.Post(t, "/api/v1/backups/run", r.Token, map[string]any{"instance_id": inst.ID, "database": "1"}),
		http.StatusUnprocessableEntity, "validation-failed")

	r.s3.Corrupt(t, "kv/"+run.Locations.Remote, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
	if vj := r.post(t, "/api/v1/backups/"+run.ID+"/verify", nil); vj.Status != "failed" || !strings.Contains(deref(vj.Error), "checksum mismatch") {
		t.Fatalf("verify of a corrupted object: %s: %s", vj.Status, deref(vj.Error))
	}
	if v := r.verified(t, run.ID); v.OK || v.Details.ChecksumOK {
		t.Fatalf("verified after corruption: %+v", v)
	}
	for what, text := range map[string]string{"control plane log": r.ControlPlane.Logs(), "agent log": r.agent.Logs()} {
		for _, secret := range []string{r.s3.SecretAccessKey, password, "AGE-SECRET-KEY-1"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s holds a secret", what)
			}
		}
	}
}

// TestBackupRedisExternalOlderVersion: Debian's Redis 7.0, registered as
// an external instance, is a version the engines list has no image of
// (it offers 7.4 and 7.2, here both the test lab's image). Its backup is
// verified all the same: a snapshot loads into the same or a newer
// version, so it loads into a throwaway server of the image of the
// newest version above it, 7.4; the run's verification names the version
// the server reported and the image's.
func TestBackupRedisExternalOlderVersion(t *testing.T) {
	testlab.Docker(t)
	image := testlab.EngineImage(t, "redis")
	r := newImagesRig(t, map[string]map[string]string{"redis": {"7.2": image, "7.4": image}})
	expectStatus(t, r.putSettings(t, r.storageSettings("kv")), http.StatusOK)
	var engines struct {
		Engines []struct {
			Name     string `json:"name"`
			Versions []struct {
				Version string `json:"version"`
			} `json:"versions"`
		} `json:"engines"`
	}
	r.Get(t, "/api/v1/databases/engines", r.Token).JSON(t, &engines)
	var listed []string
	for _, e := range engines.Engines {
		if e.Name == "redis" {
			for _, v := range e.Versions {
				listed = append(listed, v.Version)
			}
		}
	}
	if got := strings.Join(listed, ","); got != "7.4,7.2" {
		t.Fatalf("redis versions listed: %s, want 7.4,7.2", got)
	}

	rds := testlab.StartRedis(t, nil)
	c := rds.Client(t)
	ctx := t.Context()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	var serverVersion string
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			serverVersion = v
		}
	}
	if !strings.HasPrefix(serverVersion, "7.0.") {
		t.Fatalf("the test lab's Redis is %q, not Debian's 7.0", serverVersion)
	}
	inst := r.register(t, map[string]any{"name": "cache", "engine": "redis", "host": "127.0.0.1", "port": rds.Port,
		"password": rds.Password, "tls_mode": "disable"})
	if inst.State != "ready" || inst.Version != "7.0" {
		t.Fatalf("instance: %+v", inst)
	}
	p := c.Pipeline()
	for i := range 200 {
		p.Set(ctx, fmt.Sprintf("k:%d", i), i, 0)
	}
	p.HSet(ctx, "h", "a", "1")
	p.RPush(ctx, "l", "x", "y")
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	opts1 := *c.Options()
	opts1.DB = 3
	c3 := redis.NewClient(&opts1)
	defer c3.Close()
	if err := c3.Set(ctx, "other", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	run, j := r.backup(t, inst.ID, "")
	if j.Status != "succeeded" || run.Status != "succeeded" {
		t.Fatalf("backup: job %s (%s), run %s (%s)\nagent log:\n%s", j.Status, deref(j.Error), run.Status, run.Error, r.agent.Logs())
	}
	v := r.verifyOK(t, run.ID)
	if !v.OK || !v.Details.ChecksumOK || len(v.Details.Tables) != 2 {
		t.Fatalf("verified: %+v", v)
	}
	for _, tb := range v.Details.Tables {
		if !tb.OK {
			t.Fatalf("table %s differs: %+v", tb.Name, v)
		}
	}
	// The test lab's image of "7.4" holds Debian's Redis too: the server
	// it ran reports 7.0.15, the image is the one of 7.4.
	d := v.Details
	if d.EngineVersion != serverVersion || d.Loader != "image" || d.LoaderVersion != "7.4" || d.LoaderRef != image {
		t.Fatalf("loaded into %q with %s %s %s, want the image of 7.4 (%s)", d.EngineVersion, d.Loader, d.LoaderVersion,
			d.LoaderRef, image)
	}
	// The throwaway server is gone: nothing answers on the address the
	// verification named.
	addr := strings.TrimPrefix(d.Database, "a throwaway redis on ")
	if addr == d.Database {
		t.Fatalf("details.database %q names no address", d.Database)
	}
	testlab.Eventually(t, time.Minute, "the throwaway server stopped", func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
}
