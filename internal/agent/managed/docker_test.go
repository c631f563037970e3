package managed_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/agenttest"
	"github.com/capstan-dev/capstan/internal/agent/console"
	"github.com/capstan-dev/capstan/internal/agent/managed"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// managedRedisRig is what a test of a managed Redis instance on the real
// Docker engine needs: the engine, the Redis image, a fresh instance id
// with its container and volume names (both removed when the test ends),
// and the managed-database and console job executors.
func managedRedisRig(t *testing.T) (cli *client.Client, image, id, name, volume string, r agent.Registry) {
	t.Helper()
	cli = testlab.Docker(t)
	image = testlab.EngineImage(t, "redis")
	var b [4]byte
	_, _ = rand.Read(b[:])
	id = "db_test" + hex.EncodeToString(b[:])
	name, volume = "capstan-db-agenttest-"+hex.EncodeToString(b[:]), "capstan-db-"+id
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		_, _ = cli.VolumeRemove(ctx, volume, client.VolumeRemoveOptions{Force: true})
	})
	r = agent.Registry{}
	(&managed.Managed{Host: testlab.DockerHost()}).Register(r)
	console.Executors{}.Register(r)
	return cli, image, id, name, volume, r
}

// TestManagedCreateIsIdempotent runs db.create twice for one Redis
// instance on the real Docker engine: the retry reuses the volume and the
// container (same id, same port) and the instance answers with the
// password of the job's secrets. db.remove with purge then removes both.
func TestManagedCreateIsIdempotent(t *testing.T) {
	cli, image, id, name, volume, r := managedRedisRig(t)
	run := func(jobType string, payload any) ([]byte, error) {
		t.Helper()
		pl, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		data, _, err := r[jobType].Run(ctx, agentproto.Job{ID: "job_test", Type: jobType, Payload: pl},
			map[string]string{agentproto.SecretDBPassword: "s3cret"}, agenttest.Events{})
		out, _ := json.Marshal(data)
		return out, err
	}
	create := agentproto.DBCreatePayload{InstanceID: id, Engine: agentproto.EngineRedis, Version: "7.2", Image: image,
		ContainerName: name, Network: agentproto.DBNetwork, Volume: volume, MemoryLimitBytes: 128 << 20, Username: "default"}
	var first, second agentproto.DBCreateResult
	for _, res := range []*agentproto.DBCreateResult{&first, &second} {
		out, err := run(agentproto.JobDBCreate, create)
		if err != nil {
			t.Fatalf("db.create: %v: %s", err, out)
		}
		if err := json.Unmarshal(out, res); err != nil {
			t.Fatal(err)
		}
	}
	if first.ContainerID == "" || first.ContainerID != second.ContainerID || first.HostPort != second.HostPort {
		t.Fatalf("retry: first %+v, second %+v", first, second)
	}
	o := agenttest.RunJob(t, r, agentproto.JobDBKV, agentproto.DBKVPayload{Target: agentproto.DBTarget{InstanceID: id,
		Engine: agentproto.EngineRedis, Host: "127.0.0.1", Port: first.HostPort, Username: "default"}, Action: agentproto.KVInfo},
		map[string]string{agentproto.SecretDBPassword: "s3cret"})
	var kv agentproto.DBKVResult
	o.OK(t, &kv)
	if kv.Info["server"]["redis_version"] == "" {
		t.Fatalf("info: %+v", kv.Info)
	}
	if o := agenttest.RunJob(t, r, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: agentproto.DBTarget{Engine: agentproto.EngineRedis,
		Host: "127.0.0.1", Port: first.HostPort, Username: "default"}},
		map[string]string{agentproto.SecretDBPassword: "wrong"}); o.Err == nil {
		t.Fatal("a wrong password connected")
	}

	// Another instance's job does not take this container.
	other := create
	other.InstanceID = "db_other"
	if out, err := run(agentproto.JobDBCreate, other); err == nil {
		t.Fatalf("db.create of another instance with the same container name succeeded: %s", out)
	}

	out, err := run(agentproto.JobDBRemove, agentproto.DBRemovePayload{InstanceID: id, ContainerName: name, Volume: volume, Purge: true})
	var rm agentproto.DBRemoveResult
	if err != nil || json.Unmarshal(out, &rm) != nil || !rm.ContainerRemoved || !rm.VolumeRemoved {
		t.Fatalf("db.remove: %v: %s", err, out)
	}
	if _, err := cli.VolumeInspect(context.Background(), volume, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("volume after purge: %v", err)
	}
}

