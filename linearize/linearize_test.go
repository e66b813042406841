package linearize

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-run/idem"
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
func linearizable(t *testing.T, servers func(*testing.T, func(idem.Store) idem.Store) *cluster) {
	n, w := plan()
	c := servers(t, nil)
	var (
		total        stats
		totalEffects effectCounts
		totalRaw     rawEffectCounts
	)
	ops := 0
	for i := range n {
		seed := uint64(time.Now().UnixNano())
		start := time.Now()
		fresh, replays := c.upstream.fresh.Load(), c.upstream.replays.Load()
		history, counts, pool := recordHistory(t, c, w, seed)
		took := time.Since(start)
		res, path := check(t, history, true)
		if res != porcupine.Ok {
			t.Fatalf("history %d (seed %d, %d calls: %s): porcupine says %s; visualization: %s%s", i, seed, countCalls(history), counts, res, path, describeIllegal(history))
		}
		effects := checkEffects(t, c.lin.all(t), pool, history)
		raw := checkRawEffects(t, c.upstream, pool, history, int(c.upstream.fresh.Load()-fresh), int(c.upstream.replays.Load()-replays))
		total.add(counts)
		calls := countCalls(history)
		ops += calls
		t.Logf("history %d (seed %d): %d calls in %s, linearizable: %s; %s; %s", i, seed, calls, took.Round(time.Millisecond), counts, effects, raw)
		totalEffects.add(effects)
		totalRaw.add(raw)
	}
	t.Logf("LINEARIZABLE %d histories, %d calls against %d server(s): %s; %s; %s", n, ops, len(c.urls), total, totalEffects, totalRaw)
}

// effectCounts counts the transactional records of histories by what
// their committed effects were checked against.
type effectCounts struct {
	records   int // lin.put records
	committed int // seen committed with a 2xx: exactly its one effect
	declared  int // seen committed with a 4xx: no effect
	open      int // never seen committed: at most one effect, none of a rolled-back execution
	rerun     int // seen committed after one of its executions rolled back
	rolled    int // rolled-back executions, none of whose effects remain
	inFlight  int // in-flight answers on these records
}

func (e *effectCounts) add(o effectCounts) {
	e.records += o.records
	e.committed += o.committed
	e.declared += o.declared
	e.open += o.open
	e.rerun += o.rerun
	e.rolled += o.rolled
	e.inFlight += o.inFlight
}

func (e effectCounts) String() string {
	return fmt.Sprintf("%d lin.put records: %d committed 2xx (one effect each), %d declared 4xx (none), %d never seen committed, %d committed after a rollback; %d rolled-back executions (no effect left), %d in-flight answers",
		e.records, e.committed, e.declared, e.open, e.rerun, e.rolled, e.inFlight)
}

// checkEffects checks lin.put's committed effects (execution ids by
// record id) against a linearizable history: per record, at most one
// effect; exactly the committed execution's when an answer showed it
// committed with a 2xx; none when it committed with a declared 4xx (its
// write undone); and never one of an execution that answered rolled back.
func checkEffects(t *testing.T, effects map[string][]string, pool []target, history []porcupine.Operation) effectCounts {
	t.Helper()
	type seen struct {
		committed  string // execution id, from an executed or replayed answer
		status     int
		rolledBack []string
		inFlight   int
	}
	byRecord := map[string]*seen{}
	for _, op := range history {
		in, out := op.Input.(input), op.Output.(output)
		if in.Finish {
			continue
		}
		s := byRecord[in.Record]
		if s == nil {
			s = &seen{}
			byRecord[in.Record] = s
		}
		switch out.Result {
		case executed, replay:
			s.committed, s.status = out.ExecutionID, out.Status
		case rolledBack:
			s.rolledBack = append(s.rolledBack, out.ExecutionID)
		case inFlight:
			s.inFlight++
		}
	}
	var n effectCounts
	for _, tg := range pool {
		if tg.linID == "" {
			continue
		}
		n.records++
		got, s := effects[tg.linID], byRecord[tg.name]
		if s == nil {
			s = &seen{}
		}
		if len(got) > 1 {
			t.Errorf("%s (lin %s): %d committed effects %v, want at most one", tg.name, tg.linID, len(got), got)
		}
		for _, e := range s.rolledBack {
			if slices.Contains(got, e) {
				t.Errorf("%s (lin %s): the effect of %s committed, yet it answered rolled back", tg.name, tg.linID, e)
			}
		}
		n.rolled += len(s.rolledBack)
		n.inFlight += s.inFlight
		if s.committed != "" && len(s.rolledBack) > 0 {
			n.rerun++
		}
		switch {
		case s.committed == "":
			n.open++
		case s.status < 300:
			n.committed++
			if !slices.Equal(got, []string{s.committed}) {
				t.Errorf("%s (lin %s): committed effects %v, want exactly [%s] (committed with %d)", tg.name, tg.linID, got, s.committed, s.status)
			}
		default:
			n.declared++
			if len(got) != 0 {
				t.Errorf("%s (lin %s): committed effects %v, want none (%s answered %d)", tg.name, tg.linID, got, s.committed, s.status)
			}
		}
	}
	return n
}

// describeIllegal lists, in call order, the operations of the first
// record whose own history the model rejects, for the failure message.
func describeIllegal(history []porcupine.Operation) string {
	for _, part := range attemptPartition(history) {
		if porcupine.CheckOperations(attemptModel, part) {
			continue
		}
		slices.SortStableFunc(part, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		var b strings.Builder
		fmt.Fprintf(&b, "\nrejected record %s:", part[0].Input.(input).Record)
		for _, op := range part {
			ret := fmt.Sprint(op.Return / 1000)
			if op.Return == 1<<62 {
				ret = "open"
			}
			fmt.Fprintf(&b, "\n  [%d µs, %s µs] client %d: %s", op.Call/1000, ret, op.ClientId, attemptModel.DescribeOperation(op.Input, op.Output))
		}
		return b.String()
	}
	return ""
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
func rejected(t *testing.T, servers func(*testing.T, func(idem.Store) idem.Store) *cluster, wrap func(idem.Store) idem.Store) {
	rejectedOn(t, servers, wrap, defaultWorkload)
}

// rejectedOn is rejected with histories of w.
func rejectedOn(t *testing.T, servers func(*testing.T, func(idem.Store) idem.Store) *cluster, wrap func(idem.Store) idem.Store, w workload) {
	c := servers(t, wrap)
	const tries = 3
	for i := range tries {
		seed := uint64(time.Now().UnixNano())
		history, counts, _ := recordHistory(t, c, w, seed)
		switch res, _ := check(t, history, false); res {
		case porcupine.Illegal:
			t.Logf("REJECTED history %d (seed %d, %d calls: %s), as it must be%s", i, seed, countCalls(history), counts, describeIllegal(history))
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

func TestRejectsAbortCommits(t *testing.T) {
	wrap := func(s idem.Store) idem.Store { return abortCommitsStore{s} }
	t.Run("sqlite", func(t *testing.T) { rejected(t, sqliteServers, wrap) })
	t.Run("postgres", func(t *testing.T) { rejected(t, postgresServers, wrap) })
}
