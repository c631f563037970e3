package backups_test

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
)

// manual backs a database up and lets it succeed.
func (r *rig) manual(instanceID string) backups.RunView {
	r.t.Helper()
	run, _, err := r.backups.Backup(r.ctx, r.admin, instanceID, "", backups.TriggerManual)
	if err != nil {
		r.t.Fatal(err)
	}
	r.backedUp(r.claim(agentproto.JobBackupRun))
	r.clock.Advance(time.Second) // run ids sort by time
	return run
}

func (r *rig) verify(runID string, ok bool) {
	r.t.Helper()
	if _, err := r.backups.Verify(r.ctx, r.admin, runID); err != nil {
		r.t.Fatal(err)
	}
	r.verified(r.claim(agentproto.JobBackupVerify), ok)
}

// deleteJobs claims the queued jobs, which must all be backup.delete, by
// run id.
func (r *rig) deleteJobs() map[string]jobs.Job {
	r.t.Helper()
	out := map[string]jobs.Job{}
	for _, j := range r.claimAll() {
		if j.Type != agentproto.JobBackupDelete {
			r.t.Fatalf("claimed a %s job, want backup.delete", j.Type)
		}
		if strings.Contains(string(j.Payload), "secret-of-the-test") {
			r.t.Fatalf("the storage secret is in the payload: %s", j.Payload)
		}
		var p agentproto.BackupDeletePayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			r.t.Fatal(err)
		}
		out[p.RunID] = j
	}
	return out
}

func (r *rig) ids(instanceID string) []string {
	r.t.Helper()
	var out []string
	for _, run := range r.runs(instanceID) {
		out = append(out, run.ID)
	}
	return out
}

func wantConflict(t *testing.T, err error, code string) {
	t.Helper()
	if fe := fault.As(err); fe == nil || fe.Kind != fault.Conflict || fe.Code != code {
		t.Fatalf("got %v, want a %s conflict", err, code)
	}
}

