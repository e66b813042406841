package sqlitestore

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// Checkpoints off the commit path (issue 36 item 4). SQLite's default
// automatic checkpoint runs inside the commit that takes the WAL past 1,000
// pages: that commit copies the WAL back into the database file and syncs
// it before it returns, and with group commit every caller of its batch
// waits for it, about one batch in a hundred under load: the p99 of a
// first execution. The writer's automatic checkpoint is off instead
// (wal_autocheckpoint(0)), and a checkpointer runs a PASSIVE checkpoint
// after every checkpointEvery write transactions, on the writer's own
// connection once the batch that kicked it has been answered: between
// batches, when the writer is idle (at half load, mostly), or delaying
// the next batch as the commit's own checkpoint did (saturated). On the
// writer's connection no write runs meanwhile, so the checkpoint copies
// the whole WAL and the next write starts it again from the beginning; a
// checkpoint on another connection, racing the writer, would never catch
// up with it, and the WAL would grow for as long as the writes go on.
// checkpointEvery is how many write transactions the checkpointer lets
// pass between checkpoints: with a first execution's few pages each,
// about the WAL the default checkpoints at.
const checkpointEvery = 64

// checkpointer runs PASSIVE checkpoints on the writer's connection when
// kicked.
type checkpointer struct {
	db      *sql.DB
	kick    chan struct{}
	done    sync.WaitGroup
	stop    context.CancelFunc
	commits atomic.Int64 // write transactions since the last kick
	runs    atomic.Int64 // checkpoints run
}

func startCheckpointer(db *sql.DB) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, kick: make(chan struct{}, 1), stop: stop}
	c.done.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.kick:
			}
			// Best effort: a failed checkpoint leaves the frames in the
			// WAL, where readers find them, for the next one.
			if _, err := c.db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err == nil {
				c.runs.Add(1)
			}
		}
	})
	return c
}

// committed counts a write transaction and kicks a checkpoint every
// checkpointEvery of them, without waiting for it.
func (c *checkpointer) committed() {
	if c.commits.Add(1)%checkpointEvery != 0 {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default: // one is queued already
	}
}

// close stops the checkpointer (the caller closes the writer).
func (c *checkpointer) close() {
	c.stop()
	c.done.Wait()
}
