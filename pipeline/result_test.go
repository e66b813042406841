package pipeline_test

import (
	"bytes"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
)

// A replay's Data is the first answer's byte for byte, whether it is made
// from the store's record or from the replay cache, and Decode reads it.
func TestResultReplayKeepsDataByteForByte(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	c := call{op: "thing.create", body: `{"name":"a<b>"}`, key: "k1"}
	first := f.do(t.Context(), c)
	if first.Status != 201 || first.Replayed || first.Meta.Idempotency.Replayed || string(first.Data) != `{"id":"t_a\u003cb\u003e","name":"a\u003cb\u003e"}` {
		t.Fatalf("first: %d replayed=%v data %s", first.Status, first.Replayed, first.Data)
	}
	var replays []idem.Result
	for range 2 { // the first replay fills the replay cache, the second is served from it
		r := f.do(t.Context(), c)
		checkTyped(t, r)
		if !r.Replayed || !r.Meta.Idempotency.Replayed || !bytes.Equal(r.Data, first.Data) || r.Header.Get("Location") != "/v1/things/a<b>" {
			t.Fatalf("replay: %d replayed=%v data %s header %v", r.Status, r.Replayed, r.Data, r.Header)
		}
		replays = append(replays, r)
	}
	if !bytes.Equal(replays[0].Body(), replays[1].Body()) {
		t.Fatalf("replays differ:\n%s\n%s", replays[0].Body(), replays[1].Body())
	}
	var got thing
	if err := replays[1].Decode(&got); err != nil || got.Name != "a<b>" || runs.Load() != 1 {
		t.Fatalf("Decode = %+v, %v; %d runs", got, err, runs.Load())
	}
}

// A problem answers Err as an *Error with its code, and Decode returns it
// without touching the value; a stored problem replays typed too.
func TestResultErrAndDecode(t *testing.T) {
	var runs atomic.Int64
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp()})
	for i := range 2 {
		r := f.do(t.Context(), call{op: "thing.create", body: `{"name":"taken"}`, key: "taken"})
		checkTyped(t, r)
		got := thing{Name: "untouched"}
		err := r.Decode(&got)
		var e *idem.Error
		if !errors.As(err, &e) || e.Code != codeThingExists || e.Status != 409 || e.Message != r.Problem.Detail || r.Replayed != (i == 1) || got.Name != "untouched" {
			t.Fatalf("answer %d: Decode = %v (%+v), replayed %v, value %+v", i, err, e, r.Replayed, got)
		}
	}
	if err := (idem.Result{Status: 200, Data: []byte(`{"id":"x"}`)}).Err(); err != nil {
		t.Fatalf("a success has Err %v", err)
	}
	if code := idem.ErrorCode((idem.Result{Status: 502}).Err()); code != idem.CodeInternal {
		t.Fatalf("a failure without a problem has code %q", code)
	}
}

// ParseResult reads an envelope or a problem object and refuses anything
// else; Body gives back the bytes it was given.
func TestParseResult(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		ok     bool
		code   idem.Code
	}{
		{200, ` {"data":{"a":1},"meta":{"idempotency":{"key":"k","replayed":true}}}`, true, ""},
		{201, `{}`, true, ""},
		{409, `{"type":"urn:idem:error:IDEMPOTENCY_KEY_IN_FLIGHT","title":"t","status":409,"detail":"d","code":"IDEMPOTENCY_KEY_IN_FLIGHT","retryable":true}`, true, idem.CodeIdempotencyKeyInFlight},
		{200, `null`, false, ""},
		{200, `[1]`, false, ""},
		{200, ``, false, ""},
		{200, `<html>`, false, ""},
		{200, `{"data":1`, false, ""},
		{502, `{"error":"bad gateway"}`, false, ""},
		{500, `oops`, false, ""},
		{404, `null`, false, ""},
	} {
		r, err := idem.ParseResult(tc.status, http.Header{}, []byte(tc.body))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, idem.ErrNotAnAnswer)) {
			t.Errorf("%d %s: err %v", tc.status, tc.body, err)
			continue
		}
		if !tc.ok {
			continue
		}
		if string(r.Body()) != tc.body || idem.ErrorCode(r.Err()) != tc.code || (r.Problem != nil) != (tc.code != "") {
			t.Errorf("%d %s: body %s, problem %+v", tc.status, tc.body, r.Body(), r.Problem)
		}
	}
	r, _ := idem.ParseResult(200, nil, []byte(`{"data":{"a":1},"meta":{"idempotency":{"key":"k","replayed":true}}}`))
	if !r.Replayed || string(r.Data) != `{"a":1}` || r.Meta.Idempotency.Key != "k" {
		t.Fatalf("parsed %+v", r)
	}
}
