// Package singleton runs background work in exactly one control plane of
// several that share a database: a task runs only in the holder of its
// named lease in the store, which the holder renews on every run. When the
// holder stops (or dies), another control plane takes the lease once it
// lapses. With SQLite there is one control plane, and it always holds it.
package singleton

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"time"
)

// Leases is the store's lease table.
type Leases interface {
	TryLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Holder names this process as a lease holder: host, pid and randomness,
// so that two processes never share a name.
func Holder() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = cryptoRead(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

var cryptoRead = rand.Read

// Task is background work that must run in one control plane at a time.
type Task struct {
	Leases Leases
	// Name names the lease; one per kind of work.
	Name string
	// Holder is this control plane's name (Holder()).
	Holder   string
	Interval time.Duration
	// Run does one round of the work. An error is logged; the next round
	// comes at the next interval.
	Run func(ctx context.Context) error
	Now func() time.Time
	Log *slog.Logger
}

// ttl is how long a lease lasts without renewal: three intervals, so that
// a holder that misses a beat keeps it, and a dead holder's work resumes
// elsewhere within three intervals.
func (t *Task) ttl() time.Duration { return 3 * t.Interval }

// Once takes or renews the lease and, if this control plane holds it,
// runs one round. It reports whether it ran.
func (t *Task) Once(ctx context.Context) (bool, error) {
	held, err := t.Leases.TryLease(ctx, t.Name, t.Holder, t.Now(), t.ttl())
	if err != nil || !held {
		return false, err
	}
	start := time.Now()
	err = t.Run(ctx)
	if t.Log != nil {
		t.Log.Debug("background task ran", "task", t.Name, "duration_ms", time.Since(start).Milliseconds())
	}
	return true, err
}

// Loop runs rounds every interval until ctx ends, then releases the lease.
// Errors back off with jitter (up to the interval) and are logged, never
// the loop's own cancellation.
func (t *Task) Loop(ctx context.Context) {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := t.Leases.ReleaseLease(rctx, t.Name, t.Holder); err != nil {
			t.Log.Warn("releasing lease", "lease", t.Name, "err", err.Error())
		}
	}()
	for {
		wait := t.Interval
		if _, err := t.Once(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			t.Log.Error("background task", "task", t.Name, "err", err.Error())
			wait = time.Duration(float64(t.Interval) * (0.5 + 0.5*mrand.Float64()))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
