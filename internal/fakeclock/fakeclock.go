// Package fakeclock is a settable idem.Clock for tests: time moves only
// when a test says so.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a manually advanced clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock set to start, truncated to microseconds (the
// precision both stores keep).
func New(start time.Time) *Clock { return &Clock{now: start.UTC().Truncate(time.Microsecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
