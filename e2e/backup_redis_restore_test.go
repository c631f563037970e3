package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestBackupRestoreRedis restores a managed Redis instance (append-only
// file on, as Capstan configures it) in place: keys written, backed up,
// then changed, deleted and added in two databases; restore replace
// restarts the server on the snapshot and the keys are the backup's
// again, the login made through the API still signs in (the instance
// was made to look like one from before ACL files: the restore gives it
// its file first), and nothing is
// left in the volume. The server then restarts on its new append-only
// file with the same keys. An object corrupted in storage fails the
// restore with a checksum error before the instance is touched: it was
// never stopped and still serves its current data. Two restores at once
// never interleave: a second one while the first swaps is refused.
func TestBackupRestoreRedis(t *testing.T) {
	t.Parallel()
	r, mr, inst, opts := newRedisBackupRig(t)
	ctx := context.Background()
	c := redis.NewClient(opts)
	defer c.Close()
	opts1 := *opts
	opts1.DB = 1
	c1 := redis.NewClient(&opts1)
	defer c1.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := c.Pipeline()
	for i := range 200 {
		p.Set(ctx, fmt.Sprintf("app:%d", i), fmt.Sprintf("value %d", i), 0)
	}
	p.HSet(ctx, "app:hash", "a", "1", "b", "2")
	p.RPush(ctx, "app:list", "x", "y", "z")
	p.Set(ctx, "app:marker", "at-backup", 0)
	_, err := p.Exec(ctx)
	must(err)
	for i := range 30 {
		must(c1.Set(ctx, fmt.Sprintf("other:%d", i), i, 0).Err())
	}
	login, lj := r.login(t, inst.ID, map[string]any{"username": "app_reader", "key_pattern": "app:*", "access": "readonly"})
	if lj.Status != "succeeded" {
		t.Fatalf("login: %s %s", lj.Status, deref(lj.Error))
	}

	run, j := r.backup(t, inst.ID, "")
	if j.Status != "succeeded" || run.Status != "succeeded" {
		t.Fatalf("backup: job %s (%s), run %s (%s)\nagent log:\n%s", j.Status, deref(j.Error), run.Status, run.Error, r.agent.Logs())
	}

	// What the backup holds, and the keys as they are then.
	snapshot := func() map[string]string {
		t.Helper()
		out := map[string]string{}
		for db, cl := range []*redis.Client{c, c1} {
			keys, err := cl.Keys(ctx, "*").Result()
			must(err)
			for _, k := range keys {
				typ, err := cl.Type(ctx, k).Result()
				must(err)
				v := typ
				switch typ {
				case "string":
					v, err = cl.Get(ctx, k).Result()
				case "hash":
					var h map[string]string
					h, err = cl.HGetAll(ctx, k).Result()
					v = fmt.Sprint(h)
				case "list":
					var l []string
					l, err = cl.LRange(ctx, k, 0, -1).Result()
					v = fmt.Sprint(l)
				}
				must(err)
				out[fmt.Sprintf("%d/%s", db, k)] = v
			}
		}
		return out
	}
	same := func(what string, got, want map[string]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %s is %q, want %q", what, k, got[k], v)
			}
		}
	}
	atBackup := snapshot()
	if len(atBackup) != 203+30 {
		t.Fatalf("%d keys before the restore", len(atBackup))
	}

	// Changed, deleted and added since.
	must(c.Set(ctx, "app:marker", "after-backup", 0).Err())
	must(c.Del(ctx, "app:1", "app:2", "app:hash").Err())
	must(c.Set(ctx, "app:new", "later", 0).Err())
	must(c1.FlushDB(ctx).Err())

	name := "capstan-db-" + inst.Name
	startedAt := func() string {
		t.Helper()
		insp, err := mr.docker.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		must(err)
		return insp.Container.State.StartedAt
	}
	noLeftovers := func() {
		t.Helper()
		_, err := mr.docker.CopyFromContainer(ctx, name, client.CopyFromContainerOptions{SourcePath: "/data/.capstan-restore"})
		if !cerrdefs.IsNotFound(err) {
			t.Fatalf("/data/.capstan-restore after the restore: %v", err)
		}
	}

	// The instance as one made before managed instances had an ACL file:
	// no aclfile line, the login in the server's memory only. The
	// restore gives it the file first, with that login.
	conf := testlab.ContainerFile(t, mr.docker, name, "/data/capstan-redis.conf")
	var lines []string
	for _, l := range strings.Split(conf, "\n") {
		if !strings.HasPrefix(l, "aclfile ") {
			lines = append(lines, l)
		}
	}
	testlab.WriteContainerFile(t, mr.docker, name, "/data", "capstan-redis.conf", strings.Join(lines, "\n"))
	_, err = mr.docker.ContainerRestart(ctx, name, client.ContainerRestartOptions{})
	must(err)
	testlab.Eventually(t, time.Minute, "the instance answers after its restart", func() bool { return c.Ping(ctx).Err() == nil })
	if v, err := c.ConfigGet(ctx, "aclfile").Result(); err != nil || v["aclfile"] != "" {
		t.Fatalf("aclfile of the instance made old: %v, %v", v, err)
	}
	must(c.Do(ctx, "ACL", "SETUSER", "app_reader", "reset", "on", "~app:*", "resetchannels", "-@all", "+@read", "+@connection",
		"-@dangerous", ">"+login.Password).Err())

	before := startedAt()
	rj := r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "replace"})
	if rj.Status != "succeeded" {
		t.Fatalf("restore: %s: %s\n%s\nagent log:\n%s", rj.Status, deref(rj.Error), rj.Data, r.agent.Logs())
	}
	if startedAt() == before {
		t.Fatal("the restore did not restart the instance")
	}
	same("after the restore", snapshot(), atBackup)
	noLeftovers()
	reader := redis.NewClient(&redis.Options{Addr: opts.Addr, Username: login.Login.Username, Password: login.Password, Protocol: 2,
		DisableIdentity: true})
	defer reader.Close()
	if v, err := reader.Get(ctx, "app:marker").Result(); err != nil || v != "at-backup" {
		t.Fatalf("the login made before the restore: %q, %v", v, err)
	}
	if aof, err := c.ConfigGet(ctx, "appendonly").Result(); err != nil || aof["appendonly"] != "yes" {
		t.Fatalf("appendonly after the restore: %v, %v", aof, err)
	}
	if v, err := c.ConfigGet(ctx, "aclfile").Result(); err != nil || v["aclfile"] != "/data/capstan-users.acl" {
		t.Fatalf("aclfile after the restore: %v, %v", v, err)
	}

	// The next start loads the append-only file written from the
	// restored data.
	mr.control(t, inst.ID, "restart")
	same("after a restart", snapshot(), atBackup)

	// Corrupted in storage: refused before the instance is touched.
	must(c.Set(ctx, "app:current", "kept", 0).Err())
	current := snapshot()
	before = startedAt()
	r.s3.Corrupt(t, "kv/"+run.Locations.Remote, func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b })
	rj = r.post(t, "/api/v1/backups/"+run.ID+"/restore", map[string]any{"mode": "replace"})
	if rj.Status != "failed" || !strings.Contains(deref(rj.Error), "checksum mismatch") {
		t.Fatalf("restore of a corrupted object: %s: %s", rj.Status, deref(rj.Error))
	}
	if startedAt() != before {
		t.Fatal("a restore of a corrupted object restarted the instance")
	}
	same("after the refused restore", snapshot(), current)
	noLeftovers()

	// Two at once: each either swaps alone or is refused.
	run2, j2 := r.backup(t, inst.ID, "")
	if j2.Status != "succeeded" {
		t.Fatalf("second backup: %s %s", j2.Status, deref(j2.Error))
	}
	must(c.Set(ctx, "app:current", "changed", 0).Err())
	var wg sync.WaitGroup
	resps := make([]*Response, 2)
	for i := range resps {
		wg.Go(func() {
			resps[i] = r.Post(t, "/api/v1/backups/"+run2.ID+"/restore", r.Token, map[string]any{"mode": "replace"})
		})
	}
	wg.Wait()
	ok := 0
	for _, resp := range resps {
		expectStatus(t, resp, http.StatusAccepted)
		var a Accepted
		resp.JSON(t, &a)
		switch j := r.backupJob(t, a.JobID); {
		case j.Status == "succeeded":
			ok++
		case !strings.Contains(deref(j.Error), "another restore of this instance is running"):
			t.Fatalf("restore at once: %s: %s", j.Status, deref(j.Error))
		}
	}
	if ok == 0 {
		t.Fatal("neither of two restores at once succeeded")
	}
	same("after two restores at once", snapshot(), current)
	noLeftovers()
	if d := mr.settled(t, inst.ID); d.State != "ready" {
		t.Fatalf("the instance after the restores: %s", d.State)
	}
}
