package server

// Tracing of every HTTP request Handler serves (docs/tracing.md), when the
// Runner traces (Config.Runner.TracerProvider): a server span by
// OpenTelemetry's own instrumentation of net/http (otelhttp), with the
// HTTP semantic conventions' attributes, named by method and route
// template ("POST /v1/orders", "GET /v1/attempts/{key}", "GET" for a path
// no route matched). The call's idem.call span is its child. Off (no
// provider, or the no-op one), Handler is not wrapped at all.

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/felixge/httpsnoop"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	nooptrace "go.opentelemetry.io/otel/trace/noop"

	"github.com/idem-run/idem"
)

// tracing reports whether tp may record a span: it is neither nil nor
// OpenTelemetry's no-op provider, with which otelhttp would cost dozens of
// allocations a request for nothing.
func tracing(tp trace.TracerProvider) bool {
	_, noop := tp.(nooptrace.TracerProvider)
	return tp != nil && !noop
}

// traced serves next, mounted under base (Config.BasePath), under a
// server span of tp for each request, which continues the caller's trace
// (W3C traceparent). Metrics stay
// Prometheus's: otelhttp's own go to a no-op meter.
func traced(next http.Handler, tp trace.TracerProvider, routes *routeTemplates, base string) http.Handler {
	return otelhttp.NewHandler(routed(next, routes, base), "idem",
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()),
	)
}

// redacted stands for a path parameter in url.path (the word OpenTelemetry's
// conventions use for scrubbed URL parts).
const redacted = "REDACTED"

// routed adds to the request's span what otelhttp leaves out or cannot
// know before the mux has routed the request: http.route (the pattern that
// matched, which otelhttp only names the span by), error.type for a 5xx,
// and url.path without its parameters, which are inputs and, on
// /v1/attempts/{key}, a key: never attributes (SPEC §13).
func routed(next http.Handler, routes *routeTemplates, base string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		span := trace.SpanFromContext(r.Context())
		if !span.IsRecording() {
			next.ServeHTTP(w, r)
			return
		}
		status := 0
		w = httpsnoop.Wrap(w, httpsnoop.Hooks{WriteHeader: func(write httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(code int) {
				if status == 0 && code >= 200 {
					status = code
				}
				write(code)
			}
		}})
		next.ServeHTTP(w, r)
		// r is the request otelhttp passed on: the muxes (this server's,
		// the HTTP API's, the console's) set its Pattern, and otelhttp
		// names the span by it once this returns.
		route := ""
		if i := strings.IndexByte(r.Pattern, '/'); i >= 0 {
			route = r.Pattern[i:]
		}
		if t, ok := routes.of(route); ok {
			// Named by its declared template, not by the wildcards the
			// mux needed instead ({_p0} for {order-id}).
			route, r.Pattern = t, t
		}
		if base != "" {
			// Handler is mounted under base (http.StripPrefix): the
			// paths and routes the caller sees have it.
			span.SetAttributes(semconv.URLPath(base + r.URL.Path))
		}
		switch route {
		case "":
		case "/":
			// The catch-all that answers 404: no route matched.
			r.Pattern = ""
		default:
			if base != "" {
				route = base + route
				r.Pattern = route
			}
			span.SetAttributes(semconv.HTTPRoute(route))
			if strings.Contains(route, "{") {
				span.SetAttributes(semconv.URLPath(withoutParams(route)))
			}
		}
		if status >= 500 {
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(status)))
		}
	})
}

// routeTemplates maps the mux patterns of the operations' routes that
// differ from their route templates (idem.MuxPattern renames a parameter
// that is not a Go identifier) back to the templates. Reload replaces it.
type routeTemplates struct {
	m atomic.Pointer[map[string]string]
}

func (t *routeTemplates) set(descs []idem.Descriptor) {
	m := map[string]string{}
	for _, d := range descs {
		if pattern, _ := idem.MuxPattern(d.Path); pattern != d.Path {
			m[pattern] = d.Path
		}
	}
	t.m.Store(&m)
}

func (t *routeTemplates) of(pattern string) (string, bool) {
	m := t.m.Load()
	if m == nil {
		return "", false
	}
	template, ok := (*m)[pattern]
	return template, ok
}

// withoutParams is the path of route with each parameter redacted:
// /v1/orders/{id}/refund → /v1/orders/REDACTED/refund.
func withoutParams(route string) string {
	route = strings.TrimSuffix(route, "{$}")
	segs := strings.Split(route, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			segs[i] = redacted
		}
	}
	return strings.Join(segs, "/")
}
