package agent_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentDependencies keeps the control plane's server side and every
// database driver out of the agent binary.
func TestAgentDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
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
		"github.com/jackc/pgx",
		"github.com/lib/pq",
		"modernc.org/sqlite",
		"github.com/mattn/go-sqlite3",
		"github.com/go-sql-driver/mysql",
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
