package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Attempt records live in range partitions of idem_attempts by created_at,
// each partitionSpan long and named idem_attempts_pYYYYMMDDHH after the
// UTC hour it starts at, and a DEFAULT partition for rows whose time has
// none. Sweep keeps the partition of the current time and the next
// partitionsAhead, and drops a past partition once none of its rows is
// within retention (docs/store.md, "Partitions").

const (
	// partitionSpan is the time range of one partition. Every lookup by
	// key probes every partition that may hold a live record, about
	// (retention + partitionSpan) / partitionSpan of them, so the span
	// trades lookup cost against the storage a partition keeps after most
	// of its records expired (on average half a span past retention).
	// Six hours keeps a 24 h window to about seven partitions: measured
	// with parallel clients, Reserve+Complete cost about 1.3x the
	// unpartitioned table, as with daily partitions, against about 2x
	// with hourly ones (docs/store.md). It divides a day, so
	// partitions start at 00, 06, 12 and 18 UTC; migration 002 uses the
	// same grid.
	partitionSpan = 6 * time.Hour

	partitionPrefix = "idem_attempts_p"
	partitionLayout = "2006010215"

	// partitionsAhead is how many partitions after the current one are
	// made in advance.
	partitionsAhead = 1

	// ddlLockTimeout bounds each partition change's wait for its locks.
	// Creating or dropping a partition takes an ACCESS EXCLUSIVE lock on
	// idem_attempts, and reservations queue behind the waiting request, so
	// this is also the longest a waiting sweeper holds them up before it
	// gives up until its next round. Once granted, the change itself is
	// short: catalog work, a scan of the (small) DEFAULT partition, at
	// most maxMovedRows moved.
	ddlLockTimeout = 100 * time.Millisecond

	// maxMovedRows bounds the rows a new partition takes over from the
	// DEFAULT partition, all moved while reservations wait.
	maxMovedRows = 10000

	// partitionLock is the transaction-scoped advisory lock that serialises
	// partition changes across instances ("idem_prt" in ASCII). It is held
	// for one change at a time, so instances wait for it only briefly.
	partitionLock int64 = 0x6964656d5f707274
)

// partitionName names the partition that starts at start.
func partitionName(start time.Time) string {
	return partitionPrefix + start.UTC().Format(partitionLayout)
}

// partitionStart is the inverse of partitionName; ok is false for a name
// partitionName does not make (the DEFAULT partition, say) or a start off
// the partitionSpan grid.
func partitionStart(name string) (start time.Time, ok bool) {
	digits, found := strings.CutPrefix(name, partitionPrefix)
	if !found || len(digits) != len(partitionLayout) {
		return time.Time{}, false
	}
	start, err := time.Parse(partitionLayout, digits)
	if err != nil || partitionName(start) != name || !start.Truncate(partitionSpan).Equal(start) {
		return time.Time{}, false
	}
	return start, true
}

// errSkipped is returned by a partition change that found nothing to do.
var errSkipped = errors.New("pgstore: partition change skipped")

