// Package client calls an idem server from Go the way the idem CLI does
// (SPEC §10.3, §10.4): it reads the operations catalog, calls operations by
// name with flat arguments (path and query parameters filled in from the
// catalog's x-idem-in annotations), returns typed errors carrying the
// server's code, status, retryability and details, and retries only where
// the operation's retry contract makes a retry safe.
//
//	c, err := client.New("http://127.0.0.1:8080", "demo-agent")
//	res, err := c.Call(ctx, "order.refund",
//		map[string]json.RawMessage{"id": json.RawMessage(`"ord_1"`), "amount": json.RawMessage(`100`)},
//		client.CallOptions{IdempotencyKey: key})
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == idem.CodeIdempotencyResultIndeterminate {
//		// run e.Reconcile() before deciding anything
//	}
//
// Retry rules (Call):
//
//   - same_key_replay with a key: a network error (no answer, including a
//     request timeout), 409 IDEMPOTENCY_KEY_IN_FLIGHT, 503 (STORE_UNAVAILABLE:
//     nothing ran, the key is not consumed) and 429 are retried with the same
//     key and the byte-identical request, with backoff, and with
//     "Prefer: wait=N" so that the server waits for a running original.
//     IDEMPOTENCY_RESULT_INDETERMINATE, IDEMPOTENCY_RESULT_EXPIRED and every
//     other answer stop at once.
//   - fresh_read: retried on network errors, 5xx and 429.
//   - convergent, intrinsic_replay, no_automatic_retry, preview, dry runs, and
//     same_key_replay calls without a key: never retried automatically.
//
// Only these rules send a request again: a keyed call, an approval
// decision and every call whose contract is not fresh_read are held to one
// send each, so that neither net/http's transport nor HTTP/2's re-sends
// one by itself after a kept-alive connection breaks (issue 33 item 1).
//
// Retries are bounded by CallOptions.Retries (default 4, after the first
// request) and CallOptions.RetryTimeout (default 60 s: no retry starts after
// it). When no HTTP answer ever arrived, the error is NETWORK_ERROR with
// Status 0.
//
// CallResult makes the same call and returns the server's answer whatever
// its status, as an idem.Result (for a bridge such as idem mcp, which hands
// answers on as they are). Every request carries the W3C trace context of
// its ctx (traceparent, tracestate), when ctx holds one.
//
// The attempt journal (Journal, FileJournal) holds durable agent task state:
// the key of each task, recorded and fsynced before the first live request,
// so that a re-run of the same task re-sends the same key.
package client
