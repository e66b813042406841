package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The reliability checks of docs/RELIABILITY.md (crash loop, outages,
// soak) run short in make test and long in make reliability.
var long = flag.Bool("long", false, "run the long reliability checks: more crash rounds, a 60 s soak (also IDEM_LONG=1)")

func longRun() bool { return *long || os.Getenv("IDEM_LONG") == "1" }

// together runs each of cases as a subtest, all at once. Not through
// t.Parallel: its limit (-parallel, GOMAXPROCS by default) would queue
// these tests, which mostly wait for leases and sleeping handlers.
func together(t *testing.T, cases map[string]func(t *testing.T)) {
	var wg sync.WaitGroup
	for name, f := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, f)
		}()
	}
	wg.Wait()
}

// principals are the demo tokens the reliability checks call with, and the
// principal id the gateway ledger records for each.
var principals = map[string]string{"demo-agent": "agent-1", "demo-agent-2": "agent-2", "demo-other-org": "agent-9"}

// keyed is one keyed call (a refund unless said otherwise), and what every
// answer to it so far has shown about its attempt record.
type keyed struct {
	token, key, method, path, body string
	// reconcile is the operation a 5xx and an indeterminate answer name.
	reconcile string

	// execID and status are those of the one execution, once an answer
	// showed it (fresh, replayed or indeterminate).
	execID string
	status int
	// completed: an answer showed a completed record (a fresh answer
	// below 500, or a replay). indeterminate: a fresh 5xx, or a 409
	// IDEMPOTENCY_RESULT_INDETERMINATE. A record is never both.
	completed, indeterminate bool
	// answered: the client received the completed answer before a kill.
	answered bool
	// result is what a completed record answers, without meta: its data,
	// or its problem object (a stored 4xx).
	result string
}

func (k *keyed) final() bool { return k.completed || k.indeterminate }

// tally counts what the reliability checks saw. Every figure of
// docs/RELIABILITY.md comes from one.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *tally) add(name string, d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[name] += d
}

func (t *tally) get(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[name]
}

// String lists every count, duplicated and lost always (0 when the test
// passes).
func (t *tally) String() string {
	t.add("duplicated", 0)
	t.add("lost", 0)
	t.mu.Lock()
	defer t.mu.Unlock()
	names := make([]string, 0, len(t.n))
	for n := range t.n {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", n, t.n[n])
	}
	return b.String()
}

// ledger tracks keyed refunds and checks every answer against what earlier
// answers showed (SPEC §6.3, §6.4): one execution per key, a completed
// record stays completed with the same execution and status, an
// indeterminate one stays indeterminate. Violations are reported with
// t.Errorf and counted as "duplicated" (a second execution) or "lost" (a
// completed record that no longer replays).
type ledger struct {
	mu   sync.Mutex
	keys []*keyed
	byID map[string]*keyed // principal + " " + key
	// allFaults adds failBeforeEffect and timeoutOnce to the refunds.
	allFaults bool
	tally
}

// newRefund makes a refund call with a fresh key: amount 1–3 cents on a
// random order, sometimes slow (still sleeping when a kill comes), 10 %
// with failAfterEffect (with allFaults also 5 % failBeforeEffect, 2 %
// timeoutOnce).
func (l *ledger) newRefund(rng *rand.Rand, prefix string) *keyed {
	tokens := []string{"demo-agent", "demo-agent-2", "demo-other-org"}
	sim := []string{}
	switch p := rng.IntN(100); {
	case p < 30:
		sim = append(sim, fmt.Sprintf(`"delayMs":%d`, 10+rng.IntN(300)))
	case p < 45:
		sim = append(sim, fmt.Sprintf(`"delayMs":%d`, 500+rng.IntN(1500)))
	}
	switch p := rng.IntN(100); {
	case p < 10:
		sim = append(sim, `"failAfterEffect":true`)
	case p < 15 && l.allFaults:
		sim = append(sim, `"failBeforeEffect":true`)
	case p < 17 && l.allFaults:
		sim = append(sim, `"timeoutOnce":true`)
	}
	body := fmt.Sprintf(`{"amount":%d}`, 1+rng.IntN(3))
	if len(sim) > 0 {
		body = fmt.Sprintf(`{"amount":%d,"simulate":{%s}}`, 1+rng.IntN(3), strings.Join(sim, ","))
	}
	return l.add(&keyed{
		token:     tokens[rng.IntN(len(tokens))],
		key:       fmt.Sprintf("%s-%d", prefix, rng.Uint64()),
		method:    "POST",
		path:      fmt.Sprintf("/v1/orders/ord_%d/refund", 1+rng.IntN(100)),
		body:      body,
		reconcile: "order.show",
	})
}

