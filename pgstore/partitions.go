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

// Attempt records, executions and audit events live in range partitions
// of their table by a time column, and a DEFAULT partition for rows whose
// time has none: idem_attempts by created_at in six-hour partitions named
// idem_attempts_pYYYYMMDDHH after the UTC hour they start at,
// idem_executions by started_at and idem_audit_events by at in daily
// partitions named idem_executions_pYYYYMMDD and idem_audit_events_pYYYYMMDD
// after the UTC day they hold. Sweep keeps the partition of the current
// time and the next partitionsAhead of each table, drops a past attempt
// partition once none of its rows is within retention, and a past
// execution or event partition once its range ended before the audit
// retention's window (docs/store.md, "Partitions" and "Audit retention").

const (
	// partitionSpan is the time range of one attempt partition. Every
	// lookup by key probes every partition that may hold a live record,
	// about (retention + partitionSpan) / partitionSpan of them, so the
	// span trades lookup cost against the storage a partition keeps after
	// most of its records expired (on average half a span past retention).
	// Six hours keeps a 24 h window to about seven partitions: measured
	// with parallel clients, Reserve+Complete cost about 1.3x the
	// unpartitioned table, as with daily partitions, against about 2x
	// with hourly ones (docs/store.md). It divides a day, so
	// partitions start at 00, 06, 12 and 18 UTC; migration 002 uses the
	// same grid.
	partitionSpan = 6 * time.Hour

	// auditPartitionSpan is the time range of one execution or event
	// partition. Lookups by execution id probe every partition, about
	// (audit retention + span) / span of them: ten for the default week;
	// a partition stays on average half a span past the window. Migration
	// 005 uses the same grid.
	auditPartitionSpan = 24 * time.Hour

	// partitionsAhead is how many partitions after the current one are
	// made in advance.
	partitionsAhead = 1

	// ddlLockTimeout bounds each partition change's wait for its locks.
	// Creating or dropping a partition takes an ACCESS EXCLUSIVE lock on
	// its table, and the requests that use the table queue behind the
	// waiting request, so this is also the longest a waiting sweeper holds
	// them up before it gives up until its next round. Once granted, the
	// change itself is short: catalog work, a scan of the (small) DEFAULT
	// partition, at most maxMovedRows moved.
	ddlLockTimeout = 100 * time.Millisecond

	// maxMovedRows bounds the rows a new partition takes over from the
	// DEFAULT partition, all moved while requests wait.
	maxMovedRows = 10000

	// partitionLock is the transaction-scoped advisory lock that serialises
	// partition changes across instances ("idem_prt" in ASCII). It is held
	// for one change at a time, so instances wait for it only briefly.
	partitionLock int64 = 0x6964656d5f707274
)

// partitioned is a table partitioned by range of a time column.
type partitioned struct {
	table, column string
	span          time.Duration
	// layout formats a partition's start in its name.
	layout string
	// live, if set, is the statement (a template, see fill) that reads
	// whether a past partition holds a row that keeps it ($1: now);
	// unset, a partition goes once its range ended before the window,
	// which its rows cannot outlive.
	live string
}

var (
	attemptPartitions = partitioned{table: "idem_attempts", column: "created_at", span: partitionSpan, layout: "2006010215",
		live: partitionTemplate("attempts_live")}
	executionPartitions = partitioned{table: "idem_executions", column: "started_at", span: auditPartitionSpan, layout: "20060102"}
	eventPartitions     = partitioned{table: "idem_audit_events", column: "at", span: auditPartitionSpan, layout: "20060102"}
)

// The statements of partition changes (sql/partitions.sql): all but the
// first two are templates, which fill completes.
var (
	listPartitionsSQL  = section("partitions", "list")
	partitionLockSQL   = section("partitions", "lock")
	probePartitionSQL  = partitionTemplate("probe")
	createPartitionSQL = partitionTemplate("create")
	lockTableSQL       = partitionTemplate("lock_table")
	createDetachedSQL  = partitionTemplate("create_detached")
	moveRowsSQL        = partitionTemplate("move_rows")
	attachPartitionSQL = partitionTemplate("attach")
	dropPartitionSQL   = partitionTemplate("drop")
)

// partitionPlaceholders are the placeholders fill replaces.
var partitionPlaceholders = []string{"{{table}}", "{{partition}}", "{{default}}", "{{column}}", "{{from}}", "{{to}}"}

// partitionTemplate returns the template of a section of
// sql/partitions.sql. It panics, at init, when the template names a
// placeholder fill does not know.
func partitionTemplate(name string) string {
	q := section("partitions", name)
	rest := q
	for _, ph := range partitionPlaceholders {
		rest = strings.ReplaceAll(rest, ph, "")
	}
	if strings.Contains(rest, "{{") || strings.Contains(rest, "}}") {
		panic(fmt.Sprintf("pgstore: sql/partitions.sql, section %q: unknown placeholder", name))
	}
	return q
}

