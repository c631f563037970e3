package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/monitoring"
	"github.com/capstan-dev/capstan/internal/servers"
)

var _ monitoring.Store = (*Store)(nil)

const ruleColumns = `id, kind, name, scope, scope_id, threshold, duration_seconds, severity, enabled, created_by, created_at, updated_at`

type ruleRow struct {
	ID        string  `db:"id"`
	Kind      string  `db:"kind"`
	Name      string  `db:"name"`
	Scope     string  `db:"scope"`
	ScopeID   string  `db:"scope_id"`
	Threshold float64 `db:"threshold"`
	Duration  int     `db:"duration_seconds"`
	Severity  string  `db:"severity"`
	Enabled   int     `db:"enabled"`
	CreatedBy string  `db:"created_by"`
	CreatedAt int64   `db:"created_at"`
	UpdatedAt int64   `db:"updated_at"`
}

func (r ruleRow) rule() monitoring.Rule {
	return monitoring.Rule{ID: r.ID, Kind: monitoring.Kind(r.Kind), Name: r.Name, Scope: r.Scope, ScopeID: r.ScopeID, Threshold: r.Threshold,
		Duration: r.Duration, Severity: r.Severity, Enabled: r.Enabled == 1, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt),
		UpdatedAt: fromMS(r.UpdatedAt)}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// InsertRule stores a new alert rule.
func (s *Store) InsertRule(ctx context.Context, r monitoring.Rule) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO alert_rules (`+ruleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, string(r.Kind), r.Name, r.Scope, r.ScopeID, r.Threshold, r.Duration, r.Severity, boolInt(r.Enabled), r.CreatedBy,
		ms(r.CreatedAt), ms(r.UpdatedAt))
	return err
}

// Rules returns every alert rule, oldest first.
func (s *Store) Rules(ctx context.Context) ([]monitoring.Rule, error) { return s.rules(ctx, s.r) }

func (s *Store) rules(ctx context.Context, q sqlx.QueryerContext) ([]monitoring.Rule, error) {
	return selectAll(ctx, q, always(ruleRow.rule), `SELECT `+ruleColumns+` FROM alert_rules ORDER BY created_at, id`)
}

// Rule returns an alert rule.
func (s *Store) Rule(ctx context.Context, id string) (monitoring.Rule, error) {
	return getOne(ctx, s.r, always(ruleRow.rule), "alert rule", s.rebind(`SELECT `+ruleColumns+` FROM alert_rules WHERE id = ?`), id)
}

// UpdateRule stores a changed rule if nobody changed it since prev.
func (s *Store) UpdateRule(ctx context.Context, r monitoring.Rule, prev time.Time) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE alert_rules SET name = ?, threshold = ?, duration_seconds = ?, severity = ?, enabled = ?,
		updated_at = ? WHERE id = ? AND updated_at = ?`), r.Name, r.Threshold, r.Duration, r.Severity, boolInt(r.Enabled), ms(r.UpdatedAt),
		r.ID, ms(prev))
	return mustChange(res, err, func() error { _, err := s.Rule(ctx, r.ID); return err },
		fault.Conflictf("rule-changed", "The rule was changed at the same time; read it again and retry."))
}

