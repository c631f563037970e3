package testlab_test

import (
	"os/exec"
	"strings"
	"testing"
)

const testlabPath = "github.com/capstan-dev/capstan/internal/testlab"

// TestOnlyTestsImportTestlab keeps the test lab out of every binary and
// every package that is not a test helper: only test files and packages
// named ...test (storetest, agenttest) may import it.
func TestOnlyTestsImportTestlab(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found on PATH (go test puts it there): %v", err)
	}
	// Imports of non-test files only.
	out, err := exec.Command(goTool, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		"github.com/capstan-dev/capstan/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg, imports := f[0], f[1:]
		checked++
		if pkg == testlabPath || strings.HasSuffix(pkg, "test") {
			continue
		}
		for _, imp := range imports {
			if imp == testlabPath {
				t.Errorf("%s imports %s outside its tests", pkg, testlabPath)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("go list listed %d packages:\n%s", checked, out)
	}

	// No binary links the lab, nor a test helper package, however
	// indirectly.
	for _, bin := range []string{"cmd/capstan", "cmd/capstan-agent"} {
		out, err := exec.Command(goTool, "list", "-deps", "github.com/capstan-dev/capstan/"+bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", bin, err, out)
		}
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "github.com/capstan-dev/capstan/") && (p == testlabPath || strings.HasSuffix(p, "test")) {
				t.Errorf("%s links %s", bin, p)
			}
		}
	}
}
