package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/httpapi"
	"github.com/idem-run/idem/pipeline"
	"github.com/idem-run/idem/server"
	"github.com/idem-run/idem/sqlitestore"
)

// exampleStore opens a SQLite store in a new temporary directory and
// returns it with a function that closes it and removes the directory.
func exampleStore() (idem.Store, func()) {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "idem.db"), idem.StoreConfig{})
	if err != nil {
		os.RemoveAll(dir)
		log.Fatal(err)
	}
	return store, func() {
		store.Close()
		os.RemoveAll(dir)
	}
}

// exampleRunner builds the registry of ops and a quiet Runner on store.
func exampleRunner(store idem.Store, ops ...idem.Operation) *pipeline.Runner {
	reg, err := idem.NewRegistry(ops...)
	if err != nil {
		log.Fatal(err)
	}
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	return runner
}

// The input of business.create: org fills the route's {org} segment, name
// and plan travel in the JSON body and are validated against the schema
// generated from the jsonschema tags.
type exampleBusinessIn struct {
	Org  string `json:"org" in:"path"`
	Name string `json:"name" jsonschema:"minLength=1,maxLength=80"`
	Plan string `json:"plan" jsonschema:"enum=free,enum=pro"`
}

type exampleShowBusinessIn struct {
	Org  string `json:"org" in:"path"`
	Slug string `json:"slug" in:"path"`
}

type exampleBusiness struct {
	Slug string `json:"slug"`
	Name string `json:"name"`
	Plan string `json:"plan"`
}

func ExampleDefine() {
	var created int
	create := idem.Define(idem.Metadata{
		Name: "business.create", Method: "POST", Path: "/v1/orgs/{org}/businesses",
		Summary: "Create a business", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Kind:      idem.RetrySameKeyReplay,
			Reconcile: "business.show",
			Rationale: "Creating twice would make two businesses; a same-key retry replays the first answer.",
		},
		SuccessStatus: http.StatusCreated,
	}, func(ctx context.Context, call *idem.Call, in exampleBusinessIn) (exampleBusiness, error) {
		created++
		slug := strings.ToLower(strings.ReplaceAll(in.Name, " ", "-"))
		call.Header().Set("Location", "/v1/orgs/"+in.Org+"/businesses/"+slug)
		return exampleBusiness{Slug: slug, Name: in.Name, Plan: in.Plan}, nil
	})
	show := idem.Define(idem.Metadata{
		Name: "business.show", Method: "GET", Path: "/v1/orgs/{org}/businesses/{slug}",
		Summary: "Show a business", SideEffect: idem.SideEffectRead,
	}, func(ctx context.Context, call *idem.Call, in exampleShowBusinessIn) (exampleBusiness, error) {
		return exampleBusiness{Slug: in.Slug}, nil
	})

	store, cleanup := exampleStore()
	defer cleanup()
	reg, err := idem.NewRegistry(create, show)
	if err != nil {
		log.Fatal(err)
	}
	runner, err := pipeline.New(reg, pipeline.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}

	agent := idem.Principal{Org: "acme", ID: "onboarding-agent", Kind: idem.KindAgent}
	req := idem.Invocation{
		Operation: "business.create",
		Principal: agent,
		Key:       "create-corner-bakery",
		Intent:    idem.Intent{PathParams: map[string]string{"org": "acme"}, Body: []byte(`{"name": "Corner Bakery", "plan": "pro"}`)},
	}
	// The agent sends the request, then (say its connection dropped) sends
	// it again with the same key.
	for range 2 {
		// The answer is typed: Data is the output's JSON, byte for byte
		// the same on the replay, and Decode reads it into a Go value.
		resp := runner.Call(context.Background(), req)
		var b exampleBusiness
		if err := resp.Decode(&b); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s replayed=%v Location=%s\n", resp.Status, resp.Data, resp.Meta.Idempotency.Replayed, resp.Header.Get("Location"))
		fmt.Println("slug:", b.Slug)
	}
	fmt.Println("handler runs:", created)

	// Input that breaks the schema never reaches the handler. Decode
	// returns the answer's problem as an *idem.Error.
	req.Intent.Body, req.Key = []byte(`{"name": "", "plan": "gold"}`), "create-nameless"
	resp := runner.Call(context.Background(), req)
	var e *idem.Error
	if err := resp.Decode(new(exampleBusiness)); errors.As(err, &e) {
		fmt.Println(resp.Status, e.Code, "retryable:", e.Retryable, "handler runs:", created)
	}
	// Output:
	// 201 {"slug":"corner-bakery","name":"Corner Bakery","plan":"pro"} replayed=false Location=/v1/orgs/acme/businesses/corner-bakery
	// slug: corner-bakery
	// 201 {"slug":"corner-bakery","name":"Corner Bakery","plan":"pro"} replayed=true Location=/v1/orgs/acme/businesses/corner-bakery
	// slug: corner-bakery
	// handler runs: 1
	// 400 INVALID_INPUT retryable: false handler runs: 1
}

