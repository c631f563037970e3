package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/servers"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

func TestFreshStoreHasTheDefaultRules(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		got, err := s.Rules(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := monitoring.Defaults(t0)
		if len(got) != len(want) {
			t.Fatalf("rules: got %d, want %d", len(got), len(want))
		}
		byID := map[string]monitoring.Rule{}
		for _, r := range got {
			byID[r.ID] = r
		}
		for _, w := range want {
			g, ok := byID[w.ID]
			if !ok || g.Kind != w.Kind || g.Threshold != w.Threshold || g.Duration != w.Duration || g.Severity != w.Severity ||
				!g.Enabled || g.Scope != monitoring.ScopeAll || time.Since(g.CreatedAt) > time.Hour {
				t.Fatalf("default %s: got %+v, want %+v", w.ID, g, w)
			}
		}
	})
}

func TestEvaluationsOpenAndResolveOnce(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		rule := "rul_default_cpu_high"
		now := t0
		open := func() monitoring.Changes {
			return monitoring.Changes{Now: now, Open: []monitoring.Alert{{ID: ids.NewAt(monitoring.AlertIDPrefix, now), RuleID: rule,
				Kind: monitoring.CPUHigh, Severity: monitoring.Warning, Key: "srv_1",
				Subject: monitoring.AlertSubject{Type: "server", ID: "srv_1", Name: "web-1"}, Value: 97, Threshold: 90, OpenedAt: now}},
				Drop: []monitoring.Condition{{RuleID: rule, Key: "srv_1"}}}
		}
		if _, err := s.ApplyEvaluation(ctx, monitoring.Changes{Now: now, Start: []monitoring.Condition{{RuleID: rule, Key: "srv_1", Since: now},
			{RuleID: "rul_deleted", Key: "srv_1", Since: now}}}); err != nil {
			t.Fatal(err)
		}
		if conds, _ := s.Conditions(ctx); len(conds) != 1 || conds[0].RuleID != rule {
			t.Fatalf("conditions: %+v", conds)
		}
		// Several control planes evaluate at once: one alert opens.
		var opened atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				out, err := s.ApplyEvaluation(ctx, open())
				if err != nil {
					t.Error(err)
				}
				opened.Add(int32(len(out.Opened)))
			})
		}
		wg.Wait()
		if got, want := opened.Load(), int32(1); got != want {
			t.Fatalf("opened: got %d, want %d", got, want)
		}
		list, _ := s.ListAlerts(ctx, monitoring.Open, 10, "")
		if len(list) != 1 || list[0].Value != 97 || list[0].Subject.Name != "web-1" || list[0].Key != "srv_1" {
			t.Fatalf("open alerts: %+v", list)
		}
		if conds, _ := s.Conditions(ctx); len(conds) != 0 {
			t.Fatalf("conditions after opening: %+v", conds)
		}
		id := list[0].ID

		// Acknowledge: recorded once, by the first.
		a, changed, err := s.AcknowledgeAlert(ctx, id, "usr_1", now)
		if err != nil || !changed || a.AcknowledgedBy == nil || *a.AcknowledgedBy != "usr_1" || a.AcknowledgedAt == nil {
			t.Fatalf("acknowledge: %+v %v", a, err)
		}
		if a, changed, _ := s.AcknowledgeAlert(ctx, id, "usr_2", now.Add(time.Minute)); changed || *a.AcknowledgedBy != "usr_1" {
			t.Fatalf("acknowledged again by: %s", *a.AcknowledgedBy)
		}
		_, _, err = s.AcknowledgeAlert(ctx, "alr_none", "usr_1", now)
		wantKind(t, "acknowledge unknown", err, fault.NotFound)

		var resolved atomic.Int32
		for range 8 {
			wg.Go(func() {
				out, err := s.ApplyEvaluation(ctx, monitoring.Changes{Now: now.Add(time.Minute), Resolve: []string{id}})
				if err != nil {
					t.Error(err)
				}
				resolved.Add(int32(len(out.Resolved)))
			})
		}
		wg.Wait()
		if got, want := resolved.Load(), int32(1); got != want {
			t.Fatalf("resolved: got %d, want %d", got, want)
		}
		_, _, err = s.AcknowledgeAlert(ctx, id, "usr_1", now)
		if fe := fault.As(err); fe == nil || fe.Kind != fault.Conflict || fe.Code != "alert-resolved" {
			t.Fatalf("acknowledge resolved: %v", err)
		}
		// A new alert may open for the subject once the last resolved.
		now = now.Add(2 * time.Minute)
		if out, err := s.ApplyEvaluation(ctx, open()); err != nil || len(out.Opened) != 1 {
			t.Fatalf("reopen: %+v %v", out, err)
		}
		all, _ := s.ListAlerts(ctx, "", 10, "")
		if len(all) != 2 || all[0].State != monitoring.Open || all[1].State != monitoring.Resolved || all[1].ResolvedAt == nil {
			t.Fatalf("all alerts: %+v", all)
		}
		if page, _ := s.ListAlerts(ctx, "", 10, all[0].ID); len(page) != 1 || page[0].ID != all[1].ID {
			t.Fatalf("page before %s: %+v", all[0].ID, page)
		}
		want := []events.Type{events.AlertOpened, events.AlertResolved, events.AlertOpened}
		if got := eventTypes(t, s); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("events: got %v, want %v", got, want)
		}
	})
}

