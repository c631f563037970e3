// Package managed runs the managed database instances on the server's
// Docker engine: db.create, db.control and db.remove, each instance one
// container with one volume, and the ACL file of Redis/Valkey instances.
package managed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// Managed runs the managed-instance job types (db.create, db.control,
// db.remove) on the server's Docker engine. Each instance is one
// container with one named volume, on the user-defined bridge network
// agentproto.DBNetwork, its engine port published on 127.0.0.1 on a port
// the agent picks once (so it stays the same across restarts).
//
// The admin password reaches the container as the official images'
// environment (POSTGRES_PASSWORD, MARIADB_ROOT_PASSWORD,
// MYSQL_ROOT_PASSWORD); for Redis and Valkey it is written to a
// configuration file in the instance's volume (requirepass) and, as the
// default user's SHA-256, to its ACL file there (see redisACL), so it is
// never on the server's command line or in the container's arguments.
type Managed struct {
	// Host is the Docker API address; "" means the environment's default.
	Host string

	docker dockerc.Lazy
}

// Register adds the managed-instance job types to r.
func (m *Managed) Register(r agent.Registry) {
	engine.Handle(r, agentproto.DBCreate, m.create)
	engine.Handle(r, agentproto.DBControl, m.control)
	engine.Handle(r, agentproto.DBRemove, m.remove)
}

func (m *Managed) Client() (*client.Client, error) {
	return m.docker.Client(m.Host)
}

// EngineSpec is how an engine's official image is run.
type EngineSpec struct {
	Port    int
	DataDir string
}

var EngineSpecs = map[string]EngineSpec{
	agentproto.EnginePostgres: {5432, "/var/lib/postgresql/data"},
	agentproto.EngineMySQL:    {3306, "/var/lib/mysql"},
	agentproto.EngineMariaDB:  {3306, "/var/lib/mysql"},
	agentproto.EngineRedis:    {6379, "/data"},
	agentproto.EngineValkey:   {6379, "/data"},
}

// RedisConf is the configuration file of a Redis/Valkey instance, in its
// volume.
const RedisConf = "capstan-redis.conf"

// redisACL is the ACL file of a Redis/Valkey instance, in its volume
// next to RedisConf (aclfile): the server loads its users from it as it
// starts, and the logins made through Capstan are written there (ACL
// SAVE) as they change, so that they outlive a restart.
const redisACL = "capstan-users.acl"

// StopSeconds is how long an engine gets to shut down cleanly.
const StopSeconds = 60

// containerEnv returns the official image's environment for the admin
// login and the initial database.
func containerEnv(p agentproto.DBCreatePayload, password string) []string {
	switch p.Engine {
	case agentproto.EnginePostgres:
		return []string{"POSTGRES_PASSWORD=" + password, "POSTGRES_USER=" + p.Username, "POSTGRES_DB=" + p.Database}
	case agentproto.EngineMariaDB:
		return []string{"MARIADB_ROOT_PASSWORD=" + password, "MARIADB_DATABASE=" + p.Database}
	case agentproto.EngineMySQL:
		return []string{"MYSQL_ROOT_PASSWORD=" + password, "MYSQL_DATABASE=" + p.Database}
	}
	return nil
}

// redisConfig is the configuration of a Redis/Valkey instance: its
// password, data kept in an append-only file in the volume, users in
// the ACL file there. With an ACL file the server takes the default
// user's password from that file and ignores requirepass, which stays
// as a fallback should the aclfile line ever be removed.
func redisConfig(password, dataDir string) []byte {
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(password)
	return []byte("bind * -::*\nprotected-mode no\nport 6379\ndir " + dataDir + "\nappendonly yes\nrequirepass \"" + q + "\"\n" +
		aclFileLine(dataDir))
}

// aclFileLine is the configuration's line naming the ACL file.
func aclFileLine(dataDir string) string {
	return "aclfile " + dataDir + "/" + redisACL + "\n"
}

// redisAdminACL is an ACL file holding the admin login alone: the
// default user, on, with the password's SHA-256 (as the server keeps it)
// and every key, channel and command. The server refuses to start on a
// missing ACL file, and on an empty one it would make the default user
// without a password.
func redisAdminACL(password string) []byte {
	sum := sha256.Sum256([]byte(password))
	return []byte("user default on #" + hex.EncodeToString(sum[:]) + " ~* &* +@all\n")
}

