package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// On SQLite no commit checkpoints the write-ahead log: the writer's
// automatic checkpoint is off, and a background connection copies the
// log into the database file while writes go on.
func TestSQLiteCheckpointsInBackground(t *testing.T) {
	s := storetest.Open(t, store.SQLite)
	ctx := context.Background()
	if v, err := s.WriterPragma(ctx, "wal_autocheckpoint"); err != nil || v != 0 {
		t.Fatalf("writer wal_autocheckpoint = %d (%v), want 0", v, err)
	}
	srv := mustCreateServer(t, s, "ckpt")
	// Well over SQLite's default threshold of 1,000 pages.
	batch := make([]metrics.Sample, 60)
	for i := range 200 {
		for j := range batch {
			batch[j] = sample(h0.Add(time.Duration(i*len(batch)+j)*time.Second), float64(j), 50)
		}
		if _, err := s.InsertMetricSamples(ctx, srv, batch, h0); err != nil {
			t.Fatal(err)
		}
	}
	testlab.Eventually(t, 30*time.Second, "the background checkpoint copied the whole log", func() bool {
		st := s.CheckpointStats()
		return st.Runs > 0 && st.LogFrames > 0 && st.Checkpointed == st.LogFrames
	})
	if n := count(t, s, srv, h0, h0.Add(24*time.Hour)); n != 200*len(batch) {
		t.Fatalf("samples: %d, want %d", n, 200*len(batch))
	}
	if st := (&store.Store{}).CheckpointStats(); st != (store.CheckpointStats{}) {
		t.Fatalf("a store without checkpoints reports %+v", st)
	}
}
