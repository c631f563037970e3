package monitoring

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/ids"
	"github.com/capstan-dev/capstan/internal/servers"
)

// Audit actions of this package.
const (
	ActionRuleCreated      = "monitoring.rule.created"
	ActionRuleUpdated      = "monitoring.rule.updated"
	ActionRuleDeleted      = "monitoring.rule.deleted"
	ActionAlertAcknowleged = "monitoring.alert.acknowledged"
)

// Store persists rules and alerts and reads the fleet for evaluation.
type Store interface {
	Evaluator
	HealthStore
	InsertRule(ctx context.Context, r Rule) error
	Rule(ctx context.Context, id string) (Rule, error)
	// UpdateRule stores r if the rule was not changed since prev (its
	// updated_at); otherwise it is a conflict.
	UpdateRule(ctx context.Context, r Rule, prev time.Time) error
	DeleteRule(ctx context.Context, id string) error
	// ListAlerts returns up to limit alerts in state (open, resolved, or
	// "" for all), newest first, before the cursor (an alert id).
	ListAlerts(ctx context.Context, state string, limit int, before string) ([]Alert, error)
	// AcknowledgeAlert records who acknowledged an open alert and reports
	// whether this call did; a resolved one is a conflict. Acknowledging
	// again changes nothing.
	AcknowledgeAlert(ctx context.Context, id, userID string, now time.Time) (Alert, bool, error)
}

// Service manages rules and alerts and evaluates the rules.
type Service struct {
	store   Store
	health  HealthStore
	servers ServerLister
	audit   *audit.Log
	now     func() time.Time
	log     *slog.Logger

	evalMu    sync.Mutex // one evaluation at a time in this process
	evaluated func(time.Duration)
}

// OnEvaluated sets a function told how long each evaluation cycle took.
// Call it before evaluations start.
func (s *Service) OnEvaluated(f func(time.Duration)) { s.evaluated = f }

// NewService returns a monitoring service.
func NewService(st Store, srv ServerLister, log *audit.Log, now func() time.Time, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{store: st, health: st, servers: srv, audit: log, now: now, log: logger}
}

// Rules lists every rule, oldest first.
func (s *Service) Rules(ctx context.Context) ([]Rule, error) {
	list, err := s.store.Rules(ctx)
	for i := range list {
		list[i] = withUnit(list[i])
	}
	return list, err
}

func ruleDetails(r Rule) map[string]any {
	return map[string]any{"kind": r.Kind, "scope": r.Scope, "scope_id": r.ScopeID, "threshold": r.Threshold, "duration": r.Duration,
		"severity": r.Severity, "enabled": r.Enabled}
}

// CreateRule validates and stores a new rule.
func (s *Service) CreateRule(ctx context.Context, c audit.Caller, n NewRule) (Rule, error) {
	now := s.now().UTC()
	r, err := ruleOf(n, ids.NewAt(RuleIDPrefix, now), c.Actor.ID, now)
	if err != nil {
		return Rule{}, err
	}
	if err := s.store.InsertRule(ctx, r); err != nil {
		return Rule{}, err
	}
	return r, s.audit.Record(ctx, c, ActionRuleCreated, audit.Target{Type: "alert_rule", ID: r.ID}, ruleDetails(r))
}

// UpdateRule changes a rule's name, threshold, duration, severity or
// enabled flag.
func (s *Service) UpdateRule(ctx context.Context, c audit.Caller, id string, p RulePatch) (Rule, error) {
	cur, err := s.store.Rule(ctx, id)
	if err != nil {
		return Rule{}, err
	}
	r, err := p.apply(withUnit(cur), s.now().UTC())
	if err != nil {
		return Rule{}, err
	}
	if err := s.store.UpdateRule(ctx, r, cur.UpdatedAt); err != nil {
		return Rule{}, err
	}
	return r, s.audit.Record(ctx, c, ActionRuleUpdated, audit.Target{Type: "alert_rule", ID: r.ID}, ruleDetails(r))
}

// DeleteRule deletes a rule; its open alerts resolve at the next
// evaluation.
func (s *Service) DeleteRule(ctx context.Context, c audit.Caller, id string) error {
	r, err := s.store.Rule(ctx, id)
	if err != nil {
		return err
	}
	if err := s.store.DeleteRule(ctx, id); err != nil {
		return err
	}
	return s.audit.Record(ctx, c, ActionRuleDeleted, audit.Target{Type: "alert_rule", ID: id}, ruleDetails(r))
}

// Alerts lists alerts in a state ("open", "resolved" or "all"), newest
// first.
func (s *Service) Alerts(ctx context.Context, state string, limit int, before string) ([]Alert, error) {
	if state == "all" {
		state = ""
	}
	list, err := s.store.ListAlerts(ctx, state, limit, before)
	for i := range list {
		list[i] = alertWithUnit(list[i])
	}
	return list, err
}

