package main

import (
	"slices"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestExecutorsRunDatabaseJobs: this build runs the database jobs.
func TestExecutorsRunDatabaseJobs(t *testing.T) {
	types := executors().Types()
	for _, want := range []string{agentproto.JobDBConnect, agentproto.JobDBQuery, agentproto.JobDBExplore, agentproto.JobDBKV} {
		if !slices.Contains(types, want) {
			t.Errorf("no executor for %s; registered: %v", want, types)
		}
	}
}