func checkCreate(p agentproto.DBCreatePayload) (EngineSpec, error) {
	spec, ok := EngineSpecs[p.Engine]
	switch {
	case !ok:
		return spec, fmt.Errorf("invalid db.create payload: unknown engine %q", p.Engine)
	case p.InstanceID == "" || p.Image == "" || p.ContainerName == "" || p.Volume == "" || p.Network == "":
		return spec, errors.New("invalid db.create payload: instance_id, image, container_name, volume and network are required")
	case p.MemoryLimitBytes < 0:
		return spec, fmt.Errorf("invalid db.create payload: memory_limit_bytes %d", p.MemoryLimitBytes)
	case agentproto.EngineKind(p.Engine) == agentproto.EngineKindSQL && p.Database == "":
		return spec, errors.New("invalid db.create payload: a SQL engine needs its initial database")
	}
	return spec, nil
}

func (m *Managed) create(ctx context.Context, c agent.Call[agentproto.DBCreatePayload]) (agentproto.DBCreateResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	spec, err := checkCreate(p)
	if err != nil {
		return agentproto.DBCreateResult{}, err
	}
	password := secrets[agentproto.SecretDBPassword]
	if password == "" {
		return agentproto.DBCreateResult{}, errors.New("the job has no db_password secret")
	}
	cli, err := m.Client()
	if err != nil {
		return agentproto.DBCreateResult{}, err
	}
	netRef, err := dockerc.EnsureNetwork(ctx, cli, p.Network, events)
	if err != nil {
		return agentproto.DBCreateResult{}, err
	}
	p.Network = netRef
	labels := map[string]string{agentproto.LabelDBInstance: p.InstanceID, agentproto.LabelDBEngine: p.Engine}
	if _, err := cli.VolumeInspect(ctx, p.Volume, client.VolumeInspectOptions{}); cerrdefs.IsNotFound(err) {
		if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: p.Volume, Labels: labels}); err != nil {
			return agentproto.DBCreateResult{}, fmt.Errorf("creating volume %s: %w", p.Volume, err)
		}
		events.Emit(agentproto.LevelInfo, "created volume "+p.Volume, nil)
	} else if err != nil {
		return agentproto.DBCreateResult{}, fmt.Errorf("inspecting volume %s: %w", p.Volume, err)
	} else {
		events.Emit(agentproto.LevelInfo, "volume "+p.Volume+" exists; reusing it", nil)
	}
	id, err := ExistingContainer(ctx, cli, p.ContainerName, p.InstanceID)
	if err != nil {
		return agentproto.DBCreateResult{}, err
	}
	if id == "" {
		if id, err = createContainer(ctx, cli, p, spec, password, labels, events); err != nil {
			return agentproto.DBCreateResult{}, err
		}
	} else {
		events.Emit(agentproto.LevelInfo, "container "+p.ContainerName+" exists; reusing it", nil)
		if agentproto.EngineKind(p.Engine) == agentproto.EngineKindKV {
			port, err := hostPort(ctx, cli, id, spec.Port)
			if err != nil {
				return agentproto.DBCreateResult{}, err
			}
			target := agentproto.DBTarget{InstanceID: p.InstanceID, Engine: p.Engine, Host: "127.0.0.1", Port: port, Username: p.Username}
			if _, err := EnsureACLFile(ctx, cli, id, spec.DataDir, target, password, events); err != nil {
				events.Emit(agentproto.LevelWarn, "giving the instance its ACL file: "+err.Error(), nil)
			}
		}
	}
	if _, err := cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return agentproto.DBCreateResult{}, fmt.Errorf("starting container %s: %w", p.ContainerName, err)
	}
	port, err := hostPort(ctx, cli, id, spec.Port)
	if err != nil {
		return agentproto.DBCreateResult{}, err
	}
	target := agentproto.DBTarget{InstanceID: p.InstanceID, Engine: p.Engine, Host: "127.0.0.1", Port: port,
		Username: p.Username, Database: p.Database}
	version, err := waitReady(ctx, cli, id, target, password, events)
	if err != nil {
		return agentproto.DBCreateResult{}, err
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("%s %s accepts connections on 127.0.0.1:%d", p.Engine, version, port),
		map[string]any{"container_id": id, "host_port": port})
	return agentproto.DBCreateResult{ContainerID: id, HostPort: port, ServerVersion: version}, nil
}

// ExistingContainer returns the id of the instance's container, "" if
// there is none; a container of that name that is not the instance's is
// an error.
func ExistingContainer(ctx context.Context, cli *client.Client, name, instanceID string) (string, error) {
	insp, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("inspecting container %s: %w", name, err)
	}
	if insp.Container.Config == nil || insp.Container.Config.Labels[agentproto.LabelDBInstance] != instanceID {
		return "", fmt.Errorf("a container named %s exists and is not this instance's", name)
	}
	return insp.Container.ID, nil
}

