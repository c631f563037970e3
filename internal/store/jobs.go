package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

var _ jobs.Store = (*Store)(nil)

const jobColumns = `id, server_id, type, status, payload, secrets != '' AS has_secrets, idempotency_key, request_hash, created_by,
	timeout_seconds, lease_seconds, created_at, updated_at, started_at, lease_expires_at, deadline_at, finished_at, error, data, output,
	hook_pending_at, late_status, late_error, late_data, late_at, acked_at, requeues, queue_deadline_at, app_id`

type jobRow struct {
	ID             string         `db:"id"`
	ServerID       string         `db:"server_id"`
	Type           string         `db:"type"`
	Status         string         `db:"status"`
	Payload        string         `db:"payload"`
	HasSecrets     bool           `db:"has_secrets"`
	IdempotencyKey sql.NullString `db:"idempotency_key"`
	RequestHash    string         `db:"request_hash"`
	CreatedBy      string         `db:"created_by"`
	TimeoutSeconds int            `db:"timeout_seconds"`
	LeaseSeconds   int            `db:"lease_seconds"`
	CreatedAt      int64          `db:"created_at"`
	UpdatedAt      int64          `db:"updated_at"`
	StartedAt      sql.NullInt64  `db:"started_at"`
	LeaseExpiresAt sql.NullInt64  `db:"lease_expires_at"`
	DeadlineAt     sql.NullInt64  `db:"deadline_at"`
	FinishedAt     sql.NullInt64  `db:"finished_at"`
	Error          sql.NullString `db:"error"`
	Data           sql.NullString `db:"data"`
	Output         sql.NullString `db:"output"`
	HookPendingAt  sql.NullInt64  `db:"hook_pending_at"`
	LateStatus     sql.NullString `db:"late_status"`
	LateError      sql.NullString `db:"late_error"`
	LateData       sql.NullString `db:"late_data"`
	LateAt         sql.NullInt64  `db:"late_at"`
	AckedAt        sql.NullInt64  `db:"acked_at"`
	Requeues       int            `db:"requeues"`
	QueueDeadline  sql.NullInt64  `db:"queue_deadline_at"`
	AppID          sql.NullString `db:"app_id"`
}

func rawOrNil(s sql.NullString) json.RawMessage {
	if !s.Valid || s.String == "" {
		return nil
	}
	return json.RawMessage(s.String)
}

