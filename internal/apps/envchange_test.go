package apps_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/apps"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// revealed returns an application's env with its values, as key=value.
func (r *rig) revealed(id string) []string {
	r.t.Helper()
	d, err := r.apps.Get(r.ctx, id, apps.Reading{Reader: jobs.AdminReader, Reveal: true, By: r.admin})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, e := range d.Env {
		out = append(out, e.Key+"="+deref(e.Value))
	}
	return out
}

// TestChangeEnvKeepsTheOtherValues sets and removes single variables
// without the caller knowing the other values: they stay as they were,
// in their order, and the reply names the keys only.
func TestChangeEnvKeepsTheOtherValues(t *testing.T) {
	r := newRig(t)
	a := r.createApp("web", []apps.EnvVar{{Key: "A", Value: "one"}, {Key: "SECRET", Value: "hunter2"}, {Key: "C", Value: "three"}}, false)

	d, err := r.apps.ChangeEnv(r.ctx, r.admin, a.ID, apps.EnvChange{
		Set: []apps.EnvVar{{Key: "C", Value: "3"}, {Key: "NEW", Value: "new"}}, Remove: []string{"A"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.EnvKeys, []string{"SECRET", "C", "NEW"}) || len(d.Env) != 3 || d.Env[0].Value != nil || !d.Env[0].ValueSet {
		t.Fatalf("reply: keys %v, env %+v", d.EnvKeys, d.Env)
	}
	if got, want := r.revealed(a.ID), []string{"SECRET=hunter2", "C=3", "NEW=new"}; !slices.Equal(got, want) {
		t.Fatalf("env after the change: %v, want %v", got, want)
	}

	// Refusals name the field and change nothing.
	for name, ch := range map[string]apps.EnvChange{
		"nothing":         {},
		"bad key":         {Set: []apps.EnvVar{{Key: "1X", Value: "v"}}},
		"twice in set":    {Set: []apps.EnvVar{{Key: "X", Value: "1"}, {Key: "X", Value: "2"}}},
		"absent removed":  {Remove: []string{"GONE"}},
		"set and removed": {Set: []apps.EnvVar{{Key: "C", Value: "x"}}, Remove: []string{"C"}},
		"removed twice":   {Remove: []string{"C", "C"}},
		"NUL value":       {Set: []apps.EnvVar{{Key: "X", Value: "a\x00b"}}},
	} {
		_, err := r.apps.ChangeEnv(r.ctx, r.admin, a.ID, ch)
		if fe := fault.As(err); fe == nil || fe.Kind != fault.Invalid || len(fe.Fields) == 0 {
			t.Errorf("%s: %v, want a validation problem naming the field", name, err)
		}
	}
	if got, want := r.revealed(a.ID), []string{"SECRET=hunter2", "C=3", "NEW=new"}; !slices.Equal(got, want) {
		t.Fatalf("env after refused changes: %v, want %v", got, want)
	}
	if _, err := r.apps.ChangeEnv(r.ctx, r.admin, "app_none", apps.EnvChange{Remove: []string{"A"}}); !fault.Is(err, fault.NotFound) {
		t.Errorf("unknown application: %v", err)
	}
}

// TestChangeEnvConcurrently sets many variables at once from parallel
// callers: every one of them is kept, none overwrites another's.
func TestChangeEnvConcurrently(t *testing.T) {
	r := newRig(t)
	a := r.createApp("web", []apps.EnvVar{{Key: "KEEP", Value: "kept"}}, false)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := r.apps.ChangeEnv(r.ctx, r.admin, a.ID, apps.EnvChange{Set: []apps.EnvVar{{Key: fmt.Sprintf("K%d", i), Value: fmt.Sprint(i)}}})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := r.revealed(a.ID)
	if len(got) != n+1 || got[0] != "KEEP=kept" {
		t.Fatalf("env after %d parallel changes: %v", n, got)
	}
	for i := range n {
		if !slices.Contains(got, fmt.Sprintf("K%d=%d", i, i)) {
			t.Errorf("K%d lost: %v", i, got)
		}
	}
}
