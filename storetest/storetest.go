// Package storetest is the conformance suite every idem.Store passes.
// Each store's tests call Run with a way to make a fresh database.
package storetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
)

// Harness opens store instances on one fresh, empty database.
type Harness struct {
	// Open opens a new store instance on the database, with its own
	// connections, reading time from clock, and closes it when the test
	// ends.
	Open func(t *testing.T, clock idem.Clock) idem.Store
	// Break makes the database unreachable for every instance opened so
	// far, so that their calls fail.
	Break func(t *testing.T)
	// CheckFence runs the store package's fence check of f with margin
	// (pgstore.CheckFence, sqlitestore.CheckFence) in a write transaction
	// of its own on the database, as an application's effect would, and
	// returns its error.
	CheckFence func(t *testing.T, f idem.Fence, margin time.Duration) error
	// Effect writes an effect called name through tx, the transaction the
	// store's Transact gave its function, into a table of the test's own
	// in the store's database.
	Effect func(ctx context.Context, tx any, name string) error
	// Effects lists the names of the effects committed so far, sorted.
	Effects func(t *testing.T) []string
	// Crash, if set, ends the database session of tx (the transaction
	// Transact gave its function) from inside it, as a process dying
	// before its commit would: PostgreSQL terminates the backend. Nil for
	// stores whose transaction cannot outlive its process (SQLite: the
	// end-to-end crash tests kill the process instead).
	Crash func(ctx context.Context, tx any)
}

// Run runs the conformance suite. newDB is called once per subtest and
// must return a Harness on a database of its own.
func Run(t *testing.T, newDB func(t *testing.T) Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := &env{Harness: newDB(t), clock: fakeclock.New(epoch)}
			c.run(t, env)
		})
	}
}

// epoch is the fake clock's start: a fixed instant with sub-second digits,
// so that time precision mismatches show.
var epoch = time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC)

type testCase struct {
	name string
	run  func(t *testing.T, e *env)
}

// cases is filled by the files of this package, one file per subject.
var cases []testCase

func register(name string, run func(t *testing.T, e *env)) {
	cases = append(cases, testCase{name, run})
}

// env is one subtest's database, clock and default store instance.
type env struct {
	Harness
	clock *fakeclock.Clock
	store idem.Store
}

// s returns the subtest's default store instance, opening it on first use.
func (e *env) s(t *testing.T) idem.Store {
	if e.store == nil {
		e.store = e.Open(t, e.clock)
	}
	return e.store
}

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

var (
	scopeA = idem.Scope{Org: "acme", Principal: "agent-1"}
	scopeB = idem.Scope{Org: "acme", Principal: "agent-2"}
	scopeC = idem.Scope{Org: "globex", Principal: "agent-1"}
)

const (
	fpOne   = "1111111111111111111111111111111111111111111111111111111111111111"
	fpTwo   = "2222222222222222222222222222222222222222222222222222222222222222"
	lease   = 35 * time.Second
	keepFor = 24 * time.Hour
)

func reserveParams(scope idem.Scope, key, fingerprint string) idem.ReserveParams {
	return idem.ReserveParams{
		StartParams: idem.StartParams{
			ExecutionID: newID("exe_"),
			Scope:       scope,
			Operation:   "order.refund",
			Fingerprint: fingerprint,
		},
		Key:       key,
		Lease:     lease,
		Retention: keepFor,
	}
}

func completeParams(a idem.Attempt, status int, body string) idem.CompleteParams {
	code := idem.Code("")
	outcome := idem.OutcomeSucceeded
	if status >= 400 {
		code, outcome = idem.CodeExecutionFailed, idem.OutcomeFailed
	}
	return idem.CompleteParams{
		Scope:        a.Scope,
		Key:          a.Key,
		FencingToken: a.FencingToken,
		Status:       status,
		Headers:      map[string][]string{"Content-Type": {"application/json"}},
		Body:         []byte(body),
		Finish: idem.FinishParams{
			Org:         a.Scope.Org,
			ExecutionID: a.ExecutionID,
			Outcome:     outcome,
			Code:        code,
			Attempts:    1,
			Events:      []idem.AuditEvent{{ExecutionID: a.ExecutionID, Type: idem.EventSucceeded, Attempts: 1}},
		},
	}
}

// mustReserve reserves a fresh key and fails unless it was reserved.
func mustReserve(t *testing.T, s idem.Store, p idem.ReserveParams) idem.ReserveResult {
	t.Helper()
	res, err := s.Reserve(ctx(t), p)
	if err != nil {
		t.Fatalf("Reserve(%s): %v", p.Key, err)
	}
	if !res.Reserved {
		t.Fatalf("Reserve(%s) found an existing record %+v, want a new reservation", p.Key, res.Attempt)
	}
	return res
}

// Effects of a Harness live in this table of the store's database, one
// row per committed effect.
const EffectsTable = "storetest_effects"

// EffectNames reads the names of the committed effects from db, sorted;
// none when the table does not exist yet (missing reports that error).
func EffectNames(t testing.TB, db *sql.DB, missing func(error) bool) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT name FROM `+EffectsTable+` ORDER BY name`)
	if err != nil {
		if missing != nil && missing(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
