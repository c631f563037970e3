package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/domains"
	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
)

var _ domains.Store = (*Store)(nil)

const domainColumns = `id, hostname, app_id, server_id, tls_mode, redirect_www, check_job_id, check_result, proxy_job_id, proxy_status,
	proxy_error, created_by, created_at, updated_at`

type domainRow struct {
	ID          string         `db:"id"`
	Hostname    string         `db:"hostname"`
	AppID       string         `db:"app_id"`
	ServerID    string         `db:"server_id"`
	TLSMode     string         `db:"tls_mode"`
	RedirectWWW bool           `db:"redirect_www"`
	CheckJobID  sql.NullString `db:"check_job_id"`
	CheckResult sql.NullString `db:"check_result"`
	ProxyJobID  sql.NullString `db:"proxy_job_id"`
	ProxyStatus string         `db:"proxy_status"`
	ProxyError  sql.NullString `db:"proxy_error"`
	CreatedBy   string         `db:"created_by"`
	CreatedAt   int64          `db:"created_at"`
	UpdatedAt   int64          `db:"updated_at"`
}

func (r domainRow) domain() (domains.Domain, error) {
	d := domains.Domain{ID: r.ID, Hostname: r.Hostname, ApplicationID: r.AppID, ServerID: r.ServerID, TLSMode: r.TLSMode,
		RedirectWWW: r.RedirectWWW, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt)}
	if r.CheckJobID.Valid {
		id := r.CheckJobID.String
		d.CheckJobID = &id
	}
	d.Proxy = domains.ProxyState{Status: r.ProxyStatus}
	if r.ProxyJobID.Valid {
		id := r.ProxyJobID.String
		d.Proxy.JobID = &id
	}
	if r.ProxyError.Valid {
		e := r.ProxyError.String
		d.Proxy.Error = &e
	}
	if r.CheckResult.Valid && r.CheckResult.String != "" {
		d.Check = &domains.DomainCheck{}
		if err := json.Unmarshal([]byte(r.CheckResult.String), d.Check); err != nil {
			return d, err
		}
	}
	return d, nil
}

// InsertDomain stores a domain and the names it takes.
func (s *Store) InsertDomain(ctx context.Context, d domains.Domain, names []string) error {
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		q, args, err := sqlx.In(`SELECT n.name, d.hostname FROM domain_names n JOIN domains d ON d.id = n.domain_id WHERE n.name IN (?) ORDER BY n.name`, names)
		if err != nil {
			return err
		}
		var taken []struct {
			Name     string `db:"name"`
			Hostname string `db:"hostname"`
		}
		if err := tx.SelectContext(ctx, &taken, tx.Rebind(q), args...); err != nil {
			return err
		}
		if len(taken) > 0 {
			t := taken[0]
			if t.Name == t.Hostname {
				return fault.Conflictf("hostname-taken", "%s is already a domain.", t.Name)
			}
			return fault.Conflictf("hostname-taken", "%s is taken by the domain %s, which redirects www.", t.Name, t.Hostname)
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO domains (id, hostname, app_id, server_id, tls_mode, redirect_www, created_by, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`), d.ID, d.Hostname, d.ApplicationID, d.ServerID, d.TLSMode, d.RedirectWWW, d.CreatedBy,
			ms(d.CreatedAt), ms(d.UpdatedAt)); err != nil {
			return err
		}
		for _, n := range names {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO domain_names (name, domain_id) VALUES (?, ?)`), n, d.ID); err != nil {
				return err
			}
		}
		return bumpProxyRevision(ctx, tx, d.ServerID)
	})
	if isUniqueViolation(err) {
		return fault.Conflictf("hostname-taken", "%s is already taken by another domain.", strings.Join(names, " or "))
	}
	if isForeignKeyViolation(err) {
		return fault.NotFoundf("No such application.")
	}
	return err
}

func (s *Store) domainWhere(ctx context.Context, q sqlx.QueryerContext, where string, args ...any) (domains.Domain, error) {
	return getOne(ctx, q, domainRow.domain, "domain", s.rebind(`SELECT `+domainColumns+` FROM domains WHERE `+where), args...)
}

// Domain returns a domain.
func (s *Store) Domain(ctx context.Context, id string) (domains.Domain, error) {
	return s.domainWhere(ctx, s.r, "id = ?", id)
}

// DomainByCheckJob returns the domain whose latest check is jobID.
func (s *Store) DomainByCheckJob(ctx context.Context, jobID string) (domains.Domain, error) {
	return s.domainWhere(ctx, s.r, "check_job_id = ?", jobID)
}

// ListDomains returns domains by hostname.
func (s *Store) ListDomains(ctx context.Context, appID string) ([]domains.Domain, error) {
	if appID == "" {
		return selectAll(ctx, s.r, domainRow.domain, `SELECT `+domainColumns+` FROM domains ORDER BY hostname`)
	}
	return selectAll(ctx, s.r, domainRow.domain, s.rebind(`SELECT `+domainColumns+` FROM domains WHERE app_id = ? ORDER BY hostname`), appID)
}

