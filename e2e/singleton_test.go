package e2e

import (
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// evaluationRounds counts the alert evaluation rounds a control plane's
// background loop ran.
func evaluationRounds(cp *ControlPlane) int {
	n := 0
	for _, l := range cp.LogLines() {
		if l["msg"] == "background task ran" && l["task"] == "alert-evaluation" {
			n++
		}
	}
	return n
}

// TestTwoControlPlanesEvaluateOnce runs two control planes on one
// PostgreSQL database, evaluating every 2 seconds: only the holder of the
// evaluation lease evaluates; when it stops, the other takes over.
func TestTwoControlPlanesEvaluateOnce(t *testing.T) {
	opts := Options{Dialect: store.Postgres, Args: []string{"--alert-evaluation-interval=2s"}}
	a := startControlPlane(t, opts)
	// Control planes on one database share its secret key.
	opts.DatabaseURL, opts.DataDir = a.DatabaseURL, a.DataDir
	b := startControlPlane(t, opts)
	first, second := a, b
	testlab.Eventually(t, time.Minute, "one control plane evaluating", func() bool {
		return evaluationRounds(a)+evaluationRounds(b) > 0
	})
	if evaluationRounds(b) > 0 {
		first, second = b, a
	}
	testlab.Eventually(t, time.Minute, "four rounds in the lease holder", func() bool { return evaluationRounds(first) >= 4 })
	if got := evaluationRounds(second); got != 0 {
		t.Fatalf("the other control plane evaluated %d times while the holder ran %d rounds", got, evaluationRounds(first))
	}
	// The holder stops and gives up its lease: the other takes over.
	first.Stop(t)
	testlab.Eventually(t, time.Minute, "rounds in the other control plane", func() bool { return evaluationRounds(second) >= 2 })
}
