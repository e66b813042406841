package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/client"
)

// RemoteBackend forwards tools to a remote `idem serve` (or `idem proxy`)
// over its HTTP API, through the Go client (package client): it reads the
// catalog and calls each operation by name with the bearer token, so a
// call is the HTTP request of the same intent, sent once (the agent
// decides retries). The answer comes back as client.Client.CallResult
// reads it; a body that is not an idem answer comes back as INTERNAL.
// Only operations exposed on both http and mcp can be forwarded.
type RemoteBackend struct {
	client *client.Client
	// err is client.New's error: the server URL it refused.
	err error

	mu  sync.Mutex
	ops map[string]bool
}

var _ Backend = (*RemoteBackend)(nil)

// maxAnswerBytes bounds an answer read from the server.
const maxAnswerBytes = 64 << 20

// NewRemoteBackend returns a backend for the idem server at serverURL
// (e.g. http://127.0.0.1:8080), calling as token. httpClient is
// http.DefaultClient when nil; redirects are never followed.
func NewRemoteBackend(serverURL, token string, httpClient *http.Client) *RemoteBackend {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	c, err := client.New(serverURL, token, client.WithHTTPClient(httpClient), client.WithUserAgent("idem-mcp"),
		client.WithReadRetries(-1, 0), client.WithAnswerLimit(maxAnswerBytes))
	return &RemoteBackend{client: c, err: err}
}

// Descriptors implements Backend: the catalog's operations that are
// exposed on http, read afresh (once, not retried).
func (b *RemoteBackend) Descriptors(ctx context.Context) ([]Tool, error) {
	if b.err != nil {
		return nil, fmt.Errorf("read the catalog: %w", b.err)
	}
	cat, err := b.client.RefreshCatalog(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	ops := map[string]bool{}
	var out []Tool
	for _, o := range cat.Operations {
		if !slices.Contains(o.Surfaces, idem.SurfaceHTTP) {
			continue
		}
		ops[o.Name] = true
		out = append(out, Tool{
			Name: o.Name, Method: o.Method, Path: o.Path, Summary: o.Summary, SideEffect: o.SideEffect,
			Retry: o.Retry, Surfaces: o.Surfaces, InputSchema: o.InputSchema, Locations: o.Locations(),
		})
	}
	b.mu.Lock()
	b.ops = ops
	b.mu.Unlock()
	return out, nil
}

// Call implements Backend: one HTTP request to the operation's route with
// Authorization: Bearer, Idempotency-Key when keyed, dryRun=true for a
// preview and header arguments as headers, never retried. A failure to
// get an answer is NETWORK_ERROR, or CANCELLED once ctx has ended.
func (b *RemoteBackend) Call(ctx context.Context, name string, args map[string]json.RawMessage, key string, dryRun bool) (idem.Result, error) {
	b.mu.Lock()
	ok := b.ops[name]
	b.mu.Unlock()
	if !ok {
		return idem.Result{}, idem.Errorf(idem.CodeOperationNotFound, "no operation named %q on this surface", name)
	}
	res, err := b.client.CallResult(ctx, name, args, client.CallOptions{IdempotencyKey: key, DryRun: dryRun, Retries: -1})
	var e *client.Error
	switch {
	case err == nil:
		return res, nil
	case !errors.As(err, &e):
		return idem.Result{}, err
	case e.Code == idem.CodeNetworkError && ctx.Err() != nil:
		return idem.Result{}, idem.Errorf(idem.CodeCancelled, "the caller cancelled the call")
	case e.Foreign():
		// A broken upstream (a proxy's page, a truncated body).
		return brokenAnswer(e.Status), nil
	}
	// No answer, or a call the client refused before sending it.
	return idem.Result{}, &idem.Error{Code: e.Code, Status: e.Status, Message: e.Message, Retryable: e.Retryable, Details: e.Details}
}
