// Package e2e tests the capstan binary as it runs in production: built once
// with go build, started as a process on a free loopback port, and driven
// over real HTTP and through its CLI. The harness (harness_test.go) is
// shared by every suite.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// buildVersion is stamped into the binary under test; the platform endpoint
// must report it.
const buildVersion = "e2e-test"

// capstanBin is the path of the binary built by TestMain.
var capstanBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(s3PutEnv); spec != "" {
		// The test binary run as the upload half of a shell pipeline.
		os.Exit(s3Put(spec))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "capstan-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	capstanBin = filepath.Join(dir, "capstan")
	// go test puts its own go first on PATH.
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-X main.version="+buildVersion,
		"-o", capstanBin, "github.com/capstan-dev/capstan/cmd/capstan")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building capstan:", err)
		return 1
	}
	return m.Run()
}