// TestPrune: the scheduler deletes the successful backups beyond the
// policy's keep, newest kept, and never the newest verified one; a
// backup being deleted is never verified or restored; a deletion the
// storage refused stays delete_pending with the reason and is queued
// again after its backoff, not before; a deleted backup leaves the list.
func TestPrune(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		pg := r.instance("main")
		var runs []backups.RunView
		for range 5 {
			runs = append(runs, r.manual(pg.ID))
		}
		r.verify(runs[1].ID, true)
		r.verify(runs[3].ID, false) // failed verification: not verified
		// Disabled, nothing is pruned.
		r.mustPut(pg.ID, backups.PolicyInput{Enabled: false, EveryHours: 24, Keep: 2})
		if res := r.tick(); len(res.Pruned) != 0 {
			t.Fatalf("pruned under a disabled policy: %+v", res)
		}
		r.mustPut(pg.ID, backups.PolicyInput{Enabled: true, EveryHours: 24, Keep: 2})
		r.clock.Advance(time.Minute)
		res := r.tick()
		// The policy was due too: its backup is queued.
		if want := []string{runs[2].ID, runs[0].ID}; !slices.Equal(res.Pruned, want) || len(res.Queued) != 1 {
			t.Fatalf("pruned %v, want %v (keep 2, and the newest verified %s); queued %d", res.Pruned, want, runs[1].ID, len(res.Queued))
		}
		for _, j := range r.claimAll() {
			if j.Type == agentproto.JobBackupRun {
				r.complete(j, agentproto.StatusFailed, agentproto.BackupRunResult{Step: "dump"}, "dump failed")
				continue
			}
			var p agentproto.BackupDeletePayload
			if err := json.Unmarshal(j.Payload, &p); err != nil || j.Type != agentproto.JobBackupDelete {
				t.Fatalf("job %s %s", j.Type, j.Payload)
			}
			if p.RunID == runs[2].ID {
				r.complete(j, agentproto.StatusSucceeded, agentproto.BackupDeleteResult{Local: agentproto.BackupDeleteStep{OK: true},
					Remote: agentproto.BackupDeleteStep{OK: true}}, "")
				continue
			}
			if p.RunID != runs[0].ID || !strings.HasSuffix(p.Key, runs[0].ID+".sql.gz.age") {
				t.Fatalf("delete payload %+v", p)
			}
			r.complete(j, agentproto.StatusFailed, agentproto.BackupDeleteResult{Local: agentproto.BackupDeleteStep{OK: true},
				Remote: agentproto.BackupDeleteStep{Error: "503 SlowDown"}}, "deleting the stored object: 503 SlowDown")
		}
		left := r.ids(pg.ID)
		if slices.Contains(left, runs[2].ID) || !slices.Contains(left, runs[0].ID) {
			t.Fatalf("runs after the deletions: %v", left)
		}
		pending := r.runs(pg.ID)[len(left)-1]
		if pending.ID != runs[0].ID || !pending.DeletePending || !strings.Contains(pending.DeleteError, "503 SlowDown") {
			t.Fatalf("run whose deletion failed: %+v", pending)
		}
		_, err := r.backups.Verify(r.ctx, r.admin, runs[0].ID)
		wantConflict(t, err, "backup-deleted")
		_, err = r.backups.Restore(r.ctx, r.admin, runs[0].ID, agentproto.BackupRestoreNew, "copy")
		wantConflict(t, err, "backup-deleted")
		_, err = r.backups.Delete(r.ctx, r.admin, runs[0].ID)
		wantConflict(t, err, "backup-deleted")

		// Not before the backoff (1 minute, then 2).
		r.clock.Advance(30 * time.Second)
		if res := r.tick(); len(res.Pruned) != 0 || len(r.deleteJobs()) != 0 {
			t.Fatalf("a deletion was retried before its backoff")
		}
		r.clock.Advance(31 * time.Second)
		r.tick()
		again := r.deleteJobs()
		if len(again) != 1 || again[runs[0].ID].ID == "" {
			t.Fatalf("retried deletions: %v", again)
		}
		r.complete(again[runs[0].ID], agentproto.StatusFailed, agentproto.BackupDeleteResult{Remote: agentproto.BackupDeleteStep{Error: "refused"}},
			"deleting the stored object: refused")
		r.clock.Advance(90 * time.Second)
		if r.tick(); len(r.deleteJobs()) != 0 {
			t.Fatal("the second retry came before its doubled backoff")
		}
		r.clock.Advance(31 * time.Second)
		r.tick()
		third := r.deleteJobs()
		r.complete(third[runs[0].ID], agentproto.StatusSucceeded, agentproto.BackupDeleteResult{Local: agentproto.BackupDeleteStep{OK: true, Gone: true},
			Remote: agentproto.BackupDeleteStep{OK: true}}, "")
		var succeeded []string
		for _, run := range r.runs(pg.ID) {
			if run.Status == backups.StatusSucceeded {
				succeeded = append(succeeded, run.ID)
			}
		}
		if want := []string{runs[4].ID, runs[3].ID, runs[1].ID}; !slices.Equal(succeeded, want) {
			t.Fatalf("backups left %v, want %v", succeeded, want)
		}
		if res := r.tick(); len(res.Pruned) != 0 {
			t.Fatalf("pruned again: %v", res.Pruned)
		}
	})
}

