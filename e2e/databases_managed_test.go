package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// managedRig is a control plane whose engine images are the test lab's,
// with a real agent on one server that talks to the Docker engine under
// test.
type managedRig struct {
	*dbRig
	docker *client.Client
	run    string // a suffix that keeps this run's container names apart
}

func newManagedRig(t testing.TB, d store.Dialect) *managedRig {
	t.Helper()
	return newManagedRigWith(t, d)
}

// newManagedRigWith is newManagedRig with extra arguments of
// capstan-agent run.
func newManagedRigWith(t testing.TB, d store.Dialect, agentArgs ...string) *managedRig {
	t.Helper()
	docker := testlab.Docker(t)
	images, err := json.Marshal(map[string]map[string]string{
		"postgres": {"15": testlab.EngineImage(t, "postgres")},
		"mariadb":  {"10.11": testlab.EngineImage(t, "mariadb")},
		"redis":    {"7.2": testlab.EngineImage(t, "redis")},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "images.json")
	if err := os.WriteFile(file, images, 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, Options{Dialect: d, Args: []string{"--database-images", file}})
	e, config := f.enrollServer(t, "db-host")
	var b [3]byte
	_, _ = rand.Read(b[:])
	r := &managedRig{docker: docker, run: hex.EncodeToString(b[:])}
	// Registered before the agent starts, so it runs after the agent
	// stopped: whatever a failed test left behind goes.
	t.Cleanup(func() { r.removeLeftovers(t) })
	env := testlab.DockerEnv()
	r.dbRig = &dbRig{Fleet: f, serverID: e.Server.ID, agent: startAgentWith(t, config, env, agentArgs...)}
	testlab.Eventually(t, startTimeout, "the agent is online", func() bool {
		if !r.agent.Running() {
			t.Fatalf("capstan-agent exited:\n%s", r.agent.Logs())
		}
		return f.server(t, e.Server.ID).Status == "online"
	})
	return r
}

func (r *managedRig) removeLeftovers(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("name", "capstan-db-.*-"+r.run)})
	if err == nil {
		for _, c := range res.Items {
			_, _ = r.docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
			if id := c.Labels["dev.capstan.database"]; id != "" {
				_, _ = r.docker.VolumeRemove(ctx, "capstan-db-"+id, client.VolumeRemoveOptions{Force: true})
			}
		}
	}
}

// ManagedCreated is the answer of POST /api/v1/databases.
type ManagedCreated struct {
	Instance DatabaseInfo `json:"instance"`
	JobID    string       `json:"job_id"`
}

// create creates a managed instance and waits for its creation job.
func (r *managedRig) create(t testing.TB, body map[string]any) (DatabaseInfo, DatabaseJob) {
	t.Helper()
	body["server_id"] = r.serverID
	resp := r.Post(t, "/api/v1/databases", r.Token, body)
	var c ManagedCreated
	expectJSON(t, resp, http.StatusAccepted, &c)
	if c.Instance.State != "creating" || !c.Instance.Managed || c.JobID == "" || c.Instance.CheckJobID != c.JobID {
		t.Fatalf("creation: %s", resp.Body)
	}
	j := r.wait(t, c.Instance.ID, c.JobID)
	return r.settled(t, c.Instance.ID), j
}

// settled returns the instance once its state is no longer a job's
// transitional one. A job reads as finished a moment before its
// completion hook has updated the instance, so a test waits for the
// instance itself.
func (r *managedRig) settled(t testing.TB, id string) DatabaseInfo {
	t.Helper()
	var in DatabaseInfo
	testlab.Eventually(t, time.Minute, "instance "+id+" settles after its job", func() bool {
		in = r.instance(t, id)
		switch in.State {
		case "creating", "starting", "stopping", "restarting":
			return false
		}
		return true
	})
	return in
}

