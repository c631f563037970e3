package managed

import (
	"strings"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestContainerEnv: each engine gets its official image's environment
// for the admin password and initial database; Redis gets none (its
// password is in its configuration file).
func TestContainerEnv(t *testing.T) {
	p := agentproto.DBCreatePayload{Username: "postgres", Database: "app"}
	for engine, want := range map[string]string{
		agentproto.EnginePostgres: "POSTGRES_PASSWORD=pw POSTGRES_USER=postgres POSTGRES_DB=app",
		agentproto.EngineMariaDB:  "MARIADB_ROOT_PASSWORD=pw MARIADB_DATABASE=app",
		agentproto.EngineMySQL:    "MYSQL_ROOT_PASSWORD=pw MYSQL_DATABASE=app",
		agentproto.EngineRedis:    "",
	} {
		p.Engine = engine
		if got := strings.Join(containerEnv(p, "pw"), " "); got != want {
			t.Errorf("%s: %q, want %q", engine, got, want)
		}
	}
	conf := string(redisConfig(`a"b\c`, "/data"))
	if !strings.Contains(conf, `requirepass "a\"b\\c"`+"\n") || !strings.Contains(conf, "dir /data\n") ||
		!strings.Contains(conf, "aclfile /data/capstan-users.acl\n") {
		t.Errorf("redis configuration:\n%s", conf)
	}
	// The SHA-256 of "pw", as the server keeps a password.
	const want = "user default on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~* &* +@all\n"
	if got := string(redisAdminACL("pw")); got != want {
		t.Errorf("admin ACL file: %q, want %q", got, want)
	}
}

// TestCheckCreate: a payload without what the container needs is refused
// before anything is made.
func TestCheckCreate(t *testing.T) {
	good := agentproto.DBCreatePayload{InstanceID: "db_1", Engine: agentproto.EnginePostgres, Image: "postgres:17",
		ContainerName: "capstan-db-pg", Network: agentproto.DBNetwork, Volume: "capstan-db-db_1", Database: "app", Username: "postgres"}
	if _, err := checkCreate(good); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*agentproto.DBCreatePayload){
		"engine":   func(p *agentproto.DBCreatePayload) { p.Engine = "mongodb" },
		"image":    func(p *agentproto.DBCreatePayload) { p.Image = "" },
		"volume":   func(p *agentproto.DBCreatePayload) { p.Volume = "" },
		"memory":   func(p *agentproto.DBCreatePayload) { p.MemoryLimitBytes = -1 },
		"database": func(p *agentproto.DBCreatePayload) { p.Database = "" },
	} {
		p := good
		mut(&p)
		if _, err := checkCreate(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
