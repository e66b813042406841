package mcpserver

import (
	"context"
	"encoding/json"

	"github.com/idem-run/idem"
	"github.com/idem-run/idem/pipeline"
)

// principalKey is the context key of the calling principal.
type principalKey struct{}

// WithPrincipal returns ctx carrying the calling principal, which
// RunnerBackend reads. Handler puts the principal of the bearer token
// there for every tool call.
func WithPrincipal(ctx context.Context, p idem.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal WithPrincipal stored in ctx.
func PrincipalFrom(ctx context.Context) (idem.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(idem.Principal)
	return p, ok
}

// connectionKey is the context key of the call's connection.
type connectionKey struct{}

// withConnection returns ctx carrying the context of the call's
// connection (its MCP stream), which RunnerBackend passes on as
// idem.Invocation.Connection.
func withConnection(ctx, conn context.Context) context.Context {
	return context.WithValue(ctx, connectionKey{}, conn)
}

// RunnerBackend runs tools on an in-process Runner, as the principal in
// the call's context, through the same pipeline as the HTTP surface: the
// arguments are placed in path, query and body as HTTP would carry them,
// so a call has the fingerprint of the equivalent HTTP request.
type RunnerBackend struct {
	Runner *pipeline.Runner
}

var _ Backend = RunnerBackend{}

// Descriptors implements Backend.
func (b RunnerBackend) Descriptors(context.Context) ([]Tool, error) {
	descs := b.Runner.Descriptors()
	out := make([]Tool, 0, len(descs))
	for _, d := range descs {
		out = append(out, Tool{
			Name: d.Name, Method: d.Method, Path: d.Path, Summary: d.Summary, SideEffect: d.SideEffect,
			Retry: d.Retry, Surfaces: d.Surfaces, InputSchema: d.InputSchema, Locations: d.Locations(), Upstream: d.MCPTool,
		})
	}
	return out, nil
}

// Call implements Backend. The execution runs under ctx: cancelling it
// cancels the execution, which the runner finalizes once as CANCELLED; the
// end of the call's stream cancels it unless it is keyed and reserved.
func (b RunnerBackend) Call(ctx context.Context, name string, args map[string]json.RawMessage, key string, dryRun bool) (idem.Result, error) {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return idem.Result{}, idem.Errorf(idem.CodeUnauthenticated, "no principal in the call's context; send a token as Authorization: Bearer <token>")
	}
	var locations map[string]string
	if d, ok := b.Runner.Describe(name); ok {
		locations = d.Locations()
	}
	place, err := idem.PlaceArguments(locations, args)
	if err != nil {
		return idem.Result{}, err
	}
	conn, _ := ctx.Value(connectionKey{}).(context.Context)
	inv := idem.Invocation{
		Operation: name, Surface: idem.SurfaceMCP, Principal: p, Key: key, DryRun: dryRun, Connection: conn,
		Intent: idem.Intent{PathParams: place.PathParams, Query: place.Query, Body: place.Body, Header: place.Header},
	}
	return b.Runner.Call(ctx, inv), nil
}

// brokenAnswer is the answer to a call whose answer is not an envelope or
// a problem object.
func brokenAnswer(status int) idem.Result {
	return idem.ErrorResult(idem.Errorf(idem.CodeInternal, "the server answered %d with a body that is not an idem envelope or problem object", status), nil)
}
