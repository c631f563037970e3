package managed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstan-dev/capstan/internal/agent"
	"github.com/capstan-dev/capstan/internal/agent/dockerc"
	"github.com/capstan-dev/capstan/internal/agent/engine"
	"github.com/capstan-dev/capstan/internal/agentproto"
)

// A managed Redis/Valkey instance keeps its users in an ACL file in its
// volume (redisACL). An instance made before that has no aclfile line in
// its configuration, and its users live in the server's memory only:
// EnsureACLFile gives it the file the next time the agent starts, stops,
// restarts, re-creates or restores it. The users of the running server
// (ACL LIST, passwords as the server's hashes) are written to the file
// and the aclfile line is added to the configuration; the server reads
// the file from its next start on, and ACL SAVE writes it from then on.

// EnsureACLFile gives the instance's container id, whose volume is at
// dataDir, its ACL file if its configuration names none (see above);
// target and password reach its server. A stopped server holds no users
// any more: its file gets the admin login alone. It returns whether it
// changed the configuration. A running server whose users cannot be read
// is an error, and nothing is changed.
func EnsureACLFile(ctx context.Context, cli *client.Client, id, dataDir string, target agentproto.DBTarget, password string,
	events agent.EventSink) (bool, error) {
	mu, _ := aclFileLocks.LoadOrStore(id, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	h, conf, err := dockerc.ReadFile(ctx, cli, id, dataDir+"/"+RedisConf)
	if err != nil {
		return false, err
	}
	switch {
	case confHas(conf, "aclfile"):
		return false, nil
	case confHas(conf, "user"):
		// The server refuses an ACL file next to users in its
		// configuration; those users are kept there already.
		events.Emit(agentproto.LevelWarn, RedisConf+" defines users itself (user lines): the instance keeps them there and gets no "+
			redisACL, nil)
		return false, nil
	case password == "":
		return false, errors.New("the job has no db_password secret")
	}
	insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return false, fmt.Errorf("inspecting the instance's container: %w", err)
	}
	acl, users := redisAdminACL(password), 1
	if st := insp.Container.State; st != nil && (st.Running || st.Restarting) {
		if acl, users, err = runningACL(ctx, target, password); err != nil {
			return false, fmt.Errorf("reading the users of the running server, to keep them in %s: %w", redisACL, err)
		}
	}
	if err := dockerc.CopyFile(ctx, cli, id, dataDir, redisACL, acl, h); err != nil {
		return false, err
	}
	if len(conf) > 0 && conf[len(conf)-1] != '\n' {
		conf = append(conf, '\n')
	}
	if err := dockerc.CopyFile(ctx, cli, id, dataDir, RedisConf, append(conf, aclFileLine(dataDir)...), h); err != nil {
		return false, err
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("the instance keeps its users (%d) in %s from its next start on", users, redisACL), nil)
	return true, nil
}

// volumeACL is the ACL file of a new container of a Redis/Valkey
// instance: the one its volume holds, when the container is made anew on
// a volume kept from an earlier one, with its users and the admin
// login's password set to password; otherwise the admin login alone.
func volumeACL(ctx context.Context, cli *client.Client, id, dataDir, password string, events agent.EventSink) ([]byte, error) {
	_, acl, err := dockerc.ReadFile(ctx, cli, id, dataDir+"/"+redisACL)
	if cerrdefs.IsNotFound(err) {
		return redisAdminACL(password), nil
	}
	if err != nil {
		return nil, err
	}
	lines := []string{strings.TrimSuffix(string(redisAdminACL(password)), "\n")}
	for l := range strings.SplitSeq(string(acl), "\n") {
		if l != "" && !strings.HasPrefix(l, "user default ") {
			lines = append(lines, l)
		}
	}
	events.Emit(agentproto.LevelInfo, fmt.Sprintf("the volume keeps %d users besides default in %s", len(lines)-1, redisACL), nil)
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

// aclFileLocks holds a mutex by container: two jobs never write one
// instance's ACL file at once.
var aclFileLocks sync.Map

// runningACL is the running server's users as an ACL file, and how many
// they are.
func runningACL(ctx context.Context, target agentproto.DBTarget, password string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := engine.KVAdmin(ctx, target, password)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	lines, err := c.ACLList(ctx)
	if err != nil {
		return nil, 0, err
	}
	var b strings.Builder
	for _, l := range lines {
		if !strings.HasPrefix(l, "user ") {
			return nil, 0, fmt.Errorf("unexpected ACL LIST line %.40q", l)
		}
		b.WriteString(l + "\n")
	}
	if len(lines) == 0 {
		return nil, 0, errors.New("ACL LIST gave no users")
	}
	return []byte(b.String()), len(lines), nil
}

// confHas says whether a Redis configuration has a directive.
func confHas(conf []byte, directive string) bool {
	for line := range strings.SplitSeq(string(conf), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.EqualFold(f[0], directive) {
			return true
		}
	}
	return false
}