// TestDeleteRacesVerify: a DELETE and a verification of the same backup
// at once: exactly one of them goes ahead, the other is a conflict; a
// backup being verified cannot be deleted, nor one still running.
func TestDeleteRacesVerify(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		other := r.open(r.dir)
		pg := r.instance("main")
		for i := range 12 {
			run := r.manual(pg.ID)
			var wg sync.WaitGroup
			var verr, derr error
			vp, dp := r.plane, other
			if i%2 == 1 {
				vp, dp = other, r.plane
			}
			wg.Go(func() { _, verr = vp.backups.Verify(r.ctx, r.admin, run.ID) })
			wg.Go(func() { _, derr = dp.backups.Delete(r.ctx, r.admin, run.ID) })
			wg.Wait()
			if (verr == nil) == (derr == nil) {
				t.Fatalf("round %d: verify %v, delete %v: want exactly one to go ahead", i, verr, derr)
			}
			for _, err := range []error{verr, derr} {
				if err != nil && !fault.Is(err, fault.Conflict) {
					t.Fatalf("round %d: %v, want a conflict", i, err)
				}
			}
			j := r.claimAll()
			if len(j) != 1 {
				t.Fatalf("round %d: %d jobs queued", i, len(j))
			}
			if verr == nil {
				if j[0].Type != agentproto.JobBackupVerify {
					t.Fatalf("round %d: verify went ahead, but a %s job was queued", i, j[0].Type)
				}
				r.verified(j[0], true)
				continue
			}
			if j[0].Type != agentproto.JobBackupDelete {
				t.Fatalf("round %d: delete went ahead, but a %s job was queued", i, j[0].Type)
			}
		}
		// Being verified: no deletion.
		run := r.manual(pg.ID)
		if _, err := r.backups.Verify(r.ctx, r.admin, run.ID); err != nil {
			t.Fatal(err)
		}
		_, err := r.backups.Delete(r.ctx, r.admin, run.ID)
		wantConflict(t, err, "backup-verifying")
		r.verified(r.claim(agentproto.JobBackupVerify), true)
		// Still running: no deletion.
		queued, _, err := r.backups.Backup(r.ctx, r.admin, pg.ID, "", backups.TriggerManual)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.backups.Delete(r.ctx, r.admin, queued.ID)
		wantConflict(t, err, "backup-running")
		if _, err := r.backups.Delete(r.ctx, r.admin, "run_none"); !fault.Is(err, fault.NotFound) {
			t.Fatalf("delete of an unknown backup: %v", err)
		}
	})
}

// failedRun backs a database up and lets the backup fail.
func (r *rig) failedRun(instanceID string) backups.RunView {
	r.t.Helper()
	run, _, err := r.backups.Backup(r.ctx, r.admin, instanceID, "", backups.TriggerManual)
	if err != nil {
		r.t.Fatal(err)
	}
	r.complete(r.claim(agentproto.JobBackupRun), agentproto.StatusFailed, agentproto.BackupRunResult{Step: "upload"},
		"uploading the backup: 503 SlowDown")
	r.clock.Advance(time.Second) // run ids sort by time
	return run
}

