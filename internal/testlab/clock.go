package testlab

import (
	"sync"
	"time"
)

// Clock is a time source a test moves by hand, for the services that take
// a now function (pass c.Now). It is safe for concurrent use: the code
// under test reads it while the test advances it.
type Clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// NewClock is a clock that reads t until it is moved.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}
