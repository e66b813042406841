package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Durability is what the database says about how durable a commit is: the
// settings a reservation's COMMIT runs under and the standbys it could be
// replicated to. docs/SCALE.md explains what each mode loses on failover.
type Durability struct {
	// SynchronousCommit is SHOW synchronous_commit on a connection of the
	// store's pool: on, remote_apply, remote_write, local or off.
	SynchronousCommit string
	// SynchronousStandbyNames is SHOW synchronous_standby_names; empty
	// means every standby is asynchronous.
	SynchronousStandbyNames string
	// InRecovery is pg_is_in_recovery(): the store points at a standby.
	InRecovery bool
	// Standbys counts the streaming standbys in pg_stat_replication.
	Standbys int
	// SynchronousStandbys counts those whose sync_state is sync or quorum:
	// the ones a commit waits for.
	SynchronousStandbys int
	// Unreadable counts replication connections whose state this role may
	// not see (it lacks pg_read_all_stats), so they cannot be classified.
	Unreadable int
}

// The modes Durability.Mode reports.
const (
	// ModeStandalone: no standby streams from this primary and none is
	// required. A commit is as durable as the primary's own WAL; there is
	// no failover target, so no failover can lose it.
	ModeStandalone = "standalone"
	// ModeAsynchronous: standbys stream, but a commit does not wait for
	// any of them.
	ModeAsynchronous = "asynchronous"
	// ModeSynchronous: a commit returns only once a synchronous standby
	// has it.
	ModeSynchronous = "synchronous"
	// ModeSynchronousUnavailable: synchronous_standby_names asks for a
	// synchronous standby but none is connected, so commits wait.
	ModeSynchronousUnavailable = "synchronous-unavailable"
	// ModeStandby: the store is connected to a standby in recovery.
	ModeStandby = "standby"
)

// The statements of DurabilityReport (sql/durability.sql).
var (
	showSynchronousCommitSQL   = section("durability", "synchronous_commit")
	showSynchronousStandbysSQL = section("durability", "synchronous_standby_names")
	replicationSQL             = section("durability", "replication")
)

// DurabilityReport reads the durability settings and the replication
// state, all on one connection of pool (so that SHOW reports what the
// pool's sessions run under).
func DurabilityReport(ctx context.Context, pool *pgxpool.Pool) (Durability, error) {
	var d Durability
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Durability{}, err
	}
	defer conn.Release()
	if err := conn.QueryRow(ctx, showSynchronousCommitSQL).Scan(&d.SynchronousCommit); err != nil {
		return Durability{}, fmt.Errorf("show synchronous_commit: %w", err)
	}
	if err := conn.QueryRow(ctx, showSynchronousStandbysSQL).Scan(&d.SynchronousStandbyNames); err != nil {
		return Durability{}, fmt.Errorf("show synchronous_standby_names: %w", err)
	}
	err = conn.QueryRow(ctx, replicationSQL).Scan(&d.InRecovery, &d.Standbys, &d.SynchronousStandbys, &d.Unreadable)
	if err != nil {
		return Durability{}, fmt.Errorf("read pg_stat_replication: %w", err)
	}
	return d, nil
}

// Durability reports the durability of the store's database (see
// DurabilityReport). idem serve logs it at start-up.
func (s *Store) Durability(ctx context.Context) (Durability, error) {
	d, err := DurabilityReport(ctx, s.pool)
	if err != nil {
		return Durability{}, interpretError(ctx, "durability report", err)
	}
	return d, nil
}

// waitsForStandby reports whether synchronous_commit makes a commit wait
// for the synchronous standbys (when synchronous_standby_names names any).
func (d Durability) waitsForStandby() bool {
	switch d.SynchronousCommit {
	case "on", "remote_apply", "remote_write":
		return true
	}
	return false
}

// Mode classifies the replication a commit gets: one of the Mode
// constants.
func (d Durability) Mode() string {
	switch {
	case d.InRecovery:
		return ModeStandby
	case strings.TrimSpace(d.SynchronousStandbyNames) != "" && d.waitsForStandby():
		if d.SynchronousStandbys == 0 {
			return ModeSynchronousUnavailable
		}
		return ModeSynchronous
	case d.Standbys > 0 || d.Unreadable > 0:
		return ModeAsynchronous
	}
	return ModeStandalone
}

// Warning explains, in one or more sentences, how a committed reservation
// could be lost (and so a keyed handler run twice for one key) or why
// commits would stall; it is empty when neither applies. A lone primary
// with synchronous_commit on gets no warning: a commit is on its disk and
// there is no standby to fail over to.
func (d Durability) Warning() string {
	var w []string
	if d.InRecovery {
		w = append(w, "the store is connected to a standby in recovery, which accepts no writes: point the store URL at the primary")
	}
	if d.SynchronousCommit == "off" {
		w = append(w, "synchronous_commit is off: COMMIT returns before the WAL is flushed, so a crash of the database server "+
			"(even without failover) can lose the latest committed reservations, and a keyed handler may then run a second time "+
			"for the same key; set synchronous_commit = on")
	}
	switch d.Mode() {
	case ModeAsynchronous:
		w = append(w, fmt.Sprintf("%d standby(s) replicate asynchronously (synchronous_standby_names %q, synchronous_commit %q): "+
			"a failover to a standby loses the reservations committed on the primary that had not reached it, "+
			"and a keyed handler may then run twice for one key; configure a synchronous standby (synchronous_standby_names) "+
			"with synchronous_commit = on or remote_apply",
			d.Standbys+d.Unreadable, d.SynchronousStandbyNames, d.SynchronousCommit))
	case ModeSynchronousUnavailable:
		w = append(w, fmt.Sprintf("synchronous_standby_names is %q but no synchronous standby is streaming: "+
			"every commit waits until one connects, so reservations stall (nothing is lost)", d.SynchronousStandbyNames))
	}
	if d.Unreadable > 0 {
		w = append(w, fmt.Sprintf("%d replication connection(s) are not visible to this role (grant it pg_read_all_stats): "+
			"whether they are synchronous cannot be told", d.Unreadable))
	}
	return strings.Join(w, "; ")
}