// TestPruneFailed: failed backups do not pile up: each database keeps its
// newest KeepFailed failures, older ones are deleted (with whatever their
// upload left in the storage) whether or not a policy is enabled, and
// the successful backups, the newest verified among them, stay. Ticks
// at once in two control planes queue each deletion once.
func TestPruneFailed(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		other := r.open(r.dir)
		pg := r.instance("main")
		second := r.instance("second")
		good := r.manual(pg.ID)
		r.verify(good.ID, true)
		var failed []backups.RunView
		for range backups.KeepFailed + 4 {
			failed = append(failed, r.failedRun(pg.ID))
		}
		// Another database's failures are counted apart.
		var others []string
		for range 3 {
			others = append(others, r.failedRun(second.ID).ID)
		}
		var wg sync.WaitGroup
		results := make([]backups.TickResult, 2)
		for i, p := range []*plane{r.plane, other} {
			wg.Go(func() {
				res, err := p.backups.Tick(r.ctx)
				if err != nil {
					t.Errorf("tick: %v", err)
				}
				results[i] = res
			})
		}
		wg.Wait()
		var pruned []string
		for _, res := range results {
			pruned = append(pruned, res.Pruned...)
		}
		slices.Sort(pruned)
		var want []string
		for _, f := range failed[:4] {
			want = append(want, f.ID)
		}
		if !slices.Equal(pruned, want) {
			t.Fatalf("pruned %v, want the 4 oldest failures %v", pruned, want)
		}
		dels := r.deleteJobs()
		if len(dels) != 4 {
			t.Fatalf("%d deletions queued, want 4", len(dels))
		}
		for _, f := range failed[:4] {
			var p agentproto.BackupDeletePayload
			if err := json.Unmarshal(dels[f.ID].Payload, &p); err != nil || !strings.HasSuffix(p.Key, f.ID+".sql.gz.age") {
				t.Fatalf("deletion of %s: %s (%v)", f.ID, dels[f.ID].Payload, err)
			}
			r.complete(dels[f.ID], agentproto.StatusSucceeded, agentproto.BackupDeleteResult{Local: agentproto.BackupDeleteStep{OK: true,
				Gone: true}, Remote: agentproto.BackupDeleteStep{OK: true, Gone: true}}, "")
		}
		left := r.ids(pg.ID)
		if len(left) != backups.KeepFailed+1 || !slices.Contains(left, good.ID) || slices.Contains(left, failed[3].ID) ||
			!slices.Contains(left, failed[4].ID) {
			t.Fatalf("runs left %v", left)
		}
		if got := r.ids(second.ID); len(got) != 3 {
			t.Fatalf("the other database's failures: %v, want %v", got, others)
		}
		if res := r.tick(); len(res.Pruned) != 0 {
			t.Fatalf("pruned again: %v", res.Pruned)
		}
	})
}

// TestSummaryLeavesOutDeletions: a backup being deleted (a DELETE, or
// pruned) is not counted as kept in the summary's count, total_size,
// verified and unverified counts, nor as an instance's last success or
// last verification; it is counted apart as delete_pending until it is
// gone. A failure being deleted leaves the recent failures and the
// instance's failure count.
func TestSummaryLeavesOutDeletions(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		pg := r.instance("main")
		older := r.manual(pg.ID)
		newer := r.manual(pg.ID)
		r.verify(newer.ID, true)
		failed := r.failedRun(pg.ID)
		r.failedRun(pg.ID)
		summary := func() backups.Summary {
			t.Helper()
			sum, err := r.backups.Summary(r.ctx, jobs.AdminReader)
			if err != nil {
				t.Fatal(err)
			}
			return sum
		}
		sum := summary()
		if sum.Count != 2 || sum.TotalSize != 200 || sum.VerifiedCount != 1 || sum.UnverifiedCount != 1 || sum.DeletePendingCount != 0 ||
			len(sum.RecentFailures) != 2 || len(sum.Instances) != 1 || sum.Instances[0].Failures != 2 || sum.Instances[0].LastVerifiedAt == nil {
			t.Fatalf("summary before the deletions: %+v", sum)
		}
		for _, id := range []string{newer.ID, failed.ID} {
			if _, err := r.backups.Delete(r.ctx, r.admin, id); err != nil {
				t.Fatal(err)
			}
		}
		sum = summary()
		in := sum.Instances[0]
		if sum.Count != 1 || sum.TotalSize != 100 || sum.VerifiedCount != 0 || sum.UnverifiedCount != 1 || sum.DeletePendingCount != 1 ||
			sum.DeletePendingSize != 100 || len(sum.RecentFailures) != 1 || sum.RecentFailures[0].ID == failed.ID || in.Failures != 1 ||
			in.LastVerifiedAt != nil || in.LastSuccessAt == nil {
			t.Fatalf("summary while two are being deleted: %+v", sum)
		}
		// Gone: no longer counted at all.
		for id, j := range r.deleteJobs() {
			if id != newer.ID && id != failed.ID {
				t.Fatalf("deletion of %s queued", id)
			}
			r.complete(j, agentproto.StatusSucceeded, agentproto.BackupDeleteResult{Local: agentproto.BackupDeleteStep{OK: true},
				Remote: agentproto.BackupDeleteStep{OK: true}}, "")
		}
		if sum = summary(); sum.Count != 1 || sum.DeletePendingCount != 0 || sum.DeletePendingSize != 0 {
			t.Fatalf("summary after the deletions: %+v", sum)
		}
		if _, err := r.backups.Delete(r.ctx, r.admin, older.ID); err != nil {
			t.Fatal(err)
		}
		if sum = summary(); sum.Count != 0 || sum.TotalSize != 0 || sum.Instances[0].LastSuccessAt != nil {
			t.Fatalf("summary with the last backup being deleted: %+v", sum)
		}
	})
}

