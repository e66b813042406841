package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/pgtest"
)

// TestTryReserveWritesNothingWithoutTheLock: while one transaction holds
// a key's lock (it reserved the key and has not committed), reserveTx
// with try in another is busy at once, without waiting for the holder's
// rows, and writes nothing: no approval consumed, no execution. Once the
// holder rolls back, the try reserves and consumes.
func TestTryReserveWritesNothingWithoutTheLock(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	scope := idem.Scope{Org: "acme", Principal: "agent"}
	now := time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC)
	if _, err := pool.Exec(t.Context(), `INSERT INTO idem_approvals (org, id, requested_by, operation, fingerprint,
			reason, status, created_at, expires_at) VALUES ($1, 'apr_1', $2, 'op', 'fp', 'r', 'approved', $3, $4)`,
		scope.Org, scope.Principal, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	params := func(id, approval string) idem.ReserveParams {
		return idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: id, Scope: scope, Operation: "op", Fingerprint: "fp", ApprovalID: approval},
			Key:         "k", Lease: time.Minute, Retention: time.Hour,
		}
	}
	holder, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(t.Context())
	if res, busy, err := reserveTx(t.Context(), holder, params("exe_holder", ""), now, false); err != nil || busy || !res.Reserved {
		t.Fatalf("holder: %+v, busy %v, err %v", res, busy, err)
	}

	try := func(id string) (idem.ReserveResult, bool) {
		t.Helper()
		tx, err := pool.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(t.Context())
		res, busy, err := reserveTx(t.Context(), tx, params(id, "apr_1"), now, true)
		if err != nil {
			t.Fatalf("try: %v", err)
		}
		var executions, consumed int
		if err := tx.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM idem_records WHERE id = $1),
				(SELECT count(*) FROM idem_approvals WHERE status = 'consumed')`, id).Scan(&executions, &consumed); err != nil {
			t.Fatal(err)
		}
		if busy && (executions != 0 || consumed != 0) {
			t.Fatalf("a busy try wrote %d executions and consumed %d approvals", executions, consumed)
		}
		if !busy && (executions != 1 || consumed != 1 || !res.Reserved || len(res.Execution.Events) != 2) {
			t.Fatalf("try reserved %+v with %d executions and %d consumed approvals", res, executions, consumed)
		}
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		return res, busy
	}
	if _, busy := try("exe_try1"); !busy {
		t.Fatal("a try reserved a key another transaction holds")
	}
	if err := holder.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, busy := try("exe_try2"); busy {
		t.Fatal("a try was busy with no other holder")
	}
	// Consumed now: a second try fails whole.
	tx, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	p := params("exe_try3", "apr_1")
	p.Key = "k2"
	if _, _, err := reserveTx(t.Context(), tx, p, now, true); !errors.Is(err, idem.ErrApprovalNotConsumable) {
		t.Fatalf("consuming a consumed approval: err = %v", err)
	}
}