// DeleteRule deletes an alert rule and its pending conditions.
func (s *Store) DeleteRule(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM alert_rules WHERE id = ?`), id)
	return mustAffect(res, err, "alert rule")
}

// Conditions returns every condition holding without an alert yet.
func (s *Store) Conditions(ctx context.Context) ([]monitoring.Condition, error) {
	return s.conditions(ctx, s.r)
}

func (s *Store) conditions(ctx context.Context, q sqlx.QueryerContext) ([]monitoring.Condition, error) {
	var rows []struct {
		RuleID  string `db:"rule_id"`
		Subject string `db:"subject"`
		Since   int64  `db:"since"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT rule_id, subject, since FROM alert_conditions`); err != nil {
		return nil, err
	}
	out := make([]monitoring.Condition, len(rows))
	for i, r := range rows {
		out[i] = monitoring.Condition{RuleID: r.RuleID, Key: r.Subject, Since: fromMS(r.Since)}
	}
	return out, nil
}

const alertColumns = `id, rule_id, kind, severity, subject, subject_type, subject_id, subject_name, detail, value, threshold, state,
	opened_at, resolved_at, acknowledged_by, acknowledged_at`

type alertRow struct {
	ID             string         `db:"id"`
	RuleID         string         `db:"rule_id"`
	Kind           string         `db:"kind"`
	Severity       string         `db:"severity"`
	Subject        string         `db:"subject"`
	SubjectType    string         `db:"subject_type"`
	SubjectID      string         `db:"subject_id"`
	SubjectName    string         `db:"subject_name"`
	Detail         string         `db:"detail"`
	Value          float64        `db:"value"`
	Threshold      float64        `db:"threshold"`
	State          string         `db:"state"`
	OpenedAt       int64          `db:"opened_at"`
	ResolvedAt     sql.NullInt64  `db:"resolved_at"`
	AcknowledgedBy sql.NullString `db:"acknowledged_by"`
	AcknowledgedAt sql.NullInt64  `db:"acknowledged_at"`
}

func (r alertRow) alert() monitoring.Alert {
	a := monitoring.Alert{ID: r.ID, RuleID: r.RuleID, Kind: monitoring.Kind(r.Kind), Severity: r.Severity, Key: r.Subject,
		Subject: monitoring.AlertSubject{Type: r.SubjectType, ID: r.SubjectID, Name: r.SubjectName, Detail: r.Detail},
		Value:   r.Value, Threshold: r.Threshold, State: r.State, OpenedAt: fromMS(r.OpenedAt), ResolvedAt: nullMS(r.ResolvedAt),
		AcknowledgedAt: nullMS(r.AcknowledgedAt)}
	if r.AcknowledgedBy.Valid {
		a.AcknowledgedBy = &r.AcknowledgedBy.String
	}
	return a
}

func (s *Store) alertsWhere(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) ([]monitoring.Alert, error) {
	return selectAll(ctx, q, always(alertRow.alert), s.rebind(`SELECT `+alertColumns+` FROM alerts WHERE `+where), args...)
}

// OpenAlerts returns every open alert.
func (s *Store) OpenAlerts(ctx context.Context) ([]monitoring.Alert, error) {
	return s.alertsWhere(ctx, s.r, `state = 'open'`)
}

// ListAlerts returns up to limit alerts in state ("" for all), newest
// first, before the cursor.
func (s *Store) ListAlerts(ctx context.Context, state string, limit int, before string) ([]monitoring.Alert, error) {
	var c conds
	c.equal("state", state)
	if before != "" {
		c.add("id < ?", before)
	}
	return s.alertsWhere(ctx, s.r, c.where()+` ORDER BY id DESC LIMIT ?`, append(c.args, limit)...)
}

// AcknowledgeAlert records who acknowledged an open alert, and reports
// whether this call did (false when someone had already).
func (s *Store) AcknowledgeAlert(ctx context.Context, id, userID string, now time.Time) (monitoring.Alert, bool, error) {
	var out monitoring.Alert
	var changed bool
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE alerts SET acknowledged_by = ?, acknowledged_at = ?
			WHERE id = ? AND state = 'open' AND acknowledged_at IS NULL`), userID, ms(now), id)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		list, err := s.alertsWhere(ctx, tx, `id = ?`, id)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return fault.NotFoundf("No such alert.")
		}
		if out = list[0]; out.State != monitoring.Open {
			return fault.Conflictf("alert-resolved", "The alert is resolved; only an open alert can be acknowledged.")
		}
		return nil
	})
	return out, changed, err
}

func alertEvent(typ events.Type, a monitoring.Alert, at time.Time) (events.Event, error) {
	return events.New(typ, events.Subject{Type: "alert", ID: a.ID}, events.AlertPayload{AlertID: a.ID, RuleID: a.RuleID, Kind: string(a.Kind),
		Severity: a.Severity, SubjectType: a.Subject.Type, SubjectID: a.Subject.ID, SubjectName: a.Subject.Name, Detail: a.Subject.Detail,
		Value: a.Value, Threshold: a.Threshold, Acknowledged: a.AcknowledgedAt != nil}, at)
}

