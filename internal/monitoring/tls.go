package monitoring

import (
	"context"
	"time"

	"github.com/capstan-dev/capstan/internal/audit"
	"github.com/capstan-dev/capstan/internal/fault"
	"github.com/capstan-dev/capstan/internal/jobs"
)

// DomainChecks queues the domain check of every auto or internal TLS
// domain whose last check is older than Every, so that tls_expiring sees
// each certificate at least that often.
type DomainChecks struct {
	Due interface {
		DomainsDueForCheck(ctx context.Context, before time.Time, limit int) ([]string, error)
	}
	Domains interface {
		QueueCheck(ctx context.Context, actor audit.Actor, c audit.Entry, id string) (jobs.Job, error)
	}
	Every time.Duration
	Now   func() time.Time
}

// checksPerRound bounds the checks one round queues.
const checksPerRound = 500

// Run queues the checks that are due and returns how many it queued. A
// domain whose server has no agent is skipped.
func (d *DomainChecks) Run(ctx context.Context) (int, error) {
	ids, err := d.Due.DomainsDueForCheck(ctx, d.Now().Add(-d.Every), checksPerRound)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		_, err := d.Domains.QueueCheck(ctx, audit.Actor{Type: audit.ActorSystem}, audit.Entry{}, id)
		switch {
		case err == nil:
			n++
		case fault.Is(err, fault.Conflict), fault.Is(err, fault.NotFound):
		default:
			return n, err
		}
	}
	return n, nil
}
