package demo

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// transactionalOperations are the operations whose effects are rows of
// the demo's own tables (SPEC §12): they declare retry.transactional.
var transactionalOperations = []string{
	"business.create", "agreement.create", "token.mint", "webhook.create",
	"backend.bind", "limit.create", "limit.update", "serviceaccount.approve",
}

// TestTransactionalDeclarations: the operations of SPEC §12 whose effects
// are the demo's own rows are transactional; order.refund (the gateway)
// and webhook.trigger (the receiver) are not.
func TestTransactionalDeclarations(t *testing.T) {
	app := &App{}
	want := map[string]bool{}
	for _, name := range transactionalOperations {
		want[name] = true
	}
	seen := 0
	for _, op := range app.Operations() {
		m := op.Metadata()
		if m.Retry.Transactional != want[m.Name] {
			t.Errorf("%s: Transactional = %v, want %v", m.Name, m.Retry.Transactional, want[m.Name])
		}
		if want[m.Name] {
			seen++
		}
	}
	if seen != len(transactionalOperations) {
		t.Fatalf("found %d of the %d transactional operations", seen, len(transactionalOperations))
	}
}

// TestInCallSharesTheStoreTransaction: a transactional handler's writes
// through InCall commit or roll back with its attempt. A write followed by
// a failure leaves neither the row nor a record (the key is free again);
// a write followed by a declared 4xx leaves no row and stores the 4xx.
func TestInCallSharesTheStoreTransaction(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *testEnv) {
		type in struct {
			Slug string `json:"slug"`
			Fail string `json:"fail,omitempty"`
		}
		failOnce := true // "fail": "once" fails the first call only
		op := idem.Define(idem.Metadata{
			Name: "test.write_then_fail", Method: http.MethodPost, Path: "/v1/test/write-then-fail",
			Summary: "Insert a business, then fail as asked", SideEffect: idem.SideEffectWrite,
			Retry:  idem.RetryContract{Transactional: true, Kind: idem.RetrySameKeyReplay, Reconcile: "business.show", Rationale: "A test operation."},
			Errors: []idem.DeclaredError{{Code: CodeBusinessExists, Status: http.StatusConflict, Message: "asked to fail with a 409"}},
		}, func(ctx context.Context, call *idem.Call, in in) (Business, error) {
			err := e.app.db.InCall(ctx, call, func(tx *Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO idem_demo_businesses (org, slug, name, created_by, created_at) VALUES (?, ?, ?, ?, ?)`,
					call.Principal.Org, in.Slug, "written", call.Principal.ID, micros(e.app.now()))
				return err
			})
			if err != nil {
				return Business{}, err
			}
			switch in.Fail {
			case "declared":
				return Business{}, idem.Errorf(CodeBusinessExists, "asked to fail with a 409")
			case "once":
				if failOnce {
					failOnce = false
					return Business{}, errors.New("asked to fail after the write")
				}
			}
			return Business{Slug: in.Slug}, nil
		})
		reg, err := idem.NewRegistry(op, e.app.businessShow())
		if err != nil {
			t.Fatal(err)
		}
		runner, err := pipeline.New(reg, pipeline.Config{Store: e.store, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		run := &testEnv{app: e.app, runner: runner, store: e.store}
		show := func(slug string) int {
			return run.call(t, req{op: "business.show", path: map[string]string{"slug": slug}}).Status
		}

		run.call(t, req{op: "test.write_then_fail", body: `{"slug":"tx-failure","fail":"once"}`, key: "tx-1"}).must(t, 500, idem.CodeExecutionFailed)
		if s := show("tx-failure"); s != 404 {
			t.Fatalf("after a failure the handler's write is visible: business.show = %d", s)
		}
		if _, err := e.store.GetAttempt(t.Context(), idem.GetAttemptParams{Scope: Tokens()["demo-agent"].Scope(), Key: "tx-1"}); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("after a failure the key has a record: %v", err)
		}
		run.call(t, req{op: "test.write_then_fail", body: `{"slug":"tx-failure","fail":"once"}`, key: "tx-1"}).must(t, 200, "")
		if s := show("tx-failure"); s != 200 {
			t.Fatalf("the same key sent again did not write: business.show = %d", s)
		}

		run.call(t, req{op: "test.write_then_fail", body: `{"slug":"tx-declared","fail":"declared"}`, key: "tx-2"}).must(t, 409, CodeBusinessExists)
		if s := show("tx-declared"); s != 404 {
			t.Fatalf("after a declared error the handler's write is visible: business.show = %d", s)
		}
		run.call(t, req{op: "test.write_then_fail", body: `{"slug":"tx-declared","fail":"declared"}`, key: "tx-2"}).must(t, 409, CodeBusinessExists)
	})
}
