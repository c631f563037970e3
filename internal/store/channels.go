package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/notify"
)

var _ notify.ChannelStore = (*Store)(nil)

const channelColumns = `id, kind, name, events, enabled, config, config_fields, secret, previous_secret, previous_expires_at,
	created_by, created_at, updated_at`

type channelRow struct {
	ID                string        `db:"id"`
	Kind              string        `db:"kind"`
	Name              string        `db:"name"`
	Events            string        `db:"events"`
	Enabled           int           `db:"enabled"`
	Config            string        `db:"config"`
	ConfigFields      string        `db:"config_fields"`
	Secret            string        `db:"secret"`
	PreviousSecret    string        `db:"previous_secret"`
	PreviousExpiresAt sql.NullInt64 `db:"previous_expires_at"`
	CreatedBy         string        `db:"created_by"`
	CreatedAt         int64         `db:"created_at"`
	UpdatedAt         int64         `db:"updated_at"`
}

func (r channelRow) channel() (notify.StoredChannel, error) {
	c := notify.StoredChannel{Channel: notify.Channel{ID: r.ID, Kind: r.Kind, Name: r.Name, Enabled: r.Enabled == 1, CreatedBy: r.CreatedBy,
		CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt), PreviousSecretExpiresAt: nullMS(r.PreviousExpiresAt)},
		Config: r.Config, Secret: r.Secret, PreviousSecret: r.PreviousSecret}
	if err := json.Unmarshal([]byte(r.Events), &c.Events); err != nil {
		return c, err
	}
	if err := json.Unmarshal([]byte(r.ConfigFields), &c.ConfigFields); err != nil {
		return c, err
	}
	if c.ConfigFields == nil {
		c.ConfigFields = []string{}
	}
	return c, nil
}

func channelArgs(c notify.StoredChannel) ([]any, error) {
	evs, err := json.Marshal(c.Events)
	if err != nil {
		return nil, err
	}
	fields, err := json.Marshal(c.ConfigFields)
	if err != nil {
		return nil, err
	}
	var prev any
	if c.PreviousSecretExpiresAt != nil {
		prev = ms(*c.PreviousSecretExpiresAt)
	}
	return []any{c.Kind, c.Name, string(evs), boolInt(c.Enabled), c.Config, string(fields), c.Secret, c.PreviousSecret, prev}, nil
}

// InsertChannel stores a new channel; a name in use is a conflict.
func (s *Store) InsertChannel(ctx context.Context, c notify.StoredChannel) error {
	args, err := channelArgs(c)
	if err != nil {
		return err
	}
	args = append([]any{c.ID}, args...)
	args = append(args, c.CreatedBy, ms(c.CreatedAt), ms(c.UpdatedAt))
	_, err = s.w.ExecContext(ctx, s.rebind(`INSERT INTO notification_channels (`+channelColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`), args...)
	if isUniqueViolation(err) {
		return fault.Conflictf("channel-name-taken", "A channel named %q exists.", c.Name)
	}
	return err
}

// Channels returns every channel, oldest first.
func (s *Store) Channels(ctx context.Context) ([]notify.StoredChannel, error) {
	return selectAll(ctx, s.r, channelRow.channel, `SELECT `+channelColumns+` FROM notification_channels ORDER BY id`)
}

// Channel returns a channel.
func (s *Store) Channel(ctx context.Context, id string) (notify.StoredChannel, error) {
	return getOne(ctx, s.r, channelRow.channel, "notification channel", s.rebind(`SELECT `+channelColumns+` FROM notification_channels WHERE id = ?`), id)
}

// UpdateChannel stores a changed channel if nobody changed it since prev.
func (s *Store) UpdateChannel(ctx context.Context, c notify.StoredChannel, prev time.Time) error {
	args, err := channelArgs(c)
	if err != nil {
		return err
	}
	args = append(args, ms(c.UpdatedAt), c.ID, ms(prev))
	res, err := s.w.ExecContext(ctx, s.rebind(`UPDATE notification_channels SET kind = ?, name = ?, events = ?, enabled = ?, config = ?,
		config_fields = ?, secret = ?, previous_secret = ?, previous_expires_at = ?, updated_at = ? WHERE id = ? AND updated_at = ?`), args...)
	if isUniqueViolation(err) {
		return fault.Conflictf("channel-name-taken", "A channel named %q exists.", c.Name)
	}
	return mustChange(res, err, func() error { _, err := s.Channel(ctx, c.ID); return err },
		fault.Conflictf("channel-changed", "The channel was changed at the same time; read it again and retry."))
}

// DeleteChannel deletes a channel.
func (s *Store) DeleteChannel(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM notification_channels WHERE id = ?`), id)
	return mustAffect(res, err, "notification channel")
}
