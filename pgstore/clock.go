package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockResample is how often a store measures the database's clock again.
// Between samples the local monotonic clock advances it; its drift
// against the database's clock (NTP-disciplined clocks drift well under
// 100 ppm) stays under a few milliseconds a minute.
const clockResample = time.Minute

// dbClock is the store's clock when StoreConfig.Clock is nil: the
// database's clock as this instance sees it, so that every instance
// judges leases, retention and expiry by one clock, whatever the skew of
// the instances' own clocks. A sample reads clock_timestamp() and takes it
// to be the database's time at the midpoint of the round trip (the best
// of a few round trips); Now advances it by the local monotonic clock,
// so that steps of the instance's wall clock do not matter, and never
// runs backwards across samples.
type dbClock struct {
	local func() time.Time // time.Now, or a test's skewed clock
	pool  *pgxpool.Pool

	mu   sync.Mutex
	base time.Time // the database's time at the sample
	at   time.Time // the local time then, with its monotonic reading
	last time.Time // the latest time Now returned

	stop chan struct{}
	done chan struct{}
}

// readClockSQL reads the database's clock.
var readClockSQL = statement("read_clock")

// startDBClock measures the database's clock once (an error if it cannot)
// and re-measures it every clockResample until close.
func startDBClock(ctx context.Context, pool *pgxpool.Pool, local func() time.Time) (*dbClock, error) {
	c := &dbClock{local: local, pool: pool, stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.sample(ctx); err != nil {
		return nil, err
	}
	go c.resample()
	return c, nil
}

// Now implements idem.Clock.
func (c *dbClock) Now() time.Time {
	now := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.base.Add(now.Sub(c.at))
	if t.Before(c.last) {
		t = c.last
	}
	c.last = t
	return t
}

// sample reads clock_timestamp() three times and keeps the reading with
// the shortest round trip, whose midpoint error is smallest.
func (c *dbClock) sample(ctx context.Context) error {
	var base, at time.Time
	best := time.Duration(-1)
	for range 3 {
		sent := c.local()
		var db time.Time
		if err := c.pool.QueryRow(ctx, readClockSQL).Scan(&db); err != nil {
			return interpretError(ctx, "read the database's clock", err)
		}
		rtt := c.local().Sub(sent)
		if best < 0 || rtt < best {
			best, base, at = rtt, db, sent.Add(rtt/2)
		}
	}
	c.mu.Lock()
	c.base, c.at = base, at
	c.mu.Unlock()
	return nil
}

// resample keeps the sample fresh; a failed sample keeps the last one
// (the monotonic clock still advances it) and is tried again next time.
func (c *dbClock) resample() {
	defer close(c.done)
	t := time.NewTicker(clockResample)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = c.sample(ctx)
			cancel()
		}
	}
}

// close stops the resampling.
func (c *dbClock) close() {
	close(c.stop)
	<-c.done
}
