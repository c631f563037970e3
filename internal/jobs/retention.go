package jobs

import (
	"context"
	"time"
)

// DefaultResultRetention is how long what an agent reported of a job is
// kept after the job ended, unless configured otherwise.
const DefaultResultRetention = 30 * 24 * time.Hour

// purgeBatch is how many jobs one purge transaction covers.
const purgeBatch = 500

// PurgeResults removes what agents reported of jobs that ended more than
// retention ago (result data such as query rows and key values, output
// such as logs and build output, events), in batches, and returns how many
// jobs it purged. The jobs stay, with their type, status, times and
// error. Completion hooks ran long before: what a capability keeps of a
// result (a deployment's image, a backup run's size and hash) is in its
// own records.
func (s *Service) PurgeResults(ctx context.Context, retention time.Duration) (int, error) {
	now := s.now()
	cutoff := now.Add(-retention)
	total := 0
	for {
		n, err := s.store.PurgeJobResults(ctx, cutoff, now, purgeBatch)
		total += n
		if err != nil || n < purgeBatch {
			return total, err
		}
	}
}
