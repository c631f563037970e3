package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryPackage: docs/architecture.md says what each
// package under internal/ owns, so a new package fails this test until
// the guide names it (as `internal/…`), and a package removed must leave
// it too.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	packages := map[string]bool{}
	err = filepath.WalkDir("../../internal", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			packages[filepath.ToSlash(strings.TrimPrefix(filepath.Dir(path), "../../"))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) < 40 {
		t.Fatalf("found %d packages under internal/; the walk is broken", len(packages))
	}
	for p := range packages {
		if !strings.Contains(string(doc), "`"+p+"`") {
			t.Errorf("docs/architecture.md does not name %s: say what it owns in the package table", p)
		}
	}
	for _, field := range strings.Split(string(doc), "`") {
		if strings.HasPrefix(field, "internal/") && !strings.ContainsAny(field, " …") && !packages[field] {
			t.Errorf("docs/architecture.md names %s, which is not a package", field)
		}
	}
}