// add tracks k.
func (l *ledger) add(k *keyed) *keyed {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID == nil {
		l.byID = map[string]*keyed{}
	}
	l.keys = append(l.keys, k)
	l.byID[principals[k.token]+" "+k.key] = k
	l.tally.add("keys", 1)
	return k
}

// send sends k's call to s and checks the answer.
func (l *ledger) send(t *testing.T, s *server, k *keyed, strict bool) (reply, error) {
	r, err := s.try(k.method, k.path, k.token, k.body, "Idempotency-Key", k.key)
	l.observe(t, k, r, err, strict)
	return r, err
}

// observe checks one answer to k's call. strict is set when no other call
// with k's key is running, so that answers arrive in the order the server
// gave them: then a final record must not read in flight.
func (l *ledger) observe(t *testing.T, k *keyed, r reply, err error, strict bool) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.tally.add("ambiguous", 1) // a kill, or a connection reset
		return
	}
	code, _ := r.body["code"].(string)
	exec, _ := r.get("meta.executionId").(string)
	replayed := r.get("meta.idempotency.replayed") == true
	if replayed != (r.header.Get("Idempotent-Replayed") == "true") {
		t.Errorf("%s: meta.idempotency.replayed and Idempotent-Replayed disagree: %s", k.key, r.raw)
	}
	switch {
	case replayed:
		l.tally.add("replayed", 1)
		if k.indeterminate {
			l.tally.add("lost", 1)
			t.Errorf("%s: replayed %d after it read indeterminate: %s", k.key, r.status, r.raw)
		}
		if k.execID != "" && (exec != k.execID || r.status != k.status) {
			l.tally.add("lost", 1)
			t.Errorf("%s: replay %d of execution %s, want %d of %s: %s", k.key, r.status, exec, k.status, k.execID, r.raw)
		}
		if r.status >= 500 {
			t.Errorf("%s: a 5xx replayed: %s", k.key, r.raw)
		}
		k.execID, k.status, k.completed = exec, r.status, true
		l.sameResult(t, k, r)
	case r.status == 409 && code == "IDEMPOTENCY_RESULT_INDETERMINATE":
		l.tally.add("indeterminate", 1)
		id, _ := r.get("details.executionId").(string)
		if r.get("details.reconcile") != k.reconcile || id == "" {
			t.Errorf("%s: indeterminate answer without reconcile or execution: %s", k.key, r.raw)
		}
		if k.completed {
			l.tally.add("lost", 1)
			t.Errorf("%s: completed (execution %s, %d), now reads indeterminate: %s", k.key, k.execID, k.status, r.raw)
		}
		if k.execID != "" && id != k.execID {
			l.tally.add("duplicated", 1)
			t.Errorf("%s: indeterminate execution %s, want %s", k.key, id, k.execID)
		}
		k.execID, k.indeterminate = id, true
	case r.status == 409 && code == "IDEMPOTENCY_KEY_IN_FLIGHT":
		l.tally.add("in flight", 1)
		if strict && k.final() {
			l.tally.add("lost", 1)
			t.Errorf("%s: final (execution %s) but reads in flight again: %s", k.key, k.execID, r.raw)
		}
	case r.status == 503 && code == "STORE_UNAVAILABLE":
		l.tally.add("unavailable", 1)
	case r.status == 403 && (code == "APPROVAL_REQUIRED" || code == "APPROVAL_REJECTED"):
		l.tally.add("approval required", 1) // nothing reserved
	case exec != "" && (r.status < 500 || code == "EXECUTION_FAILED" || code == "TIMEOUT"):
		l.tally.add("executed", 1)
		if k.execID != "" {
			l.tally.add("duplicated", 1)
			t.Errorf("%s: executed again as %s (%d), after execution %s: %s", k.key, exec, r.status, k.execID, r.raw)
		}
		k.execID, k.status = exec, r.status
		if r.status >= 500 {
			k.indeterminate = true
			if r.body["retryable"] != false || r.get("details.reconcile") != k.reconcile {
				t.Errorf("%s: keyed 5xx without retryable false and reconcile: %s", k.key, r.raw)
			}
		} else {
			k.completed = true
			l.sameResult(t, k, r)
		}
	default:
		t.Errorf("%s: unexpected answer %d: %s", k.key, r.status, r.raw)
	}
}

// sameResult checks that a completed record of k answers the result it
// answered first (SPEC §6.3: the original data or problem object; a secret
// the same within its window). The caller holds l.mu.
func (l *ledger) sameResult(t *testing.T, k *keyed, r reply) {
	t.Helper()
	body := map[string]any{}
	for name, v := range r.body {
		if name != "meta" {
			body[name] = v
		}
	}
	raw, _ := json.Marshal(body) // map keys sorted: comparable
	if k.result == "" {
		k.result = string(raw)
		return
	}
	if string(raw) != k.result {
		l.tally.add("lost", 1)
		t.Errorf("%s: answers %s, first %s", k.key, raw, k.result)
	}
}

