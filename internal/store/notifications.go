package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/notify"
)

var _ notify.InboxStore = (*Store)(nil)

// InsertNotification stores an inbox item once per user and event; an
// item of a user deleted meanwhile is dropped.
func (s *Store) InsertNotification(ctx context.Context, n notify.Notification) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO notifications (id, user_id, event_id, event_type, title, body, link,
		subject_type, subject_id, created_at) SELECT ?, id, ?, ?, ?, ?, ?, ?, ?, ? FROM users WHERE id = ?
		ON CONFLICT (user_id, event_id) DO NOTHING`),
		n.ID, n.EventID, string(n.EventType), n.Title, n.Body, n.Link, n.Subject.Type, n.Subject.ID, ms(n.CreatedAt), n.UserID)
	return err
}

type notificationRow struct {
	ID          string        `db:"id"`
	UserID      string        `db:"user_id"`
	EventID     string        `db:"event_id"`
	EventType   string        `db:"event_type"`
	Title       string        `db:"title"`
	Body        string        `db:"body"`
	Link        string        `db:"link"`
	SubjectType string        `db:"subject_type"`
	SubjectID   string        `db:"subject_id"`
	CreatedAt   int64         `db:"created_at"`
	ReadAt      sql.NullInt64 `db:"read_at"`
}

// ListNotifications returns up to limit items of a user, newest event
// first, after the item before (the previous page's last), and the user's
// unread count. Items are ordered by their events, not by when they were
// delivered: deliveries may arrive in any order.
func (s *Store) ListNotifications(ctx context.Context, userID string, limit int, before string) ([]notify.Notification, int, error) {
	q, args := `SELECT id, user_id, event_id, event_type, title, body, link, subject_type, subject_id, created_at, read_at
		FROM notifications WHERE user_id = ?`, []any{userID}
	if before != "" {
		var cursor string
		err := s.r.GetContext(ctx, &cursor, s.rebind(`SELECT event_id FROM notifications WHERE user_id = ? AND id = ?`), userID, before)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, 0, fault.Invalidf("before", "is not an item of this inbox; pass next_cursor of the previous page")
		}
		if err != nil {
			return nil, 0, err
		}
		q, args = q+` AND event_id < ?`, append(args, cursor)
	}
	var rows []notificationRow
	if err := s.r.SelectContext(ctx, &rows, s.rebind(q+` ORDER BY event_id DESC LIMIT ?`), append(args, limit)...); err != nil {
		return nil, 0, err
	}
	var unread int
	if err := s.r.GetContext(ctx, &unread, s.rebind(`SELECT COUNT(*) FROM notifications WHERE user_id = ? AND read_at IS NULL`), userID); err != nil {
		return nil, 0, err
	}
	out := make([]notify.Notification, len(rows))
	for i, r := range rows {
		out[i] = notify.Notification{ID: r.ID, UserID: r.UserID, EventID: r.EventID, EventType: events.Type(r.EventType), Title: r.Title,
			Body: r.Body, Link: r.Link, Subject: events.Subject{Type: r.SubjectType, ID: r.SubjectID}, CreatedAt: fromMS(r.CreatedAt),
			ReadAt: nullMS(r.ReadAt), Read: r.ReadAt.Valid}
	}
	return out, unread, nil
}

// MarkNotificationsRead marks a user's items read and returns how many it
// marked and how many stay unread. Ids of other users' items mark nothing.
func (s *Store) MarkNotificationsRead(ctx context.Context, userID string, ids []string, all bool, now time.Time) (int, int, error) {
	var marked, unread int
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		var res sql.Result
		var err error
		if all {
			res, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE notifications SET read_at = ? WHERE user_id = ? AND read_at IS NULL`), ms(now), userID)
		} else {
			var q string
			var args []any
			q, args, err = sqlx.In(`UPDATE notifications SET read_at = ? WHERE user_id = ? AND read_at IS NULL AND id IN (?)`, ms(now), userID, ids)
			if err != nil {
				return err
			}
			res, err = tx.ExecContext(ctx, tx.Rebind(q), args...)
		}
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		marked = int(n)
		return tx.GetContext(ctx, &unread, tx.Rebind(`SELECT COUNT(*) FROM notifications WHERE user_id = ? AND read_at IS NULL`), userID)
	})
	return marked, unread, err
}

var _ notify.SettingsStore = (*Store)(nil)

// NotificationSettings returns the e-mail preferences of every user who
// set any.
func (s *Store) NotificationSettings(ctx context.Context) (map[string]notify.Settings, error) {
	var rows []struct {
		UserID  string `db:"user_id"`
		Success int    `db:"email_deploy_success"`
		Failure int    `db:"email_deploy_failure"`
		Alerts  int    `db:"email_alerts"`
	}
	if err := s.r.SelectContext(ctx, &rows, `SELECT user_id, email_deploy_success, email_deploy_failure, email_alerts FROM notification_settings`); err != nil {
		return nil, err
	}
	out := make(map[string]notify.Settings, len(rows))
	for _, r := range rows {
		out[r.UserID] = notify.Settings{EmailDeploySuccess: r.Success == 1, EmailDeployFailure: r.Failure == 1, EmailAlerts: r.Alerts == 1}
	}
	return out, nil
}

// PutNotificationSettings replaces a user's e-mail preferences.
func (s *Store) PutNotificationSettings(ctx context.Context, userID string, st notify.Settings, now time.Time) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`INSERT INTO notification_settings (user_id, email_deploy_success, email_deploy_failure, email_alerts, updated_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (user_id) DO UPDATE SET email_deploy_success = excluded.email_deploy_success,
		email_deploy_failure = excluded.email_deploy_failure, email_alerts = excluded.email_alerts, updated_at = excluded.updated_at`),
		userID, boolInt(st.EmailDeploySuccess), boolInt(st.EmailDeployFailure), boolInt(st.EmailAlerts), ms(now))
	return err
}
