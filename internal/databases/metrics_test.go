package databases_test

import (
	"strings"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// TestMonitorList: the agent's list holds the ready instances of its
// server with the admin login's password; the revision changes when an
// instance is added or changes state, and not otherwise.
func TestMonitorList(t *testing.T) {
	r := newRig(t)
	rev0, err := r.dbs.MonitorRevision(r.ctx, r.serverID)
	if err != nil {
		t.Fatal(err)
	}
	reg := r.mustExternal("main", "postgres") // checking: not sampled yet
	rev1, _ := r.dbs.MonitorRevision(r.ctx, r.serverID)
	list, err := r.dbs.MonitorList(r.ctx, r.serverID)
	if err != nil {
		t.Fatal(err)
	}
	if rev1 == rev0 || list.Revision != rev1 || len(list.Instances) != 0 {
		t.Fatalf("after registering: revisions %q → %q, list %+v", rev0, rev1, list)
	}
	r.complete(r.claim(agentproto.JobDBConnect), agentproto.StatusSucceeded, agentproto.DBConnectResult{ServerVersion: "16.4"}, "")
	rev2, _ := r.dbs.MonitorRevision(r.ctx, r.serverID)
	list, err = r.dbs.MonitorList(r.ctx, r.serverID)
	if err != nil {
		t.Fatal(err)
	}
	if rev2 == rev1 || len(list.Instances) != 1 || list.Instances[0].Password != password ||
		list.Instances[0].Target.InstanceID != reg.Instance.ID || list.Instances[0].ContainerName != "" {
		t.Fatalf("after the check: revision %q → %q, list %+v", rev1, rev2, list)
	}
	if again, _ := r.dbs.MonitorRevision(r.ctx, r.serverID); again != rev2 {
		t.Fatalf("revision changed without a change: %q → %q", rev2, again)
	}
	if other, _ := r.dbs.MonitorList(r.ctx, "srv_other"); len(other.Instances) != 0 {
		t.Fatalf("another server's list: %+v", other)
	}
}

// TestIngestMetrics: a bad sample refuses the whole report with the
// field named and nothing stored; samples of instances that are not on
// the agent's server are skipped; a report sent twice is stored once.
func TestIngestMetrics(t *testing.T) {
	r := newRig(t)
	d := r.ready("main", "postgres", "16.4")
	now := time.Now().UTC()
	n := int64(3)
	good := agentproto.DBMetricSample{InstanceID: d.ID, At: now.Add(-time.Minute), Connections: &n}
	for field, bad := range map[string]agentproto.DBMetricSample{
		"samples[1].at":             {InstanceID: d.ID, At: now.Add(-25 * time.Hour)},
		"samples[1].connections":    {InstanceID: d.ID, At: now, Connections: func() *int64 { v := int64(-1); return &v }()},
		"samples[1].instance_id":    {At: now},
		"samples[1].error":          {InstanceID: d.ID, At: now, Error: strings.Repeat("e", 2000)},
		"samples[1].ops_per_second": {InstanceID: d.ID, At: now, OpsPerSecond: func() *float64 { v := -2.0; return &v }()},
	} {
		_, err := r.dbs.IngestMetrics(r.ctx, r.serverID, agentproto.DBMetricsRequest{Samples: []agentproto.DBMetricSample{good, bad}})
		fe := fault.As(err)
		if fe == nil || fe.Kind != fault.Invalid || len(fe.Fields) == 0 || fe.Fields[0].Field != field {
			t.Errorf("bad %s: got %v, want a field error on it", field, err)
		}
	}
	if s, err := r.dbs.Metrics(r.ctx, d.ID, 1, jobs.AdminReader); err != nil || len(s.Points) != 0 {
		t.Fatalf("refused reports stored %d points (%v)", len(s.Points), err)
	}
	report := agentproto.DBMetricsRequest{Samples: []agentproto.DBMetricSample{good, {InstanceID: "db_elsewhere", At: now}}}
	res, err := r.dbs.IngestMetrics(r.ctx, r.serverID, report)
	if err != nil || res.Stored != 1 || res.Skipped != 1 {
		t.Fatalf("ingest: %+v (%v), want 1 stored and 1 skipped", res, err)
	}
	if res, err = r.dbs.IngestMetrics(r.ctx, r.serverID, report); err != nil || res.Stored != 0 {
		t.Fatalf("the same report again: %+v (%v), want nothing stored", res, err)
	}
	if _, err := r.dbs.IngestMetrics(r.ctx, "srv_other", report); err != nil {
		t.Fatal(err)
	}
	got, err := r.dbs.Get(r.ctx, d.ID, jobs.AdminReader)
	if err != nil || got.LastMetrics == nil || *got.LastMetrics.Connections != 3 {
		t.Fatalf("last metrics: %+v (%v)", got.LastMetrics, err)
	}
	for _, h := range []int{0, 2161, -5} {
		if _, err := r.dbs.Metrics(r.ctx, d.ID, h, jobs.AdminReader); !fault.Is(err, fault.Invalid) {
			t.Errorf("hours %d: %v, want invalid", h, err)
		}
	}
}
