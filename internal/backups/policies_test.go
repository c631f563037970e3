package backups_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
)

func forEachDialect(t *testing.T, fn func(t *testing.T, d store.Dialect)) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) { fn(t, d) })
	}
}

func wantInvalid(t *testing.T, err error, field, text string) {
	t.Helper()
	fe := fault.As(err)
	if fe == nil || fe.Kind != fault.Invalid {
		t.Fatalf("got %v, want invalid %s", err, field)
	}
	for _, f := range fe.Fields {
		if f.Field == field && strings.Contains(f.Message, text) {
			return
		}
	}
	t.Fatalf("invalid fields %+v: none is %s saying %q", fe.Fields, field, text)
}

// TestPolicies: every instance has a policy, disabled by default; a PUT
// checks its bounds and that each database is one the control plane
// knows the instance has (its initial database, or one its agent listed
// in its newest metric sample), and a refused PUT changes nothing.
func TestPolicies(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		pg := r.instance("main")
		p := r.policy(pg.ID)
		if p.Enabled || p.EveryHours != 24 || p.Keep != 7 || !p.Verify || len(p.Databases) != 0 || p.NextDueAt != nil ||
			p.UpdatedAt != nil || p.InstanceName != "main" {
			t.Fatalf("default policy: %+v", p)
		}
		good := backups.PolicyInput{Enabled: true, EveryHours: 6, Keep: 3, Verify: true}
		for _, c := range []struct {
			mut          func(*backups.PolicyInput)
			field, where string
		}{
			{func(in *backups.PolicyInput) { in.EveryHours = 0 }, "every_hours", "1 to 168"},
			{func(in *backups.PolicyInput) { in.EveryHours = 169 }, "every_hours", "1 to 168"},
			{func(in *backups.PolicyInput) { in.Keep = 0 }, "keep", "1 to 365"},
			{func(in *backups.PolicyInput) { in.Keep = 366 }, "keep", "1 to 365"},
			{func(in *backups.PolicyInput) { in.Databases = []string{"shop"} }, "databases", "has not listed"},
			{func(in *backups.PolicyInput) { in.Databases = []string{"app", "app"} }, "databases", "twice"},
			{func(in *backups.PolicyInput) { in.Databases = []string{"-x"} }, "databases", "must not start"},
		} {
			in := good
			c.mut(&in)
			_, err := r.put(pg.ID, in)
			wantInvalid(t, err, c.field, c.where)
		}
		if _, err := r.put("db_none", good); !fault.Is(err, fault.NotFound) {
			t.Fatalf("policy of an unknown instance: %v, want not found", err)
		}
		if p := r.policy(pg.ID); p.Enabled || p.UpdatedAt != nil {
			t.Fatalf("a refused PUT changed the policy: %+v", p)
		}

		// Once the agent listed shop, it is known; an unknown one still is
		// not, and the problem says what the agent listed.
		r.report(pg.ID, "shop", "app", "postgres")
		_, err := r.put(pg.ID, backups.PolicyInput{Enabled: true, EveryHours: 6, Keep: 3, Databases: []string{"shop", "ghost"}})
		wantInvalid(t, err, "databases", "its agent listed shop, app, postgres at ")
		in := good
		in.Databases = []string{"shop", "app"}
		v := r.mustPut(pg.ID, in)
		if !v.Enabled || v.EveryHours != 6 || v.Keep != 3 || !slices.Equal(v.Databases, []string{"app", "shop"}) ||
			v.NextDueAt == nil || v.UpdatedBy != r.admin.Actor.ID {
			t.Fatalf("saved policy: %+v", v)
		}
		if got := r.policy(pg.ID); got.NextDueAt == nil || !got.NextDueAt.Equal(*v.NextDueAt) || !slices.Equal(got.Databases, v.Databases) {
			t.Fatalf("listed policy %+v, saved %+v", got, v)
		}
		// Saving it again unchanged keeps the schedule; disabling drops it.
		r.clock.Advance(time.Minute)
		if again := r.mustPut(pg.ID, in); !again.NextDueAt.Equal(*v.NextDueAt) {
			t.Fatalf("next_due_at moved from %s to %s on an unchanged save", v.NextDueAt, again.NextDueAt)
		}
		in.Enabled = false
		if off := r.mustPut(pg.ID, in); off.Enabled || off.NextDueAt != nil {
			t.Fatalf("disabled policy: %+v", off)
		}
	})
}

