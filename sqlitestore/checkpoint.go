package sqlitestore

import (
	"context"
	"database/sql"
	"sync/atomic"

	"modernc.org/sqlite"
)

// Checkpoints off the commit path (issue 36 item 4). SQLite's automatic
// checkpoint runs inside the commit that takes the WAL past 1,000 pages:
// that commit copies the WAL into the database file and syncs it before
// it returns, and every caller of its group-commit batch waits. So the
// writer's automatic checkpoint is off (wal_autocheckpoint(0)) and the
// writer checkpoints itself, PASSIVE, between batches (groupcommit's
// Config.After), once the batch's callers have their answers:
//
//   - when the WAL holds checkpointFrames frames or more and no write
//     waits (at half load, after most batches);
//   - regardless once it holds checkpointFramesMax, so that the WAL stays
//     bounded when writes never pause (saturated), the next batch then
//     waiting for the checkpoint as it did for the commit's own.
//
// The frames are the pages the writer's connection wrote to the WAL since
// its last complete checkpoint (SQLITE_DBSTATUS_CACHE_WRITE), so the
// trigger follows the bytes written, not a count of transactions. On the
// writer's connection no write runs meanwhile, so a checkpoint copies the
// whole WAL unless a reader's snapshot holds frames back, and the next
// write starts the WAL again from its beginning; on a connection of its
// own, racing the writer, a checkpoint never caught up with it (d3b9144).
const (
	checkpointFrames    = 1000 // SQLite's own default
	checkpointFramesMax = 4 * checkpointFrames
)

// checkpointer decides and runs the writer's checkpoints. after runs on
// the writer's goroutine only.
type checkpointer struct {
	db *sql.DB // the writer
	// soft and bound are the frames at which a checkpoint runs when no
	// write waits, and regardless (checkpointFrames, checkpointFramesMax).
	soft, bound int64
	frames      int64 // written to the WAL since its last complete checkpoint
	// Figures (CheckpointStats).
	idle, forced, partial, failed atomic.Int64
}

func newCheckpointer(w *sql.DB) *checkpointer {
	return &checkpointer{db: w, soft: checkpointFrames, bound: checkpointFramesMax}
}

// due reports whether a checkpoint should run now, with queued writes
// waiting.
func (c *checkpointer) due(queued int) bool {
	return c.frames >= c.bound || (c.frames >= c.soft && queued == 0)
}

// after is groupcommit's Config.After for the writer.
func (c *checkpointer) after(queued int) {
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	defer cancel()
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return
	}
	defer conn.Close()
	if err := conn.Raw(func(dc any) error {
		st, ok := dc.(sqlite.DBStatus)
		if !ok {
			return nil
		}
		n, _, err := st.Status(sqlite.DBStatusCacheWrite, true)
		c.frames += int64(n)
		return err
	}); err != nil || !c.due(queued) {
		return
	}
	// Best effort: a checkpoint that fails (a full disk) leaves the frames
	// in the WAL, where readers find them, for the next one.
	var busy, log, done int64
	if err := conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &log, &done); err != nil {
		c.failed.Add(1)
		return
	}
	if queued > 0 {
		c.forced.Add(1)
	} else {
		c.idle.Add(1)
	}
	c.frames = 0
	if log > done {
		// A reader's snapshot held frames back: they count towards the
		// next one.
		c.partial.Add(1)
		c.frames = log - done
	}
}

// CheckpointStats reports the checkpoints the writer ran between batches:
// with no write waiting (idle), with writes waiting because the WAL had
// reached its bound (forced), how many of those left frames behind for a
// reader (partial), and how many failed.
func (s *Store) CheckpointStats() (idle, forced, partial, failed int64) {
	c := s.ckpt
	return c.idle.Load(), c.forced.Load(), c.partial.Load(), c.failed.Load()
}
