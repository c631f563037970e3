package monitoring

import (
	"context"
	"math"
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
		QueueCheck(ctx context.Context, c audit.Caller, id string) (jobs.Job, error)
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
		_, err := d.Domains.QueueCheck(ctx, audit.System, id)
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

// RenewalWindowRatio is the part of a certificate's lifetime left when a
// renewer following the usual window starts renewing it (Caddy's
// certificate manager renews once a third of the lifetime remains; so
// does certbot for certificates that are short-lived).
const RenewalWindowRatio = 1.0 / 3

// tlsState classifies the certificate a domain served against a
// tls_expiring rule of threshold days, resolving hysteresis days past it.
//
// The certificate's lifetime caps the threshold: the condition holds
// when the time left is at most the threshold and, when the lifetime is
// known (not_before and not_after), at most a third of the lifetime as
// well. Before that a renewer has not even begun to renew, so a
// short-lived certificate (Caddy's local CA issues 12-hour ones) is
// healthy while more than a third of its life remains, however close its
// expiry is in days; a 90-day certificate alerts at the threshold as
// before (a third of 90 days is 30). When the cap applies, the
// hysteresis shrinks with it to at most a tenth of the lifetime, so that
// a renewed short-lived certificate resolves the alert. value is the
// days left, to a tenth, rounded down.
func tlsState(d DomainCertificate, threshold, hysteresis float64, now time.Time) (state int, value float64) {
	left := d.NotAfter.Sub(now)
	value = math.Floor(left.Hours()/24*10) / 10
	limit := time.Duration(threshold * 24 * float64(time.Hour))
	slack := time.Duration(hysteresis * 24 * float64(time.Hour))
	if d.NotBefore != nil {
		if life := d.NotAfter.Sub(*d.NotBefore); life > 0 {
			if window := time.Duration(float64(life) * RenewalWindowRatio); window < limit {
				limit = window
			}
			slack = min(slack, life/10)
		}
	}
	switch {
	case left <= limit:
		return firing, value
	case left > limit+slack:
		return clear, value
	}
	return band, value
}