func alertWithUnit(a Alert) Alert {
	if sp, ok := SpecOf(a.Kind); ok {
		a.Unit = sp.Unit
	}
	return a
}

// Acknowledge records that a user has seen an open alert.
func (s *Service) Acknowledge(ctx context.Context, c audit.Caller, id string) (Alert, error) {
	a, changed, err := s.store.AcknowledgeAlert(ctx, id, c.Actor.ID, s.now().UTC())
	if err != nil || !changed {
		return alertWithUnit(a), err
	}
	return alertWithUnit(a), s.audit.Record(ctx, c, ActionAlertAcknowleged, audit.Target{Type: "alert", ID: id}, map[string]any{"kind": a.Kind, "subject_id": a.Subject.ID})
}

// Evaluate evaluates every enabled rule now: it opens alerts whose
// condition has held for the rule's duration and resolves those whose
// condition cleared.
func (s *Service) Evaluate(ctx context.Context) (Outcome, error) {
	s.evalMu.Lock()
	defer s.evalMu.Unlock()
	if s.evaluated != nil {
		start := time.Now()
		defer func() { s.evaluated(time.Since(start)) }()
	}
	snap, err := s.store.EvaluationSnapshot(ctx)
	if err != nil {
		return Outcome{}, err
	}
	f := &fleet{now: s.now().UTC(), servers: make(map[string]servers.Server, len(snap.Servers)),
		samples: make(map[string]ServerSample, len(snap.Samples)), apps: snap.Apps, domains: snap.Domains,
		backups: snap.Backups}
	rules := snap.Rules
	for i := range rules {
		rules[i] = withUnit(rules[i])
	}
	for _, srv := range s.servers.WithStatus(snap.Servers) {
		f.servers[srv.ID] = srv
	}
	for _, sm := range snap.Samples {
		f.samples[sm.ServerID] = sm
	}
	conds, open := snap.Conditions, snap.Open
	c := plan(f, rules, conds, open, func() string { return ids.NewAt(AlertIDPrefix, f.now) })
	if len(c.Start)+len(c.Drop)+len(c.Open)+len(c.Resolve) == 0 {
		return Outcome{Opened: []Alert{}, Resolved: []Alert{}}, nil
	}
	out, err := s.store.ApplyEvaluation(ctx, c)
	if err != nil {
		return Outcome{}, err
	}
	for i := range out.Opened {
		out.Opened[i] = alertWithUnit(out.Opened[i])
	}
	for i := range out.Resolved {
		out.Resolved[i] = alertWithUnit(out.Resolved[i])
	}
	if n := len(out.Opened) + len(out.Resolved); n > 0 {
		s.log.Info("alerts evaluated", "opened", len(out.Opened), "resolved", len(out.Resolved))
	}
	return out, nil
}

// HealthStore records applications' health probes.
type HealthStore interface {
	// SetAppHealth records the probes of applications on serverID (others
	// are ignored): failing_since is kept while probes keep failing.
	SetAppHealth(ctx context.Context, serverID string, probes []agentproto.AppProbe, now time.Time) error
	// HealthTargets returns the applications on serverID with a live
	// release, to probe.
	HealthTargets(ctx context.Context, serverID string) ([]agentproto.HealthTarget, error)
}

// HealthTargets returns the applications an agent probes: every
// application of its server, of every kind, with a live release.
func (s *Service) HealthTargets(ctx context.Context, serverID string) (agentproto.HealthTargets, error) {
	apps, err := s.health.HealthTargets(ctx, serverID)
	if err != nil {
		return agentproto.HealthTargets{}, err
	}
	return agentproto.HealthTargets{Apps: apps}, nil
}

// RecordHealth stores an agent's health report.
func (s *Service) RecordHealth(ctx context.Context, serverID string, rep agentproto.HealthReport) error {
	if len(rep.Probes) > agentproto.MaxHealthProbes {
		return fault.Invalidf("probes", "at most %d probes", agentproto.MaxHealthProbes)
	}
	now := s.now().UTC()
	var errs fault.Fields
	for i, p := range rep.Probes {
		if p.AppID == "" || len(p.AppID) > 64 || len(p.DeploymentID) > 64 {
			errs.Add(fmt.Sprintf("probes[%d].app_id", i), "must be an application id")
		}
		if p.At.IsZero() || p.At.After(now.Add(2*time.Minute)) {
			errs.Add(fmt.Sprintf("probes[%d].at", i), "must be a time, not in the future")
		}
		if p.StatusCode < 0 || p.StatusCode > 999 {
			errs.Add(fmt.Sprintf("probes[%d].status_code", i), "must be an HTTP status or 0")
		}
		if len(p.Error) > 1000 {
			rep.Probes[i].Error = p.Error[:1000]
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	return s.health.SetAppHealth(ctx, serverID, rep.Probes, now)
}
