package linearize

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-run/idem"
)

// workload shapes one history.
type workload struct {
	// Clients is the number of concurrent HTTP clients.
	Clients int
	// Ops is the number of calls in the history.
	Ops int
	// Records is the size of the pool of (principal, key) pairs the calls
	// pick from, small so that calls collide.
	Records int
	// FailRate is the share of refund bodies with simulate.failAfterEffect.
	FailRate float64
	// TxFailRate is the share of lin.put bodies with failAfterWrite (a
	// rolled-back failure), TxDeclareRate of those with declare (a stored
	// 409 whose write is undone).
	TxFailRate, TxDeclareRate float64
	// RawFailRate is the share of linRaw bodies whose upstream fails (a
	// 500 or a connection broken after the request: indeterminate),
	// RawDeclareRate of those it answers 409, the others 201; independently, RawNotDispatchedRate is the share of linRaw
	// bodies whose executions are each NotDispatched (the key freed) with
	// probability refuseShare (proxy_test.go).
	RawFailRate, RawDeclareRate, RawNotDispatchedRate float64
	// ShortTimeoutRate is the share of calls whose client gives up after
	// 1–30 ms, often before the answer (an ambiguous outcome).
	ShortTimeoutRate float64
}

// defaultWorkload is the short mode's shape.
var defaultWorkload = workload{Clients: 12, Ops: 500, Records: 20, FailRate: 0.1, TxFailRate: 0.35, TxDeclareRate: 0.1,
	RawFailRate: 0.15, RawDeclareRate: 0.15, RawNotDispatchedRate: 0.5, ShortTimeoutRate: 0.12}

// principals are demo tokens: two principals of one org and one of
// another, sharing key names, so that scopes are exercised too.
var principals = []string{"demo-agent", "demo-agent-2", "demo-other-org"}

// target is one attempt record the calls aim at, and the 2–3 request
// bodies (fingerprints) they choose from.
type target struct {
	name   string // principal token and key: the partition
	token  string
	key    string
	op     string // the operation's name
	path   string
	bodies [][]byte
	// tx is set when op is transactional (SPEC §6.7), from the catalog.
	tx bool
	// linID is the lin.put record id whose committed effects the table
	// holds; empty for other operations.
	linID string
	// rawSlot is the linRaw slot whose upstream effects the cluster's
	// upstream holds (proxy_test.go); empty for other operations. frees
	// tells, per body, whether it may answer NotDispatched.
	rawSlot string
	frees   []bool
}

// stats counts a history's answers by result.
type stats [released + 1]int

func (s *stats) add(o stats) {
	for i := range s {
		s[i] += o[i]
	}
}

func (s stats) String() string {
	var b bytes.Buffer
	for r := executed; r <= freed; r++ {
		fmt.Fprintf(&b, "%s %d, ", r, s[r])
	}
	return b.String()[:b.Len()-2]
}