func createContainer(ctx context.Context, cli *client.Client, p agentproto.DBCreatePayload, spec EngineSpec, password string,
	labels map[string]string, events agent.EventSink) (string, error) {
	port, _ := network.PortFrom(uint16(spec.Port), network.TCP)
	stop := StopSeconds
	cfg := &container.Config{Image: p.Image, Env: containerEnv(p, password), Labels: labels,
		ExposedPorts: network.PortSet{port: {}}, StopTimeout: &stop}
	kv := agentproto.EngineKind(p.Engine) == agentproto.EngineKindKV
	if kv {
		server := "redis-server"
		if p.Engine == agentproto.EngineValkey {
			server = "valkey-server"
		}
		cfg.Cmd = []string{server, spec.DataDir + "/" + RedisConf}
	}
	hostPort, err := agent.FreeLoopbackPort()
	if err != nil {
		return "", fmt.Errorf("choosing a loopback port: %w", err)
	}
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(p.Network),
		PortBindings:  network.PortMap{port: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hostPort)}}},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		Resources:     container.Resources{Memory: p.MemoryLimitBytes},
		Mounts:        []mount.Mount{{Type: mount.TypeVolume, Source: p.Volume, Target: spec.DataDir}},
	}
	opts := client.ContainerCreateOptions{Name: p.ContainerName, Config: cfg, HostConfig: hc}
	res, err := cli.ContainerCreate(ctx, opts)
	if cerrdefs.IsNotFound(err) {
		events.Emit(agentproto.LevelInfo, "pulling image "+p.Image, nil)
		pull, perr := cli.ImagePull(ctx, p.Image, client.ImagePullOptions{})
		if perr == nil {
			perr = pull.Wait(ctx)
		}
		if perr != nil {
			return "", fmt.Errorf("image %s is not on the server and could not be pulled: %w", p.Image, perr)
		}
		res, err = cli.ContainerCreate(ctx, opts)
	}
	if err != nil {
		return "", fmt.Errorf("creating container %s: %w", p.ContainerName, err)
	}
	for _, w := range res.Warnings {
		events.Emit(agentproto.LevelWarn, "the engine warns: "+w, nil)
	}
	if kv {
		acl, err := volumeACL(ctx, cli, res.ID, spec.DataDir, password, events)
		if err != nil {
			return "", err
		}
		if err := dockerc.CopyFile(ctx, cli, res.ID, spec.DataDir, redisACL, acl, nil); err != nil {
			return "", err
		}
		if err := dockerc.CopyFile(ctx, cli, res.ID, spec.DataDir, RedisConf, redisConfig(password, spec.DataDir), nil); err != nil {
			return "", err
		}
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("created container %s of image %s, port %d on 127.0.0.1:%d", p.ContainerName,
		p.Image, spec.Port, hostPort), map[string]any{"container_id": res.ID, "memory_limit_bytes": p.MemoryLimitBytes})
	return res.ID, nil
}