func (r jobRow) job() jobs.Job {
	j := jobs.Job{ID: r.ID, ServerID: r.ServerID, Type: r.Type, Status: jobs.Status(r.Status), Payload: json.RawMessage(r.Payload),
		HasSecrets: r.HasSecrets, IdempotencyKey: r.IdempotencyKey.String, RequestHash: r.RequestHash, CreatedBy: r.CreatedBy,
		TimeoutSeconds: r.TimeoutSeconds, LeaseSeconds: r.LeaseSeconds, CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt),
		StartedAt: nullMS(r.StartedAt), LeaseExpiresAt: nullMS(r.LeaseExpiresAt), DeadlineAt: nullMS(r.DeadlineAt),
		FinishedAt: nullMS(r.FinishedAt), Data: rawOrNil(r.Data), Output: rawOrNil(r.Output), HookPendingAt: nullMS(r.HookPendingAt),
		AckedAt: nullMS(r.AckedAt), Requeues: r.Requeues, QueueDeadlineAt: nullMS(r.QueueDeadline), AppID: r.AppID.String}
	if r.Error.Valid {
		e := r.Error.String
		j.Error = &e
	}
	if r.LateStatus.Valid && r.LateAt.Valid {
		j.LateResult = &jobs.LateResult{Status: jobs.Status(r.LateStatus.String), Data: rawOrNil(r.LateData), At: fromMS(r.LateAt.Int64)}
		if r.LateError.Valid {
			e := r.LateError.String
			j.LateResult.Error = &e
		}
	}
	return j
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullRaw(b json.RawMessage) sql.NullString {
	if len(b) == 0 {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

// InsertJob stores a new queued job.
func (s *Store) InsertJob(ctx context.Context, j jobs.Job, sealedSecrets string) error {
	var queueDeadline sql.NullInt64
	if j.QueueDeadlineAt != nil {
		queueDeadline = sql.NullInt64{Int64: ms(*j.QueueDeadlineAt), Valid: true}
	}
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO jobs (id, server_id, type, status, payload, secrets, idempotency_key, request_hash,
		created_by, timeout_seconds, lease_seconds, created_at, updated_at, queue_deadline_at, app_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		j.ID, j.ServerID, j.Type, string(j.Status), string(j.Payload), sealedSecrets, nullString(j.IdempotencyKey), j.RequestHash,
		j.CreatedBy, j.TimeoutSeconds, j.LeaseSeconds, ms(j.CreatedAt), ms(j.UpdatedAt), queueDeadline, nullString(j.AppID))
	if isUniqueViolation(err) {
		return fault.Conflictf("idempotency-key", "A job with this idempotency key exists.")
	}
	return err
}

func (s *Store) jobWhere(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) (jobs.Job, error) {
	return getOne(ctx, q, always(s.jobOf), "job", s.rebind(`SELECT `+jobColumns+` FROM jobs WHERE `+where), args...)
}

// JobByIdempotencyKey returns the server's job created with key.
func (s *Store) JobByIdempotencyKey(ctx context.Context, serverID, key string) (jobs.Job, error) {
	return s.jobWhere(ctx, s.r, "server_id = ? AND idempotency_key = ?", serverID, key)
}

// Job returns a job.
func (s *Store) Job(ctx context.Context, id string) (jobs.Job, error) {
	return s.jobWhere(ctx, s.r, "id = ?", id)
}

// JobEvents returns a job's events in order.
func (s *Store) JobEvents(ctx context.Context, id string) ([]jobs.Event, error) {
	var rows []struct {
		Seq     int            `db:"seq"`
		At      int64          `db:"at"`
		Level   string         `db:"level"`
		Message string         `db:"message"`
		Data    sql.NullString `db:"data"`
	}
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT seq, at, level, message, data FROM job_events WHERE job_id = ? ORDER BY seq`), id); err != nil {
		return nil, err
	}
	out := make([]jobs.Event, len(rows))
	for i, r := range rows {
		msg := r.Message
		if m := s.open(eventSealContext("message", id, r.Seq), sql.NullString{String: msg, Valid: true}); m.Valid {
			msg = m.String // else a message stored in plain text that happens to start like a sealed one
		}
		out[i] = jobs.Event{Seq: r.Seq, At: fromMS(r.At), Level: r.Level, Message: msg,
			Data: rawOrNil(s.open(eventSealContext("data", id, r.Seq), r.Data))}
	}
	return out, nil
}

// ListJobs returns the jobs f selects, newest first, with the names of
// their server, application and creating user. The newest jobs are picked
// first, through the index of the filter (server, application, type,
// status or creator, each with the id), and only those few are joined to
// the names.
func (s *Store) ListJobs(ctx context.Context, f jobs.ListFilter, limit int) ([]jobs.Job, error) {
	var c conds
	c.equal("server_id", f.ServerID)
	c.equal("app_id", f.AppID)
	c.equal("type", f.Type)
	c.equal("status", string(f.Status))
	switch {
	case f.Actor == "":
	case f.Actor == jobs.ActorSystem:
		c.add("created_by = ''")
	case strings.Contains(f.Actor, "@"):
		c.add("created_by = (SELECT id FROM users WHERE email = ?)", strings.ToLower(strings.TrimSpace(f.Actor)))
	default:
		c.add("created_by = ?", f.Actor)
	}
	var rows []struct {
		jobRow
		ServerName sql.NullString `db:"server_name"`
		AppName    sql.NullString `db:"app_name"`
		ActorEmail sql.NullString `db:"actor_email"`
	}
	err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT j.*, s.name AS server_name, a.name AS app_name, u.email AS actor_email
		FROM (SELECT `+jobColumns+` FROM jobs WHERE `+c.where()+` ORDER BY id DESC LIMIT ?) j
		LEFT JOIN servers s ON s.id = j.server_id LEFT JOIN applications a ON a.id = j.app_id LEFT JOIN users u ON u.id = j.created_by
		ORDER BY j.id DESC`), append(c.args, limit)...)
	if err != nil {
		return nil, err
	}
	out := make([]jobs.Job, len(rows))
	for i, r := range rows {
		out[i] = s.jobOf(r.jobRow)
		out[i].ServerName, out[i].AppName, out[i].ActorEmail = r.ServerName.String, r.AppName.String, r.ActorEmail.String
	}
	return out, nil
}