type exampleRefundIn struct {
	Order       string `json:"order" in:"path"`
	AmountCents int    `json:"amountCents" jsonschema:"minimum=1"`
}

type exampleOrderIn struct {
	Order string `json:"order" in:"path"`
}

type exampleRefund struct {
	Order       string `json:"order"`
	AmountCents int    `json:"amountCents"`
}

func ExamplePolicyFor() {
	// Refunds above 100.00 need a second pair of eyes.
	largeRefunds := idem.PolicyFor("large-refunds", func(ctx context.Context, p idem.Principal, in exampleRefundIn) (idem.PolicyDecision, error) {
		if in.AmountCents > 100_00 {
			return idem.PolicyDecision{Effect: idem.RequireApproval, Reason: "refunds above 100.00 need approval"}, nil
		}
		return idem.PolicyDecision{Effect: idem.Allow}, nil
	})
	refund := idem.Define(idem.Metadata{
		Name: "order.refund", Method: "POST", Path: "/v1/orders/{order}/refunds",
		Summary: "Refund an order", SideEffect: idem.SideEffectWrite,
		Retry:         idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "order.show", Rationale: "One refund per key."},
		Approval:      idem.ApprovalPolicy,
		SuccessStatus: http.StatusCreated,
	}, func(ctx context.Context, call *idem.Call, in exampleRefundIn) (exampleRefund, error) {
		return exampleRefund{Order: in.Order, AmountCents: in.AmountCents}, nil
	}).WithPolicies(largeRefunds)
	show := idem.Define(idem.Metadata{
		Name: "order.show", Method: "GET", Path: "/v1/orders/{order}", Summary: "Show an order", SideEffect: idem.SideEffectRead,
	}, func(ctx context.Context, call *idem.Call, in exampleOrderIn) (exampleRefund, error) {
		return exampleRefund{Order: in.Order}, nil
	})

	store, cleanup := exampleStore()
	defer cleanup()
	runner := exampleRunner(store, refund, show)
	ctx := context.Background()
	agent := idem.Principal{Org: "acme", ID: "support-agent", Kind: idem.KindAgent}
	approver := idem.Principal{Org: "acme", ID: "dana", Kind: idem.KindCLISession, Roles: []string{idem.RoleApprover}}
	refundReq := func(cents int, key string) idem.Invocation {
		return idem.Invocation{
			Operation: "order.refund",
			Principal: agent,
			Key:       key,
			Intent:    idem.Intent{PathParams: map[string]string{"order": "ord_1"}, Body: fmt.Appendf(nil, `{"amountCents": %d}`, cents)},
		}
	}

	small := runner.Call(ctx, refundReq(25_00, "refund-small"))
	fmt.Println("small refund:", small.Status)

	large := runner.Call(ctx, refundReq(250_00, "refund-large"))
	fmt.Println("large refund:", large.Status, large.Problem.Code, "-", large.Problem.Details["reason"])
	approvalID := large.Problem.Details["approvalId"].(string)

	decided, err := runner.DecideApproval(ctx, approver, approvalID, true, "checked with the customer")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("decision:", decided.Status)

	// The same request with the same key now runs, consuming the approval.
	again := runner.Call(ctx, refundReq(250_00, "refund-large"))
	var refunded exampleRefund
	if err := again.Decode(&refunded); err != nil {
		log.Fatal(err)
	}
	fmt.Println("large refund again:", again.Status, refunded.AmountCents)
	a, err := runner.GetApproval(ctx, agent, approvalID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("approval:", a.Status)
	// Output:
	// small refund: 201
	// large refund: 403 APPROVAL_REQUIRED - refunds above 100.00 need approval
	// decision: approved
	// large refund again: 201 25000
	// approval: consumed
}

