package proxy

// Tracing of the upstream call (docs/tracing.md): when the attempt has a
// span, the upstream request goes through OpenTelemetry's instrumented
// transport (otelhttp), which makes a client span under the attempt's
// and injects its context (W3C traceparent). The span is named by method
// and the operation's route template, as the HTTP semantic conventions
// ask; its url.full carries neither the path parameters nor the query's
// values, which are inputs (SPEC §13).

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idem-run/idem"
)

// redacted stands for an input in url.full (the word OpenTelemetry's
// conventions use for scrubbed URL parts).
const redacted = "REDACTED"

// upstreamRoute is what the client span says of an upstream request: the
// operation's route template and the URL with its inputs redacted.
type upstreamRoute struct {
	template string
	full     string
}

type routeKey struct{}

// tracedClient is f's client with the instrumented transport, built once.
// Its tracer is the attempt span's provider (otelhttp takes it from the
// request's context), so the proxy needs no provider of its own.
func (f *Forwarder) tracedClient() *http.Client {
	f.tracedOnce.Do(func() {
		c := *f.client()
		c.Transport = otelhttp.NewTransport(scrubbing{c.Transport},
			otelhttp.WithPropagators(propagation.TraceContext{}),
			otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()),
			otelhttp.WithSpanNameFormatter(clientSpanName),
		)
		f.traced = &c
	})
	return f.traced
}

// withRoute gives ctx the client span's view of a call of op to target.
func (f *Forwarder) withRoute(ctx context.Context, op Operation, target *url.URL) context.Context {
	params := map[string]string{}
	for _, name := range idem.PathParamNames(op.Path) {
		params[name] = redacted
	}
	u := *f.Upstream
	u.Path = strings.TrimRight(u.Path, "/") + idem.FillPath(op.Path, params)
	u.RawPath, u.RawQuery, u.Fragment, u.User = "", "", "", nil
	if q := target.Query(); len(q) > 0 {
		names := make([]string, 0, len(q))
		for name := range q {
			names = append(names, name)
		}
		sort.Strings(names)
		for i, name := range names {
			names[i] = url.QueryEscape(name) + "=" + redacted
		}
		u.RawQuery = strings.Join(names, "&")
	}
	return context.WithValue(ctx, routeKey{}, upstreamRoute{template: op.Path, full: u.String()})
}

// clientSpanName is "{method} {url.template}" (the HTTP semantic
// conventions' client span name).
func clientSpanName(_ string, r *http.Request) string {
	if rt, ok := r.Context().Value(routeKey{}).(upstreamRoute); ok {
		return r.Method + " " + rt.template
	}
	return r.Method
}

// scrubbing is the transport under otelhttp's: the client span is in the
// request's context by then, with otelhttp's attributes, which it
// overrides: url.full without the inputs, and url.template.
type scrubbing struct{ next http.RoundTripper }

func (s scrubbing) RoundTrip(r *http.Request) (*http.Response, error) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		if rt, ok := r.Context().Value(routeKey{}).(upstreamRoute); ok {
			span.SetAttributes(semconv.URLFull(rt.full), semconv.URLTemplate(rt.template))
		}
	}
	next := s.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}
