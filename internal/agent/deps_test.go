package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentDependencies keeps the control plane's server side and the
// store's database drivers out of the agent binary. The agent connects to
// database instances itself, so it links the engines' clients (pgx,
// go-sql-driver/mysql, go-redis), but only through internal/agent/engine.
func TestAgentDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found on PATH (go test puts it there): %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/capstan-dev/capstan/cmd/capstan-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/capstan-dev/capstan/internal/store",
		"github.com/capstan-dev/capstan/internal/httpapi",
		"github.com/capstan-dev/capstan/internal/agentapi",
		"github.com/capstan-dev/capstan/internal/auth",
		"github.com/capstan-dev/capstan/internal/testlab",
		"github.com/jackc/pgx/v5/stdlib",
		"github.com/lib/pq",
		"modernc.org/sqlite",
		"github.com/mattn/go-sqlite3",
		"github.com/jmoiron/sqlx",
		"github.com/pressly/goose",
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		t.Fatal("go list printed no packages")
	}
	for _, p := range pkgs {
		for _, f := range forbidden {
			if p == f || strings.HasPrefix(p, f+"/") {
				t.Errorf("capstan-agent links %s (forbidden: %s)", p, f)
			}
		}
	}
}

// TestEngineClientsOnlyInEngine keeps the database engines' clients in
// the one package that connects to instances; the console, managed
// instances, dumps, backups and metrics reach the engines through it.
func TestEngineClientsOnlyInEngine(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found on PATH (go test puts it there): %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/capstan-dev/capstan/cmd/capstan-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	clients := []string{"github.com/jackc/pgx/v5", "github.com/go-sql-driver/mysql", "github.com/redis/go-redis/v9"}
	const module, owner = "github.com/capstan-dev/capstan/", "github.com/capstan-dev/capstan/internal/agent/engine"
	linked := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		for _, imp := range f[1:] {
			for _, c := range clients {
				if imp == c || strings.HasPrefix(imp, c+"/") {
					linked[c] = true
					if f[0] != owner {
						t.Errorf("%s imports %s; only %s may", f[0], imp, owner)
					}
				}
			}
		}
	}
	for _, c := range clients {
		if !linked[c] {
			t.Errorf("%s does not import %s", owner, c)
		}
	}
}