// TestPolicyJitter: policies enabled together first fire spread over the
// jitter window (never beyond their interval), each at a time fixed by
// its instance.
func TestPolicyJitter(t *testing.T) {
	r := newRigWith(t, store.SQLite, func(o *backups.Deps) { o.Schedule = backups.ScheduleOptions{Jitter: 30 * time.Minute} })
	now := r.clock.Now()
	var offsets []time.Duration
	for i := range 12 {
		inst := r.instance(fmt.Sprintf("db%d", i))
		v := r.mustPut(inst.ID, backups.PolicyInput{Enabled: true, EveryHours: 24, Keep: 2, Verify: true})
		off := v.NextDueAt.Sub(now)
		if off < 0 || off >= 30*time.Minute {
			t.Fatalf("first due %s after enabling, want within the 30 minute window", off)
		}
		offsets = append(offsets, off)
	}
	slices.Sort(offsets)
	if distinct := len(slices.Compact(slices.Clone(offsets))); distinct < 10 || offsets[len(offsets)-1]-offsets[0] < 10*time.Minute {
		t.Fatalf("12 policies enabled at once first fire at %v: not spread", offsets)
	}
	// A one-hour policy's jitter stays within its hour even with a
	// longer window (a control plane started with it, on the same store).
	r.tune = func(o *backups.Deps) { o.Schedule = backups.ScheduleOptions{Jitter: 24 * time.Hour} }
	r.plane = r.open(r.dir)
	inst := r.instance("hourly")
	v := r.mustPut(inst.ID, backups.PolicyInput{Enabled: true, EveryHours: 1, Keep: 2})
	if off := v.NextDueAt.Sub(now); off < 0 || off >= time.Hour {
		t.Fatalf("an hourly policy first fires %s after enabling", off)
	}
}

// TestSchedulerTick drives the scheduler with an explicit tick and a
// clock: a due policy queues one scheduled backup per database, and its
// verification once it succeeded; the next round is not queued while
// the previous scheduled backup of the database still runs; a database
// without a verified backup within twice the interval publishes
// backup.stale once, and is fresh again after a verified backup.
func TestSchedulerTick(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		pg := r.instance("main")
		r.mustPut(pg.ID, backups.PolicyInput{Enabled: true, EveryHours: 6, Keep: 3, Verify: true})
		res := r.tick()
		if len(res.Queued) != 1 || res.Queued[0].Database != "app" || res.Queued[0].Trigger != backups.TriggerSchedule {
			t.Fatalf("first tick: %+v", res)
		}
		if again := r.tick(); len(again.Queued)+len(again.Skipped) != 0 {
			t.Fatalf("a second tick at the same time: %+v", again)
		}
		next := r.policy(pg.ID).NextDueAt
		if want := r.clock.Now().Add(6 * time.Hour); next == nil || !next.Equal(want) {
			t.Fatalf("next due %v, want %s", next, want)
		}
		// Six hours on, the first backup has not run: skipped.
		r.clock.Advance(6 * time.Hour)
		if res := r.tick(); len(res.Queued) != 0 || !slices.Equal(res.Skipped, []string{pg.ID + "/app"}) {
			t.Fatalf("tick while the scheduled backup is queued: %+v", res)
		}
		// It succeeds: its verification is queued at once.
		r.backedUp(r.claim(agentproto.JobBackupRun))
		verify := r.claim(agentproto.JobBackupVerify)
		var vp agentproto.BackupRestorePayload
		if err := json.Unmarshal(verify.Payload, &vp); err != nil || vp.RunID != res.Queued[0].ID {
			t.Fatalf("verify payload %s (%v), want run %s", verify.Payload, err, res.Queued[0].ID)
		}

		// Nothing verified yet: not stale before twice the interval since
		// the policy was enabled.
		r.clock.Advance(6*time.Hour - time.Minute)
		if res := r.tick(); len(res.Stale) != 0 {
			t.Fatalf("tick at 11:59 h: %+v", res)
		}
		r.clock.Advance(time.Minute)
		stale := r.tick()
		if len(stale.Stale) != 1 || stale.Stale[0].Database != "app" || len(stale.Queued) != 1 {
			t.Fatalf("tick at 12 h without a verified backup: %+v", stale)
		}
		r.clock.Advance(time.Minute)
		if again := r.tick(); len(again.Stale) != 0 {
			t.Fatalf("stale published again: %+v", again)
		}
		evs := r.eventsOf(events.BackupStale)
		var payload events.BackupStalePayload
		if len(evs) != 1 || json.Unmarshal(evs[0].Payload, &payload) != nil || payload.InstanceID != pg.ID || payload.Database != "app" ||
			payload.EveryHours != 6 || payload.LastVerifiedAt != nil || payload.InstanceName != "main" {
			t.Fatalf("backup.stale events: %+v", evs)
		}
		if p := r.policy(pg.ID); len(p.Stale) != 1 || p.Stale[0].Database != "app" {
			t.Fatalf("policy's stale list: %+v", p.Stale)
		}
		// The verification succeeds: fresh again, and stale again only
		// after another twice the interval, with a new event.
		r.verified(verify, true)
		r.tick()
		if p := r.policy(pg.ID); len(p.Stale) != 0 {
			t.Fatalf("stale after a verified backup: %+v", p.Stale)
		}
		for _, j := range r.claimAll() {
			if j.Type == agentproto.JobBackupRun {
				r.complete(j, agentproto.StatusFailed, agentproto.BackupRunResult{Step: "upload"}, "uploading the backup: refused")
			}
		}
		r.clock.Advance(6 * time.Hour)
		if res := r.tick(); len(res.Stale) != 1 {
			t.Fatalf("tick 12 h after the last verified backup: %+v", res)
		}
		if evs := r.eventsOf(events.BackupStale); len(evs) != 2 {
			t.Fatalf("%d backup.stale events, want 2", len(evs))
		}
	})
}

