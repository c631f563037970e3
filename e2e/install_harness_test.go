package e2e

// The throwaway systemd hosts of the installer tests come from the test
// lab (testlab.BootHost): a cached Debian tree booted with systemd-nspawn
// on a tmpfs overlay, sharing the host's network so that 127.0.0.1 inside
// reaches the control plane under test.

import (
	"testing"

	"github.com/capstan-dev/capstan/internal/testlab"
)

// Container is a booted systemd host.
type Container = testlab.Host

// requireNspawnHost skips the test, or fails it when CI=true, unless this
// machine can boot a systemd host.
func requireNspawnHost(t *testing.T) {
	t.Helper()
	testlab.RequireNspawn(t)
}

// debianRootfs returns the cached Debian tree, building it first if needed.
func debianRootfs(t *testing.T) string {
	t.Helper()
	return testlab.DebianRootfs(t)
}

// bootContainer boots root as a systemd host, halted when the test ends.
func bootContainer(t *testing.T, root string) *Container {
	t.Helper()
	return testlab.BootHost(t, root, testlab.HostOptions{})
}
