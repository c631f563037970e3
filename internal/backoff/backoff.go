// Package backoff computes the waits between attempts of the control
// plane's retry loops: exponential, capped, and spread with jitter so that
// many retrying at once do not retry in step.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exponential waits Base after the first failure and twice as long after
// each further one, never more than Max.
type Exponential struct {
	Base, Max time.Duration
}

// Delay is the wait after the n-th consecutive failure (n from 1).
func (e Exponential) Delay(n int) time.Duration {
	d := e.Base
	for i := 1; i < n && d < e.Max; i++ {
		d *= 2
	}
	return min(d, e.Max)
}

// Jitter spreads d over [d·(1-f), d·(1+f)), uniformly at random.
func Jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 - f + 2*f*rand.Float64()))
}
