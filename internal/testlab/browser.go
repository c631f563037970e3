package testlab

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Browser tests of the web console run a Node.js script (playwright-core,
// from the console's own packages) that drives Debian's Chromium headless.

// Chromium returns the Chromium binary: CAPSTAN_TEST_CHROMIUM (written by
// scripts/testenv.sh), else chromium on PATH.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CAPSTAN_TEST_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		Require(t, "chromium (as root: apt-get install chromium, or scripts/testenv.sh up)")
	}
	return p
}

// ConsoleScripts returns node and the web console's directory, with its
// packages installed (make web-deps), for running its browser scripts.
func ConsoleScripts(t testing.TB, webDir string) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		Require(t, "node (Node.js 20 or later: apt-get install nodejs npm)")
	}
	dir, err = filepath.Abs(webDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		Require(t, "the web console's packages in "+filepath.Join(dir, "node_modules")+" (make web-deps)")
	}
	return node, dir
}