// UpdateDomainTLS changes a domain's TLS mode and raises its server's
// proxy revision.
func (s *Store) UpdateDomainTLS(ctx context.Context, id, mode string, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		serverID, err := domainServer(ctx, tx, id)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE domains SET tls_mode = ?, updated_at = ? WHERE id = ?`), mode, ms(now), id)
		if err := mustAffect(res, err, "domain"); err != nil {
			return err
		}
		return bumpProxyRevision(ctx, tx, serverID)
	})
}

// DeleteDomain deletes a domain, frees its names and raises its server's
// proxy revision.
func (s *Store) DeleteDomain(ctx context.Context, id string) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		serverID, err := domainServer(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM domain_names WHERE domain_id = ?`), id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM domains WHERE id = ?`), id)
		if err := mustAffect(res, err, "domain"); err != nil {
			return err
		}
		return bumpProxyRevision(ctx, tx, serverID)
	})
}

// domainServer is the server of a domain, read in tx.
func domainServer(ctx context.Context, tx *sqlx.Tx, id string) (string, error) {
	var serverID string
	err := tx.GetContext(ctx, &serverID, tx.Rebind(`SELECT server_id FROM domains WHERE id = ?`), id)
	if notFound(err) {
		return "", fault.NotFoundf("No such domain.")
	}
	return serverID, err
}

// SetDomainCheckJob records a domain's latest check job.
func (s *Store) SetDomainCheckJob(ctx context.Context, id, jobID string, now time.Time) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE domains SET check_job_id = ?, updated_at = ? WHERE id = ?`), jobID, ms(now), id)
	return mustAffect(res, err, "domain")
}

// SetDomainProxyJob records the proxy.apply job of a domain's latest
// change: the domain is applying until the job ends.
func (s *Store) SetDomainProxyJob(ctx context.Context, id, jobID string, now time.Time) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE domains SET proxy_job_id = ?, proxy_status = ?, proxy_error = NULL, updated_at = ?
		WHERE id = ?`), jobID, domains.ProxyApplying, ms(now), id)
	return mustAffect(res, err, "domain")
}

// FinishDomainProxy records the end of a server's proxy.apply job on the
// domains whose latest change it carries, and returns those that changed.
// A job that succeeded applied the server's whole desired state, so it
// also settles the domains of the server whose own job failed or was lost
// before this one was queued.
func (s *Store) FinishDomainProxy(ctx context.Context, serverID, jobID string, queuedAt time.Time, ok bool, msg string, now time.Time) ([]domains.Domain, error) {
	var changed []domains.Domain
	published := false
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		where, args := `server_id = ? AND proxy_job_id = ? AND proxy_status = ?`, []any{serverID, jobID, domains.ProxyApplying}
		if ok {
			where = `server_id = ? AND proxy_status != ? AND (proxy_job_id = ? OR updated_at <= ?)`
			args = []any{serverID, domains.ProxyApplied, jobID, ms(queuedAt)}
		}
		var rows []domainRow
		if err := tx.SelectContext(ctx, &rows, tx.Rebind(`SELECT `+domainColumns+` FROM domains WHERE `+where+` ORDER BY hostname`), args...); err != nil {
			return err
		}
		status, errText := domains.ProxyApplied, sql.NullString{}
		if !ok {
			status, errText = domains.ProxyFailed, sql.NullString{String: msg, Valid: true}
		}
		for _, r := range rows {
			res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE domains SET proxy_status = ?, proxy_error = ? WHERE id = ? AND proxy_status = ?
				AND COALESCE(proxy_job_id, '') = ?`), status, errText, r.ID, r.ProxyStatus, r.ProxyJobID.String)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				continue // changed meanwhile: a newer change has its own job
			}
			r.ProxyStatus, r.ProxyError = status, errText
			d, err := r.domain()
			if err != nil {
				return err
			}
			changed = append(changed, d)
		}
		if ok || len(changed) == 0 {
			return nil
		}
		p := events.ProxyFailedPayload{ServerID: serverID, JobID: jobID, Error: msg}
		if err := tx.GetContext(ctx, &p.ServerName, tx.Rebind(`SELECT name FROM servers WHERE id = ?`), serverID); err != nil && !notFound(err) {
			return err
		}
		for _, d := range changed {
			p.Domains = append(p.Domains, events.ProxyFailedDomain{DomainID: d.ID, Hostname: d.Hostname, ApplicationID: d.ApplicationID})
		}
		ev, err := events.New(events.ProxyFailed, events.Subject{Type: "server", ID: serverID}, p, now)
		if err != nil {
			return err
		}
		published = true
		return publishTx(ctx, tx, ev)
	})
	if published && err == nil {
		s.published()
	}
	return changed, err
}

// SetDomainCheck stores a check's result if it is the domain's latest.
func (s *Store) SetDomainCheck(ctx context.Context, id, jobID string, c domains.DomainCheck, now time.Time) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, s.rebind(`UPDATE domains SET check_result = ?, checked_at = ?, updated_at = ? WHERE id = ? AND check_job_id = ?`),
		string(b), ms(c.CheckedAt), ms(now), id, jobID)
	return err
}
