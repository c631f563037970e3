package store

import (
	"context"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/databases"
	"github.com/capstan-dev/capstan/internal/fault"
)

type databaseAttachmentRow struct {
	ID            string `db:"id"`
	InstanceID    string `db:"instance_id"`
	CredentialID  string `db:"credential_id"`
	ApplicationID string `db:"application_id"`
	EnvKey        string `db:"env_key"`
	CreatedBy     string `db:"created_by"`
	CreatedAt     int64  `db:"created_at"`
}

const attachmentColumns = `a.id, a.instance_id, a.credential_id, a.application_id, a.env_key, a.created_by, a.created_at`

func (r databaseAttachmentRow) attachment() databases.Attachment {
	return databases.Attachment{ID: r.ID, InstanceID: r.InstanceID, CredentialID: r.CredentialID, ApplicationID: r.ApplicationID,
		EnvKey: r.EnvKey, CreatedBy: r.CreatedBy, CreatedAt: fromMS(r.CreatedAt)}
}

// InsertAttachedLogin stores a login with the attachment it is made for.
func (s *Store) InsertAttachedLogin(ctx context.Context, c databases.Credential, a databases.Attachment) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		if err := s.insertLogin(ctx, tx, c); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO database_attachments (id, instance_id, credential_id, application_id, env_key,
			created_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			a.ID, a.InstanceID, a.CredentialID, a.ApplicationID, a.EnvKey, a.CreatedBy, ms(a.CreatedAt))
		if isUniqueViolation(err) {
			return fault.Conflictf("already-attached", "The application is attached to this instance, or has an attachment setting %s, already.", a.EnvKey)
		}
		if isForeignKeyViolation(err) {
			return fault.NotFoundf("No such application.")
		}
		return err
	})
}

// AttachmentByLoginJob returns the attachment whose login jobID creates
// or rotates.
func (s *Store) AttachmentByLoginJob(ctx context.Context, jobID string) (databases.Attachment, error) {
	return getOne(ctx, s.r, always(databaseAttachmentRow.attachment), "attachment", s.rebind(`SELECT `+attachmentColumns+` FROM database_attachments a
		JOIN database_credentials c ON c.id = a.credential_id WHERE c.job_id = ? OR c.rotate_job_id = ?`), jobID, jobID)
}

// ApplicationAttachments returns an application's attachments, oldest
// first.
func (s *Store) ApplicationAttachments(ctx context.Context, appID string) ([]databases.Attachment, error) {
	return s.attachmentsWhere(ctx, "a.application_id = ?", appID)
}

// InstanceAttachments returns an instance's attachments, oldest first.
func (s *Store) InstanceAttachments(ctx context.Context, instanceID string) ([]databases.Attachment, error) {
	return s.attachmentsWhere(ctx, "a.instance_id = ?", instanceID)
}

func (s *Store) attachmentsWhere(ctx context.Context, where string, arg any) ([]databases.Attachment, error) {
	return selectAll(ctx, s.r, always(databaseAttachmentRow.attachment), s.rebind(`SELECT `+attachmentColumns+` FROM database_attachments a WHERE `+where+
		` ORDER BY a.id`), arg)
}
