package telemetry

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// clearEnv unsets, for the test, every variable FromEnv or the SDK reads.
func clearEnv(t *testing.T) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(v, "")
	}
}

// received is what a collector got: the export requests, decoded.
type received struct {
	mu       sync.Mutex
	requests []*coltracepb.ExportTraceServiceRequest
}

func (r *received) add(t *testing.T, body []byte) {
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		t.Errorf("the export is not an OTLP ExportTraceServiceRequest: %v", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, &req)
}

// spans returns "service.name/span name" of every span received.
func (r *received) spans() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, req := range r.requests {
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, service+"/"+s.Name)
				}
			}
		}
	}
	return out
}

// otlpHTTP is a collector that takes OTLP/HTTP protobuf at /v1/traces.
func otlpHTTP(t *testing.T) (*httptest.Server, *received) {
	got := &received{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || len(body) == 0 {
			t.Errorf("the collector got %s %s (%s, %d bytes)", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(body))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got.add(t, body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// exportOne makes a span through FromEnv's provider and shuts it down.
func exportOne(t *testing.T) {
	t.Helper()
	tp, shutdown, err := FromEnv(t.Context(), "1.2.3")
	if err != nil || tp == nil {
		t.Fatalf("FromEnv = %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(t.Context(), "one")
	span.End()
	if err := shutdown(t.Context()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestFromEnvOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"nothing set", nil},
		{"a service name alone", map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}},
		{"the SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tp, shutdown, err := FromEnv(t.Context(), "1")
			if tp != nil || err != nil || shutdown == nil {
				t.Fatalf("FromEnv = %v, %v, shutdown nil: %v", tp, err, shutdown == nil)
			}
			if err := shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFromEnvRefusesWhatItCannotDo(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	} {
		clearEnv(t)
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		tp, shutdown, err := FromEnv(t.Context(), "1")
		if err == nil || !strings.Contains(err.Error(), tc.want) || tp != nil || shutdown == nil {
			t.Errorf("%v: FromEnv = %v, %v; want an error naming %s", tc.env, tp, err, tc.want)
		}
	}
}

func TestFromEnvOTLPHTTP(t *testing.T) {
	clearEnv(t)
	srv, got := otlpHTTP(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "idem-test")
	exportOne(t)
	if spans := got.spans(); len(spans) != 1 || spans[0] != "idem-test/one" {
		t.Fatalf("the collector got spans %v, want [idem-test/one]", spans)
	}
}

// TestFromEnvEndpointAlone: an OTLP endpoint with no exporter named turns
// OTLP on, and service.name defaults to idem.
func TestFromEnvEndpointAlone(t *testing.T) {
	clearEnv(t)
	srv, got := otlpHTTP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", srv.URL+"/v1/traces")
	exportOne(t)
	if spans := got.spans(); len(spans) != 1 || spans[0] != "idem/one" {
		t.Fatalf("the collector got spans %v, want [idem/one]", spans)
	}
}

// collector is an OTLP/gRPC trace service.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	t   *testing.T
	got *received
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	c.got.add(c.t, body)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func TestFromEnvOTLPGRPC(t *testing.T) {
	clearEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := &received{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, &collector{t: t, got: got})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,deployment.environment=test")
	exportOne(t)
	if spans := got.spans(); len(spans) != 1 || spans[0] != "from-attributes/one" {
		t.Fatalf("the collector got spans %v, want [from-attributes/one]", spans)
	}
}

func TestFromEnvConsole(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	var out bytes.Buffer
	tp, shutdown, err := fromEnv(t.Context(), "1", &out)
	if err != nil || tp == nil {
		t.Fatalf("fromEnv = %v, %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(t.Context(), "printed")
	span.End()
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"Name":"printed"`) {
		t.Fatalf("the console got %q", out.String())
	}
}
