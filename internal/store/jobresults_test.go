package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/agentproto"
	"github.com/capstan-dev/capstan/internal/jobs"
	"github.com/capstan-dev/capstan/internal/secrets"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// finishWith claims and finishes a job with data, output and one event,
// each holding marker.
func finishWith(t *testing.T, s *store.Store, j jobs.Job, marker string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	mustClaim(t, s, j.ServerID, j.ID, at)
	if err := s.AppendJobEvents(ctx, j.ID, []jobs.Event{{At: at, Level: agentproto.LevelInfo, Message: "line " + marker,
		Data: json.RawMessage(`{"line":"` + marker + `"}`)}}, at); err != nil {
		t.Fatal(err)
	}
	ok, err := s.FinishJob(ctx, j.ID, jobs.Succeeded, nil, json.RawMessage(`{"rows":[["`+marker+`"]]}`),
		json.RawMessage(`{"log":"`+marker+`"}`), at.Add(time.Second))
	if err != nil || !ok {
		t.Fatalf("finish: %v, %v", ok, err)
	}
}

// TestJobResultsSealedAtRest: what an agent reports of a job is stored
// encrypted and read back in plain text; results stored in plain text
// before still read; past the retention they are purged (once, however
// many control planes purge at the same time), and the job stays.
func TestJobResultsSealedAtRest(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		srv := mustCreateServer(t, s, "db-1")

		// Before the store seals: plain text, as older versions stored it.
		legacy := mustInsertJobWithSecrets(t, s, srv, t0)
		finishWith(t, s, legacy, "legacy-marker", t0)

		s.SealJobResults(secrets.GenerateKey())
		j := mustInsertJobWithSecrets(t, s, srv, t0.Add(time.Minute))
		const marker = "row-value-7f3a"
		finishWith(t, s, j, marker, t0.Add(time.Minute))
		raw, err := s.RawJobColumns(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range raw {
			if strings.Contains(v, marker) {
				t.Fatalf("stored column %d holds the result in plain text: %q", i, v)
			}
		}
		if len(raw) != 5 || !strings.HasPrefix(raw[0], "v1:") || !strings.HasPrefix(raw[3], "v1:") {
			t.Fatalf("stored columns: %q; want data and the event sealed", raw)
		}
		got, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(got.Data), marker) || !strings.Contains(string(got.Output), marker) {
			t.Fatalf("read back: data %s, output %s", got.Data, got.Output)
		}
		evs, err := s.JobEvents(ctx, j.ID)
		if err != nil || len(evs) != 1 || evs[0].Message != "line "+marker || !strings.Contains(string(evs[0].Data), marker) {
			t.Fatalf("events read back: %+v, %v", evs, err)
		}
		old, err := s.Job(ctx, legacy.ID)
		if err != nil || !strings.Contains(string(old.Data), "legacy-marker") {
			t.Fatalf("a result stored in plain text reads %s (%v)", old.Data, err)
		}
		if evs, _ := s.JobEvents(ctx, legacy.ID); len(evs) != 1 || evs[0].Message != "line legacy-marker" {
			t.Fatalf("plain-text events read %+v", evs)
		}

		// Many jobs past the retention, purged by four at once.
		var ended []string
		for i := 0; i < 30; i++ {
			k := mustInsertJobWithSecrets(t, s, srv, t0.Add(time.Hour+time.Duration(i)*time.Second))
			finishWith(t, s, k, "old", t0.Add(time.Hour+time.Duration(i)*time.Second))
			ended = append(ended, k.ID)
		}
		cutoff := t0.Add(2 * time.Hour)
		var purged atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n, err := s.PurgeJobResults(ctx, cutoff, cutoff, 7)
					if err != nil {
						t.Error(err)
						return
					}
					purged.Add(int64(n))
					if n == 0 {
						return
					}
				}
			}()
		}
		wg.Wait()
		// The legacy job, the sealed one and the 30.
		if got, want := purged.Load(), int64(32); got != want {
			t.Fatalf("purged %d jobs, want %d (each once)", got, want)
		}
		for _, id := range append(ended, j.ID, legacy.ID) {
			k, err := s.Job(ctx, id)
			if err != nil {
				t.Fatalf("job %s gone after the purge: %v", id, err)
			}
			if k.Status != jobs.Succeeded || k.FinishedAt == nil || k.Data != nil || k.Output != nil {
				t.Fatalf("purged job %s: status %s, data %s, output %s", id, k.Status, k.Data, k.Output)
			}
			if evs, _ := s.JobEvents(ctx, id); len(evs) != 0 {
				t.Fatalf("purged job %s keeps %d events", id, len(evs))
			}
		}
		if n, err := s.PurgeJobResults(ctx, cutoff, cutoff, 100); err != nil || n != 0 {
			t.Fatalf("a second purge: %d, %v", n, err)
		}
		// A job that ended after the cutoff keeps its results.
		recent := mustInsertJobWithSecrets(t, s, srv, cutoff.Add(time.Minute))
		finishWith(t, s, recent, "recent", cutoff.Add(time.Minute))
		if n, _ := s.PurgeJobResults(ctx, cutoff, cutoff, 100); n != 0 {
			t.Fatalf("purged %d recent jobs", n)
		}
		if k, _ := s.Job(ctx, recent.ID); !strings.Contains(string(k.Data), "recent") {
			t.Fatalf("recent job's data: %s", k.Data)
		}
	})
}
