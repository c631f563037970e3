package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/capstan-dev/capstan/internal/jobs"
)

// Sealer encrypts values at rest, each bound to a context naming its row
// and column (secrets.Key is one).
type Sealer interface {
	Seal(context string, plaintext []byte) string
	Open(context, sealed string) ([]byte, error)
}

// SealJobResults makes the store encrypt what agents report of their jobs
// (result data, output, late results, event messages and data: query
// rows, key values, log lines, build output) with k as it writes them,
// and open them as it reads them. It is called once, when the control
// plane's key is known (after the store was opened and its key checked),
// before anything reads or writes jobs. Values written before, in plain
// text, are read as they are.
func (s *Store) SealJobResults(k Sealer) { s.results.Store(&k) }

// sealedPrefix starts every value Seal makes; JSON and the event messages
// this store writes itself never start with it.
const sealedPrefix = "v1:"

func jobSealContext(column, jobID string) string { return "jobs." + column + ":" + jobID }

func eventSealContext(column, jobID string, seq int) string {
	return "job_events." + column + ":" + jobID + ":" + strconv.Itoa(seq)
}

// seal is v sealed for context, or v itself when the store seals nothing.
func (s *Store) seal(context string, v sql.NullString) sql.NullString {
	k := s.results.Load()
	if k == nil || !v.Valid {
		return v
	}
	return sql.NullString{String: (*k).Seal(context, []byte(v.String)), Valid: true}
}

// open is the plain text of a value seal made, or v itself when it was
// stored in plain text. A value that cannot be opened (sealed with a key
// that is not the store's, which the store's key check prevents, or
// altered) reads as absent: job results are reports, never the only copy
// of what a job changed.
func (s *Store) open(context string, v sql.NullString) sql.NullString {
	if !v.Valid || !strings.HasPrefix(v.String, sealedPrefix) {
		return v
	}
	k := s.results.Load()
	if k == nil {
		return sql.NullString{}
	}
	b, err := (*k).Open(context, v.String)
	if err != nil {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

// jobOf is the job a row holds, its results opened.
func (s *Store) jobOf(r jobRow) jobs.Job {
	r.Data = s.open(jobSealContext("data", r.ID), r.Data)
	r.Output = s.open(jobSealContext("output", r.ID), r.Output)
	r.LateData = s.open(jobSealContext("late_data", r.ID), r.LateData)
	return r.job()
}

// PurgeJobResults removes what agents reported of jobs that finished
// before cutoff (result data, output, late results, events), at most
// limit jobs at a time, oldest first; the jobs themselves stay, with
// their type, status, times and error. It returns how many jobs it
// purged. It is idempotent: several control planes may run it at once.
func (s *Store) PurgeJobResults(ctx context.Context, cutoff, now time.Time, limit int) (int, error) {
	var ids []string
	if err := s.r.SelectContext(ctx, &ids, s.rebind(`SELECT id FROM jobs WHERE finished_at < ? AND results_purged_at IS NULL
		ORDER BY finished_at LIMIT ?`), ms(cutoff), limit); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	purged := 0
	err := s.tx(ctx, func(tx *sqlx.Tx) error {
		for _, id := range ids {
			res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE jobs SET data = NULL, output = NULL, late_data = NULL, results_purged_at = ?
				WHERE id = ? AND results_purged_at IS NULL`), ms(now), id)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				continue // another control plane purged it first
			}
			if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM job_events WHERE job_id = ?`), id); err != nil {
				return err
			}
			purged++
		}
		return nil
	})
	return purged, err
}

// rawSealed is b as a column value, sealed for context.
func (s *Store) rawSealed(context string, b json.RawMessage) sql.NullString {
	return s.seal(context, nullRaw(b))
}