// TestManagedRedisGetsItsACLFile: a managed Redis made before instances
// had an ACL file (its configuration names none, its users live in
// memory) gets one the next time the agent restarts it, or stops it,
// with the users its server held; from then on a login made through the
// agent is saved there and outlives a restart the agent has no part in
// (as the host's reboot).
func TestManagedRedisGetsItsACLFile(t *testing.T) {
	cli, image, id, name, volume, r := managedRedisRig(t)
	const password = "s3cret"
	runErr := func(jobType string, payload any) ([]byte, error) {
		pl, err := json.Marshal(payload)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		data, _, err := r[jobType].Run(ctx, agentproto.Job{ID: "job_test", Type: jobType, Payload: pl},
			map[string]string{agentproto.SecretDBPassword: password}, agenttest.Events{})
		out, _ := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %s", jobType, err, out)
		}
		return out, nil
	}
	run := func(jobType string, payload any) []byte {
		t.Helper()
		out, err := runErr(jobType, payload)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var created agentproto.DBCreateResult
	if err := json.Unmarshal(run(agentproto.JobDBCreate, agentproto.DBCreatePayload{InstanceID: id, Engine: agentproto.EngineRedis,
		Version: "7.2", Image: image, ContainerName: name, Network: agentproto.DBNetwork, Volume: volume, Username: "default"}), &created); err != nil {
		t.Fatal(err)
	}
	target := agentproto.DBTarget{InstanceID: id, Engine: agentproto.EngineRedis, Host: "127.0.0.1", Port: created.HostPort, Username: "default"}
	addr := fmt.Sprintf("127.0.0.1:%d", created.HostPort)
	ctx := t.Context()
	connect := func(user, pw string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := connect("", password)
	aclFile := func() string {
		t.Helper()
		v, err := admin.ConfigGet(ctx, "aclfile").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v["aclfile"]
	}
	if got := aclFile(); got != "/data/capstan-users.acl" {
		t.Fatalf("a new instance's aclfile: %q", got)
	}
	if err := connect("", "wrong").Ping(ctx).Err(); err == nil {
		t.Fatal("a wrong password is taken")
	}

	// makeOld turns the instance into one made before ACL files: no
	// aclfile line, the server running on that configuration, a login
	// in its memory only.
	makeOld := func(user string) {
		t.Helper()
		conf := testlab.ContainerFile(t, cli, name, "/data/capstan-redis.conf")
		var kept []string
		for _, l := range strings.Split(conf, "\n") {
			if !strings.HasPrefix(l, "aclfile ") {
				kept = append(kept, l)
			}
		}
		testlab.WriteContainerFile(t, cli, name, "/data", "capstan-redis.conf", strings.Join(kept, "\n"))
		if _, err := cli.ContainerRestart(ctx, name, client.ContainerRestartOptions{}); err != nil {
			t.Fatal(err)
		}
		testlab.Eventually(t, time.Minute, "the server answers after its restart", func() bool { return admin.Ping(ctx).Err() == nil })
		if got := aclFile(); got != "" {
			t.Fatalf("the old instance's aclfile: %q", got)
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw-"+user, "~"+user+":*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
	}

	makeOld("old1")
	run(agentproto.JobDBControl, agentproto.DBControlPayload{Target: target, ContainerName: name, Action: agentproto.DBControlRestart})
	if err := connect("old1", "pw-old1").Ping(ctx).Err(); err != nil {
		t.Fatalf("the in-memory login after the restart that gave the instance its ACL file: %v", err)
	}
	if got := aclFile(); got != "/data/capstan-users.acl" {
		t.Fatalf("aclfile after the restart: %q", got)
	}

	// A login made through the agent now, then a restart without it.
	o := agenttest.RunJob(t, r, agentproto.JobDBUserCreate, agentproto.DBUserPayload{Target: target, Username: "app", KeyPattern: "app:*",
		Access: agentproto.DBAccessReadWrite}, map[string]string{agentproto.SecretDBPassword: password, agentproto.SecretDBNewPassword: "app-pw"})
	var res agentproto.DBAdminResult
	o.OK(t, &res)
	if last := res.Statements[len(res.Statements)-1]; last != "ACL SAVE" {
		t.Fatalf("statements: %v", res.Statements)
	}
	var appLine string
	for _, l := range strings.Split(testlab.ContainerFile(t, cli, name, "/data/capstan-users.acl"), "\n") {
		if strings.HasPrefix(l, "user app ") {
			appLine = l
		}
	}
	if appLine == "" || strings.Contains(testlab.ContainerFile(t, cli, name, "/data/capstan-users.acl"), password) {
		t.Fatalf("the ACL file holds no app login, or a password in clear:\n%s", testlab.ContainerFile(t, cli, name, "/data/capstan-users.acl"))
	}
	if _, err := cli.ContainerRestart(ctx, name, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, time.Minute, "the server answers after its restart", func() bool { return admin.Ping(ctx).Err() == nil })
	users, err := admin.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil || strings.Join(users, " ") != "app default old1" {
		t.Fatalf("users after a restart without the agent: %v, %v", users, err)
	}
	if err := connect("app", "app-pw").Set(ctx, "app:1", "v", 0).Err(); err != nil {
		t.Fatalf("the login made through the agent, after a restart without it: %v", err)
	}

	// Stopped as an old instance, it keeps the users its server held.
	makeOld("old2")
	run(agentproto.JobDBControl, agentproto.DBControlPayload{Target: target, ContainerName: name, Action: agentproto.DBControlStop})
	run(agentproto.JobDBControl, agentproto.DBControlPayload{Target: target, ContainerName: name, Action: agentproto.DBControlStart})
	if err := connect("old2", "pw-old2").Ping(ctx).Err(); err != nil {
		t.Fatalf("the in-memory login after stop and start: %v", err)
	}
	if users, err := admin.Do(ctx, "ACL", "USERS").StringSlice(); err != nil || strings.Join(users, " ") != "default old2" {
		t.Fatalf("users after stop and start: %v, %v", users, err)
	}

	// Two jobs at once on an old instance: one of them gives it its
	// file, once, and neither loses a user.
	makeOld("old3")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = runErr(agentproto.JobDBControl, agentproto.DBControlPayload{Target: target, ContainerName: name,
				Action: agentproto.DBControlStart})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(testlab.ContainerFile(t, cli, name, "/data/capstan-redis.conf"), "\naclfile "); n != 1 {
		t.Fatalf("%d aclfile lines after two jobs at once", n)
	}
	if _, err := cli.ContainerRestart(ctx, name, client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}
	testlab.Eventually(t, time.Minute, "the server answers after its restart", func() bool { return admin.Ping(ctx).Err() == nil })
	if users, err := admin.Do(ctx, "ACL", "USERS").StringSlice(); err != nil || strings.Join(users, " ") != "default old3" {
		t.Fatalf("users after two jobs at once and a restart: %v, %v", users, err)
	}

	// A container made anew on the kept volume keeps its users.
	if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	var again agentproto.DBCreateResult
	if err := json.Unmarshal(run(agentproto.JobDBCreate, agentproto.DBCreatePayload{InstanceID: id, Engine: agentproto.EngineRedis,
		Version: "7.2", Image: image, ContainerName: name, Network: agentproto.DBNetwork, Volume: volume, Username: "default"}), &again); err != nil {
		t.Fatal(err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", again.HostPort)
	if err := connect("old3", "pw-old3").Ping(ctx).Err(); err != nil {
		t.Fatalf("a login after its container was made anew: %v", err)
	}
	if users, err := connect("", password).Do(ctx, "ACL", "USERS").StringSlice(); err != nil || strings.Join(users, " ") != "default old3" {
		t.Fatalf("users after the container was made anew: %v, %v", users, err)
	}
}