// maintainPartitions makes the partitions of now and the next
// partitionsAhead, and drops past partitions that hold no record within
// retention at now. It counts what it created and dropped.
func (s *Store) maintainPartitions(ctx context.Context, now time.Time) (created, dropped int, err error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'idem_attempts'::regclass`)
	if err != nil {
		return 0, 0, interpretError(ctx, "list partitions", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, 0, interpretError(ctx, "list partitions", err)
	}
	have := map[time.Time]bool{}
	var past []time.Time
	for _, name := range names {
		if start, ok := partitionStart(name); ok {
			have[start] = true
			if !start.Add(partitionSpan).After(now) {
				past = append(past, start)
			}
		}
	}
	current := now.Truncate(partitionSpan) // UTC: Truncate counts from year 1, and the span divides a day
	for i := range partitionsAhead + 1 {
		start := current.Add(time.Duration(i) * partitionSpan)
		if have[start] {
			continue
		}
		ok, err := s.createPartition(ctx, start)
		if err != nil {
			return created, dropped, err
		}
		if ok {
			created++
		}
	}
	slices.SortFunc(past, time.Time.Compare)
	for _, start := range past {
		ok, err := s.dropPartition(ctx, start, now)
		if err != nil {
			return created, dropped, err
		}
		if ok {
			dropped++
		}
	}
	return created, dropped, nil
}

// createPartition makes the partition that starts at start unless it
// exists. Rows of its range already in the DEFAULT partition (a new
// installation's first minutes, before the first sweep) move into it, up
// to maxMovedRows; with more, the range goes without a partition and its
// rows are deleted one by one when they expire. It reports whether it
// made the partition.
func (s *Store) createPartition(ctx context.Context, start time.Time) (bool, error) {
	name := partitionName(start)
	table := pgx.Identifier{name}.Sanitize()
	end := start.Add(partitionSpan)
	bounds := fmt.Sprintf(`FOR VALUES FROM ('%s') TO ('%s')`, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339))
	return s.changePartition(ctx, "create partition "+name, func(tx pgx.Tx) error {
		var exists bool
		var inDefault int
		err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, (SELECT count(*) FROM (
				SELECT FROM idem_attempts_default WHERE created_at >= $2 AND created_at < $3 LIMIT $4) r)`,
			name, start, end, maxMovedRows+1).Scan(&exists, &inDefault)
		switch {
		case err != nil:
			return err
		case exists || inDefault > maxMovedRows:
			return errSkipped
		case inDefault == 0:
			_, err = tx.Exec(ctx, `CREATE TABLE `+table+` PARTITION OF idem_attempts `+bounds)
			return err
		}
		// Under the table lock nothing reads or writes the rows that move.
		// ATTACH makes the partition's indexes and checks the DEFAULT
		// partition, now without rows of the range.
		for _, q := range []string{
			`LOCK TABLE ONLY idem_attempts IN ACCESS EXCLUSIVE MODE`,
			`CREATE TABLE ` + table + ` (LIKE idem_attempts INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
			fmt.Sprintf(`WITH moved AS (DELETE FROM idem_attempts_default WHERE created_at >= '%s' AND created_at < '%s' RETURNING *)
				INSERT INTO %s SELECT * FROM moved`, start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), table),
			`ALTER TABLE idem_attempts ATTACH PARTITION ` + table + ` ` + bounds,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
}

// dropPartition drops the partition that starts at start if none of its
// rows is within retention, or in flight within its lease, at now. It
// reports whether it dropped it.
func (s *Store) dropPartition(ctx context.Context, start, now time.Time) (bool, error) {
	table := pgx.Identifier{partitionName(start)}.Sanitize()
	live := `SELECT EXISTS (SELECT FROM ` + table + ` WHERE expires_at > $1 OR (state = 'in_flight' AND lease_expires_at > $1))`
	// A first look without the exclusive lock, so that the usual answer
	// ("not yet") stalls nobody.
	var busy bool
	if err := s.pool.QueryRow(ctx, live, now).Scan(&busy); err != nil {
		if isSkip(err) {
			return false, nil
		}
		return false, interpretError(ctx, "drop partition "+table, err)
	}
	if busy {
		return false, nil
	}
	return s.changePartition(ctx, "drop partition "+table, func(tx pgx.Tx) error {
		// Under the lock no row can arrive (an instance whose clock lags
		// may still write into a past range), so look again.
		if _, err := tx.Exec(ctx, `LOCK TABLE ONLY idem_attempts IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, live, now).Scan(&busy); err != nil {
			return err
		}
		if busy {
			return errSkipped
		}
		_, err := tx.Exec(ctx, `DROP TABLE `+table)
		return err
	})
}

// changePartition runs fn in a transaction of its own that holds the
// partition lock, waiting at most ddlLockTimeout for it and for every
// other lock. fn must check under the lock that its change is still due.
// changePartition reports whether fn made its change: one whose lock wait
// timed out, or that the table's state made moot (errSkipped, a concurrent
// drop, rows in the DEFAULT partition), is left for a later round. It does
// not go through inTx: partition DDL is never retried at once, and a lost
// race is not an error.
func (s *Store) changePartition(ctx context.Context, op string, fn func(pgx.Tx) error) (bool, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", ddlLockTimeout.Milliseconds()))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, partitionLock); err != nil {
			return err
		}
		return fn(tx)
	})
	switch {
	case err == nil:
		return true, nil
	case isSkip(err):
		return false, nil
	default:
		return false, interpretError(ctx, op, err)
	}
}

// isSkip reports whether err means a partition change is not to be made
// now: errSkipped, or PostgreSQL's lock_not_available (lock_timeout),
// check_violation (the DEFAULT partition holds rows of the new
// partition's range), invalid_object_definition (the range overlaps a
// partition named otherwise), undefined_table (dropped meanwhile) or
// duplicate_table (created meanwhile).
func isSkip(err error) bool {
	if errors.Is(err, errSkipped) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "55P03", "23514", "42P17", "42P01", "42P07":
		return true
	}
	return false
}