// ApplyEvaluation applies an evaluation's changes in one transaction and
// publishes alert.opened and alert.resolved for what it changed.
func (s *Store) ApplyEvaluation(ctx context.Context, c monitoring.Changes) (monitoring.Outcome, error) {
	var out monitoring.Outcome
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		out = monitoring.Outcome{Opened: []monitoring.Alert{}, Resolved: []monitoring.Alert{}}
		for _, d := range c.Drop {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM alert_conditions WHERE rule_id = ? AND subject = ?`), d.RuleID, d.Key); err != nil {
				return err
			}
		}
		for _, st := range c.Start {
			// The rule may have been deleted since it was read.
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO alert_conditions (rule_id, subject, since)
				SELECT id, ?, ? FROM alert_rules WHERE id = ? ON CONFLICT (rule_id, subject) DO NOTHING`),
				st.Key, ms(st.Since), st.RuleID); err != nil {
				return err
			}
		}
		for _, a := range c.Open {
			res, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO alerts (id, rule_id, kind, severity, subject, subject_type, subject_id,
				subject_name, detail, value, threshold, state, opened_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?)
				ON CONFLICT (rule_id, subject) WHERE state = 'open' DO NOTHING`),
				a.ID, a.RuleID, string(a.Kind), a.Severity, a.Key, a.Subject.Type, a.Subject.ID, a.Subject.Name, a.Subject.Detail,
				a.Value, a.Threshold, ms(a.OpenedAt))
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue // another evaluation opened it
			}
			ev, err := alertEvent(events.AlertOpened, a, c.Now)
			if err != nil {
				return err
			}
			if err := publishTx(ctx, tx, ev); err != nil {
				return err
			}
			out.Opened = append(out.Opened, a)
		}
		for _, id := range c.Resolve {
			res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE alerts SET state = 'resolved', resolved_at = ? WHERE id = ? AND state = 'open'`),
				ms(c.Now), id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue
			}
			list, err := s.alertsWhere(ctx, tx, `id = ?`, id)
			if err != nil || len(list) == 0 {
				return err
			}
			ev, err := alertEvent(events.AlertResolved, list[0], c.Now)
			if err != nil {
				return err
			}
			if err := publishTx(ctx, tx, ev); err != nil {
				return err
			}
			out.Resolved = append(out.Resolved, list[0])
		}
		return nil
	})
	if err == nil && len(out.Opened)+len(out.Resolved) > 0 {
		s.published()
	}
	return out, err
}

// LatestServerSamples returns every server's newest sample with its swap
// and filesystems.
func (s *Store) LatestServerSamples(ctx context.Context) ([]monitoring.ServerSample, error) {
	return s.latestServerSamples(ctx, s.r)
}