// exampleGateway stands in for a payment provider that, like real ones,
// applies each idempotency key's charge once and answers repeats with the
// charge it already made.
type exampleGateway struct {
	mu      sync.Mutex
	calls   int
	charges map[string]int // idempotency key → amount charged
}

func (g *exampleGateway) Charge(ctx context.Context, idempotencyKey string, amountCents int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if _, done := g.charges[idempotencyKey]; !done {
		g.charges[idempotencyKey] = amountCents
	}
	return nil
}

type exampleChargeIn struct {
	AmountCents int `json:"amountCents" jsonschema:"minimum=1"`
}

type exampleCharge struct {
	AmountCents int `json:"amountCents"`
}

func ExampleCall_IdempotencyKey() {
	gateway := &exampleGateway{charges: map[string]int{}}
	charge := idem.Define(idem.Metadata{
		Name: "payment.charge", Method: "POST", Path: "/v1/payments", Summary: "Charge a card",
		SideEffect: idem.SideEffectExternal,
		// The claim that makes runtime retries legal on an external effect:
		// repeating the handler is safe because the gateway deduplicates on
		// call.IdempotencyKey.
		Idempotent:   true,
		RuntimeRetry: idem.RuntimeRetry{MaxAttempts: 1, BackoffMs: 20},
		Retry:        idem.RetryContract{Kind: idem.RetrySameKeyReplay, Reconcile: "payment.list", Rationale: "One charge per key."},
	}, func(ctx context.Context, call *idem.Call, in exampleChargeIn) (exampleCharge, error) {
		if err := gateway.Charge(ctx, call.IdempotencyKey, in.AmountCents); err != nil {
			return exampleCharge{}, err
		}
		if call.Attempt == 1 {
			// The charge went through, but its answer was lost on the way
			// back: a transient failure the runtime may retry.
			return exampleCharge{}, idem.Retryable(errors.New("gateway: connection reset while reading the answer"))
		}
		return exampleCharge{AmountCents: in.AmountCents}, nil
	})
	list := idem.Define(idem.Metadata{
		Name: "payment.list", Method: "GET", Path: "/v1/payments", Summary: "List payments", SideEffect: idem.SideEffectRead,
	}, func(ctx context.Context, call *idem.Call, in struct{}) ([]exampleCharge, error) {
		return nil, nil
	})

	store, cleanup := exampleStore()
	defer cleanup()
	runner := exampleRunner(store, charge, list)
	agent := idem.Principal{Org: "acme", ID: "billing-agent", Kind: idem.KindAgent}
	resp := runner.Call(context.Background(), idem.Invocation{
		Operation: "payment.charge",
		Principal: agent,
		Key:       "invoice-17-payment",
		Intent:    idem.Intent{Body: []byte(`{"amountCents": 4200}`)},
	})
	fmt.Println("status:", resp.Status, "attempts:", resp.Meta.Attempts)
	fmt.Println("gateway calls:", gateway.calls, "charges applied:", len(gateway.charges))

	x, err := runner.GetExecution(context.Background(), agent, resp.Meta.ExecutionID)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range x.Events {
		switch e.Type {
		case idem.EventRetried:
			fmt.Printf("%s attempt=%d after %s\n", e.Type, e.Attempt, e.PreviousErrorCode)
		case idem.EventSucceeded, idem.EventFailed:
			fmt.Printf("%s attempts=%d\n", e.Type, e.Attempts)
		default:
			fmt.Printf("%s attempt=%d\n", e.Type, e.Attempt)
		}
	}
	// Output:
	// status: 200 attempts: 2
	// gateway calls: 2 charges applied: 1
	// execution.started attempt=1
	// execution.retried attempt=2 after EXECUTION_FAILED
	// execution.succeeded attempts=2
}

