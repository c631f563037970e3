package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/capstan-dev/capstan/internal/metrics"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/testlab"
)

// On SQLite a background connection checkpoints the write-ahead log while
// writes and reads go on, and the log does not grow with what was
// written: it starts again from the beginning, so its file stays far
// smaller than the data written through it.
func TestSQLiteCheckpointsInBackground(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	srv := mustCreateServer(t, s, "ckpt")
	// About 60 MB through the log, in reports of 60 samples with three
	// filesystems each.
	const reports, perReport = 600, 60
	batch := make([]metrics.Sample, perReport)
	maxWAL := int64(0)
	wal := filepath.Join(dir, store.FileName+"-wal")
	for i := range reports {
		for j := range batch {
			m := sample(h0.Add(time.Duration(i*perReport+j)*time.Second), float64(j), 50)
			m.Filesystems = append(m.Filesystems, m.Filesystems[0], m.Filesystems[0])
			batch[j] = m
		}
		if _, err := s.InsertMetricSamples(ctx, srv, batch, h0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CountMetricSamples(ctx, srv, h0, h0.Add(48*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(wal); err == nil {
			maxWAL = max(maxWAL, fi.Size())
		}
	}
	db, err := os.Stat(filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("database %d MB, largest log %d MB, checkpoints %+v", db.Size()>>20, maxWAL>>20, s.CheckpointStats())
	if maxWAL > db.Size()/2 {
		t.Fatalf("the log grew to %d bytes with a database of %d: it never started again", maxWAL, db.Size())
	}
	testlab.Eventually(t, 30*time.Second, "background checkpoints ran", func() bool { return s.CheckpointStats().Runs > 0 })
	if n := count(t, s, srv, h0, h0.Add(48*time.Hour)); n != reports*perReport {
		t.Fatalf("samples: %d, want %d", n, reports*perReport)
	}
	if st := (&store.Store{}).CheckpointStats(); st != (store.CheckpointStats{}) {
		t.Fatalf("a store without checkpoints reports %+v", st)
	}
}