// targets makes w.Records records, a quarter of each: refunds of
// distinct orders with small amounts, delays of 0–50 ms and sometimes
// failAfterEffect; business creates whose slugs sometimes collide (a
// stored 409 BUSINESS_EXISTS); lin.put records (transactional) with
// delays of 0–50 ms, sometimes failAfterWrite (rolled back) or declare (a
// stored 409); and linRaw records (a raw operation, the path of idem
// proxy: rawTarget). transactional tells which operations are
// transactional.
func targets(rng *mrand.Rand, run string, w workload, transactional func(op string) bool) []target {
	var out []target
	lastSlug := ""
	for i := range w.Records {
		t := target{token: principals[i%len(principals)], key: fmt.Sprintf("lin-%s-%d", run, i/len(principals))}
		t.name = t.token + "/" + t.key
		n := 2 + rng.IntN(2)
		switch rng.IntN(4) {
		case 0:
			t.op = "business.create"
			slug := fmt.Sprintf("lin-%s-%d", run, i)
			if lastSlug != "" && rng.IntN(3) == 0 {
				slug = lastSlug
			}
			lastSlug = slug
			t.path = "/v1/businesses"
			for b := range n {
				t.bodies = append(t.bodies, mustJSON(map[string]any{"slug": slug, "name": fmt.Sprintf("business %d", b)}))
			}
		case 1:
			t.op, t.linID = linPutOp, fmt.Sprintf("%s-%d", run, i)
			t.path = "/v1/lin/" + t.linID
			for b := range n {
				in := map[string]any{"body": b, "delayMs": rng.IntN(51)}
				switch f := rng.Float64(); {
				case f < w.TxFailRate:
					in["failAfterWrite"] = true
				case f < w.TxFailRate+w.TxDeclareRate:
					in["declare"] = true
				}
				t.bodies = append(t.bodies, mustJSON(in))
			}
		case 2:
			rawTarget(rng, &t, fmt.Sprintf("%s-%d", run, i), n, w)
		default:
			t.op = "order.refund"
			t.path = fmt.Sprintf("/v1/orders/ord_%d/refund", 1+rng.IntN(100))
			for b := range n {
				sim := map[string]any{"delayMs": rng.IntN(51)}
				if rng.Float64() < w.FailRate {
					sim["failAfterEffect"] = true
				}
				t.bodies = append(t.bodies, mustJSON(map[string]any{"amount": b + 1, "simulate": sim}))
			}
		}
		t.tx = transactional(t.op)
		out = append(out, t)
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// recordHistory runs one history of w against the servers of cl (clients
// pick one at random per call), then a closing round of one call per
// record and body, and returns it as porcupine operations, with counts of
// answers by result and the records it aimed at. Answers the model has no
// class for fail the test.
func recordHistory(t *testing.T, cl *cluster, w workload, seed uint64) ([]porcupine.Operation, stats, []target) {
	t.Helper()
	var runID [4]byte
	_, _ = rand.Read(runID[:])
	setup := mrand.New(mrand.NewPCG(seed, 0))
	pool := targets(setup, hex.EncodeToString(runID[:]), w, cl.transactional)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = w.Clients
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}

	start := time.Now()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		counts  stats
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	// send makes one call as client id and records it.
	send := func(id int, url string, tg target, body int, timeout time.Duration) {
		call := time.Since(start).Nanoseconds()
		out, rep, err := do(client, url+tg.path, tg, tg.bodies[body], timeout)
		ret := time.Since(start).Nanoseconds()
		if err == nil && tg.rawSlot != "" {
			err = cl.upstream.verify(tg, out, rep)
		}
		if err != nil {
			t.Errorf("%s body %d: %v", tg.name, body, err)
			return
		}
		ops := operations(id, tg, body, call, ret, out)
		mu.Lock()
		history = append(history, ops...)
		counts[out.Result]++
		mu.Unlock()
	}
	for c := range w.Clients {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(seed, uint64(c)+1))
			for next.Add(1) <= int64(w.Ops) {
				tg := pool[rng.IntN(len(pool))]
				body := rng.IntN(len(tg.bodies))
				timeout := 10 * time.Second
				if rng.Float64() < w.ShortTimeoutRate {
					timeout = time.Duration(1+rng.IntN(30)) * time.Millisecond
				}
				send(c, cl.urls[rng.IntN(len(cl.urls))], tg, body, timeout)
			}
		})
	}
	wg.Wait()
	// A closing round, once every client is done: one call per record and
	// body, so that every record's final state is observed (this pins
	// down records that only ambiguous calls reached).
	for _, tg := range pool {
		for body := range tg.bodies {
			send(w.Clients, cl.urls[0], tg, body, 10*time.Second)
		}
	}
	return history, counts, pool
}