// idem's surfaces mounted in an application's own http.ServeMux under
// /idem/, beside the application's routes, inside the application's own
// middleware (here a recovery handler and an access log), with the
// Runner's background work started and stopped by the application.
func Example_mountBesideRoutes() {
	create := idem.Define(idem.Metadata{
		Name: "business.create", Method: "POST", Path: "/v1/orgs/{org}/businesses",
		Summary: "Create a business", SideEffect: idem.SideEffectWrite,
		Retry: idem.RetryContract{
			Kind: idem.RetrySameKeyReplay, Reconcile: "business.show",
			Rationale: "Creating twice would make two businesses; a same-key retry replays the first answer.",
		},
		SuccessStatus: http.StatusCreated,
	}, func(ctx context.Context, call *idem.Call, in exampleBusinessIn) (exampleBusiness, error) {
		return exampleBusiness{Slug: strings.ToLower(in.Name), Name: in.Name, Plan: in.Plan}, nil
	})
	show := idem.Define(idem.Metadata{
		Name: "business.show", Method: "GET", Path: "/v1/orgs/{org}/businesses/{slug}",
		Summary: "Show a business", SideEffect: idem.SideEffectRead,
	}, func(ctx context.Context, call *idem.Call, in exampleShowBusinessIn) (exampleBusiness, error) {
		return exampleBusiness{Slug: in.Slug}, nil
	})

	store, cleanup := exampleStore()
	defer cleanup()
	// Any identity the application already has: here one API token.
	auth := httpapi.NewTokens(map[string]idem.Principal{
		"s3cr3t": {Org: "acme", ID: "onboarding-agent", Kind: idem.KindAgent},
	})
	srv, err := server.New(context.Background(), server.Config{
		Operations: []idem.Operation{create, show}, Store: store, Auth: auth, BasePath: "/idem",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil { // the sweeper, the completion feed
		log.Fatal(err)
	}
	defer srv.Stop(context.Background()) // after the HTTP server stopped

	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello from the app") })
	mux.Handle("/idem/", http.StripPrefix("/idem", srv.Handler()))
	var accessLog []string
	var mu sync.Mutex
	logged := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			accessLog = append(accessLog, r.Method+" "+r.URL.Path)
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	}
	recovered := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					http.Error(w, "internal error", http.StatusInternalServerError)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
	ts := httptest.NewServer(recovered(logged(mux)))
	defer ts.Close()

	get := func(path string) string {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	fmt.Print(get("/hello"))
	for range 2 {
		req, _ := http.NewRequest("POST", ts.URL+"/idem/v1/orgs/acme/businesses", strings.NewReader(`{"name":"Bakery","plan":"pro"}`))
		req.Header.Set("Authorization", "Bearer s3cr3t")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "create-bakery")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Printf("%s Idempotent-Replayed=%q\n", resp.Status, resp.Header.Get("Idempotent-Replayed"))
	}
	var doc struct {
		Servers []struct{ URL string } `json:"servers"`
	}
	if err := json.Unmarshal([]byte(get("/idem/openapi.json")), &doc); err != nil {
		log.Fatal(err)
	}
	fmt.Println("OpenAPI servers:", doc.Servers[0].URL)
	mu.Lock()
	fmt.Println("access log:", strings.Join(accessLog, ", "))
	mu.Unlock()
	// Output:
	// hello from the app
	// 201 Created Idempotent-Replayed=""
	// 201 Created Idempotent-Replayed="true"
	// OpenAPI servers: /idem
	// access log: GET /hello, POST /idem/v1/orgs/acme/businesses, POST /idem/v1/orgs/acme/businesses, GET /idem/openapi.json
}
