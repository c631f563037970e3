package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// holdJob changes a job in a transaction on raw and keeps it open: the
// row stays locked until commit is called. It is the other side of a race,
// caught at its worst moment.
func holdJob(t *testing.T, raw *sql.DB, jobID, set string) (commit func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`UPDATE jobs SET %s WHERE id = '%s'`, set, jobID)); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitBlocked waits until a statement waits for a row lock. PostgreSQL
// lets the racing method read the row (as it was before the held change)
// and blocks its update: the moment a read-then-update goes wrong. SQLite
// takes its write lock when the transaction begins, so there the method
// waits before it reads, and there is nothing to wait for here.
func waitBlocked(t *testing.T, d store.Dialect, raw *sql.DB) {
	t.Helper()
	if d != store.Postgres {
		return
	}
	testlab.Eventually(t, 10*time.Second, "a statement waiting for the held row", func() bool {
		var n int
		err := raw.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE NOT granted`).Scan(&n)
		return err == nil && n > 0
	})
}

// TestJobStateChangesLoseRacesCleanly: a state change that loses a race
// to another one changes nothing and reports nothing, so that no
// completion hook runs for a job that it did not change: a cancel racing a
// claim is a conflict (the job runs), and an expiry racing a completion or
// a lease extension leaves the job as the winner left it.
func TestJobStateChangesLoseRacesCleanly(t *testing.T) {
	runWithRaw(t, func(t *testing.T, s *store.Store, raw *sql.DB) {
		d := s.Dialect()
		ctx := context.Background()
		t.Run("cancel racing a claim", func(t *testing.T) {
			srv := mustCreateServer(t, s, "web-1")
			j := mustInsertJobWithSecrets(t, s, srv, t0)
			commit := holdJob(t, raw, j.ID, fmt.Sprintf(`status = 'running', started_at = %d, lease_expires_at = %d, deadline_at = %d`,
				t0.UnixMilli(), t0.Add(30*time.Second).UnixMilli(), t0.Add(time.Minute).UnixMilli()))
			type answer struct {
				j   jobs.Job
				err error
			}
			done := make(chan answer, 1)
			go func() {
				j, err := s.CancelJob(ctx, j.ID, t0)
				done <- answer{j, err}
			}()
			waitBlocked(t, d, raw)
			commit()
			a := <-done
			if !fault.Is(a.err, fault.Conflict) {
				t.Fatalf("cancel of a job claimed meanwhile: got (%s, %v), want a conflict", a.j.Status, a.err)
			}
			got, err := s.Job(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != jobs.Running || got.HookPendingAt != nil {
				t.Fatalf("job after the lost cancel: status %s, hook pending %v; want running, none", got.Status, got.HookPendingAt)
			}
		})

		for _, c := range []struct {
			name, set string
			want      jobs.Status
		}{
			{"expiry racing a completion", fmt.Sprintf(`status = 'succeeded', finished_at = %d, lease_expires_at = NULL, data = '{}'`,
				t0.Add(29*time.Second).UnixMilli()), jobs.Succeeded},
			{"expiry racing a lease extension", fmt.Sprintf(`lease_expires_at = %d`, t0.Add(59*time.Second).UnixMilli()), jobs.Running},
		} {
			t.Run(c.name, func(t *testing.T) {
				srv := mustCreateServer(t, s, c.name)
				mustInsertJobWithSecrets(t, s, srv, t0)
				j, ok, err := s.ClaimJob(ctx, srv, t0)
				if err != nil || !ok {
					t.Fatalf("claim: %v %v", ok, err)
				}
				// The agent has it: a lapsed lease fails it.
				if err := s.AckJob(ctx, srv, j.ID, t0.Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				commit := holdJob(t, raw, j.ID, c.set)
				type answer struct {
					expired []jobs.Job
					err     error
				}
				done := make(chan answer, 1)
				go func() {
					expired, _, err := s.ExpireJobs(ctx, t0.Add(31*time.Second), jobs.MaxRequeues)
					done <- answer{expired, err}
				}()
				waitBlocked(t, d, raw)
				commit()
				a := <-done
				if a.err != nil {
					t.Fatal(a.err)
				}
				for _, e := range a.expired {
					if e.ServerID != srv {
						continue
					}
					t.Fatalf("expiry reported the job (%s), want not: it was changed first", *e.Error)
				}
				got, err := s.Job(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != c.want || got.Error != nil {
					t.Fatalf("job after the lost expiry: status %s error %v, want %s and no error", got.Status, got.Error, c.want)
				}
			})
		}
	})
}

// TestStaleHooksTakenOnce: a hook left pending (its control plane died
// after ending the job) is handed out once, to one of several callers,
// and only after it is stale.
func TestStaleHooksTakenOnce(t *testing.T) {
	runWithRaw(t, func(t *testing.T, s *store.Store, raw *sql.DB) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "web-1")
		mustInsertJobWithSecrets(t, s, srv, t0)
		j, _, err := s.ClaimJob(ctx, srv, t0)
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := s.FinishJob(ctx, j.ID, jobs.Succeeded, nil, nil, nil, t0.Add(time.Second)); err != nil || !ok {
			t.Fatalf("finish: %v %v", ok, err)
		}
		got, _ := s.Job(ctx, j.ID)
		if got.HookPendingAt == nil || !got.HookPendingAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("hook pending after finish: %v, want %s", got.HookPendingAt, t0.Add(time.Second))
		}
		if taken, err := s.TakeStaleHooks(ctx, t0, t0.Add(time.Minute), 10); err != nil || len(taken) != 0 {
			t.Fatalf("a fresh pending hook was taken: %d %v", len(taken), err)
		}
		const n = 8
		counts := make(chan int, n)
		for range n {
			go func() {
				taken, err := s.TakeStaleHooks(ctx, t0.Add(2*time.Second), t0.Add(time.Minute), 10)
				if err != nil {
					t.Error(err)
				}
				counts <- len(taken)
			}()
		}
		total := 0
		for range n {
			total += <-counts
		}
		if total != 1 {
			t.Fatalf("stale hook taken %d times by %d parallel callers, want once", total, n)
		}
		if err := s.ClearHookPending(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if taken, err := s.TakeStaleHooks(ctx, t0.Add(time.Hour), t0.Add(time.Hour), 10); err != nil || len(taken) != 0 {
			t.Fatalf("a cleared hook was taken: %d %v", len(taken), err)
		}
	})
}