// operations are the history's operations for one call of client id on
// tg, sent at call and answered at ret: the call, and the finish half of
// an executed call or the release half of a rolled-back or freed one,
// both over the call's interval.
func operations(id int, tg target, body int, call, ret int64, out output) []porcupine.Operation {
	in := input{Record: tg.name, Body: body, Tx: tg.tx, Frees: tg.rawSlot != "" && tg.frees[body]}
	if out.Result == ambiguous {
		// It may take effect any time after the call: its interval is
		// open.
		ret = 1 << 62
	}
	ops := []porcupine.Operation{{ClientId: id, Input: in, Call: call, Output: out, Return: ret}}
	half := input{Record: tg.name, Tx: tg.tx, Finish: true}
	switch out.Result {
	case executed:
		ops = append(ops, porcupine.Operation{ClientId: id, Input: half, Call: call, Output: output{Result: finished, ExecutionID: out.ExecutionID}, Return: ret})
	case rolledBack, freed:
		ops = append(ops, porcupine.Operation{ClientId: id, Input: half, Call: call, Output: output{Result: released, ExecutionID: out.ExecutionID}, Return: ret})
	}
	return ops
}

// reply is an HTTP answer as received.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends one keyed call and classifies its answer, which it returns too
// (empty when ambiguous).
func do(client *http.Client, url string, tg target, body []byte, timeout time.Duration) (output, reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return output{}, reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+tg.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", tg.key)
	resp, err := client.Do(req)
	if err != nil {
		return output{Result: ambiguous}, reply{}, nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return output{Result: ambiguous}, reply{}, nil
	}
	rep := reply{resp.StatusCode, resp.Header, raw}
	if tg.rawSlot != "" {
		out, err := classifyRaw(resp.StatusCode, resp.Header, raw)
		return out, rep, err
	}
	out, err := classify(resp.StatusCode, resp.Header, raw)
	return out, rep, err
}

// answer is the part of an envelope or problem object the model reads.
type answer struct {
	Type      string         `json:"type"`
	Code      idem.Code      `json:"code"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details"`
	Meta      *struct {
		ExecutionID string `json:"executionId"`
		Idempotency *struct {
			Replayed bool `json:"replayed"`
		} `json:"idempotency"`
	} `json:"meta"`
}

// classify maps an HTTP answer to the model's output.
func classify(status int, h http.Header, raw []byte) (output, error) {
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return output{}, fmt.Errorf("status %d, undecodable body %q: %v", status, raw, err)
	}
	replayed := a.Meta != nil && a.Meta.Idempotency != nil && a.Meta.Idempotency.Replayed
	if replayed != (h.Get(idem.HeaderIdempotentReplayed) == "true") {
		return output{}, fmt.Errorf("status %d: meta.idempotency.replayed %v but header %s %q: %s", status, replayed, idem.HeaderIdempotentReplayed, h.Get(idem.HeaderIdempotentReplayed), raw)
	}
	exe := ""
	if a.Meta != nil {
		exe = a.Meta.ExecutionID
	}
	switch {
	case replayed:
		return output{Result: replay, ExecutionID: exe, Status: status}, nil
	case a.Code == idem.CodeIdempotencyKeyInFlight && status == http.StatusConflict:
		return output{Result: inFlight, Status: status}, nil
	case a.Code == idem.CodeIdempotencyResultIndeterminate && status == http.StatusConflict:
		id, _ := a.Details["executionId"].(string)
		if id == "" {
			return output{}, fmt.Errorf("indeterminate answer without details.executionId: %s", raw)
		}
		return output{Result: indeterminate, ExecutionID: id, Status: status}, nil
	case a.Code == idem.CodeIdempotencyKeyReused && status == http.StatusUnprocessableEntity:
		return output{Result: reused, Status: status}, nil
	case a.Code == idem.CodeStoreUnavailable && status == http.StatusServiceUnavailable:
		return output{Result: notStored, Status: status}, nil
	case exe != "" && status >= 500 && a.Retryable:
		// Only a transactional execution, rolled back whole, fails
		// retryably once started (SPEC §6.7); the model checks that it is.
		return output{Result: rolledBack, ExecutionID: exe, Status: status}, nil
	case exe != "":
		return output{Result: executed, ExecutionID: exe, Status: status}, nil
	}
	return output{}, fmt.Errorf("unexpected answer %d: %s", status, raw)
}
