package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/events"
	"github.com/capstan-dev/capstan/internal/ids"
)

var _ events.Store = (*Store)(nil)

// OnPublish sets fn to be called (without blocking) after events are
// stored, to wake the dispatcher.
func (s *Store) OnPublish(fn func()) { s.onPublish.Store(&fn) }

func (s *Store) published() {
	if fn := s.onPublish.Load(); fn != nil {
		(*fn)()
	}
}

// publishTx stores events in tx, the transaction of the change they report.
func publishTx(ctx context.Context, tx *sqlx.Tx, evs ...events.Event) error {
	for _, ev := range evs {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO events (id, type, subject_type, subject_id, payload, occurred_at)
			VALUES (?, ?, ?, ?, ?, ?)`), ev.ID, string(ev.Type), ev.Subject.Type, ev.Subject.ID, string(ev.Payload), ms(ev.OccurredAt)); err != nil {
			return err
		}
	}
	return nil
}

// Publish stores events on their own, for changes that are not stored
// in a transaction of this store.
func (s *Store) Publish(ctx context.Context, evs ...events.Event) error {
	if err := s.tx(ctx, func(tx *sqlx.Tx) error { return publishTx(ctx, tx, evs...) }); err != nil {
		return err
	}
	s.published()
	return nil
}

type eventRow struct {
	ID          string `db:"id"`
	Type        string `db:"type"`
	SubjectType string `db:"subject_type"`
	SubjectID   string `db:"subject_id"`
	Payload     string `db:"payload"`
	OccurredAt  int64  `db:"occurred_at"`
}

func (r eventRow) event() events.Event {
	return events.Event{ID: r.ID, Type: events.Type(r.Type), Subject: events.Subject{Type: r.SubjectType, ID: r.SubjectID},
		Payload: []byte(r.Payload), OccurredAt: fromMS(r.OccurredAt)}
}

const eventColumns = `id, type, subject_type, subject_id, payload, occurred_at`

// ListEvents returns up to limit events, newest first, before the cursor
// (an event id) and of the type, when given.
func (s *Store) ListEvents(ctx context.Context, limit int, before, typ string) ([]events.Event, error) {
	var c conds
	if before != "" {
		c.add("id < ?", before)
	}
	c.equal("type", typ)
	return selectAll(ctx, s.r, always(eventRow.event), s.rebind(`SELECT `+eventColumns+` FROM events WHERE `+c.where()+
		` ORDER BY id DESC LIMIT ?`), append(c.args, limit)...)
}

// UnroutedEvents returns up to limit events not yet routed, oldest first.
func (s *Store) UnroutedEvents(ctx context.Context, limit int) ([]events.Event, error) {
	return selectAll(ctx, s.w, always(eventRow.event), s.rebind(`SELECT `+eventColumns+` FROM events WHERE routed = 0 ORDER BY id LIMIT ?`), limit)
}

// RouteEvent records a pending delivery per destination and marks the
// event routed; an event routed already is left alone.
func (s *Store) RouteEvent(ctx context.Context, eventID string, destinations []string, now time.Time) error {
	return s.tx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE events SET routed = 1 WHERE id = ? AND routed = 0`), eventID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // routed by another dispatcher, or pruned
		}
		for _, d := range destinations {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO event_deliveries (id, event_id, destination, status, next_attempt_at, created_at)
				VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT (event_id, destination) DO NOTHING`),
				ids.NewAt(events.DeliveryIDPrefix, now), eventID, d, ms(now), ms(now)); err != nil {
				return err
			}
		}
		return nil
	})
}

type deliveryRow struct {
	ID            string        `db:"id"`
	EventID       string        `db:"event_id"`
	Destination   string        `db:"destination"`
	Status        string        `db:"status"`
	Attempts      int           `db:"attempts"`
	NextAttemptAt int64         `db:"next_attempt_at"`
	LastAttemptAt sql.NullInt64 `db:"last_attempt_at"`
	ResponseCode  int           `db:"response_code"`
	LastError     string        `db:"last_error"`
	DeliveredAt   sql.NullInt64 `db:"delivered_at"`
	CreatedAt     int64         `db:"created_at"`
	EventType     string        `db:"event_type"`
}

func (r deliveryRow) delivery() events.Delivery {
	d := events.Delivery{ID: r.ID, EventID: r.EventID, EventType: events.Type(r.EventType), Destination: r.Destination, Status: r.Status,
		Attempts: r.Attempts, ResponseCode: r.ResponseCode, LastError: r.LastError, LastAttemptAt: nullMS(r.LastAttemptAt),
		DeliveredAt: nullMS(r.DeliveredAt), CreatedAt: fromMS(r.CreatedAt)}
	if r.Status == events.Pending {
		t := fromMS(r.NextAttemptAt)
		d.NextAttemptAt = &t
	}
	return d
}

const deliveryColumns = `d.id, d.event_id, d.destination, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at, d.response_code,
	d.last_error, d.delivered_at, d.created_at, e.type AS event_type`

// ClaimDeliveries claims up to limit due deliveries whose earlier claim
// (if any) lapsed, counting an attempt for each.
func (s *Store) ClaimDeliveries(ctx context.Context, now, leaseUntil time.Time, limit int) ([]events.Claimed, error) {
	var out []events.Claimed
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		out = nil
		pick := `SELECT id FROM event_deliveries WHERE status = 'pending' AND next_attempt_at <= ?
			AND (lease_until IS NULL OR lease_until <= ?) ORDER BY next_attempt_at LIMIT ?`
		if s.dialect == Postgres {
			pick += ` FOR UPDATE SKIP LOCKED`
		}
		var picked []string
		if err := tx.SelectContext(ctx, &picked, tx.Rebind(pick), ms(now), ms(now), limit); err != nil {
			return err
		}
		if len(picked) == 0 {
			return nil
		}
		q, args, err := sqlx.In(`UPDATE event_deliveries SET attempts = attempts + 1, lease_until = ? WHERE id IN (?)`, ms(leaseUntil), picked)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(q), args...); err != nil {
			return err
		}
		q, args, err = sqlx.In(`SELECT `+deliveryColumns+`, e.subject_type, e.subject_id, e.payload, e.occurred_at
			FROM event_deliveries d JOIN events e ON e.id = d.event_id WHERE d.id IN (?) ORDER BY d.next_attempt_at`, picked)
		if err != nil {
			return err
		}
		var rows []struct {
			deliveryRow
			SubjectType string `db:"subject_type"`
			SubjectID   string `db:"subject_id"`
			Payload     string `db:"payload"`
			OccurredAt  int64  `db:"occurred_at"`
		}
		if err := tx.SelectContext(ctx, &rows, tx.Rebind(q), args...); err != nil {
			return err
		}
		for _, r := range rows {
			ev := eventRow{ID: r.EventID, Type: r.EventType, SubjectType: r.SubjectType, SubjectID: r.SubjectID, Payload: r.Payload,
				OccurredAt: r.OccurredAt}.event()
			out = append(out, events.Claimed{Delivery: r.delivery(), Event: ev})
		}
		return nil
	})
	return out, err
}

// FinishDelivery records an attempt's outcome, unless the delivery was
// claimed again since.
func (s *Store) FinishDelivery(ctx context.Context, id string, o events.Outcome) error {
	var delivered, next any
	if o.Status == events.Delivered {
		delivered = ms(o.At)
	}
	next = ms(o.At)
	if o.Status == events.Pending {
		next = ms(o.NextAttempt)
	}
	_, err := s.w.ExecContext(ctx, s.rebind(`UPDATE event_deliveries SET status = ?, lease_until = NULL, last_attempt_at = ?,
		response_code = ?, last_error = ?, delivered_at = ?, next_attempt_at = ?
		WHERE id = ? AND attempts = ? AND status = 'pending'`),
		o.Status, ms(o.At), o.ResponseCode, strings.ToValidUTF8(truncate(o.Error, 1000), ""), delivered, next, id, o.Attempt)
	return err
}

// Deliveries returns up to limit deliveries to a destination, newest first.
func (s *Store) Deliveries(ctx context.Context, destination string, limit int) ([]events.Delivery, error) {
	return selectAll(ctx, s.r, always(deliveryRow.delivery), s.rebind(`SELECT `+deliveryColumns+` FROM event_deliveries d JOIN events e ON e.id = d.event_id
		WHERE d.destination = ? ORDER BY d.id DESC LIMIT ?`), destination, limit)
}

// Delivery returns a delivery by id.
func (s *Store) Delivery(ctx context.Context, id string) (events.Delivery, error) {
	return getOne(ctx, s.r, always(deliveryRow.delivery), "delivery", s.rebind(`SELECT `+deliveryColumns+` FROM event_deliveries d JOIN events e ON e.id = d.event_id WHERE d.id = ?`), id)
}

// PruneEvents deletes events older than before whose deliveries have all
// ended, with their deliveries, at most limit at a time.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM events WHERE id IN (SELECT id FROM events e WHERE occurred_at < ? AND routed = 1
		AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.event_id = e.id AND d.status = 'pending') ORDER BY id LIMIT ?)`),
		ms(before), limit)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
