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
// writes and reads go on, and once the log is long, a checkpoint through
// the writer lets it start again from the beginning: after that, writing
// less than the log holds does not make its file any longer.
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
	const perReport = 60
	written := 0
	write := func(reports int) {
		t.Helper()
		batch := make([]metrics.Sample, perReport)
		for range reports {
			for j := range batch {
				m := sample(h0.Add(time.Duration(written*perReport+j)*time.Second), float64(j), 50)
				m.Filesystems = append(m.Filesystems, m.Filesystems[0], m.Filesystems[0])
				batch[j] = m
			}
			if _, err := s.InsertMetricSamples(ctx, srv, batch, h0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.CountMetricSamples(ctx, srv, h0, h0.Add(1000*time.Hour)); err != nil {
				t.Fatal(err)
			}
			written++
		}
	}
	wal := filepath.Join(dir, store.FileName+"-wal")
	walSize := func() int64 {
		t.Helper()
		fi, err := os.Stat(wal)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	write(600)
	before := s.CheckpointStats()
	testlab.Eventually(t, 30*time.Second, "a checkpoint after the writes copied the whole log", func() bool {
		st := s.CheckpointStats()
		return st.Runs > before.Runs && st.LogFrames == st.Checkpointed
	})
	// One write starts the log again; what follows fits in it.
	maxWAL := walSize()
	write(1)
	st := s.CheckpointStats()
	write(30)
	if got := walSize(); got > maxWAL {
		t.Fatalf("the log grew from %d to %d bytes after a full checkpoint (%+v): it did not start again", maxWAL, got, st)
	}
	db, err := os.Stat(filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("database %d MB, largest log %d MB, checkpoints %+v", db.Size()>>20, maxWAL>>20, s.CheckpointStats())
	if n := count(t, s, srv, h0, h0.Add(1000*time.Hour)); n != written*perReport {
		t.Fatalf("samples: %d, want %d", n, written*perReport)
	}
	if st := (&store.Store{}).CheckpointStats(); st != (store.CheckpointStats{}) {
		t.Fatalf("a store without checkpoints reports %+v", st)
	}
}