func (r *managedRig) control(t *testing.T, id, action string) {
	t.Helper()
	var c ManagedCreated
	expectJSON(t, r.Post(t, "/api/v1/databases/"+id+"/control", r.Token, map[string]any{"action": action}), http.StatusAccepted, &c)
	if j := r.wait(t, id, c.JobID); j.Status != "succeeded" {
		t.Fatalf("%s: %s %s: %s\nagent log:\n%s", action, j.Status, deref(j.Error), j.Data, r.agent.Logs())
	}
	r.settled(t, id)
}

// remove deletes a managed instance and waits until its record is gone.
func (r *managedRig) remove(t *testing.T, id string, purge bool) (volumeKept bool) {
	t.Helper()
	resp := r.Do(t, Req{Method: http.MethodDelete, Path: fmt.Sprintf("/api/v1/databases/%s?purge=%t", id, purge), Token: r.Token})
	var out struct {
		JobID      string `json:"job_id"`
		Managed    bool   `json:"managed"`
		VolumeKept *bool  `json:"volume_kept"`
	}
	expectJSON(t, resp, http.StatusAccepted, &out)
	if out.JobID == "" || !out.Managed || out.VolumeKept == nil || *out.VolumeKept == purge {
		t.Fatalf("delete (purge %t): %s", purge, resp.Body)
	}
	r.waitJob(t, out.JobID, "succeeded", 3*time.Minute)
	testlab.Eventually(t, time.Minute, "instance "+id+" is gone after its removal job", func() bool {
		resp := r.Get(t, "/api/v1/databases/"+id, r.Token)
		if resp.Status == http.StatusNotFound {
			return true
		}
		expectStatus(t, resp, http.StatusOK)
		return false
	})
	return *out.VolumeKept
}