// markAnswered records which keys' clients hold a completed answer: from
// now on these must replay, whatever happens to the server.
func (l *ledger) markAnswered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.keys {
		if k.completed && !k.answered {
			k.answered = true
			l.tally.add("answered before a kill", 1)
		}
	}
}

// retryAll sends every key's call once more through s (only those not yet
// final unless all), 8 at a time, and returns how many are still in flight.
func (l *ledger) retryAll(t *testing.T, s *server, all bool) int {
	t.Helper()
	l.mu.Lock()
	var keys []*keyed
	for _, k := range l.keys {
		if all || !k.final() {
			keys = append(keys, k)
		}
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	var pending sync.Map
	work := make(chan *keyed)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				l.mu.Lock()
				was := k.execID
				l.mu.Unlock()
				r, err := l.send(t, s, k, true)
				l.tally.add("retries", 1)
				if was == "" && err == nil && r.get("meta.executionId") != nil && r.get("meta.idempotency.replayed") != true && !strings.HasPrefix(fmt.Sprint(r.body["code"]), "IDEMPOTENCY_") {
					l.tally.add("executed on a retry", 1) // never reserved before
				}
				if err != nil {
					t.Errorf("%s: retry through a live server: %v", k.key, err)
				} else if code, _ := r.body["code"].(string); code == "IDEMPOTENCY_KEY_IN_FLIGHT" {
					pending.Store(k, true)
					l.inFlight(t, s, k)
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	n := 0
	pending.Range(func(any, any) bool { n++; return true })
	return n
}

// inFlight reads the attempt record of k, in flight, and notes its
// execution: a later answer from any other execution is a duplicate.
func (l *ledger) inFlight(t *testing.T, s *server, k *keyed) {
	t.Helper()
	r, err := s.try("GET", "/v1/attempts/"+k.key, k.token, "")
	if err != nil || r.status != 200 {
		t.Errorf("%s: in flight, but its record reads %v %d %s", k.key, err, r.status, r.raw)
		return
	}
	id, _ := r.get("data.executionId").(string)
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.execID != "" && id != k.execID {
		l.tally.add("duplicated", 1)
		t.Errorf("%s: the record shows execution %s, earlier answers %s", k.key, id, k.execID)
	}
	k.execID = id
}

// checkLedger reads the gateway ledger of both demo orgs through s: no
// request key reached the gateway from two executions or under two handler
// keys, every effect belongs to a key sent with the execution its answers
// showed, and, once every record is final, every completed refund that
// succeeded (200) applied exactly once.
func (l *ledger) checkLedger(t *testing.T, s *server, final bool) {
	t.Helper()
	seen := map[string]map[string]any{}
	for _, token := range []string{"demo-agent", "demo-other-org"} {
		for _, e := range ledgerEffects(t, s, token) {
			principal, _ := e["principal"].(string)
			requestKey, _ := e["requestKey"].(string)
			id := principal + " " + requestKey
			l.tally.add("ledger effects checked", 1)
			if prev, dup := seen[id]; dup {
				l.tally.add("duplicated", 1)
				t.Errorf("request key %s of %s has two ledger effects: %v and %v", requestKey, principal, prev, e)
			}
			seen[id] = e
			ids, _ := e["executionIds"].([]any)
			if len(ids) != 1 {
				l.tally.add("duplicated", 1)
				t.Errorf("request key %s of %s reached the gateway from %d executions: %v", requestKey, principal, len(ids), e)
				continue
			}
			l.mu.Lock()
			k := l.byID[id]
			l.mu.Unlock()
			if k == nil {
				continue // another test's key, or an unkeyed call
			}
			if k.execID != "" && ids[0] != k.execID {
				l.tally.add("duplicated", 1)
				t.Errorf("%s: the gateway effect comes from execution %v, the answers from %s", k.key, ids[0], k.execID)
			}
		}
	}
	if !final {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.keys {
		if !k.final() {
			t.Errorf("%s: never reached a final state", k.key)
			continue
		}
		if k.reconcile != "order.show" {
			continue // not a refund: the gateway never sees it
		}
		e := seen[principals[k.token]+" "+k.key]
		if k.completed && k.status == 200 && (e == nil || e["applied"] != true) {
			l.tally.add("lost", 1)
			t.Errorf("%s: completed refund (execution %s) without an applied ledger effect: %v", k.key, k.execID, e)
		}
		if k.completed && k.status != 200 && e != nil && e["applied"] == true {
			t.Errorf("%s: refund answered %d but applied: %v", k.key, k.status, e)
		}
	}
}

// counts returns how many keys ended completed and indeterminate.
func (l *ledger) counts() (completed, indeterminate int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.keys {
		if k.completed {
			completed++
		}
		if k.indeterminate {
			indeterminate++
		}
	}
	return
}
