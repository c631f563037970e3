package store

import (
	"context"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/githost"
)

type gitHostAppRow struct {
	Provider      string `db:"provider"`
	AppID         int64  `db:"app_id"`
	Slug          string `db:"slug"`
	Name          string `db:"name"`
	OwnerLogin    string `db:"owner_login"`
	OwnerType     string `db:"owner_type"`
	HTMLURL       string `db:"html_url"`
	ClientID      string `db:"client_id"`
	ClientSecret  string `db:"client_secret"`
	PrivateKey    string `db:"private_key"`
	WebhookSecret string `db:"webhook_secret"`
	CreatedBy     string `db:"created_by"`
	CreatedAt     int64  `db:"created_at"`
}

type gitHostInstallationRow struct {
	ID                  int64  `db:"id"`
	AccountLogin        string `db:"account_login"`
	AccountType         string `db:"account_type"`
	RepositorySelection string `db:"repository_selection"`
	CreatedAt           int64  `db:"created_at"`
	UpdatedAt           int64  `db:"updated_at"`
}

func (r gitHostInstallationRow) installation() githost.Installation {
	return githost.Installation{ID: r.ID, Account: r.AccountLogin, AccountType: r.AccountType,
		RepositorySelection: r.RepositorySelection, CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt)}
}

// InsertGitHostApp stores the connected app (there is at most one).
func (s *Store) InsertGitHostApp(ctx context.Context, a githost.App) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO githost_apps (id, provider, app_id, slug, name, owner_login, owner_type,
		html_url, client_id, client_secret, private_key, webhook_secret, created_by, created_at)
		VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		a.Provider, a.AppID, a.Slug, a.Name, a.OwnerLogin, a.OwnerType, a.HTMLURL, a.ClientID, a.SealedClientSecret,
		a.SealedPrivateKey, a.SealedWebhookSecret, a.CreatedBy, ms(a.CreatedAt))
	if isUniqueViolation(err) {
		return fault.Conflictf("app-connected", "An app is connected already; disconnect it first (DELETE /api/v1/githost/app).")
	}
	return err
}

// GitHostApp returns the connected app.
func (s *Store) GitHostApp(ctx context.Context) (githost.App, error) {
	var r gitHostAppRow
	err := s.r.GetContext(ctx, &r, `SELECT provider, app_id, slug, name, owner_login, owner_type, html_url, client_id,
		client_secret, private_key, webhook_secret, created_by, created_at FROM githost_apps WHERE id = 1`)
	if notFound(err) {
		return githost.App{}, fault.NotFoundf("No git host app is connected.")
	}
	if err != nil {
		return githost.App{}, err
	}
	return githost.App{Provider: r.Provider, AppID: r.AppID, Slug: r.Slug, Name: r.Name, OwnerLogin: r.OwnerLogin,
		OwnerType: r.OwnerType, HTMLURL: r.HTMLURL, ClientID: r.ClientID, SealedClientSecret: r.ClientSecret,
		SealedPrivateKey: r.PrivateKey, SealedWebhookSecret: r.WebhookSecret, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt)}, nil
}

// DeleteGitHostApp forgets the app with its installations.
func (s *Store) DeleteGitHostApp(ctx context.Context) (bool, error) {
	var n int64
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM githost_installations`); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM githost_apps WHERE id = 1`)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// UpsertGitHostInstallation records or refreshes an installation; its
// first recording time stays.
func (s *Store) UpsertGitHostInstallation(ctx context.Context, in githost.Installation) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO githost_installations (id, app_ref, account_login, account_type,
		repository_selection, created_at, updated_at) SELECT ?, id, ?, ?, ?, ?, ? FROM githost_apps WHERE id = 1
		ON CONFLICT (id) DO UPDATE SET account_login = excluded.account_login, account_type = excluded.account_type,
		repository_selection = excluded.repository_selection, updated_at = excluded.updated_at`),
		in.ID, in.Account, in.AccountType, in.RepositorySelection, ms(in.CreatedAt), ms(in.UpdatedAt))
	return unlessNone(res, err, fault.Conflictf("app-not-connected", "No git host app is connected."))
}

// DeleteGitHostInstallation forgets an installation.
func (s *Store) DeleteGitHostInstallation(ctx context.Context, id int64) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`DELETE FROM githost_installations WHERE id = ?`), id))
}

const gitHostInstallationColumns = `id, account_login, account_type, repository_selection, created_at, updated_at`

// GitHostInstallation returns one installation.
func (s *Store) GitHostInstallation(ctx context.Context, id int64) (githost.Installation, error) {
	return getOne(ctx, s.r, always(gitHostInstallationRow.installation), "installation", s.rebind(`SELECT `+gitHostInstallationColumns+` FROM githost_installations WHERE id = ?`), id)
}

// GitHostInstallations returns the installations by id.
func (s *Store) GitHostInstallations(ctx context.Context) ([]githost.Installation, error) {
	return selectAll(ctx, s.r, always(gitHostInstallationRow.installation), `SELECT `+gitHostInstallationColumns+` FROM githost_installations ORDER BY id`)
}

// InsertGitHostState stores a manifest state's hash.
func (s *Store) InsertGitHostState(ctx context.Context, hash, sessionID, userID, organization string, expiresAt time.Time) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO githost_states (state_hash, session_id, user_id, organization, expires_at)
		VALUES (?, ?, ?, ?, ?)`), hash, sessionID, userID, organization, ms(expiresAt))
	return err
}

// UseGitHostState marks a state used, once: the update is conditional on
// it being unused, unexpired and the session's, and only the one caller
// whose update changed the row gets true.
func (s *Store) UseGitHostState(ctx context.Context, hash, sessionID string, now time.Time) (bool, error) {
	var n int64
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		// Expired states (used or not) are of no further use.
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM githost_states WHERE expires_at <= ?`), ms(now)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE githost_states SET used_at = ?
			WHERE state_hash = ? AND session_id = ? AND used_at IS NULL AND expires_at > ?`), ms(now), hash, sessionID, ms(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// RememberGitHostDelivery records a webhook delivery by the SHA-256 of
// its body, once: the insert is conditional on the digest's unique key,
// and only the one caller whose insert added the row gets true.
func (s *Store) RememberGitHostDelivery(ctx context.Context, bodySHA256, deliveryID, event string, now, forgetBefore time.Time) (bool, error) {
	var n int64
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM githost_deliveries WHERE received_at < ?`), ms(forgetBefore)); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO githost_deliveries (body_sha256, delivery_id, event, received_at)
			VALUES (?, ?, ?, ?) ON CONFLICT (body_sha256) DO NOTHING`), bodySHA256, deliveryID, event, ms(now))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// ForgetGitHostDelivery forgets a webhook delivery by its body's SHA-256.
func (s *Store) ForgetGitHostDelivery(ctx context.Context, bodySHA256 string) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`DELETE FROM githost_deliveries WHERE body_sha256 = ?`), bodySHA256))
}
