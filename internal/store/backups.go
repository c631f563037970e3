package store

import (
	"context"

	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
)

type backupSettingsRow struct {
	Provider        string `db:"provider"`
	Endpoint        string `db:"endpoint"`
	Region          string `db:"region"`
	Bucket          string `db:"bucket"`
	Prefix          string `db:"prefix"`
	PathStyle       bool   `db:"path_style"`
	TLS             bool   `db:"tls"`
	CA              string `db:"ca"`
	Folder          string `db:"folder"`
	AccessKeyID     string `db:"access_key_id"`
	SecretAccessKey string `db:"secret_access_key"`
	Revision        int64  `db:"revision"`
	UpdatedBy       string `db:"updated_by"`
	UpdatedAt       int64  `db:"updated_at"`
}

// BackupSettings returns the backup storage settings.
func (s *Store) BackupSettings(ctx context.Context) (backups.Settings, error) {
	var r backupSettingsRow
	err := s.r.GetContext(ctx, &r, `SELECT provider, endpoint, region, bucket, prefix, path_style, tls, ca, folder, access_key_id,
		secret_access_key, revision, updated_by, updated_at FROM backup_settings WHERE id = 1`)
	if notFound(err) {
		return backups.Settings{}, fault.NotFoundf("No backup storage settings are saved.")
	}
	if err != nil {
		return backups.Settings{}, err
	}
	return backups.Settings{Provider: r.Provider, Endpoint: r.Endpoint, Region: r.Region, Bucket: r.Bucket, Prefix: r.Prefix,
		PathStyle: r.PathStyle, TLS: r.TLS, CA: r.CA, Folder: r.Folder, SealedAccessKeyID: r.AccessKeyID,
		SealedSecretAccessKey: r.SecretAccessKey, Revision: r.Revision, UpdatedBy: r.UpdatedBy, UpdatedAt: fromMS(r.UpdatedAt)}, nil
}

// PutBackupSettings saves the settings if the stored ones are at
// prevRevision (0: none stored); false if they are not.
func (s *Store) PutBackupSettings(ctx context.Context, b backups.Settings, prevRevision int64) (bool, error) {
	args := []any{b.Provider, b.Endpoint, b.Region, b.Bucket, b.Prefix, b.PathStyle, b.TLS, b.CA, b.Folder, b.SealedAccessKeyID,
		b.SealedSecretAccessKey, b.Revision, b.UpdatedBy, ms(b.UpdatedAt)}
	if prevRevision == 0 {
		_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO backup_settings (id, provider, endpoint, region, bucket, prefix, path_style,
			tls, ca, folder, access_key_id, secret_access_key, revision, updated_by, updated_at)
			VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), args...)
		if isUniqueViolation(err) {
			return false, nil
		}
		return err == nil, err
	}
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE backup_settings SET provider = ?, endpoint = ?, region = ?, bucket = ?,
		prefix = ?, path_style = ?, tls = ?, ca = ?, folder = ?, access_key_id = ?, secret_access_key = ?, revision = ?,
		updated_by = ?, updated_at = ? WHERE id = 1 AND revision = ?`), append(args, prevRevision)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
