package monitoring

import (
	"slices"
	"testing"
	"time"
)

// TestBackupStale: a database of an enabled policy opens a backup_stale
// alert once it has gone without a verified backup for threshold hours
// and for twice its policy's interval (whichever is later), once; a
// newer verified backup resolves it; a rule scoped to an instance
// watches only that instance; a database no longer in an enabled policy
// resolves.
func TestBackupStale(t *testing.T) {
	all := rule(BackupStale, 1, 0)
	one := rule(BackupStale, 30, 0)
	one.ID, one.Scope, one.ScopeID = "rul_one", ScopeInstance, "db_b"
	w := newWorld(all, one)
	// db_a: every 6 hours (stale after 12 h); db_b: every 24 hours
	// (stale after 48 h, under the default rule; the scoped rule's 30 h
	// is below that allowance, so it too waits for 48 h).
	w.f.backups = []BackupAge{
		{InstanceID: "db_a", InstanceName: "a", Database: "app", EveryHours: 6, Since: t0},
		{InstanceID: "db_b", InstanceName: "b", Database: "shop", EveryHours: 24, Since: t0},
	}
	if got := w.step(12*time.Hour - 6*time.Minute); len(got) != 0 {
		t.Fatalf("at 11.9 h: %v", got)
	}
	if got := w.step(6 * time.Minute); !slices.Equal(got, []string{"+backup/db_a/app"}) {
		t.Fatalf("at 12 h: %v", got)
	}
	if got := w.step(time.Hour); len(got) != 0 {
		t.Fatalf("an hour later: %v, want no change (one open alert)", got)
	}
	a := w.open[[2]string{all.ID, "backup/db_a/app"}]
	if a.Subject.Type != "database" || a.Subject.ID != "db_a" || a.Subject.Detail != "app" || a.Value != 12 {
		t.Fatalf("alert: %+v", a)
	}
	// A verified backup now: resolved.
	w.f.backups[0].Since = w.f.now
	if got := w.step(time.Minute); !slices.Equal(got, []string{"-backup/db_a/app"}) {
		t.Fatalf("after a verified backup: %v", got)
	}
	// db_b at 48 h: both the default and the scoped rule open.
	w.f.backups[1].Since = w.f.now.Add(-48 * time.Hour)
	got := w.step(time.Minute)
	slices.Sort(got)
	if !slices.Equal(got, []string{"+backup/db_b/shop", "+backup/db_b/shop"}) || len(w.open) != 2 {
		t.Fatalf("db_b past 48 h: %v (open %v)", got, w.open)
	}
	// Its policy is disabled: the database is gone from the list.
	w.f.backups = w.f.backups[:1]
	if got := w.step(time.Minute); len(got) != 2 || len(w.open) != 0 {
		t.Fatalf("after the policy was disabled: %v", got)
	}
}

// TestBackupStaleRule: the kind takes hours within its bounds and the
// scopes all and instance only.
func TestBackupStaleRule(t *testing.T) {
	for _, c := range []struct {
		n  NewRule
		ok bool
	}{
		{NewRule{Kind: BackupStale}, true},
		{NewRule{Kind: BackupStale, Scope: ScopeInstance, ScopeID: "db_1"}, true},
		{NewRule{Kind: BackupStale, Threshold: ptr(8760.0)}, true},
		{NewRule{Kind: BackupStale, Threshold: ptr(0.0)}, false},
		{NewRule{Kind: BackupStale, Threshold: ptr(8761.0)}, false},
		{NewRule{Kind: BackupStale, Scope: ScopeServer, ScopeID: "srv_1"}, false},
		{NewRule{Kind: BackupStale, Scope: ScopeInstance}, false},
		{NewRule{Kind: CPUHigh, Scope: ScopeInstance, ScopeID: "db_1"}, false},
	} {
		r, err := ruleOf(c.n, "rul_x", "usr_a", t0)
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.n, err, c.ok)
		}
		if err == nil && (r.Unit != "hours" || c.n.Threshold == nil && r.Threshold != 1) {
			t.Errorf("%+v: unit %s threshold %g", c.n, r.Unit, r.Threshold)
		}
	}
	d := Defaults(t0)
	if last := d[len(d)-1]; last.Kind != BackupStale || !last.Enabled || last.ID != "rul_default_backup_stale" || last.Scope != ScopeAll {
		t.Fatalf("default rule: %+v", last)
	}
}

func ptr[T any](v T) *T { return &v }
