package idem

import "time"

// Clock tells the time. Stores and the runner read time only through a
// Clock, so that tests move time instead of sleeping.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
