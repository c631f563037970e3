package store

import (
	"context"
	"strings"
	"time"
)

// TakeThrottle takes one token from the bucket key (burst tokens at most,
// one back per every), in one conditional upsert: of parallel takes on a
// bucket with n tokens, n succeed. It returns 0 when it took one, or how
// long until the next token when there is none (and takes nothing). A
// clock that goes backwards refills nothing.
//
// A token given back between the refused take and the look at the bucket
// makes the wait 0 or less: the take is then tried again, so that a
// refusal always comes with a wait.
func (s *Store) TakeThrottle(ctx context.Context, key string, burst int, every time.Duration, now time.Time) (time.Duration, error) {
	for {
		wait, err := s.takeThrottle(ctx, key, burst, every, now)
		if err != nil || wait >= 0 {
			return wait, err
		}
	}
}

// takeThrottle is one try of TakeThrottle: it returns 0 when it took a
// token, the wait for the next one, or -1 when the bucket had a token
// again by the time it was looked at.
func (s *Store) takeThrottle(ctx context.Context, key string, burst int, every time.Duration, now time.Time) (time.Duration, error) {
	refilled := `LEAST(?, login_throttles.tokens + CAST(GREATEST(? - login_throttles.updated_at, 0) AS DOUBLE PRECISION) / ?)`
	q := `INSERT INTO login_throttles (key, tokens, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET tokens = ` + refilled + ` - 1, updated_at = GREATEST(?, login_throttles.updated_at)
		WHERE ` + refilled + ` >= 1 RETURNING tokens`
	b, n, perToken := float64(burst), ms(now), float64(every.Milliseconds())
	rows, err := s.w.QueryContext(ctx, s.dialectSQL(q), key, b-1, n, b, n, perToken, n, b, n, perToken)
	if err != nil {
		return 0, err
	}
	took := rows.Next()
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if took {
		return 0, nil
	}
	var tokens float64
	var at int64
	if err := s.w.QueryRowContext(ctx, s.rebind(`SELECT tokens, updated_at FROM login_throttles WHERE key = ?`), key).Scan(&tokens, &at); err != nil {
		return 0, err
	}
	tokens = min(b, tokens+float64(max(n-at, 0))/perToken)
	if wait := time.Duration((1 - tokens) * float64(every)); wait > 0 {
		return wait, nil
	}
	return -1, nil
}

// ReturnThrottle gives back a token taken by TakeThrottle, never beyond
// burst; a bucket that is gone (pruned: it was full) stays gone.
func (s *Store) ReturnThrottle(ctx context.Context, key string, burst int) error {
	_, err := s.w.ExecContext(ctx, s.dialectSQL(`UPDATE login_throttles SET tokens = LEAST(?, tokens + 1) WHERE key = ?`), float64(burst), key)
	return err
}

// PruneThrottles deletes buckets unused since before: they are full
// again, and a full bucket is the same as none.
func (s *Store) PruneThrottles(ctx context.Context, before time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM login_throttles WHERE updated_at < ?`), ms(before))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// dialectSQL rebinds q and, for SQLite, names LEAST and GREATEST as
// SQLite's scalar MIN and MAX.
func (s *Store) dialectSQL(q string) string {
	if s.dialect == SQLite {
		q = strings.NewReplacer("LEAST(", "MIN(", "GREATEST(", "MAX(").Replace(q)
	}
	return s.rebind(q)
}

// ResetThrottle deletes the bucket key: it is full again.
func (s *Store) ResetThrottle(ctx context.Context, key string) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`DELETE FROM login_throttles WHERE key = ?`), key))
}
