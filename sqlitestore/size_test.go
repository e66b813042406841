package sqlitestore_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/internal/fakeclock"
	"github.com/idem-run/idem/sqlitestore"
)

// dbBytes returns the pages (page size included) and the payload bytes of
// every table and index of the database at path (dbstat), the schema
// apart.
func dbBytes(t *testing.T, path string) (pages, payload int64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT coalesce(sum(pgsize), 0), coalesce(sum(payload), 0) FROM dbstat WHERE name <> 'sqlite_schema'`).Scan(&pages, &payload); err != nil {
		t.Fatal(err)
	}
	return pages, payload
}

// What keyed first executions (Reserve and Complete with a 35-byte body and
// one final event) leave in the file: their rows while retained, no result
// once forgotten, nothing once past the audit retention.
func TestFirstExecutionBytes(t *testing.T) {
	const n = 2000
	path := filepath.Join(t.TempDir(), "idem.db")
	clock := fakeclock.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	s, err := sqlitestore.Open(t.Context(), path, idem.StoreConfig{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	emptyPages, emptyPayload := dbBytes(t, path)
	scope := idem.Scope{Org: "acme", Principal: "agent-1"}
	body := []byte(`{"data":{"id":"thing_0123456789"}}`)
	for i := range n {
		key := fmt.Sprintf("key-%05d", i)
		res, err := s.Reserve(t.Context(), idem.ReserveParams{
			StartParams: idem.StartParams{ExecutionID: fmt.Sprintf("exe_%013d%020x", 1764504000000+i, i), Scope: scope, Operation: "thing.create",
				Fingerprint: "sha256:4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a"},
			Key: key, Lease: 35 * time.Second, Retention: 24 * time.Hour,
		})
		if err != nil || !res.Reserved {
			t.Fatalf("Reserve: %+v, %v", res, err)
		}
		if _, err := s.Complete(t.Context(), idem.CompleteParams{Scope: scope, Key: key, FencingToken: res.Attempt.FencingToken, Status: 201,
			Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: body,
			Finish: idem.FinishParams{Outcome: idem.OutcomeSucceeded, Attempts: 1, Events: []idem.AuditEvent{{Type: idem.EventSucceeded, Attempts: 1, DurationMs: 3}}}}); err != nil {
			t.Fatal(err)
		}
	}
	pages, payload := dbBytes(t, path)
	sweep := func() {
		t.Helper()
		for {
			r, err := s.Sweep(t.Context(), idem.SweepParams{AuditRetention: 7 * 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if r.Done(500) {
				return
			}
		}
	}
	clock.Advance(25 * time.Hour)
	sweep()
	forgottenPages, forgottenPayload := dbBytes(t, path)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rows, held, results int64
	if err := db.QueryRow(`SELECT count(*), coalesce(sum(held), 0), coalesce(sum(length(body)) + sum(length(headers)), 0) FROM idem_records`).Scan(&rows, &held, &results); err != nil {
		t.Fatal(err)
	}
	if rows != n || held != 0 || results != 0 {
		t.Fatalf("forgotten: %d rows, %d holding their key, %d bytes of results; want %d, 0, 0", rows, held, results, n)
	}
	clock.Advance(7 * 24 * time.Hour)
	sweep()
	if err := db.QueryRow(`SELECT count(*) FROM idem_records`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("past the audit retention: %d rows (%v), want none", rows, err)
	}
	t.Logf("per first execution: %d bytes of pages, %d of payload while retained; %d, %d once forgotten (empty store: %d, %d bytes)",
		(pages-emptyPages)/n, (payload-emptyPayload)/n, (forgottenPages-emptyPages)/n, (forgottenPayload-emptyPayload)/n, emptyPages, emptyPayload)
}