// JobNames returns the name of a server and of an application and the
// e-mail of a user; "" for each that is unknown.
func (s *Store) JobNames(ctx context.Context, serverID, appID, createdBy string) (serverName, appName, email string, err error) {
	var r struct {
		Server sql.NullString `db:"server_name"`
		App    sql.NullString `db:"app_name"`
		Email  sql.NullString `db:"email"`
	}
	err = s.r.GetContext(ctx, &r, s.rebind(`SELECT (SELECT name FROM servers WHERE id = ?) AS server_name,
		(SELECT name FROM applications WHERE id = ?) AS app_name, (SELECT email FROM users WHERE id = ?) AS email`),
		serverID, appID, createdBy)
	return r.Server.String, r.App.String, r.Email.String, err
}

// CancelJob cancels a queued job. The update is conditional on the job
// still being queued: a claim that took it first leaves it running, and
// the cancel is a conflict.
func (s *Store) CancelJob(ctx context.Context, id string, now time.Time) (jobs.Job, error) {
	var j jobs.Job
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'cancelled', error = 'cancelled', finished_at = ?, updated_at = ?,
			data = NULL, secrets = '', hook_pending_at = ? WHERE id = ? AND status = 'queued'`), ms(now), ms(now), ms(now), id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		cur, err := s.jobWhere(ctx, tx, "id = ?", id)
		if err != nil {
			return err
		}
		if n != 1 {
			return fault.Conflictf("job-not-queued", "Only a queued job can be cancelled; this one is %s.", cur.Status)
		}
		j = cur
		return nil
	})
	return j, err
}

// ClaimJob moves the oldest queued job of the server to running, its claim
// not acknowledged yet. Most
// claims find nothing: that is found out with a read, and only a claim
// that has a job to take opens a write transaction.
func (s *Store) ClaimJob(ctx context.Context, serverID string, now time.Time) (jobs.Job, bool, error) {
	var queued int
	err := s.getR(ctx, &queued, `SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE server_id = ? AND status = 'queued' LIMIT 1) q`, serverID)
	if err != nil || queued == 0 {
		return jobs.Job{}, false, err
	}
	var j jobs.Job
	var ok bool
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		for attempt := 0; attempt < 3; attempt++ {
			var id string
			err := tx.GetContext(ctx, &id, tx.Rebind(`SELECT id FROM jobs WHERE server_id = ? AND status = 'queued' ORDER BY id LIMIT 1`), serverID)
			if notFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'running', started_at = ?, updated_at = ?,
				lease_expires_at = ? + lease_seconds * 1000, deadline_at = ? + timeout_seconds * 1000, acked_at = NULL
				WHERE id = ? AND status = 'queued'`), ms(now), ms(now), ms(now), ms(now), id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				continue // another replica took it
			}
			j, err = s.jobWhere(ctx, tx, "id = ?", id)
			ok = err == nil
			return err
		}
		return nil
	})
	return j, ok, err
}

