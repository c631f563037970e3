package main

import (
	"slices"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestExecutorsRunApplications: this build runs the application jobs.
func TestExecutorsRunApplications(t *testing.T) {
	types := executors().Types()
	for _, want := range []string{agentproto.JobAppDeploy, agentproto.JobAppRemove, agentproto.JobAppLogs} {
		if !slices.Contains(types, want) {
			t.Errorf("no executor for %s; registered: %v", want, types)
		}
	}
}