func (s *Store) latestServerSamples(ctx context.Context, q sqlx.QueryerContext) ([]monitoring.ServerSample, error) {
	var rows []struct {
		ServerID    string          `db:"server_id"`
		At          int64           `db:"at"`
		CPU         float64         `db:"cpu_percent"`
		Memory      sql.NullFloat64 `db:"memory_used_percent"`
		Swap        sql.NullFloat64 `db:"swap_used_percent"`
		SwapTotal   int64           `db:"swap_total"`
		Filesystems string          `db:"filesystems"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT m.server_id, m.at, m.cpu_percent, m.memory_used_percent, m.swap_used_percent,
		m.swap_total, m.filesystems FROM metric_latest l JOIN metric_samples m ON m.server_id = l.server_id AND m.at = l.at`); err != nil {
		return nil, err
	}
	out := make([]monitoring.ServerSample, len(rows))
	for i, r := range rows {
		out[i] = monitoring.ServerSample{ServerID: r.ServerID, At: fromMS(r.At), CPUPercent: r.CPU, MemoryUsedPercent: nullFloat(r.Memory)}
		if r.SwapTotal > 0 {
			out[i].SwapUsedPercent = nullFloat(r.Swap)
		}
		if err := json.Unmarshal([]byte(r.Filesystems), &out[i].Filesystems); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AppHealth returns the latest health probe of every application.
func (s *Store) AppHealth(ctx context.Context) ([]monitoring.AppHealth, error) {
	return s.appHealth(ctx, s.r)
}

func (s *Store) appHealth(ctx context.Context, q sqlx.QueryerContext) ([]monitoring.AppHealth, error) {
	var rows []struct {
		AppID        string        `db:"app_id"`
		Name         string        `db:"name"`
		ServerID     string        `db:"server_id"`
		Healthy      int           `db:"healthy"`
		FailingSince sql.NullInt64 `db:"failing_since"`
		StatusCode   int           `db:"status_code"`
		LastError    string        `db:"last_error"`
		ProbedAt     int64         `db:"probed_at"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT h.app_id, a.name, h.server_id, h.healthy, h.failing_since, h.status_code,
		h.last_error, h.probed_at FROM app_health h JOIN applications a ON a.id = h.app_id`); err != nil {
		return nil, err
	}
	out := make([]monitoring.AppHealth, len(rows))
	for i, r := range rows {
		out[i] = monitoring.AppHealth{AppID: r.AppID, AppName: r.Name, ServerID: r.ServerID, Healthy: r.Healthy == 1,
			FailingSince: nullMS(r.FailingSince), StatusCode: r.StatusCode, LastError: r.LastError, ProbedAt: fromMS(r.ProbedAt)}
	}
	return out, nil
}

// DomainCertificates returns the certificate each domain served at its
// last check.
func (s *Store) DomainCertificates(ctx context.Context) ([]monitoring.DomainCertificate, error) {
	return s.domainCertificates(ctx, s.r)
}

func (s *Store) domainCertificates(ctx context.Context, q sqlx.QueryerContext) ([]monitoring.DomainCertificate, error) {
	var rows []struct {
		ID        string         `db:"id"`
		Hostname  string         `db:"hostname"`
		AppID     string         `db:"app_id"`
		ServerID  string         `db:"server_id"`
		TLSMode   string         `db:"tls_mode"`
		Result    sql.NullString `db:"check_result"`
		CheckedAt sql.NullInt64  `db:"checked_at"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `SELECT id, hostname, app_id, server_id, tls_mode, check_result, checked_at FROM domains`); err != nil {
		return nil, err
	}
	out := make([]monitoring.DomainCertificate, len(rows))
	for i, r := range rows {
		out[i] = monitoring.DomainCertificate{DomainID: r.ID, Hostname: r.Hostname, AppID: r.AppID, ServerID: r.ServerID, TLSMode: r.TLSMode,
			CheckedAt: nullMS(r.CheckedAt)}
		if r.Result.Valid && r.Result.String != "" {
			// The stored check is a domains.DomainCheck.
			var res struct {
				CertNotAfter  *time.Time `json:"cert_not_after"`
				CertNotBefore *time.Time `json:"cert_not_before"`
			}
			if err := json.Unmarshal([]byte(r.Result.String), &res); err == nil && res.CertNotAfter != nil {
				t := res.CertNotAfter.UTC()
				out[i].NotAfter = &t
				if res.CertNotBefore != nil && res.CertNotBefore.Before(t) {
					b := res.CertNotBefore.UTC()
					out[i].NotBefore = &b
				}
			}
		}
	}
	return out, nil
}

// SetAppHealth records the probes of the applications on serverID; probes
// of applications elsewhere, or older than the stored one, are ignored.
func (s *Store) SetAppHealth(ctx context.Context, serverID string, probes []agentproto.AppProbe, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		for _, p := range probes {
			var failing any
			if !p.Healthy {
				failing = ms(p.At)
			}
			// failing_since keeps the first failure of a run of failures.
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO app_health (app_id, server_id, healthy, failing_since, status_code, last_error, probed_at)
				SELECT id, server_id, ?, ?, ?, ?, ? FROM applications WHERE id = ? AND server_id = ?
				ON CONFLICT (app_id) DO UPDATE SET server_id = excluded.server_id, healthy = excluded.healthy,
					failing_since = CASE WHEN excluded.healthy = 1 THEN NULL ELSE COALESCE(app_health.failing_since, excluded.failing_since) END,
					status_code = excluded.status_code, last_error = excluded.last_error, probed_at = excluded.probed_at
				WHERE app_health.probed_at <= excluded.probed_at`),
				boolInt(p.Healthy), failing, p.StatusCode, p.Error, ms(p.At), p.AppID, serverID); err != nil {
				return err
			}
		}
		return nil
	})
}