// AckJob records that the server's agent holds its running job, unless
// that is known already.
func (s *Store) AckJob(ctx context.Context, serverID, id string, now time.Time) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE jobs SET acked_at = ? WHERE id = ? AND server_id = ? AND status = 'running' AND acked_at IS NULL`),
		ms(now), id, serverID)
	return err
}

// JobSecrets returns a job's sealed secrets.
func (s *Store) JobSecrets(ctx context.Context, id string) (string, error) {
	var sealed string
	err := s.r.GetContext(ctx, &sealed, s.rebind(`SELECT secrets FROM jobs WHERE id = ?`), id)
	if notFound(err) {
		return "", fault.NotFoundf("No such job.")
	}
	return sealed, err
}

// AppendJobEvents stores events and extends the job's lease; events
// acknowledge its claim.
func (s *Store) AppendJobEvents(ctx context.Context, jobID string, events []jobs.Event, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		var next int
		if err := tx.GetContext(ctx, &next, tx.Rebind(`SELECT COALESCE(MAX(seq), 0) + 1 FROM job_events WHERE job_id = ?`), jobID); err != nil {
			return err
		}
		for i, e := range events {
			seq := next + i
			msg := s.seal(eventSealContext("message", jobID, seq), sql.NullString{String: e.Message, Valid: true})
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO job_events (job_id, seq, at, level, message, data) VALUES (?, ?, ?, ?, ?, ?)`),
				jobID, seq, ms(e.At), e.Level, msg.String, s.rawSealed(eventSealContext("data", jobID, seq), e.Data)); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET lease_expires_at = ? + lease_seconds * 1000, acked_at = COALESCE(acked_at, ?)
			WHERE id = ? AND status = 'running'`), ms(now), ms(now), jobID)
		return err
	})
}

// FinishJob moves a job to a final status: a running one, or one queued
// again after a claim that was never acknowledged, whose agent did get it
// after all and reports its result.
func (s *Store) FinishJob(ctx context.Context, id string, status jobs.Status, errText *string, data, output json.RawMessage, now time.Time) (bool, error) {
	var e sql.NullString
	if errText != nil {
		e = sql.NullString{String: *errText, Valid: true}
	}
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE jobs SET status = ?, error = ?, data = ?, output = ?, finished_at = ?, updated_at = ?,
		started_at = COALESCE(started_at, ?), lease_expires_at = NULL, secrets = '', hook_pending_at = ?
		WHERE id = ? AND (status = 'running' OR (status = 'queued' AND requeues > 0))`),
		string(status), e, s.rawSealed(jobSealContext("data", id), data), s.rawSealed(jobSealContext("output", id), output),
		ms(now), ms(now), ms(now), ms(now), id))
}

// ExtendLeases extends the leases of a server's running jobs and
// acknowledges their claims.
func (s *Store) ExtendLeases(ctx context.Context, serverID string, ids []string, now time.Time) error {
	q, args, err := sqlx.In(`UPDATE jobs SET lease_expires_at = ? + lease_seconds * 1000, acked_at = COALESCE(acked_at, ?)
		WHERE server_id = ? AND status = 'running' AND id IN (?)`,
		ms(now), ms(now), serverID, ids)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, s.rebind(q), args...)
	return err
}

// RequeuedMessage is the event of a job queued again because its claim
// was never acknowledged.
const RequeuedMessage = "The agent never acknowledged this job (no heartbeat naming it, no event, no fetch of its secrets) before its lease lapsed: " +
	"the answer to its claim was most likely lost. The job is queued again."

// ExpireJobs ends the claims of running jobs whose lease lapsed or
// deadline passed: a claim never acknowledged is queued again while the
// job has fewer than maxRequeues requeues; any other job is failed.
func (s *Store) ExpireJobs(ctx context.Context, now time.Time, maxRequeues int) (expired, requeued []jobs.Job, err error) {
	err = s.tx(ctx, func(tx *sqlx.Tx) error {
		var rows []jobRow
		if err := tx.SelectContext(ctx, &rows, tx.Rebind(`SELECT `+jobColumns+` FROM jobs WHERE status = 'running'
			AND (lease_expires_at < ? OR deadline_at < ?) ORDER BY id LIMIT 500`), ms(now), ms(now)); err != nil {
			return err
		}
		for _, r := range rows {
			if !r.AckedAt.Valid && r.Requeues < maxRequeues {
				// Conditional on what was read: a heartbeat or event
				// that acknowledged the claim since, or another control
				// plane that requeued it first, leaves it alone.
				changed, err := changedOne(tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'queued', started_at = NULL, lease_expires_at = NULL,
					deadline_at = NULL, requeues = requeues + 1, updated_at = ?
					WHERE id = ? AND status = 'running' AND acked_at IS NULL AND requeues = ? AND (lease_expires_at < ? OR deadline_at < ?)`),
					ms(now), r.ID, r.Requeues, ms(now), ms(now)))
				if err != nil {
					return err
				}
				if !changed {
					continue
				}
				if err := appendJobEvent(ctx, tx, r.ID, now, RequeuedMessage); err != nil {
					return err
				}
				j := s.jobOf(r)
				j.Status, j.Requeues = jobs.Queued, r.Requeues+1
				j.StartedAt, j.LeaseExpiresAt, j.DeadlineAt = nil, nil, nil
				j.UpdatedAt = fromMS(ms(now))
				requeued = append(requeued, j)
				continue
			}
			// The reason is whichever lapsed first: a job whose agent
			// vanished before (or as) its deadline passed was lost, not
			// slow. (With a timeout equal to the lease, as agent.ping
			// has, a dead agent's job reaches both at once.)
			reason := jobs.ErrAgentLost
			if r.DeadlineAt.Valid && r.DeadlineAt.Int64 < ms(now) &&
				(!r.LeaseExpiresAt.Valid || r.DeadlineAt.Int64 < r.LeaseExpiresAt.Int64) {
				reason = jobs.ErrTimedOut
			}
			// Conditional on what was read: a completion or a grace
			// that changed the job since is not overridden, and the job
			// is not reported (its hook is not run) unless it changed here.
			changed, err := changedOne(tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, updated_at = ?,
				lease_expires_at = NULL, secrets = '', hook_pending_at = ? WHERE id = ? AND status = 'running'
				AND (lease_expires_at < ? OR deadline_at < ?) AND (acked_at IS NOT NULL OR requeues >= ?)`),
				reason, ms(now), ms(now), ms(now), r.ID, ms(now), ms(now), maxRequeues))
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			j := s.jobOf(r)
			j.Status, j.Error = jobs.Failed, &reason
			t := fromMS(ms(now))
			j.FinishedAt, j.HookPendingAt, j.LeaseExpiresAt = &t, &t, nil
			expired = append(expired, j)
		}
		return nil
	})
	if err != nil {
		// Rolled back: nothing changed.
		return nil, nil, err
	}
	return expired, requeued, nil
}