func TestRuleUpdatesAreConditional(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		r, err := s.Rule(ctx, "rul_default_disk_high")
		if err != nil {
			t.Fatal(err)
		}
		var ok, conflicts atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				n := r
				n.Threshold, n.UpdatedAt = float64(50+i), r.UpdatedAt.Add(time.Second)
				err := s.UpdateRule(ctx, n, r.UpdatedAt)
				switch {
				case err == nil:
					ok.Add(1)
				case fault.Is(err, fault.Conflict):
					conflicts.Add(1)
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 || conflicts.Load() != 7 {
			t.Fatalf("updates: %d stored, %d conflicts; want 1 and 7", ok.Load(), conflicts.Load())
		}
		if err := s.DeleteRule(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		wantKind(t, "delete again", s.DeleteRule(ctx, r.ID), fault.NotFound)
		wantKind(t, "update deleted", s.UpdateRule(ctx, r, r.UpdatedAt), fault.NotFound)
	})
}

func TestEvaluationSnapshotReadsWhatTheSeparateReadsDo(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for i, name := range []string{"snap-1", "snap-2", "snap-3"} {
			srv := servers.Server{ID: ids.NewAt(ids.Server, t0.Add(time.Duration(i)*time.Millisecond)), Name: name, Tags: []string{"web"},
				Status: servers.Pending, CreatedAt: t0, UpdatedAt: t0}
			if err := s.CreateServer(ctx, srv, "hash-"+name, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		rule := "rul_default_cpu_high"
		if _, err := s.ApplyEvaluation(ctx, monitoring.Changes{Now: t0, Start: []monitoring.Condition{{RuleID: rule, Key: "srv_x", Since: t0}},
			Open: []monitoring.Alert{{ID: ids.NewAt(monitoring.AlertIDPrefix, t0), RuleID: "rul_default_memory_high", Kind: monitoring.MemoryHigh,
				Severity: monitoring.Warning, Key: "srv_y", Subject: monitoring.AlertSubject{Type: "server", ID: "srv_y", Name: "y"}, Value: 97,
				Threshold: 90, OpenedAt: t0}}}); err != nil {
			t.Fatal(err)
		}
		snap, err := s.EvaluationSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rules, _ := s.Rules(ctx)
		conds, _ := s.Conditions(ctx)
		open, _ := s.OpenAlerts(ctx)
		list, _ := s.ListServers(ctx)
		if len(snap.Rules) != len(rules) || len(rules) == 0 || len(snap.Conditions) != 1 || len(conds) != 1 ||
			snap.Conditions[0] != conds[0] || len(snap.Open) != 1 || len(open) != 1 || snap.Open[0].ID != open[0].ID {
			t.Fatalf("snapshot: %d rules, %+v conditions, %d open; separately %d, %+v, %d", len(snap.Rules), snap.Conditions,
				len(snap.Open), len(rules), conds, len(open))
		}
		if len(snap.Servers) != 3 || len(list) != 3 {
			t.Fatalf("snapshot servers %d, listed %d", len(snap.Servers), len(list))
		}
		byID := map[string]servers.Server{}
		for _, srv := range snap.Servers {
			byID[srv.ID] = srv
		}
		for _, want := range list {
			got := byID[want.ID]
			if got.Name != want.Name || got.Status != want.Status || len(got.Tags) != 1 || got.Tags[0] != "web" || got.Facts != nil {
				t.Errorf("snapshot server %+v, listed %+v", got, want)
			}
		}
	})
}
