package linearize

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/proxy"
)

// The path of idem proxy (SPEC §15): raw operations built by proxy.Build
// from an OpenAPI document, whose handler is proxy.Forwarder, in front of
// an upstream that stands in for the API the proxy fronts (an httptest
// server of its own, one per cluster, shared by its servers as the one API
// behind several proxies is). linRaw, POST /v1/lin-raw/{slot}, is
// same_key_replay with linRawShow, GET /v1/lin-raw/{slot}, as its
// reconcile read. The upstream records, per slot, the executions whose
// request reached it (their effect, named by the handler key the
// forwarder sends), waits delayMs, and answers as the body says: 201 with
// a JSON body, a 409 problem of its own (stored like a declared 4xx), 500
// (passed through: indeterminate), or breaks the connection after reading
// the request (indeterminate too). A body with notDispatched has each of
// its executions refused, with probability refuseShare, by the
// forwarder's transport before any byte is sent (as a connection refused
// is): the forwarder marks that NotDispatched, and the key is released.

const (
	linRawOp   = "linRaw"
	linRawPath = "/v1/lin-raw/"
	// refuseShare is the share of a notDispatched body's executions that
	// are refused, so that a key is often freed more than once.
	refuseShare = 0.75
)

// upstreamDocument is the upstream's OpenAPI document, served at
// /openapi.json, where each server's proxy.Load reads it.
const upstreamDocument = `{
  "openapi": "3.1.0",
  "info": {"title": "linearize upstream", "version": "1"},
  "paths": {
    "/v1/lin-raw/{slot}": {
      "parameters": [{"name": "slot", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1, "maxLength": 200}}],
      "post": {
        "operationId": "linRaw",
        "summary": "Test only: record one effect upstream, wait, then answer 201, 409 or 500, or break the connection",
        "x-idem-agent-retry": {"kind": "same_key_replay", "reconcile": "linRawShow",
          "rationale": "The upstream's answer is stored and replayed by key; a request that never left the proxy frees the key."},
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
          "type": "object", "additionalProperties": false, "required": ["body", "answer"],
          "properties": {
            "body": {"type": "integer"},
            "answer": {"enum": ["created", "declared", "fail", "break"]},
            "notDispatched": {"type": "boolean"},
            "delayMs": {"type": "integer", "minimum": 0, "maximum": 1000}
          }}}}},
        "responses": {"201": {"description": "Created"}, "409": {"description": "A conflict of the upstream's own"}}
      },
      "get": {
        "operationId": "linRawShow",
        "summary": "Test only: the executions whose linRaw requests reached the upstream",
        "responses": {"200": {"description": "The executions", "content": {"application/json": {"schema": {"type": "object"}}}}}
      }
    }
  }
}`

// rawInput is linRaw's body.
type rawInput struct {
	Body          int    `json:"body"`
	Answer        string `json:"answer"`
	NotDispatched bool   `json:"notDispatched,omitempty"`
	DelayMs       int    `json:"delayMs,omitempty"`
}

// upstreamAnswer is what the upstream answered one execution.
type upstreamAnswer struct {
	status int
	header http.Header
	body   []byte
	broken bool // it broke the connection instead
}

// upstream is the API behind linRaw, and what it saw.
type upstream struct {
	url *url.URL
	mu  sync.Mutex
	// effects are, per slot, the executions whose request reached the
	// upstream, in arrival order.
	effects map[string][]string
	// answers are the upstream's answers by execution.
	answers map[string]upstreamAnswer
	// refused are the executions whose request the transport refused
	// before sending it.
	refused map[string]bool
	// fresh and replays count the answers checked against the
	// upstream's, byte for byte.
	fresh, replays atomic.Int64
}

// newUpstream starts the upstream; it closes when the test ends, after
// the servers in front of it (registered later, so closed first).
func newUpstream(t *testing.T) *upstream {
	u := &upstream{effects: map[string][]string{}, answers: map[string]upstreamAnswer{}, refused: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, upstreamDocument)
	})
	mux.HandleFunc("POST "+linRawPath+"{slot}", u.post)
	mux.HandleFunc("GET "+linRawPath+"{slot}", func(w http.ResponseWriter, r *http.Request) {
		slot := r.PathValue("slot")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"slot": slot, "executions": u.effectsOf(slot)})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	u.url, _ = url.Parse(ts.URL)
	return u
}

