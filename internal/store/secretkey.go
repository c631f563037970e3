package store

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
)

// secretKeyIDName is the store_meta row that records the id of the secret
// key the store's values are sealed with.
const secretKeyIDName = "secret_key_id"

// sealedColumns are the columns that held sealed values before the store
// recorded its key id. Only a store last opened before that record can
// lack it, so the list need not grow with columns added later.
var sealedColumns = []struct{ table, column string }{
	{"users", "totp_secret"},
	{"jobs", "secrets"},
	{"applications", "env"},
	{"applications", "build_args"},
	{"deployments", "env"},
	{"deployments", "build_args"},
	{"database_credentials", "password"},
	{"database_credentials", "pending_password"},
	{"notification_channels", "config"},
	{"notification_channels", "secret"},
	{"notification_channels", "previous_secret"},
	{"githost_apps", "client_secret"},
	{"githost_apps", "private_key"},
	{"githost_apps", "webhook_secret"},
	{"backup_settings", "access_key_id"},
	{"backup_settings", "secret_access_key"},
	{"clouddrive_connections", "refresh_token"},
	{"clouddrive_states", "verifier"},
}

// sealedKeyIDsQuery lists the key ids found on sealed values
// ("v1:<8 hex digits>:…"), the most used first.
var sealedKeyIDsQuery = func() string {
	parts := make([]string, len(sealedColumns))
	for i, c := range sealedColumns {
		parts[i] = "SELECT substr(" + c.column + ", 4, 8) AS id FROM " + c.table + " WHERE " + c.column + " LIKE 'v1:%'"
	}
	return "SELECT id FROM (" + strings.Join(parts, " UNION ALL ") + ") sealed GROUP BY id ORDER BY COUNT(*) DESC, id"
}()

// SecretKeyID returns the id of the secret key the store expects: the one
// it recorded or, in a store that predates the record, the one that sealed
// most of its values. "" means the store has neither and takes any key.
// It writes nothing.
func (s *Store) SecretKeyID(ctx context.Context) (string, error) {
	recorded, sealed, err := s.secretKeyIDs(ctx, s.r)
	if err != nil || recorded != "" || len(sealed) == 0 {
		return recorded, err
	}
	return sealed[0], nil
}

// ClaimSecretKeyID makes id the store's secret key id unless the store
// has another one, and returns the store's key id: id when it is (now)
// recorded, or the id the store expects instead, writing nothing. A store
// that predates the record takes id if id sealed any of its values. Of
// parallel claims with different ids on a store without any, one is
// recorded and the others are given it.
func (s *Store) ClaimSecretKeyID(ctx context.Context, id string, now time.Time) (string, error) {
	var got string
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		recorded, sealed, err := s.secretKeyIDs(ctx, tx)
		if err != nil {
			return err
		}
		if recorded != "" {
			got = recorded
			return nil
		}
		if len(sealed) > 0 && !slices.Contains(sealed, id) {
			got = sealed[0]
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.rebind(`INSERT INTO store_meta (name, value, created_at) VALUES (?, ?, ?)
			ON CONFLICT (name) DO NOTHING`), secretKeyIDName, id, ms(now)); err != nil {
			return err
		}
		// A parallel claim may have inserted first: what is recorded wins.
		return tx.GetContext(ctx, &got, s.rebind(`SELECT value FROM store_meta WHERE name = ?`), secretKeyIDName)
	})
	return got, err
}

// secretKeyIDs returns the recorded key id ("" if none) and, when there is
// none, the key ids found on sealed values, the most used first.
func (s *Store) secretKeyIDs(ctx context.Context, q sqlx.QueryerContext) (recorded string, sealed []string, err error) {
	err = sqlx.GetContext(ctx, q, &recorded, s.rebind(`SELECT value FROM store_meta WHERE name = ?`), secretKeyIDName)
	if err == nil || !notFound(err) {
		return recorded, nil, err
	}
	err = sqlx.SelectContext(ctx, q, &sealed, sealedKeyIDsQuery)
	return "", sealed, err
}
