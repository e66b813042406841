package linearize

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	_ "modernc.org/sqlite"             // the "sqlite" driver

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/demo"
	"github.com/idem-run/idem/pgstore"
	"github.com/idem-run/idem/sqlitestore"
)

// lin.put is a test-only transactional operation (SPEC §6.7), so that the
// histories have a transactional target whatever the demo's operations
// are: its handler writes one row, naming its record and execution,
// through the call's transaction into lin_effects, a table of this
// package's own in the store's database; waits delayMs; and then fails
// (failAfterWrite: a 500, rolled back with the row) or answers a declared
// 409 (declare: stored, the row undone) or succeeds (201, the row kept).

const (
	linPutOp  = "lin.put"
	linShowOp = "lin.show"
)

// linPutInput is lin.put's input; Body only tells bodies apart.
type linPutInput struct {
	ID             string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=200"`
	Body           int    `json:"body"`
	DelayMs        int    `json:"delayMs,omitempty" jsonschema:"minimum=0,maximum=1000"`
	FailAfterWrite bool   `json:"failAfterWrite,omitempty"`
	Declare        bool   `json:"declare,omitempty"`
}

type linShowInput struct {
	ID string `json:"id" in:"path" jsonschema:"minLength=1,maxLength=200"`
}

// linView is a record's committed effects: the executions that wrote them.
type linView struct {
	ID         string   `json:"id"`
	Executions []string `json:"executions"`
}

// linTable is lin_effects in the database of one store URL, read through
// a connection of its own.
type linTable struct {
	db *sql.DB
	pg bool
}

// openLinTable creates lin_effects in the database of storeURL (sqlite:PATH
// or a PostgreSQL URL) if it is not there; it closes when the test ends.
func openLinTable(t *testing.T, storeURL string) *linTable {
	t.Helper()
	lt := &linTable{}
	var err error
	if path, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		lt.db, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	} else {
		lt.db, err = sql.Open("pgx", storeURL)
		lt.pg = true
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lt.db.Close() })
	if _, err := lt.db.Exec(`CREATE TABLE IF NOT EXISTS lin_effects (record TEXT NOT NULL, execution_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return lt
}

// executions lists the executions whose effects on record id committed.
func (lt *linTable) executions(ctx context.Context, id string) ([]string, error) {
	q := `SELECT execution_id FROM lin_effects WHERE record = ? ORDER BY execution_id`
	if lt.pg {
		q = strings.Replace(q, "?", "$1", 1)
	}
	rows, err := lt.db.QueryContext(ctx, q, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var e string
		if err := rows.Scan(&e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// all returns every committed effect: execution ids by record id.
func (lt *linTable) all(t *testing.T) map[string][]string {
	t.Helper()
	rows, err := lt.db.Query(`SELECT record, execution_id FROM lin_effects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var r, e string
		if err := rows.Scan(&r, &e); err != nil {
			t.Fatal(err)
		}
		out[r] = append(out[r], e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// linOperations are lin.put and its reconcile read lin.show on lt.
func linOperations(lt *linTable) []idem.Operation {
	return []idem.Operation{
		idem.Define(idem.Metadata{
			Name: linPutOp, Method: "POST", Path: "/v1/lin/{id}",
			Summary: "Test only: write one effect through the transaction, wait, then fail, reject or succeed", SideEffect: idem.SideEffectWrite,
			Retry: idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: linShowOp, Transactional: true,
				Rationale: "Its effect commits with its record or not at all: a replay returns the one committed execution, a failure leaves nothing."},
			SuccessStatus: http.StatusCreated,
			Errors:        []idem.DeclaredError{idem.Declare(demo.CodeBusinessExists, "The body asked for a declared error (declare).")},
		}, linPut),
		idem.Define(idem.Metadata{
			Name: linShowOp, Method: "GET", Path: "/v1/lin/{id}",
			Summary: "Test only: the executions whose lin.put effects committed", SideEffect: idem.SideEffectRead,
			Retry: idem.RetryContract{Kind: idem.RetryFreshRead, Rationale: "A read of current state."},
		}, func(ctx context.Context, _ *idem.Call, in linShowInput) (linView, error) {
			ex, err := lt.executions(ctx, in.ID)
			return linView{ID: in.ID, Executions: ex}, err
		}),
	}
}

func linPut(ctx context.Context, call *idem.Call, in linPutInput) (linView, error) {
	if err := writeLinEffect(ctx, call, in.ID); err != nil {
		return linView{}, err
	}
	if in.DelayMs > 0 {
		t := time.NewTimer(time.Duration(in.DelayMs) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return linView{}, ctx.Err()
		}
	}
	switch {
	case in.FailAfterWrite:
		return linView{}, errors.New("lin.put failed after its write (failAfterWrite)")
	case in.Declare:
		return linView{}, idem.Errorf(demo.CodeBusinessExists, "lin.put %q was asked to answer a declared error (declare)", in.ID)
	}
	return linView{ID: in.ID, Executions: []string{call.ExecutionID}}, nil
}

// writeLinEffect writes the call's effect on record id through the call's
// transaction, whichever store gave it.
func writeLinEffect(ctx context.Context, call *idem.Call, id string) error {
	if tx := sqlitestore.Tx(call); tx != nil {
		_, err := tx.ExecContext(ctx, `INSERT INTO lin_effects (record, execution_id) VALUES (?, ?)`, id, call.ExecutionID)
		return err
	}
	if tx := pgstore.Tx(call); tx != nil {
		_, err := tx.Exec(ctx, `INSERT INTO lin_effects (record, execution_id) VALUES ($1, $2)`, id, call.ExecutionID)
		return err
	}
	return errors.New("lin.put: the call carries no transaction")
}
