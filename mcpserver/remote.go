package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/propagation"

	"github.com/idem-run/idem"
)

// RemoteBackend forwards tools to a remote `idem serve` over its HTTP API:
// it reads the catalog (GET /v1/operations) and calls each operation's
// route with the bearer token, so a call is the HTTP request of the same
// intent. The HTTP status, headers and body come back as they are, read by
// idem.ParseResult; a body that is not an idem answer comes back as
// INTERNAL. Only operations
// exposed on both http and mcp can be forwarded.
type RemoteBackend struct {
	server string
	token  string
	client *http.Client

	mu  sync.Mutex
	ops map[string]Tool
}

var _ Backend = (*RemoteBackend)(nil)

// maxAnswerBytes bounds an answer read from the server.
const maxAnswerBytes = 64 << 20

// NewRemoteBackend returns a backend for the idem server at serverURL
// (e.g. http://127.0.0.1:8080), calling as token. client is
// http.DefaultClient when nil.
func NewRemoteBackend(serverURL, token string, client *http.Client) *RemoteBackend {
	if client == nil {
		client = http.DefaultClient
	}
	return &RemoteBackend{server: strings.TrimRight(serverURL, "/"), token: token, client: client}
}

// Descriptors implements Backend: the catalog's operations that are
// exposed on http.
func (b *RemoteBackend) Descriptors(ctx context.Context) ([]Tool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.server+"/v1/operations", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", idem.ContentTypeJSON)
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the catalog: GET %s/v1/operations answered %d", b.server, resp.StatusCode)
	}
	var catalog struct {
		Operations []struct {
			Name        string             `json:"name"`
			Method      string             `json:"method"`
			Path        string             `json:"path"`
			Summary     string             `json:"summary"`
			SideEffect  idem.SideEffect    `json:"sideEffect"`
			Retry       idem.RetryContract `json:"retry"`
			Surfaces    []idem.Surface     `json:"surfaces"`
			InputSchema json.RawMessage    `json:"inputSchema"`
		} `json:"operations"`
	}
	if err := json.Unmarshal(body, &catalog); err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	ops := map[string]Tool{}
	var out []Tool
	for _, o := range catalog.Operations {
		if !slices.Contains(o.Surfaces, idem.SurfaceHTTP) {
			continue
		}
		t := Tool{
			Name: o.Name, Method: o.Method, Path: o.Path, Summary: o.Summary, SideEffect: o.SideEffect,
			Retry: o.Retry, Surfaces: o.Surfaces, InputSchema: o.InputSchema, Locations: idem.LocationsFromSchema(o.InputSchema),
		}
		ops[t.Name] = t
		out = append(out, t)
	}
	b.mu.Lock()
	b.ops = ops
	b.mu.Unlock()
	return out, nil
}

// Call implements Backend: one HTTP request to the operation's route with
// Authorization: Bearer, Idempotency-Key when keyed and dryRun=true for a
// preview. A failure to get an answer is NETWORK_ERROR.
func (b *RemoteBackend) Call(ctx context.Context, name string, args map[string]json.RawMessage, key string, dryRun bool) (idem.Result, error) {
	b.mu.Lock()
	t, ok := b.ops[name]
	b.mu.Unlock()
	if !ok {
		return idem.Result{}, idem.Errorf(idem.CodeOperationNotFound, "no operation named %q on this surface", name)
	}
	place, err := idem.PlaceArguments(t.Locations, args)
	if err != nil {
		return idem.Result{}, err
	}
	if dryRun {
		place.Query.Set(idem.DryRunParam, "true")
	}
	u := b.server + idem.FillPath(t.Path, place.PathParams)
	if len(place.Query) > 0 {
		u += "?" + place.Query.Encode()
	}
	var body io.Reader
	if place.Body != nil {
		body = bytes.NewReader(place.Body)
	}
	req, err := http.NewRequestWithContext(ctx, t.Method, u, body)
	if err != nil {
		return idem.Result{}, idem.Errorf(idem.CodeInvalidInput, "build the request: %v", err)
	}
	req.Header.Set("Accept", idem.ContentTypeJSON+", "+idem.ContentTypeProblem)
	if place.Body != nil {
		req.Header.Set("Content-Type", idem.ContentTypeJSON)
	}
	for name, vs := range place.Header {
		req.Header[name] = vs
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	if key != "" {
		req.Header.Set(idem.HeaderIdempotencyKey, key)
	}
	// The agent's trace context (from _meta) travels on to idem serve.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := b.client.Do(req)
	if err != nil {
		return idem.Result{}, networkError(ctx, t, u, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return idem.Result{}, networkError(ctx, t, u, err)
	}
	res, err := idem.ParseResult(resp.StatusCode, resp.Header, answer)
	if resp.Header.Get(idem.HeaderExecutionID) != "" && (err != nil || res.Problem == nil || !strings.HasPrefix(res.Problem.Type, idem.ProblemTypeBase)) {
		// A proxied operation's own answer (idem proxy): the upstream's
		// body, with the idempotency facts in headers. The proxy's own
		// problems carry the header too, and a type that names idem.
		meta := &idem.Meta{Operation: name}
		if key != "" {
			meta.Idempotency = &idem.IdempotencyMeta{Key: key}
		}
		return idem.RawResultOf(resp.StatusCode, resp.Header, answer, meta), nil
	}
	if err != nil {
		// A broken upstream (a proxy's page, a truncated body).
		return brokenAnswer(resp.StatusCode), nil
	}
	return res, nil
}

func networkError(ctx context.Context, t Tool, u string, err error) error {
	if ctx.Err() != nil {
		return idem.Errorf(idem.CodeCancelled, "the caller cancelled the call")
	}
	redacted := u
	if parsed, perr := url.Parse(u); perr == nil {
		redacted = parsed.Redacted()
	}
	e := idem.Errorf(idem.CodeNetworkError, "%s %s: no answer from the server: %v", t.Method, redacted, err)
	if t.Retry.Reconcile != "" {
		e = e.WithDetail("reconcile", t.Retry.Reconcile)
	}
	return e
}
