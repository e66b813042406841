package linearize

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"idem"
)

var long = flag.Bool("long", false, "check more and longer histories (also IDEM_LONG=1)")

// plan is how many histories of which shape a test checks.
func plan() (histories int, w workload) {
	if *long || os.Getenv("IDEM_LONG") == "1" {
		w := defaultWorkload
		w.Clients, w.Ops, w.Records = 16, 1000, 32
		return 25, w
	}
	return 5, defaultWorkload
}

// checkTimeout bounds one porcupine check; Unknown counts as a failure.
const checkTimeout = 60 * time.Second

// check runs porcupine on history. When the verdict is not Ok and
// visualize is set, it writes the visualization to a temporary file and
// returns its path too.
func check(t *testing.T, history []porcupine.Operation, visualize bool) (porcupine.CheckResult, string) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(attemptModel, history, checkTimeout)
	if res == porcupine.Ok || !visualize {
		return res, ""
	}
	f, err := os.CreateTemp("", "idem-linearize-*.html")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := porcupine.Visualize(attemptModel, info, f); err != nil {
		t.Logf("visualize: %v", err)
	}
	return res, f.Name()
}

// linearizable records histories against servers and requires the checker
// to accept each.
func linearizable(t *testing.T, servers func(*testing.T, func(idem.Store) idem.Store) []string) {
	n, w := plan()
	urls := servers(t, nil)
	var total stats
	ops := 0
	for i := range n {
		seed := uint64(time.Now().UnixNano())
		start := time.Now()
		history, counts := recordHistory(t, urls, w, seed)
		took := time.Since(start)
		res, path := check(t, history, true)
		if res != porcupine.Ok {
			t.Fatalf("history %d (seed %d, %d calls: %s): porcupine says %s; visualization: %s", i, seed, countCalls(history), counts, res, path)
		}
		total.add(counts)
		calls := countCalls(history)
		ops += calls
		t.Logf("history %d (seed %d): %d calls in %s, linearizable: %s", i, seed, calls, took.Round(time.Millisecond), counts)
	}
	t.Logf("LINEARIZABLE %d histories, %d calls against %d server(s): %s", n, ops, len(urls), total)
}

// countCalls counts the calls of a history (not the finish halves).
func countCalls(history []porcupine.Operation) int {
	n := 0
	for _, op := range history {
		if !op.Input.(input).Finish {
			n++
		}
	}
	return n
}

func TestLinearizableSQLite(t *testing.T) { linearizable(t, sqliteServers) }

func TestLinearizablePostgresTwoServers(t *testing.T) { linearizable(t, postgresServers) }

// rejected records histories against a broken store until the checker
// rejects one (Illegal), up to a few tries, and fails if none is.
func rejected(t *testing.T, servers func(*testing.T, func(idem.Store) idem.Store) []string, wrap func(idem.Store) idem.Store) {
	urls := servers(t, wrap)
	const tries = 3
	for i := range tries {
		seed := uint64(time.Now().UnixNano())
		history, counts := recordHistory(t, urls, defaultWorkload, seed)
		switch res, _ := check(t, history, false); res {
		case porcupine.Illegal:
			t.Logf("REJECTED history %d (seed %d, %d calls: %s), as it must be", i, seed, countCalls(history), counts)
			return
		case porcupine.Unknown:
			t.Fatalf("history %d (seed %d): the check timed out", i, seed)
		}
		t.Logf("history %d (seed %d) was linearizable despite the broken store (%s); trying again", i, seed, counts)
	}
	t.Fatalf("the checker accepted %d histories against a broken store: it has no teeth", tries)
}

func TestRejectsNoFingerprintCheck(t *testing.T) {
	wrap := func(s idem.Store) idem.Store { return noFingerprintStore{s} }
	t.Run("sqlite", func(t *testing.T) { rejected(t, sqliteServers, wrap) })
	t.Run("postgres", func(t *testing.T) { rejected(t, postgresServers, wrap) })
}

func TestRejectsNoLock(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { rejected(t, sqliteServers, newNoLockStore) })
	t.Run("postgres", func(t *testing.T) { rejected(t, postgresServers, newNoLockStore) })
}