// hostPort returns the loopback port the container's port is published
// on.
func hostPort(ctx context.Context, cli *client.Client, id string, containerPort int) (int, error) {
	insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return 0, fmt.Errorf("inspecting container: %w", err)
	}
	port, _ := network.PortFrom(uint16(containerPort), network.TCP)
	if hc := insp.Container.HostConfig; hc != nil {
		for _, b := range hc.PortBindings[port] {
			if n, err := strconv.Atoi(b.HostPort); err == nil && n > 0 {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("the container publishes no host port for %d", containerPort)
}

// waitReady connects as target until the engine accepts the login (on
// the initial database for SQL engines), the container stops running, or
// ctx (the job's deadline) ends.
func waitReady(ctx context.Context, cli *client.Client, id string, target agentproto.DBTarget, password string, events agent.EventSink) (string, error) {
	var last error
	said := false
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := engine.Connect(attempt, target, password, "")
		cancel()
		if err == nil {
			v := conn.ServerVersion()
			l, ok := conn.(interface{ Loading() bool })
			loading := ok && l.Loading()
			conn.Close()
			if !loading {
				return v, nil
			}
			err = errors.New("the server is loading its dataset")
		}
		last = err
		if !said {
			events.Emit(agentproto.LevelInfo, "waiting for the engine to accept connections", nil)
			said = true
		}
		insp, ierr := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if ierr == nil && insp.Container.State != nil && !insp.Container.State.Running && !insp.Container.State.Restarting {
			return "", fmt.Errorf("the container is %s (exit code %d) before the engine accepted connections: %v",
				insp.Container.State.Status, insp.Container.State.ExitCode, last)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the engine did not accept connections before the job's deadline: %v", last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (m *Managed) control(ctx context.Context, c agent.Call[agentproto.DBControlPayload]) (agentproto.DBControlResult, error) {
	p, secrets, events := c.Payload, c.Secrets, c.Events
	if p.ContainerName == "" {
		return agentproto.DBControlResult{}, errors.New("invalid db.control payload: no container_name")
	}
	cli, err := m.Client()
	if err != nil {
		return agentproto.DBControlResult{}, err
	}
	id, err := ExistingContainer(ctx, cli, p.ContainerName, p.Target.InstanceID)
	if err != nil {
		return agentproto.DBControlResult{}, err
	}
	if id == "" {
		return agentproto.DBControlResult{}, fmt.Errorf("the instance's container %s does not exist", p.ContainerName)
	}
	if spec, ok := EngineSpecs[p.Target.Engine]; ok && agentproto.EngineKind(p.Target.Engine) == agentproto.EngineKindKV {
		// Before a stop or restart, while the server still holds
		// its users. A server that does not answer is restarted all
		// the same (its file is made the next time).
		if _, err := EnsureACLFile(ctx, cli, id, spec.DataDir, p.Target, secrets[agentproto.SecretDBPassword], events); err != nil {
			events.Emit(agentproto.LevelWarn, "giving the instance its ACL file: "+err.Error(), nil)
		}
	}
	stop := StopSeconds
	switch p.Action {
	case agentproto.DBControlStop:
		if _, err := cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &stop}); err != nil {
			return agentproto.DBControlResult{}, fmt.Errorf("stopping %s: %w", p.ContainerName, err)
		}
		events.Emit(agentproto.LevelInfo, "stopped "+p.ContainerName, nil)
		return agentproto.DBControlResult{Action: p.Action}, nil
	case agentproto.DBControlStart:
		_, err = cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	case agentproto.DBControlRestart:
		_, err = cli.ContainerRestart(ctx, id, client.ContainerRestartOptions{Timeout: &stop})
	default:
		return agentproto.DBControlResult{}, fmt.Errorf("invalid db.control payload: action %q (start, stop or restart)", p.Action)
	}
	if err != nil {
		return agentproto.DBControlResult{}, fmt.Errorf("%s %s: %w", p.Action, p.ContainerName, err)
	}
	version, err := waitReady(ctx, cli, id, p.Target, secrets[agentproto.SecretDBPassword], events)
	if err != nil {
		return agentproto.DBControlResult{}, err
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("%s: %s accepts connections", p.Action, p.ContainerName), nil)
	return agentproto.DBControlResult{Action: p.Action, Running: true, ServerVersion: version}, nil
}

func (m *Managed) remove(ctx context.Context, c agent.Call[agentproto.DBRemovePayload]) (agentproto.DBRemoveResult, error) {
	p, events := c.Payload, c.Events
	if p.ContainerName == "" || p.Volume == "" || p.InstanceID == "" {
		return agentproto.DBRemoveResult{}, errors.New("invalid db.remove payload: instance_id, container_name and volume are required")
	}
	cli, err := m.Client()
	if err != nil {
		return agentproto.DBRemoveResult{}, err
	}
	var res agentproto.DBRemoveResult
	id, err := ExistingContainer(ctx, cli, p.ContainerName, p.InstanceID)
	if err != nil {
		return agentproto.DBRemoveResult{}, err
	}
	if id != "" {
		stop := StopSeconds
		if _, err := cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &stop}); err != nil && !cerrdefs.IsNotFound(err) {
			return agentproto.DBRemoveResult{}, fmt.Errorf("stopping %s: %w", p.ContainerName, err)
		}
		if _, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return agentproto.DBRemoveResult{}, fmt.Errorf("removing %s: %w", p.ContainerName, err)
		}
		res.ContainerRemoved = true
		events.Emit(agentproto.LevelInfo, "removed container "+p.ContainerName, nil)
	}
	if !p.Purge {
		events.Emit(agentproto.LevelInfo, "kept volume "+p.Volume, nil)
		return res, nil
	}
	insp, err := cli.VolumeInspect(ctx, p.Volume, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		res.VolumeRemoved = true // by an earlier try
		return res, nil
	}
	if err != nil {
		return agentproto.DBRemoveResult{}, fmt.Errorf("inspecting volume %s: %w", p.Volume, err)
	}
	if insp.Volume.Labels[agentproto.LabelDBInstance] != p.InstanceID {
		return agentproto.DBRemoveResult{}, fmt.Errorf("volume %s is not this instance's; left alone", p.Volume)
	}
	if _, err := cli.VolumeRemove(ctx, p.Volume, client.VolumeRemoveOptions{}); err != nil {
		return agentproto.DBRemoveResult{}, fmt.Errorf("removing volume %s: %w", p.Volume, err)
	}
	res.VolumeRemoved = true
	events.Emit(agentproto.LevelInfo, "removed volume "+p.Volume, nil)
	return res, nil
}