// TestSchedulerConcurrentTicks fires the scheduler from 8 goroutines in
// each of two control planes sharing one database: every due policy
// queues its backups exactly once.
func TestSchedulerConcurrentTicks(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		other := r.open(r.dir)
		var ids []string
		for i := range 6 {
			inst := r.instance(fmt.Sprintf("db%d", i))
			ids = append(ids, inst.ID)
			r.mustPut(inst.ID, backups.PolicyInput{Enabled: true, EveryHours: 1, Keep: 2})
		}
		for round := range 3 {
			var wg sync.WaitGroup
			queued := make(chan backups.Run, 100)
			for i := range 16 {
				p := r.plane
				if i%2 == 1 {
					p = other
				}
				wg.Go(func() {
					res, err := p.backups.Tick(r.ctx)
					if err != nil {
						t.Error(err)
					}
					for _, run := range res.Queued {
						queued <- run
					}
				})
			}
			wg.Wait()
			close(queued)
			per := map[string]int{}
			for run := range queued {
				per[run.InstanceID]++
			}
			for _, id := range ids {
				if per[id] != 1 {
					t.Fatalf("round %d: %d scheduled backups of %s from 16 concurrent ticks, want 1", round, per[id], id)
				}
				if n := len(r.runs(id)); n != round+1 {
					t.Fatalf("round %d: %s has %d runs, want %d", round, id, n, round+1)
				}
			}
			// Each backup finishes before the next round is due.
			for _, j := range r.claimAll() {
				r.backedUp(j)
			}
			r.clock.Advance(time.Hour)
		}
	})
}

// TestSchedulerPutRacesTick: a PUT that disables a due policy races
// ticks; the policy queues at most one backup, and once the PUT is
// saved no tick queues another.
func TestSchedulerPutRacesTick(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d store.Dialect) {
		r := newRig(t, d)
		other := r.open(r.dir)
		for i := range 8 {
			inst := r.instance(fmt.Sprintf("race%d", i))
			r.mustPut(inst.ID, backups.PolicyInput{Enabled: true, EveryHours: 2, Keep: 2})
			var wg sync.WaitGroup
			for k := range 4 {
				p := r.plane
				if k%2 == 1 {
					p = other
				}
				wg.Go(func() {
					if _, err := p.backups.Tick(r.ctx); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Go(func() {
				if _, err := r.put(inst.ID, backups.PolicyInput{Enabled: false, EveryHours: 2, Keep: 2}); err != nil {
					t.Error(err)
				}
			})
			wg.Wait()
			if n := len(r.runs(inst.ID)); n > 1 {
				t.Fatalf("%d backups of a policy disabled while ticks ran, want at most 1", n)
			}
			before := len(r.runs(inst.ID))
			r.clock.Advance(2 * time.Hour)
			r.tick()
			if n := len(r.runs(inst.ID)); n != before {
				t.Fatalf("a tick after the policy was disabled queued a backup")
			}
			if p := r.policy(inst.ID); p.Enabled || p.NextDueAt != nil {
				t.Fatalf("policy after the race: %+v", p)
			}
			for _, j := range r.claimAll() {
				r.backedUp(j)
			}
		}
	})
}
