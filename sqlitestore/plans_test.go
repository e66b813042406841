package sqlitestore

import (
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/storetest"
)

// Every statement of the hot path (as storetest.Workload drives it: every
// kind of execution, replays, approvals) reads idem's tables through an
// index, on a fresh database (no sqlite_stat1: SQLite never analyzes by
// itself) and after ANALYZE over thousands of rows alike: EXPLAIN QUERY
// PLAN shows SEARCH … USING INDEX, never a SCAN of a table (issue 36
// item 1).
func TestHotStatementsSearchAnIndex(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string][]any{}
	)
	s, _ := traced(t)
	statementHook = func(q string, args []any) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[q]; !ok {
			seen[q] = append([]any(nil), args...)
		}
	}
	scope := idem.Scope{Org: "acme", Principal: "agent"}
	if err := storetest.Workload(t.Context(), s, scope, "w", 500); err != nil {
		t.Fatal(err)
	}
	// taken returns the statements seen so far and not returned before.
	returned := map[string]bool{}
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var qs []string
		for q := range seen {
			if !returned[q] {
				returned[q] = true
				qs = append(qs, q)
			}
		}
		sort.Strings(qs)
		return qs
	}
	hot := taken()
	if _, err := s.Sweep(t.Context(), idem.SweepParams{AuditRetention: 7 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	sweep := taken()
	mu.Lock()
	statementHook = nil
	statements := seen
	mu.Unlock()
	check := func(when string, qs []string) {
		t.Helper()
		for _, q := range qs {
			if savepoint.MatchString(q) {
				continue
			}
			plan := queryPlan(t, s, q, statements[q])
			for _, step := range plan {
				if strings.HasPrefix(step, "SCAN idem_") {
					t.Errorf("%s: %s scans a table:\n%s\n%s", when, q, strings.Join(plan, "\n"), q)
				}
			}
		}
	}
	check("fresh", hot)
	check("fresh", sweep)
	if len(hot) < 15 {
		t.Fatalf("the workload ran %d statements; want every kind of call's", len(hot))
	}
	// The store never runs ANALYZE; should an operator, the hot
	// statements keep their indexes. (The sweep's expiry of approvals
	// does not: over statistics of a few approvals SQLite scans the
	// table rather than look its batch up by rowid.)
	if _, err := s.w.ExecContext(t.Context(), `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	check("analyzed", hot)
}

// queryPlan is EXPLAIN QUERY PLAN of q with args on s's writer, one
// "detail" per step.
func queryPlan(t *testing.T, s *Store, q string, args []any) []string {
	t.Helper()
	rows, err := s.w.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