// fill completes a partition statement's template for the partition of p
// that starts at start: names as quoted identifiers, the range's bounds in
// RFC 3339 (sql/partitions.sql says why they are not parameters).
func (p partitioned) fill(template string, start time.Time) string {
	return strings.NewReplacer(
		"{{table}}", pgx.Identifier{p.table}.Sanitize(),
		"{{partition}}", pgx.Identifier{p.name(start)}.Sanitize(),
		"{{default}}", pgx.Identifier{p.defaultPartition()}.Sanitize(),
		"{{column}}", pgx.Identifier{p.column}.Sanitize(),
		"{{from}}", start.UTC().Format(time.RFC3339),
		"{{to}}", start.Add(p.span).UTC().Format(time.RFC3339),
	).Replace(template)
}

// prefix is what every time partition's name starts with.
func (p partitioned) prefix() string { return p.table + "_p" }

// defaultPartition names the DEFAULT partition.
func (p partitioned) defaultPartition() string { return p.table + "_default" }

// name names the partition that starts at start.
func (p partitioned) name(start time.Time) string {
	return p.prefix() + start.UTC().Format(p.layout)
}

// start is the inverse of name; ok is false for a name that name does not
// make (the DEFAULT partition, say) or a start off the span's grid.
func (p partitioned) start(name string) (start time.Time, ok bool) {
	digits, found := strings.CutPrefix(name, p.prefix())
	if !found || len(digits) != len(p.layout) {
		return time.Time{}, false
	}
	start, err := time.Parse(p.layout, digits)
	if err != nil || p.name(start) != name || !start.Truncate(p.span).Equal(start) {
		return time.Time{}, false
	}
	return start, true
}

// errSkipped is returned by a partition change that found nothing to do.
var errSkipped = errors.New("pgstore: partition change skipped")

// maintainPartitions makes the partitions of p for now and the next
// partitionsAhead, and drops past partitions: those whose range ended at
// or before keepFrom, and (with p.live) those that hold no live row at
// now. A zero keepFrom with no p.live drops nothing. It counts what it
// created and dropped.
func (s *Store) maintainPartitions(ctx context.Context, p partitioned, now, keepFrom time.Time) (created, dropped int, err error) {
	rows, err := s.pool.Query(ctx, listPartitionsSQL, p.table)
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
		if start, ok := p.start(name); ok {
			have[start] = true
			end := start.Add(p.span)
			if p.live != "" && !end.After(now) || p.live == "" && !keepFrom.IsZero() && !end.After(keepFrom) {
				past = append(past, start)
			}
		}
	}
	current := now.Truncate(p.span) // UTC: Truncate counts from year 1, and the span divides a day
	for i := range partitionsAhead + 1 {
		start := current.Add(time.Duration(i) * p.span)
		if have[start] {
			continue
		}
		ok, err := s.createPartition(ctx, p, start)
		if err != nil {
			return created, dropped, err
		}
		if ok {
			created++
		}
	}
	slices.SortFunc(past, time.Time.Compare)
	for _, start := range past {
		ok, err := s.dropPartition(ctx, p, start, now)
		if err != nil {
			return created, dropped, err
		}
		if ok {
			dropped++
		}
	}
	return created, dropped, nil
}

// createPartition makes the partition of p that starts at start unless it
// exists. Rows of its range already in the DEFAULT partition (a new
// installation's first minutes, before the first sweep) move into it, up
// to maxMovedRows; with more, the range goes without a partition and its
// rows are deleted one by one when they expire. It reports whether it
// made the partition.
func (s *Store) createPartition(ctx context.Context, p partitioned, start time.Time) (bool, error) {
	name := p.name(start)
	return s.changePartition(ctx, "create partition "+name, func(tx pgx.Tx) error {
		var exists bool
		var inDefault int
		err := tx.QueryRow(ctx, p.fill(probePartitionSQL, start), name, start, start.Add(p.span), maxMovedRows+1).
			Scan(&exists, &inDefault)
		switch {
		case err != nil:
			return err
		case exists || inDefault > maxMovedRows:
			return errSkipped
		case inDefault == 0:
			_, err = tx.Exec(ctx, p.fill(createPartitionSQL, start))
			return err
		}
		// Under the table lock nothing reads or writes the rows that move.
		// ATTACH makes the partition's indexes and checks the DEFAULT
		// partition, now without rows of the range.
		for _, q := range []string{lockTableSQL, createDetachedSQL, moveRowsSQL, attachPartitionSQL} {
			if _, err := tx.Exec(ctx, p.fill(q, start)); err != nil {
				return err
			}
		}
		return nil
	})
}

// dropPartition drops the partition of p that starts at start, if p.live
// is unset or none of its rows is live at now. It reports whether it
// dropped it.
func (s *Store) dropPartition(ctx context.Context, p partitioned, start, now time.Time) (bool, error) {
	table := pgx.Identifier{p.name(start)}.Sanitize()
	lock, drop := p.fill(lockTableSQL, start), p.fill(dropPartitionSQL, start)
	if p.live == "" {
		return s.changePartition(ctx, "drop partition "+table, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lock); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, drop)
			return err
		})
	}
	live := p.fill(p.live, start)
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
		if _, err := tx.Exec(ctx, lock); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, live, now).Scan(&busy); err != nil {
			return err
		}
		if busy {
			return errSkipped
		}
		_, err := tx.Exec(ctx, drop)
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
		_, err := tx.Exec(ctx, lockTimeoutSQL, fmt.Sprintf("%dms", ddlLockTimeout.Milliseconds()))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, partitionLockSQL, partitionLock); err != nil {
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