// localRun backs a database up and lets it succeed with a local copy,
// reporting the runs whose copies the agent removed; it returns the run
// and the job's payload.
func (r *rig) localRun(instanceID string, removed ...string) (backups.RunView, agentproto.BackupRunPayload) {
	r.t.Helper()
	run, _, err := r.backups.Backup(r.ctx, r.admin, instanceID, "", backups.TriggerManual)
	if err != nil {
		r.t.Fatal(err)
	}
	j := r.claim(agentproto.JobBackupRun)
	var p agentproto.BackupRunPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		r.t.Fatal(err)
	}
	sum := "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
	r.complete(j, agentproto.StatusSucceeded, agentproto.BackupRunResult{Bytes: 100, SHA256: sum,
		Remote: &agentproto.BackupObject{Size: 100, SHA256: sum}, Local: "/var/backups/" + run.ID + ".sql.gz.age", LocalRemoved: removed,
		Manifest: &agentproto.BackupManifest{Kind: agentproto.BackupManifestSQL, Tables: []agentproto.BackupTable{}}}, "")
	r.clock.Advance(time.Second)
	return run, p
}

// TestLocalCopies: the agent's bound on local copies follows the control
// plane: each backup.run names the database's newest verified backup,
// whose local copy the agent never removes to make room, and the runs
// whose copies the agent did remove lose their local location, so that
// locations.local never names a file that is gone. Another database's
// runs are never touched.
func TestLocalCopies(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRigWith(t, d, func(o *backups.Deps) { o.Run = backups.RunOptions{LocalKeep: 1} })
		pg := r.instance("main")
		other := r.instance("other")
		first, p := r.localRun(pg.ID)
		if p.LocalKeep != 1 || len(p.LocalProtect) != 0 {
			t.Fatalf("first payload: keep %d, protect %v", p.LocalKeep, p.LocalProtect)
		}
		r.verify(first.ID, true)
		elsewhere, _ := r.localRun(other.ID)
		second, p := r.localRun(pg.ID)
		if !slices.Equal(p.LocalProtect, []string{first.ID}) {
			t.Fatalf("protected %v, want the newest verified %s", p.LocalProtect, first.ID)
		}
		third, p := r.localRun(pg.ID, second.ID, elsewhere.ID)
		if !slices.Equal(p.LocalProtect, []string{first.ID}) {
			t.Fatalf("protected %v, want %s", p.LocalProtect, first.ID)
		}
		local := map[string]string{}
		for _, id := range []string{pg.ID, other.ID} {
			for _, run := range r.runs(id) {
				local[run.ID] = run.Locations.Local
			}
		}
		if local[second.ID] != "" || local[first.ID] == "" || local[third.ID] == "" || local[elsewhere.ID] == "" {
			t.Fatalf("local copies after the agent removed %s's: %v", second.ID, local)
		}
		// A newer verified backup is the one protected from then on.
		r.verify(third.ID, true)
		if _, p := r.localRun(pg.ID); !slices.Equal(p.LocalProtect, []string{third.ID}) {
			t.Fatalf("protected %v, want %s", p.LocalProtect, third.ID)
		}
	})
}