func (r *managedRig) volumeExists(t *testing.T, id string) bool {
	t.Helper()
	_, err := r.docker.VolumeInspect(context.Background(), "capstan-db-"+id, client.VolumeInspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestManagedPostgres creates a managed PostgreSQL through a real agent
// and Docker engine: it becomes ready with its port on 127.0.0.1, takes
// queries, keeps its data across stop and start, and deleting it keeps
// its volume unless purge is asked for. Bad input changes nothing.
func TestManagedPostgres(t *testing.T) {
	forEachStore(t, testManagedPostgres)
}

func testManagedPostgres(t *testing.T, d store.Dialect) {
	r := newManagedRig(t, d)
	name := "pg-" + r.run

	// Bad input: 422 and nothing stored or queued.
	for _, body := range []map[string]any{
		{"name": "bad-engine-" + r.run, "engine": "mongodb", "version": "7", "database": "app"},
		{"name": "bad-version-" + r.run, "engine": "postgres", "version": "9", "database": "app"},
		{"name": "bad-db-" + r.run, "engine": "postgres", "version": "15", "database": `a"; DROP TABLE x; --`},
		{"name": "bad-mem-" + r.run, "engine": "postgres", "version": "15", "database": "app", "memory_limit": 1024},
		{"name": "Bad Name", "engine": "postgres", "version": "15", "database": "app"},
	} {
		body["server_id"] = r.serverID
		resp := r.Post(t, "/api/v1/databases", r.Token, body)
		expectStatus(t, resp, http.StatusUnprocessableEntity)
	}
	if list := r.listDatabases(t); len(list) != 0 {
		t.Fatalf("bad input stored instances: %+v", list)
	}
	// A member may not create.
	member := createUser(t, r.ControlPlane, "member@example.com", testPassword, false)
	memberToken := signInUser(t, r.ControlPlane, member).AccessToken
	resp := r.Post(t, "/api/v1/databases", memberToken, map[string]any{"name": name, "server_id": r.serverID, "engine": "postgres",
		"version": "15", "database": "app"})
	expectStatus(t, resp, http.StatusForbidden)

	pg, j := r.create(t, map[string]any{"name": name, "engine": "postgres", "version": "15", "database": "app",
		"memory_limit": 256 << 20})
	if j.Status != "succeeded" || pg.State != "ready" || pg.Version != "15" || !strings.HasPrefix(pg.ServerVersion, "15.") {
		t.Fatalf("created: job %s %s %s; instance %+v\nagent log:\n%s", j.Status, deref(j.Error), j.Data, pg, r.agent.Logs())
	}
	// The container: on the capstan network, its port on 127.0.0.1 only,
	// restarted unless stopped, the memory limit, the password not in its
	// arguments.
	insp, err := r.docker.ContainerInspect(context.Background(), "capstan-db-"+name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := insp.Container.HostConfig
	if string(hc.NetworkMode) != "capstan" || hc.RestartPolicy.Name != "unless-stopped" || hc.Memory != 256<<20 {
		t.Errorf("container: network %s, restart %s, memory %d", hc.NetworkMode, hc.RestartPolicy.Name, hc.Memory)
	}
	for _, bs := range insp.Container.NetworkSettings.Ports {
		for _, b := range bs {
			if b.HostIP.String() != "127.0.0.1" {
				t.Errorf("port published on %s", b.HostIP)
			}
		}
	}

	// A name in use is refused as bad input.
	resp = r.Post(t, "/api/v1/databases", r.Token, map[string]any{"name": name, "server_id": r.serverID, "engine": "postgres",
		"version": "15", "database": "app"})
	expectStatus(t, resp, http.StatusUnprocessableEntity)
	if n := len(r.listDatabases(t)); n != 1 {
		t.Fatalf("%d instances after a name clash, want 1", n)
	}

	var w struct {
		RowsAffected *int64 `json:"rows_affected"`
	}
	r.call(t, pg.ID, "query", map[string]any{"sql": "CREATE TABLE kept (v text)", "readonly": false}).result(t, &w)
	r.call(t, pg.ID, "query", map[string]any{"sql": "INSERT INTO kept VALUES ('survives')", "readonly": false}).result(t, &w)
	var q struct {
		Rows [][]any `json:"rows"`
	}
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT current_database(), current_user", "readonly": false}).result(t, &q)
	if len(q.Rows) != 1 || q.Rows[0][0] != "app" || q.Rows[0][1] != "postgres" {
		t.Fatalf("current database and user: %+v", q.Rows)
	}

	// The connection read: from the server and from an app container.
	resp = r.Get(t, "/api/v1/databases/"+pg.ID+"/connection", r.Token)
	var conn struct {
		Logins []struct {
			Password string `json:"password"`
			URL      string `json:"url"`
			AppURL   string `json:"app_url"`
		} `json:"logins"`
	}
	expectJSON(t, resp, http.StatusOK, &conn)
	if len(conn.Logins) != 1 || len(conn.Logins[0].Password) < 32 ||
		!strings.Contains(conn.Logins[0].URL, fmt.Sprintf("@127.0.0.1:%d/app", r.instancePort(t, pg.ID))) ||
		!strings.Contains(conn.Logins[0].AppURL, "@capstan-db-"+name+":5432/app") {
		t.Fatalf("connection: %s", resp.Body)
	}
	if strings.Contains(strings.Join(insp.Container.Args, " "), conn.Logins[0].Password) {
		t.Error("the admin password is in the container's arguments")
	}

	// Stop, start: the data is still there.
	r.control(t, pg.ID, "stop")
	if got := r.instance(t, pg.ID).State; got != "stopped" {
		t.Fatalf("after stop: %s", got)
	}
	expectStatus(t, r.Post(t, "/api/v1/databases/"+pg.ID+"/query", r.Token, map[string]any{"sql": "SELECT 1"}), http.StatusConflict)
	r.control(t, pg.ID, "start")
	r.call(t, pg.ID, "query", map[string]any{"sql": "SELECT v FROM kept"}).result(t, &q)
	if len(q.Rows) != 1 || q.Rows[0][0] != "survives" {
		t.Fatalf("after stop and start: %+v", q.Rows)
	}
	r.control(t, pg.ID, "restart")
	if got := r.instance(t, pg.ID); got.State != "ready" {
		t.Fatalf("after restart: %+v", got)
	}

	// Control is for managed instances only, with a known action.
	resp = r.Post(t, "/api/v1/databases/"+pg.ID+"/control", r.Token, map[string]any{"action": "explode"})
	expectStatus(t, resp, http.StatusUnprocessableEntity)

	// Delete keeps the volume; deleting a second instance with purge
	// removes it.
	if kept := r.remove(t, pg.ID, false); !kept || !r.volumeExists(t, pg.ID) {
		t.Fatalf("delete without purge: kept %t, volume exists %t", kept, r.volumeExists(t, pg.ID))
	}
	if _, err := r.docker.ContainerInspect(context.Background(), "capstan-db-"+name, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("the container is still there: %v", err)
	}
	_, _ = r.docker.VolumeRemove(context.Background(), "capstan-db-"+pg.ID, client.VolumeRemoveOptions{})

	pg2, j := r.create(t, map[string]any{"name": name, "engine": "postgres", "version": "15", "database": "other"})
	if j.Status != "succeeded" || pg2.State != "ready" {
		t.Fatalf("second instance: %s %s: %+v", j.Status, deref(j.Error), pg2)
	}
	if kept := r.remove(t, pg2.ID, true); kept || r.volumeExists(t, pg2.ID) {
		t.Fatalf("delete with purge: kept %t, volume exists %t", kept, r.volumeExists(t, pg2.ID))
	}
}

// TestManagedMariaDBAndRedis creates a managed MariaDB and Redis through
// a real agent, queries the one and browses the other.
func TestManagedMariaDBAndRedis(t *testing.T) {
	r := newManagedRig(t, store.SQLite)
	my, j := r.create(t, map[string]any{"name": "maria-" + r.run, "engine": "mariadb", "version": "10.11", "database": "shop"})
	if j.Status != "succeeded" || my.State != "ready" || !strings.Contains(my.ServerVersion, "MariaDB") {
		t.Fatalf("mariadb: %s %s %s: %+v\nagent log:\n%s", j.Status, deref(j.Error), j.Data, my, r.agent.Logs())
	}
	var q struct {
		Rows [][]any `json:"rows"`
	}
	r.call(t, my.ID, "query", map[string]any{"sql": "SELECT DATABASE()"}).result(t, &q)
	if len(q.Rows) != 1 || q.Rows[0][0] != "shop" {
		t.Fatalf("mariadb database: %+v", q.Rows)
	}

	rd, j := r.create(t, map[string]any{"name": "redis-" + r.run, "engine": "redis", "version": "7.2"})
	if j.Status != "succeeded" || rd.State != "ready" {
		t.Fatalf("redis: %s %s %s: %+v\nagent log:\n%s", j.Status, deref(j.Error), j.Data, rd, r.agent.Logs())
	}
	insp, err := r.docker.ContainerInspect(context.Background(), "capstan-db-redis-"+r.run, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range insp.Container.Config.Env {
		if strings.HasPrefix(e, "REDIS_PASSWORD") {
			t.Errorf("redis password in the environment: %s", e)
		}
	}
	if strings.Contains(strings.Join(insp.Container.Args, " "), "requirepass") {
		t.Errorf("redis password on the command line: %v", insp.Container.Args)
	}
	var kv struct {
		Info map[string]map[string]string `json:"info"`
	}
	r.call(t, rd.ID, "kv", map[string]any{"action": "info"}).result(t, &kv)
	if kv.Info["server"]["redis_version"] == "" {
		t.Fatalf("redis info: %+v", kv.Info)
	}
	r.remove(t, my.ID, true)
	r.remove(t, rd.ID, true)
}

func (r *managedRig) listDatabases(t *testing.T) []DatabaseInfo {
	t.Helper()
	var out struct {
		Databases []DatabaseInfo `json:"databases"`
	}
	expectJSON(t, r.Get(t, "/api/v1/databases", r.Token), http.StatusOK, &out)
	return out.Databases
}

func (r *managedRig) instancePort(t *testing.T, id string) int {
	t.Helper()
	var out struct {
		Port int `json:"port"`
	}
	expectJSON(t, r.Get(t, "/api/v1/databases/"+id, r.Token), http.StatusOK, &out)
	return out.Port
}

// TestManagedRedisLoginsSurviveRestart: the logins of a managed Redis
// made through the API are in its ACL file, so a restart through the API
// keeps them: a created login still authenticates, a rotated password is
// the one that works, and a deleted login stays deleted.
func TestManagedRedisLoginsSurviveRestart(t *testing.T) {
	r := newManagedRig(t, store.SQLite)
	rd, j := r.create(t, map[string]any{"name": "keep-" + r.run, "engine": "redis", "version": "7.2"})
	if j.Status != "succeeded" || rd.State != "ready" {
		t.Fatalf("redis: %s %s %s: %+v\nagent log:\n%s", j.Status, deref(j.Error), j.Data, rd, r.agent.Logs())
	}
	addr := fmt.Sprintf("127.0.0.1:%d", r.instancePort(t, rd.ID))
	auth := func(user, password string) error {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, Protocol: 2, DisableIdentity: true,
			MaxRetries: -1})
		defer c.Close()
		return c.Ping(t.Context()).Err()
	}
	restart := func() {
		t.Helper()
		r.control(t, rd.ID, "restart")
		if in := r.instance(t, rd.ID); in.State != "ready" {
			t.Fatalf("after restart: %+v", in)
		}
	}
	login := func(name string) LoginSecret {
		t.Helper()
		s, j := r.login(t, rd.ID, map[string]any{"username": name, "key_pattern": name + ":*", "access": "readwrite"})
		if j.Status != "succeeded" {
			t.Fatalf("login %s: %s %s", name, deref(j.Error), j.Data)
		}
		return s
	}
	kept, rotated, dropped := login("kept"), login("rotated"), login("dropped")
	restart()
	if err := auth("kept", kept.Password); err != nil {
		t.Fatalf("a login after restart: %v\nagent log:\n%s", err, r.agent.Logs())
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Username: "kept", Password: kept.Password, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	if err := c.Set(t.Context(), "kept:1", "v", 0).Err(); err != nil {
		t.Errorf("the login's rules after restart (SET in its pattern): %v", err)
	}
	if err := c.Set(t.Context(), "other:1", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("the login's rules after restart (SET outside its pattern): %v", err)
	}

	nw, j := r.rotate(t, rd.ID, rotated.Login.CredentialID)
	if j.Status != "succeeded" {
		t.Fatalf("rotate: %s", deref(j.Error))
	}
	if j := r.delJob(t, rd.ID, "/users/dropped"); j.Status != "succeeded" {
		t.Fatalf("drop: %s", deref(j.Error))
	}
	restart()
	if err := auth("rotated", nw.Password); err != nil {
		t.Errorf("the rotated password after restart: %v", err)
	}
	if err := auth("rotated", rotated.Password); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("the old password after rotate and restart: %v", err)
	}
	if err := auth("dropped", dropped.Password); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a deleted login after restart: %v", err)
	}
	if err := auth("kept", kept.Password); err != nil {
		t.Errorf("a login after a second restart: %v", err)
	}
	// The admin login is the one the instance was made with.
	var kv struct {
		ACLUsers []struct {
			Name string `json:"name"`
		} `json:"acl_users"`
	}
	r.call(t, rd.ID, "kv", map[string]any{"action": "acl_list"}).result(t, &kv)
	var names []string
	for _, u := range kv.ACLUsers {
		names = append(names, u.Name)
	}
	if got := strings.Join(names, " "); got != "default kept rotated" {
		t.Errorf("ACL users after restarts: %s", got)
	}
	r.remove(t, rd.ID, true)
}
