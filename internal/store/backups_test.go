package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/capstan-dev/capstan/internal/backups"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/store"
	"github.com/capstan-dev/capstan/internal/store/storetest"
)

// TestStoreBackupSettings: one row, saved at a revision; of concurrent
// saves at the same revision exactly one applies.
func TestStoreBackupSettings(t *testing.T) {
	storetest.RunWithStores(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if _, err := s.BackupSettings(ctx); !fault.Is(err, fault.NotFound) {
			t.Fatalf("settings before any save: %v, want not found", err)
		}
		want := backups.Settings{Provider: "s3", Endpoint: "s3.example.net:9000", Region: "eu-1", Bucket: "b", Prefix: "p/",
			PathStyle: true, TLS: true, CA: "ca", SealedAccessKeyID: "v1:k:a", SealedSecretAccessKey: "v1:k:s", Revision: 1,
			UpdatedBy: "usr_a", UpdatedAt: t0}
		// The second round finds the row there: no save at revision 0 applies.
		for round, prev := range []int64{0, 0} {
			var wg sync.WaitGroup
			applied := make(chan bool, 8)
			for i := range 8 {
				wg.Go(func() {
					b := want
					b.Revision = prev + 1
					b.Bucket = fmt.Sprintf("bucket-%d", i)
					ok, err := s.PutBackupSettings(ctx, b, prev)
					if err != nil {
						t.Error(err)
					}
					applied <- ok
				})
			}
			wg.Wait()
			close(applied)
			n := 0
			for ok := range applied {
				if ok {
					n++
				}
			}
			if want := 1 - round; n != want {
				t.Fatalf("round %d: %d of 8 concurrent first saves applied, want %d", round, n, want)
			}
		}
		got, err := s.BackupSettings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Revision != 1 {
			t.Fatalf("revision %d after the first save, want 1", got.Revision)
		}
		next := want
		next.Revision = 2
		var wg sync.WaitGroup
		applied := make(chan bool, 8)
		for range 8 {
			wg.Go(func() {
				ok, err := s.PutBackupSettings(ctx, next, 1)
				if err != nil {
					t.Error(err)
				}
				applied <- ok
			})
		}
		wg.Wait()
		close(applied)
		n := 0
		for ok := range applied {
			if ok {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d of 8 concurrent saves at revision 1 applied, want 1", n)
		}
		got, err = s.BackupSettings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != next {
			t.Fatalf("got %+v\nwant %+v", got, next)
		}
	})
}
