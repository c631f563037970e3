package store

import (
	"context"
	"time"
)

// TryLease takes the named lease for holder until now+ttl, or renews it if
// holder has it already. It reports whether holder has the lease: false
// while another holder's lease runs. Leases compare the callers' clocks, so
// ttl must be well above the clock skew between control planes.
func (s *Store) TryLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error) {
	return changedOne(s.w.ExecContext(ctx, s.rebind(`INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?`), name, holder, ms(now.Add(ttl)), ms(now)))
}

// ReleaseLease gives up the named lease if holder has it, so that another
// control plane takes it at once.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := s.w.ExecContext(ctx, s.rebind(`DELETE FROM leases WHERE name = ? AND holder = ?`), name, holder)
	return err
}