// appendJobEvent adds a warning from the control plane to a job's events.
func appendJobEvent(ctx context.Context, tx *sqlx.Tx, jobID string, now time.Time, message string) error {
	var seq int
	if err := tx.GetContext(ctx, &seq, tx.Rebind(`SELECT COALESCE(MAX(seq), 0) + 1 FROM job_events WHERE job_id = ?`), jobID); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO job_events (job_id, seq, at, level, message) VALUES (?, ?, ?, ?, ?)`),
		jobID, seq, ms(now), "warn", message)
	return err
}

// Events of queued jobs that the control plane fails.
const (
	ServerOfflineMessage = "The server has stayed offline for longer than the job's lease since the job was queued again: " +
		"the agent that never acknowledged its claim is gone. The job is failed instead of waiting for it."
	QueueTimedOutMessage = "No agent claimed the job within its queue timeout. The job is failed instead of waiting longer."
)

// silentServer matches a job whose server is enrolled and has not been
// heard from since the first argument minus the job's lease. A job whose
// server is gone is not matched: deleting a server ends its jobs.
const silentServer = `EXISTS (SELECT 1 FROM servers s WHERE s.id = jobs.server_id AND s.last_seen_at < ? - jobs.lease_seconds * 1000)`

// ExpireQueuedJobs fails the queued jobs that wait in vain: queued again
// for a server silent since before offlineSince minus their lease
// (server_offline), or past their queue deadline (queue_timed_out).
func (s *Store) ExpireQueuedJobs(ctx context.Context, now, offlineSince time.Time) ([]jobs.Job, error) {
	var out []jobs.Job
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var rows []struct {
			jobRow
			Offline bool `db:"server_offline"`
		}
		if err := tx.SelectContext(ctx, &rows, tx.Rebind(`SELECT `+jobColumns+`, (requeues > 0 AND `+silentServer+`) AS server_offline
			FROM jobs WHERE status = 'queued' AND (queue_deadline_at < ? OR (requeues > 0 AND `+silentServer+`))
			ORDER BY id LIMIT 500`), ms(offlineSince), ms(now), ms(offlineSince)); err != nil {
			return err
		}
		for _, r := range rows {
			reason, message, cond, arg := jobs.ErrQueueTimedOut, QueueTimedOutMessage, `queue_deadline_at < ?`, ms(now)
			if r.Offline {
				reason, message, cond, arg = jobs.ErrServerOffline, ServerOfflineMessage, `requeues > 0 AND `+silentServer, ms(offlineSince)
			}
			// Conditional on the job still being queued, for the reason
			// read: a claim, a result or a heartbeat that came since
			// leaves it alone, and it is not reported.
			changed, err := changedOne(tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, updated_at = ?,
				secrets = '', hook_pending_at = ? WHERE id = ? AND status = 'queued' AND `+cond),
				reason, ms(now), ms(now), ms(now), r.ID, arg))
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			if err := appendJobEvent(ctx, tx, r.ID, now, message); err != nil {
				return err
			}
			j := r.job()
			j.Status, j.Error, j.HasSecrets = jobs.Failed, &reason, false
			t := fromMS(ms(now))
			j.FinishedAt, j.HookPendingAt, j.UpdatedAt = &t, &t, t
			out = append(out, j)
		}
		return nil
	})
	if err != nil {
		// Rolled back: nothing changed.
		return nil, err
	}
	return out, nil
}

