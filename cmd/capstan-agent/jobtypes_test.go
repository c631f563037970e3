package main

import (
	"slices"
	"testing"

	"github.com/capstan-dev/capstan/internal/agentproto"
)

// TestExecutorsRunEveryJobType: this build has a handler for every
// declared job type, and none for a type that is not declared.
func TestExecutorsRunEveryJobType(t *testing.T) {
	var declared []string
	for _, jt := range agentproto.JobTypes {
		declared = append(declared, jt.JobName())
	}
	slices.Sort(declared)
	got := executors().Types()
	slices.Sort(got)
	for _, name := range declared {
		if !slices.Contains(got, name) {
			t.Errorf("job type %s is declared but the agent has no handler for it", name)
		}
	}
	for _, name := range got {
		if !slices.Contains(declared, name) {
			t.Errorf("the agent handles %s, which agentproto.JobTypes does not declare", name)
		}
	}
}
