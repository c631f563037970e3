package database_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/database"
	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// TestManagedCreateIsIdempotent runs db.create twice for one Redis
// instance on the real Docker engine: the retry reuses the volume and the
// container (same id, same port) and the instance answers with the
// password of the job's secrets. db.remove with purge then removes both.
func TestManagedCreateIsIdempotent(t *testing.T) {
	cli := testlab.Docker(t)
	image := testlab.EngineImage(t, "redis")
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := "db_test" + hex.EncodeToString(b[:])
	name, volume := "capstan-db-agenttest-"+hex.EncodeToString(b[:]), "capstan-db-"+id
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true})
		_, _ = cli.VolumeRemove(ctx, volume, client.VolumeRemoveOptions{Force: true})
	})
	r := agent.Registry{}
	(&database.Managed{Host: testlab.DockerHost()}).Register(r)
	run := func(jobType string, payload any) ([]byte, error) {
		t.Helper()
		pl, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		data, _, err := r[jobType].Run(ctx, agentproto.Job{ID: "job_test", Type: jobType, Payload: pl},
			map[string]string{agentproto.SecretDBPassword: "s3cret"}, events{})
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
	o := runJob(t, agentproto.JobDBKV, agentproto.DBKVPayload{Target: agentproto.DBTarget{InstanceID: id,
		Engine: agentproto.EngineRedis, Host: "127.0.0.1", Port: first.HostPort, Username: "default"}, Action: agentproto.KVInfo}, "s3cret")
	var kv agentproto.DBKVResult
	o.ok(t, &kv)
	if kv.Info["server"]["redis_version"] == "" {
		t.Fatalf("info: %+v", kv.Info)
	}
	if o := runJob(t, agentproto.JobDBConnect, agentproto.DBConnectPayload{Target: agentproto.DBTarget{Engine: agentproto.EngineRedis,
		Host: "127.0.0.1", Port: first.HostPort, Username: "default"}}, "wrong"); o.err == nil {
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
