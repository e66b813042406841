package pipeline_test

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idem-run/idem"
)

func TestParseDryRun(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   bool
		ok     bool
	}{
		{"absent", nil, false, true},
		{"true", []string{"true"}, true, true},
		{"false", []string{"false"}, false, true},
		{"1", []string{"1"}, false, false},
		{"0", []string{"0"}, false, false},
		{"True", []string{"True"}, false, false},
		{"TRUE", []string{"TRUE"}, false, false},
		{"yes", []string{"yes"}, false, false},
		{"empty", []string{""}, false, false},
		{"spaces", []string{" true"}, false, false},
		{"quoted", []string{`"true"`}, false, false},
		{"repeated true", []string{"true", "true"}, false, false},
		{"false then true", []string{"false", "true"}, false, false},
		{"true then false", []string{"true", "false"}, false, false},
		{"JSON null", []string{"null"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := idem.ParseDryRun(tt.values)
			if tt.ok {
				if err != nil || got != tt.want {
					t.Fatalf("ParseDryRun(%q) = %v, %v; want %v", tt.values, got, err, tt.want)
				}
				return
			}
			e := idem.AsError(err)
			if err == nil || e.Code != idem.CodeInvalidInput {
				t.Fatalf("ParseDryRun(%q) = %v, %v; want INVALID_INPUT", tt.values, got, err)
			}
			errs, _ := e.Details["errors"].([]map[string]string)
			if len(errs) != 1 || errs[0]["path"] != "/dryRun" || errs[0]["message"] != "dryRun must be true or false, given once" {
				t.Fatalf("details.errors = %v", e.Details["errors"])
			}
		})
	}
}

// SPEC §6.4: dryRun is exactly true or false, given at most once; any other
// spelling is 400 INVALID_INPUT and nothing runs or is stored, whoever
// sends it, whatever the operation.
func TestDryRunParsedStrictly(t *testing.T) {
	var runs atomic.Int64
	var previews atomic.Int64
	bind := idem.Define(idem.Metadata{
		Name: "thing.bind", Method: "PUT", Path: "/v1/things/{id}/bind", Summary: "Bind", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{Kind: idem.RetryConvergent, Reconcile: "thing.show", Preview: true},
	}, func(ctx context.Context, call *idem.Call, in showIn) (thing, error) {
		runs.Add(1)
		return thing{ID: in.ID}, nil
	}).WithPreview(func(ctx context.Context, call *idem.Call, in showIn) (any, error) {
		previews.Add(1)
		return map[string]any{"wouldBind": in.ID}, nil
	})
	f := newFixture(t, []idem.Operation{createOp(&runs), showOp(), bind})
	bad := map[string]string{
		"1": "dryRun=1", "True": "dryRun=True", "yes": "dryRun=yes", "empty": "dryRun=", "bare": "dryRun",
		"false then true": "dryRun=false&dryRun=true", "true twice": "dryRun=true&dryRun=true",
	}
	for name, raw := range bad {
		q, err := url.ParseQuery(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []call{
			{op: "thing.create", principal: agent, body: `{"name":"a"}`, key: "k-" + strings.ReplaceAll(name, " ", "-"), query: q},
			{op: "thing.create", principal: browser, body: `{"name":"a"}`, query: q},
			{op: "thing.bind", principal: agent, path: map[string]string{"id": "x"}, query: q},
			{op: "thing.show", principal: agent, path: map[string]string{"id": "x"}, query: q},
		} {
			t.Run(name+"/"+c.op+"/"+c.principal.ID, func(t *testing.T) {
				d := expect(t, f.do(t.Context(), c), 400, idem.CodeInvalidInput)
				errs, _ := d.Details["errors"].([]any)
				if len(errs) != 1 || errs[0].(map[string]any)["path"] != "/dryRun" {
					t.Fatalf("details.errors = %v", d.Details["errors"])
				}
				if runs.Load() != 0 || previews.Load() != 0 {
					t.Fatalf("?%s ran the handler %d times, the preview %d times", raw, runs.Load(), previews.Load())
				}
				if c.key != "" {
					if _, err := f.runner.GetAttempt(t.Context(), agent, c.key); idem.ErrorCode(err) != idem.CodeNotFound {
						t.Fatalf("?%s stored a record: %v", raw, err)
					}
				}
			})
		}
	}
	// Valid values: true previews, false runs live; once parsed, dryRun is
	// left out of the intent, so dryRun=false and no dryRun are one request.
	expect(t, f.do(t.Context(), call{op: "thing.bind", path: map[string]string{"id": "x"}, query: url.Values{"dryRun": {"true"}}}), 200, "")
	if previews.Load() != 1 || runs.Load() != 0 {
		t.Fatalf("dryRun=true: %d previews, %d runs", previews.Load(), runs.Load())
	}
	first := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k-false", query: url.Values{"dryRun": {"false"}}}), 201, "")
	again := expect(t, f.do(t.Context(), call{op: "thing.create", body: `{"name":"a"}`, key: "k-false"}), 201, "")
	if runs.Load() != 1 || !again.Meta.Idempotency.Replayed || again.Meta.ExecutionID != first.Meta.ExecutionID {
		t.Fatalf("dryRun=false then no dryRun under one key: %d runs, replay %+v", runs.Load(), again.Meta)
	}
}