// HealthTargets returns the applications on serverID with a live
// release (a current deployment, not being removed) with the live
// deployment's health path and container port, by id.
func (s *Store) HealthTargets(ctx context.Context, serverID string) ([]agentproto.HealthTarget, error) {
	var rows []struct {
		ID           string `db:"id"`
		Kind         string `db:"kind"`
		DeploymentID string `db:"deployment_id"`
		Spec         string `db:"spec"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT a.id, a.kind, d.id AS deployment_id, d.spec FROM applications a
		JOIN deployments d ON d.id = a.current_deployment_id WHERE a.server_id = ? AND a.state = 'active' ORDER BY a.id`), serverID); err != nil {
		return nil, err
	}
	out := make([]agentproto.HealthTarget, 0, len(rows))
	for _, r := range rows {
		// The spec is an apps.Spec.
		var spec struct {
			HealthPath    string `json:"health_path"`
			ContainerPort int    `json:"container_port"`
		}
		if err := json.Unmarshal([]byte(r.Spec), &spec); err != nil {
			return nil, fmt.Errorf("deployment %s: reading its spec: %w", r.DeploymentID, err)
		}
		t := agentproto.HealthTarget{AppID: r.ID, Kind: r.Kind, DeploymentID: r.DeploymentID, HealthPath: spec.HealthPath,
			ContainerPort: spec.ContainerPort}
		if t.Kind == agentproto.AppKindService {
			t.ContainerPort = 0
		}
		out = append(out, t)
	}
	return out, nil
}

// DomainsDueForCheck returns up to limit domains with auto or internal
// TLS whose last check finished before before (or that were never
// checked), and whose check is not queued or running.
func (s *Store) DomainsDueForCheck(ctx context.Context, before time.Time, limit int) ([]string, error) {
	var out []string
	err := s.r.SelectContext(ctx, &out, s.rebind(`SELECT d.id FROM domains d LEFT JOIN jobs j ON j.id = d.check_job_id
		WHERE d.tls_mode IN ('auto', 'internal') AND (d.checked_at IS NULL OR d.checked_at < ?)
		AND (j.id IS NULL OR j.status NOT IN ('queued', 'running')) ORDER BY d.checked_at, d.id LIMIT ?`), ms(before), limit)
	return out, err
}

// EvaluationSnapshot reads what an alert evaluation needs, in one read
// transaction: one connection is taken from the pool once (not once per
// query, each time queueing behind the agents' requests), and the reads
// see one state of the database.
func (s *Store) EvaluationSnapshot(ctx context.Context) (monitoring.Snapshot, error) {
	var snap monitoring.Snapshot
	opts := &sql.TxOptions{}
	if s.dialect == Postgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := s.r.BeginTxx(ctx, opts)
	if err != nil {
		return snap, err
	}
	defer tx.Rollback() //nolint:errcheck // read only
	if snap.Rules, err = s.rules(ctx, tx); err != nil {
		return snap, err
	}
	if snap.Conditions, err = s.conditions(ctx, tx); err != nil {
		return snap, err
	}
	if snap.Open, err = s.alertsWhere(ctx, tx, `state = 'open'`); err != nil {
		return snap, err
	}
	var rows []struct {
		ID         string        `db:"id"`
		Name       string        `db:"name"`
		Tags       string        `db:"tags"`
		Status     string        `db:"status"`
		LastSeenAt sql.NullInt64 `db:"last_seen_at"`
	}
	// Only what evaluation looks at: not the facts, whose JSON is most of
	// a server row.
	if err := tx.SelectContext(ctx, &rows, `SELECT id, name, tags, status, last_seen_at FROM servers`); err != nil {
		return snap, err
	}
	snap.Servers = make([]servers.Server, len(rows))
	for i, r := range rows {
		srv := servers.Server{ID: r.ID, Name: r.Name, Status: r.Status, LastSeenAt: nullMS(r.LastSeenAt)}
		if r.Tags != "" && r.Tags != "[]" {
			if err := json.Unmarshal([]byte(r.Tags), &srv.Tags); err != nil {
				return snap, err
			}
		}
		snap.Servers[i] = srv
	}
	if snap.Samples, err = s.latestServerSamples(ctx, tx); err != nil {
		return snap, err
	}
	if snap.Apps, err = s.appHealth(ctx, tx); err != nil {
		return snap, err
	}
	if snap.Domains, err = s.domainCertificates(ctx, tx); err != nil {
		return snap, err
	}
	if snap.Backups, err = s.monitoringBackupAges(ctx, tx); err != nil {
		return snap, err
	}
	return snap, tx.Commit()
}