// executionOf is the execution of a forwarded request, from the handler
// key the forwarder sends (SPEC §7: "ik_" and the execution id's tail).
// The forwarder sets the header under its lower-case name (so that the
// transport never resends the request by itself): it is looked up by any
// case.
func executionOf(h http.Header) (string, bool) {
	for name, v := range h {
		if strings.EqualFold(name, idem.HeaderIdempotencyKey) && len(v) == 1 {
			tail, ok := strings.CutPrefix(v[0], "ik_")
			return "exe_" + tail, ok && tail != ""
		}
	}
	return "", false
}

func (u *upstream) post(w http.ResponseWriter, r *http.Request) {
	slot := r.PathValue("slot")
	exe, ok := executionOf(r.Header)
	var in rawInput
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || !ok {
		// The check fails on it: the upstream answered no execution.
		http.Error(w, fmt.Sprintf("no handler key (%v) or an unreadable body (%v)", ok, err), http.StatusBadRequest)
		return
	}
	if !pause(r.Context(), time.Duration(in.DelayMs)*time.Millisecond) {
		return
	}
	u.mu.Lock()
	u.effects[slot] = append(u.effects[slot], exe)
	u.mu.Unlock()
	pause(r.Context(), time.Duration(mrand.IntN(21))*time.Millisecond)
	var a upstreamAnswer
	switch in.Answer {
	case "break":
		a.broken = true
	case "declared":
		a = upstreamAnswer{status: http.StatusConflict, header: http.Header{"Content-Type": {"application/problem+json"}},
			body: fmt.Appendf(nil, `{"title": "Conflict", "status": 409, "detail": "slot %s was asked to conflict"}`, slot)}
	case "fail":
		a = upstreamAnswer{status: http.StatusInternalServerError, header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			body: fmt.Appendf(nil, "upstream failed for %s\n", exe)}
	default:
		// Spaced and ended as no canonical JSON is: a replay must keep it.
		a = upstreamAnswer{status: http.StatusCreated, header: http.Header{"Content-Type": {"application/json"},
			"Location": {linRawPath + slot}, "Etag": {`"` + exe + `"`}},
			body: fmt.Appendf(nil, "{\"slot\": %q,  \"execution\": %q, \"body\": %d}\n", slot, exe, in.Body)}
	}
	if a.header != nil {
		// Not replayable: fresh answers carry it, replays must not.
		a.header.Set("X-Upstream", "linearize")
	}
	u.mu.Lock()
	u.answers[exe] = a
	u.mu.Unlock()
	if a.broken {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// pause waits d unless ctx ends first; it reports whether it waited.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (u *upstream) effectsOf(slot string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string{}, u.effects[slot]...)
}

// refusing is the forwarder's transport: it refuses, before connecting,
// refuseShare of the requests whose body asks for notDispatched, after
// their delay, as a connection refused is; the others it sends.
type refusing struct {
	next http.RoundTripper
	up   *upstream
}

func (r refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil {
		return r.next.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	var in rawInput
	_ = json.Unmarshal(body, &in)
	if exe, ok := executionOf(req.Header); ok && in.NotDispatched && mrand.Float64() < refuseShare {
		if !pause(req.Context(), time.Duration(in.DelayMs)*time.Millisecond) {
			return nil, req.Context().Err()
		}
		r.up.mu.Lock()
		r.up.refused[exe] = true
		r.up.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	// Not rewindable, as the forwarder made it (no GetBody).
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	return r.next.RoundTrip(out)
}

// rawOperations are linRaw and linRawShow as idem proxy declares them:
// the upstream's document, loaded from the upstream, built by
// proxy.Build, forwarded by a proxy.Forwarder of this server's own.
func rawOperations(t *testing.T, up *upstream) []idem.Operation {
	t.Helper()
	client := proxy.NewClient()
	inner := client.Transport.(*http.Transport)
	t.Cleanup(inner.CloseIdleConnections)
	client.Transport = refusing{next: inner, up: up}
	fwd := &proxy.Forwarder{Upstream: up.url, Client: client}
	doc, err := proxy.Load(t.Context(), "/openapi.json", up.url, client)
	if err != nil {
		t.Fatal(err)
	}
	built, err := proxy.Build(doc, proxy.Overlay{}, proxy.Options{Forward: fwd.Handler, Upstream: fwd.Upstream})
	if err != nil {
		t.Fatal(err)
	}
	if len(built.Warnings) > 0 {
		t.Fatalf("proxy.Build warns: %v", built.Warnings)
	}
	return built.Operations
}

// rawTarget makes t a linRaw record on slot with n bodies: each answered
// created (201), declared (409, RawDeclareRate), fail (500) or break
// (RawFailRate for the two), and, independently, notDispatched
// (RawNotDispatchedRate), with delays of 0–50 ms.
func rawTarget(rng *mrand.Rand, t *target, slot string, n int, w workload) {
	t.op, t.rawSlot, t.path = linRawOp, slot, linRawPath+slot
	for b := range n {
		in := rawInput{Body: b, Answer: "created", DelayMs: rng.IntN(51), NotDispatched: rng.Float64() < w.RawNotDispatchedRate}
		switch f := rng.Float64(); {
		case f < w.RawFailRate/2:
			in.Answer = "fail"
		case f < w.RawFailRate:
			in.Answer = "break"
		case f < w.RawFailRate+w.RawDeclareRate:
			in.Answer = "declared"
		}
		t.bodies = append(t.bodies, mustJSON(in))
		t.frees = append(t.frees, in.NotDispatched)
	}
}

// classifyRaw maps an answer of linRaw to the model's output. The
// handler's own answer (the upstream's, fresh or replayed) has no
// envelope: it is read from its status and its headers Idem-Execution-Id
// and Idempotent-Replayed. Problems the pipeline produces are problem
// objects without Idem-Execution-Id, read by classify, but for
// NotDispatched (503 UPSTREAM_UNAVAILABLE, retryable, with
// meta.executionId), which freed the key.
// ownProblem tells the proxy's own problem objects, which carry the
// execution's header too, from an upstream's answer: their type names
// idem (an upstream's own problem object's does not).
func ownProblem(body []byte) bool {
	var a answer
	return json.Unmarshal(body, &a) == nil && strings.HasPrefix(a.Type, idem.ProblemTypeBase)
}

func classifyRaw(status int, h http.Header, body []byte) (output, error) {
	replayed := h.Get(idem.HeaderIdempotentReplayed) == "true"
	var a answer
	own := json.Unmarshal(body, &a) == nil && ownProblem(body)
	if exe := h.Get(idem.HeaderExecutionID); exe != "" && !own {
		if replayed {
			return output{Result: replay, ExecutionID: exe, Status: status}, nil
		}
		return output{Result: executed, ExecutionID: exe, Status: status}, nil
	}
	if !own {
		return output{}, fmt.Errorf("status %d: neither a raw answer (no %s) nor a problem object: %q", status, idem.HeaderExecutionID, body)
	}
	if a.Code == idem.CodeUpstreamUnavailable && status == http.StatusServiceUnavailable && a.Retryable && a.Meta != nil && a.Meta.ExecutionID != "" && !replayed {
		return output{Result: freed, ExecutionID: a.Meta.ExecutionID, Status: status}, nil
	}
	out, err := classify(status, h, body)
	if err == nil && out.Result == rolledBack {
		return output{}, fmt.Errorf("status %d: a raw operation is never rolled back, yet it answered retryably after its start: %s", status, body)
	}
	return out, err
}

// verify checks a linRaw answer against what the upstream did: a raw
// answer, fresh or replayed, is the upstream's answer to its execution
// byte for byte (status, body, the replayable headers), a fresh one with
// its other headers and a replay without them; a freed execution never
// reached the upstream; an execution failed or indeterminate is one whose
// request reached it and was answered 5xx or broken off.
func (u *upstream) verify(tg target, out output, rep reply) error {
	u.mu.Lock()
	a, answered := u.answers[out.ExecutionID]
	refused := u.refused[out.ExecutionID]
	reached := slices.Contains(u.effects[tg.rawSlot], out.ExecutionID)
	u.mu.Unlock()
	rawAnswer := rep.header.Get(idem.HeaderExecutionID) != "" && !ownProblem(rep.body)
	switch {
	case out.Result == freed:
		if !refused || reached {
			return fmt.Errorf("%s answered NotDispatched, yet the transport refused it %v, the upstream received it %v", out.ExecutionID, refused, reached)
		}
	case out.Result == indeterminate, (out.Result == executed || out.Result == replay) && !rawAnswer:
		if !answered || !reached || !(a.broken || a.status >= 500) {
			return fmt.Errorf("%s answered %s %d, yet the upstream answered %v (received %v) %d, broken %v", out.ExecutionID, out.Result, rep.status, answered, reached, a.status, a.broken)
		}
	case out.Result == executed || out.Result == replay:
		if !answered || a.broken || !reached {
			return fmt.Errorf("%s: a raw answer %d of an execution the upstream did not answer", out.ExecutionID, rep.status)
		}
		if rep.status != a.status || !bytes.Equal(rep.body, a.body) {
			return fmt.Errorf("%s (%s): answered %d %q, the upstream answered %d %q", out.ExecutionID, out.Result, rep.status, rep.body, a.status, a.body)
		}
		for _, name := range idem.ReplayedHeaders {
			if got, want := rep.header.Values(name), a.header.Values(name); !slices.Equal(got, want) {
				return fmt.Errorf("%s (%s): header %s %q, the upstream answered %q", out.ExecutionID, out.Result, name, got, want)
			}
		}
		if got, want := rep.header.Get("X-Upstream"), a.header.Get("X-Upstream"); out.Result == replay && got != "" || out.Result == executed && got != want {
			return fmt.Errorf("%s (%s): header X-Upstream %q (the upstream's: %q; only replayable headers are replayed)", out.ExecutionID, out.Result, got, want)
		}
		if out.Result == replay {
			u.replays.Add(1)
		} else {
			u.fresh.Add(1)
		}
	}
	return nil
}

// rawEffectCounts counts the linRaw records of histories by what the
// upstream's effects were checked against.
type rawEffectCounts struct {
	records       int // linRaw records
	created       int // seen completed with a 201: exactly its one effect
	declared      int // seen completed with the upstream's 409: exactly its one effect
	indeterminate int // seen indeterminate: at most its one effect
	open          int // never seen final: at most one effect
	rerun         int // seen final after one of its executions was freed
	freed         int // executions freed (NotDispatched): none reached the upstream
	fresh         int // fresh raw answers, checked byte for byte against the upstream's
	replays       int // replayed raw answers, checked likewise
}

func (e *rawEffectCounts) add(o rawEffectCounts) {
	e.records += o.records
	e.created += o.created
	e.declared += o.declared
	e.indeterminate += o.indeterminate
	e.open += o.open
	e.rerun += o.rerun
	e.freed += o.freed
	e.fresh += o.fresh
	e.replays += o.replays
}

func (e rawEffectCounts) String() string {
	return fmt.Sprintf("%d linRaw records: %d completed 201 and %d completed 409 (one effect each), %d indeterminate (at most one), %d never seen final, %d seen final after a freed execution; %d freed executions (no effect), %d fresh and %d replayed raw answers identical to the upstream's",
		e.records, e.created, e.declared, e.indeterminate, e.open, e.rerun, e.freed, e.fresh, e.replays)
}

// checkRawEffects checks the upstream's effects (executions by slot)
// against a linearizable history: per record, at most one effect, never
// one of a freed execution; exactly the completed execution's when an
// answer showed it completed (201 or the upstream's 409); none but the
// indeterminate execution's when one showed that. fresh and replays are
// the history's checked answers (verify).
func checkRawEffects(t *testing.T, up *upstream, pool []target, history []porcupine.Operation, fresh, replays int) rawEffectCounts {
	t.Helper()
	type seen struct {
		final  string // execution id, from a completed or indeterminate answer
		status int
		freed  []string
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
			s.final, s.status = out.ExecutionID, out.Status
		case indeterminate:
			s.final, s.status = out.ExecutionID, http.StatusInternalServerError
		case freed:
			s.freed = append(s.freed, out.ExecutionID)
		}
	}
	n := rawEffectCounts{fresh: fresh, replays: replays}
	for _, tg := range pool {
		if tg.rawSlot == "" {
			continue
		}
		n.records++
		got, s := up.effectsOf(tg.rawSlot), byRecord[tg.name]
		if s == nil {
			s = &seen{}
		}
		if len(got) > 1 {
			t.Errorf("%s (slot %s): %d upstream effects %v, want at most one", tg.name, tg.rawSlot, len(got), got)
		}
		for _, e := range s.freed {
			if slices.Contains(got, e) {
				t.Errorf("%s (slot %s): %s reached the upstream, yet it answered NotDispatched", tg.name, tg.rawSlot, e)
			}
		}
		n.freed += len(s.freed)
		if s.final != "" && len(s.freed) > 0 {
			n.rerun++
		}
		switch {
		case s.final == "":
			n.open++
		case s.status < 500:
			if s.status < 300 {
				n.created++
			} else {
				n.declared++
			}
			if !slices.Equal(got, []string{s.final}) {
				t.Errorf("%s (slot %s): upstream effects %v, want exactly [%s] (completed with %d)", tg.name, tg.rawSlot, got, s.final, s.status)
			}
		default:
			n.indeterminate++
			if len(got) > 0 && !slices.Equal(got, []string{s.final}) {
				t.Errorf("%s (slot %s): upstream effects %v, want none or [%s] (indeterminate)", tg.name, tg.rawSlot, got, s.final)
			}
		}
	}
	return n
}

// noReleaseStore makes Release a no-op that reports success: a call whose
// request never left the proxy is answered, as the runner says of a
// released key, that nothing ran and the same key may be sent again; but
// the reservation stays, in flight, so that the retry finds the key
// taken (until the lease passes, and then indeterminate).
type noReleaseStore struct{ idem.Store }

func (s noReleaseStore) Release(context.Context, idem.ReleaseParams) error { return nil }

func (s noReleaseStore) Transact(ctx context.Context, p idem.ReserveParams, run idem.TransactFunc) (idem.TransactResult, error) {
	return transact(ctx, s.Store, p, run)
}

// TestRejectsNoRelease runs the default workload but for every linRaw
// body being notDispatched, so that most linRaw records see a freed
// execution.
func TestRejectsNoRelease(t *testing.T) {
	wrap := func(s idem.Store) idem.Store { return noReleaseStore{s} }
	w := defaultWorkload
	w.RawNotDispatchedRate = 1
	t.Run("sqlite", func(t *testing.T) { rejectedOn(t, sqliteServers, wrap, w) })
	t.Run("postgres", func(t *testing.T) { rejectedOn(t, postgresServers, wrap, w) })
}

// TestVerifyRawAnswers checks verify on hand-made answers, so that its
// silence on real ones means what it says.
func TestVerifyRawAnswers(t *testing.T) {
	u := &upstream{effects: map[string][]string{"s": {"exe_a", "exe_b"}}, refused: map[string]bool{"exe_c": true},
		answers: map[string]upstreamAnswer{
			"exe_a": {status: 201, header: http.Header{"Content-Type": {"application/json"}, "Location": {"/x"}, "X-Upstream": {"linearize"}}, body: []byte(`{"a":  1}`)},
			"exe_b": {broken: true},
		}}
	tg := target{rawSlot: "s"}
	fresh := http.Header{"Content-Type": {"application/json"}, "Location": {"/x"}, "X-Upstream": {"linearize"}, idem.HeaderExecutionID: {"exe_a"}}
	replayed := http.Header{"Content-Type": {"application/json"}, "Location": {"/x"}, idem.HeaderExecutionID: {"exe_a"}, idem.HeaderIdempotentReplayed: {"true"}}
	for _, tt := range []struct {
		name string
		out  output
		rep  reply
		ok   bool
	}{
		{"fresh as the upstream answered", output{Result: executed, ExecutionID: "exe_a", Status: 201}, reply{201, fresh, []byte(`{"a":  1}`)}, true},
		{"replay as the upstream answered", output{Result: replay, ExecutionID: "exe_a", Status: 201}, reply{201, replayed, []byte(`{"a":  1}`)}, true},
		{"replay re-encoded", output{Result: replay, ExecutionID: "exe_a", Status: 201}, reply{201, replayed, []byte(`{"a":1}`)}, false},
		{"replay with another status", output{Result: replay, ExecutionID: "exe_a", Status: 200}, reply{200, replayed, []byte(`{"a":  1}`)}, false},
		{"replay with a header not replayable", output{Result: replay, ExecutionID: "exe_a", Status: 201},
			reply{201, func() http.Header { h := replayed.Clone(); h.Set("X-Upstream", "linearize"); return h }(), []byte(`{"a":  1}`)}, false},
		{"replay without Location", output{Result: replay, ExecutionID: "exe_a", Status: 201},
			reply{201, func() http.Header { h := replayed.Clone(); h.Del("Location"); return h }(), []byte(`{"a":  1}`)}, false},
		{"raw answer of a broken execution", output{Result: executed, ExecutionID: "exe_b", Status: 201}, reply{201, http.Header{idem.HeaderExecutionID: {"exe_b"}}, nil}, false},
		{"broken execution failed", output{Result: executed, ExecutionID: "exe_b", Status: 500}, reply{500, http.Header{}, nil}, true},
		{"freed, refused", output{Result: freed, ExecutionID: "exe_c", Status: 503}, reply{503, http.Header{}, nil}, true},
		{"freed, yet it reached the upstream", output{Result: freed, ExecutionID: "exe_a", Status: 503}, reply{503, http.Header{}, nil}, false},
		{"indeterminate, yet completed", output{Result: indeterminate, ExecutionID: "exe_a", Status: 409}, reply{409, http.Header{}, nil}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := u.verify(tg, tt.out, tt.rep); (err == nil) != tt.ok {
				t.Errorf("verify = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