// EndServerJobs cancels queued and fails running jobs of a server.
func (s *Store) EndServerJobs(ctx context.Context, serverID, reason string, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'cancelled', error = ?, finished_at = ?, updated_at = ?, secrets = ''
			WHERE server_id = ? AND status = 'queued'`), reason, ms(now), ms(now), serverID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET status = 'failed', error = ?, finished_at = ?, updated_at = ?, lease_expires_at = NULL, secrets = ''
			WHERE server_id = ? AND status = 'running'`), reason, ms(now), ms(now), serverID)
		return err
	})
}

// ClearHookPending records that a job's completion hook ran.
func (s *Store) ClearHookPending(ctx context.Context, id string) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE jobs SET hook_pending_at = NULL WHERE id = ?`), id)
	return err
}

// TakeStaleHooks takes the jobs whose hook has been pending since before
// before: each is taken by moving its mark to now, conditional on the mark
// read, so that of several control planes one gets each.
func (s *Store) TakeStaleHooks(ctx context.Context, before, now time.Time, limit int) ([]jobs.Job, error) {
	var rows []jobRow
	if err := s.r.SelectContext(ctx, &rows, s.rebind(`SELECT `+jobColumns+` FROM jobs
		WHERE hook_pending_at IS NOT NULL AND hook_pending_at < ? ORDER BY hook_pending_at LIMIT ?`), ms(before), limit); err != nil {
		return nil, err
	}
	var out []jobs.Job
	for _, r := range rows {
		res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE jobs SET hook_pending_at = ? WHERE id = ? AND hook_pending_at = ?`),
			ms(now), r.ID, r.HookPendingAt.Int64)
		if err != nil {
			return out, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return out, err
		} else if n == 1 {
			j := s.jobOf(r)
			t := fromMS(ms(now))
			j.HookPendingAt = &t
			out = append(out, j)
		}
	}
	return out, nil
}

// RecordLateResult stores the late result of a job failed with agent_lost,
// once.
func (s *Store) RecordLateResult(ctx context.Context, id string, r jobs.LateResult) (bool, error) {
	var e sql.NullString
	if r.Error != nil {
		e = sql.NullString{String: *r.Error, Valid: true}
	}
	return changedOne(s.w.ExecContext(ctx, s.rebind(`UPDATE jobs SET late_status = ?, late_error = ?, late_data = ?, late_at = ?, updated_at = ?
		WHERE id = ? AND status = 'failed' AND error = ? AND late_at IS NULL`),
		string(r.Status), e, s.rawSealed(jobSealContext("late_data", id), r.Data), ms(r.At), ms(r.At), id, jobs.ErrAgentLost))
}

// GraceLeases moves the leases and the deadlines of running jobs that end
// before until to until. The deadline moves too: a job that finished on
// time while the control plane was down has its result delivered once the
// agent's retry reaches the new process, and must not be failed timed_out
// before (the agent enforces the job's timeout itself).
func (s *Store) GraceLeases(ctx context.Context, until time.Time) (int, error) {
	u := ms(until)
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE jobs SET
		lease_expires_at = CASE WHEN lease_expires_at < ? THEN ? ELSE lease_expires_at END,
		deadline_at = CASE WHEN deadline_at < ? THEN ? ELSE deadline_at END
		WHERE status = 'running' AND (lease_expires_at < ? OR deadline_at < ?)`),
		u, u, u, u, u, u)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
