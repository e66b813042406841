package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/idem-run/idem/client"
)

// reference is the Go client's surface as docs/cli.md lists it, compiled.
func reference(ctx context.Context, token, key, id, reason string, h *http.Client, d time.Duration) error {
	c, err := client.New("http://127.0.0.1:8080", token,
		client.WithHTTPClient(h), client.WithUserAgent("my-agent"),
		client.WithBackoff(250*time.Millisecond, 5*time.Second),
		client.WithRequestTimeout(d), client.WithReadRetries(4, time.Minute))
	if err != nil {
		return err
	}

	cat, err := c.Catalog(ctx)              // *Catalog{Raw, Operations, DirectCLIOperations}, cached per client
	op, ok := cat.Operation("order.refund") // Retry (idem.RetryContract), Locations(), Bound(), …

	res, err := c.Call(ctx, "order.refund",
		map[string]json.RawMessage{"id": json.RawMessage(`"ord_1"`), "amount": json.RawMessage(`100`)},
		client.CallOptions{IdempotencyKey: key, DryRun: false, Wait: 0, Retries: 0 /* default 4; <0 none */, RetryTimeout: 0 /* 60 s */})
	// res: Status, Header, Body (exact bytes), Envelope (idem.Envelope), Requests, Replayed(), Decode(&v)

	var e *client.Error
	if errors.As(err, &e) {
		// e.Code, e.Status (0: no HTTP answer), e.Retryable, e.Message, e.Details, e.Problem (raw JSON),
		// e.Header, e.Operation, e.IdempotencyKey, e.Requests, e.Local, e.Refused, e.Err (network cause),
		// e.Reconcile() (details.reconcile), e.ApprovalID()
	}

	c.Approvals(ctx, "pending")
	c.Approval(ctx, id)
	c.Approve(ctx, id, reason)
	c.Reject(ctx, id, reason)
	c.Execution(ctx, id)
	c.Attempt(ctx, key) // *Answer[T]{Data T; *Result}
	_, _, _ = op, ok, res
	return nil
}

var _ = reference
