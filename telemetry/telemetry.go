// Package telemetry builds the OpenTelemetry tracer provider of idem serve
// and idem proxy from the standard OTEL_* environment variables, for
// pipeline.Config.TracerProvider. Tracing is off unless the environment
// asks for it.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES says otherwise.
const DefaultServiceName = "idem"

// FromEnv returns the tracer provider the environment asks for, and its
// shutdown, which flushes the spans not yet exported (call it on the way
// out, with a deadline). The provider is nil, and tracing off, unless:
//
//   - OTEL_TRACES_EXPORTER names exporters: "otlp" (OTLP, over
//     OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL:
//     "http/protobuf", the default, or "grpc"), "console" (the spans as
//     JSON on standard error), several separated by commas; "none" is off;
//   - or, with OTEL_TRACES_EXPORTER unset, OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set: then "otlp".
//
// OTEL_SDK_DISABLED=true turns it off whatever else is set. The SDK reads
// the rest itself: the exporters' OTEL_EXPORTER_OTLP_* (endpoint, headers,
// timeout, compression, certificates), OTEL_TRACES_SAMPLER and its _ARG
// (parentbased_always_on by default), OTEL_BSP_* (batching), and
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name is "idem"
// otherwise, service.version is serviceVersion). The shutdown is never
// nil.
func FromEnv(ctx context.Context, serviceVersion string) (trace.TracerProvider, func(context.Context) error, error) {
	return fromEnv(ctx, serviceVersion, os.Stderr)
}

func nothing(context.Context) error { return nil }

func fromEnv(ctx context.Context, serviceVersion string, console io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	names, err := exporterNames()
	if err != nil || len(names) == 0 {
		return nil, nothing, err
	}
	var opts []sdktrace.TracerProviderOption
	for _, name := range names {
		exp, err := newExporter(ctx, name, console)
		if err != nil {
			return nil, nothing, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", DefaultServiceName)}
	if serviceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", serviceVersion))
	}
	// Later detectors win: the environment's attributes over idem's.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nil, nothing, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	return tp, tp.Shutdown, nil
}

// exporterNames are the exporters the environment asks for; none when
// tracing is off.
func exporterNames() ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	value, set := os.LookupEnv("OTEL_TRACES_EXPORTER")
	if !set || strings.TrimSpace(value) == "" {
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			return []string{"otlp"}, nil
		}
		return nil, nil
	}
	var names []string
	for _, name := range strings.Split(value, ",") {
		switch name = strings.ToLower(strings.TrimSpace(name)); name {
		case "none":
			return nil, nil
		case "otlp", "console":
			names = append(names, name)
		default:
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: idem exports traces with otlp or console (or none); set one of those, or unset it", value)
		}
	}
	return names, nil
}

func newExporter(ctx context.Context, name string, console io.Writer) (sdktrace.SpanExporter, error) {
	if name == "console" {
		return stdouttrace.New(stdouttrace.WithWriter(console))
	}
	variable, protocol := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		variable, protocol = "OTEL_EXPORTER_OTLP_PROTOCOL", os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch strings.TrimSpace(protocol) {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%q: idem sends OTLP as http/protobuf (the default) or grpc; set one of those", variable, protocol)
	}
	if err != nil {
		return nil, errors.Join(errors.New("the OTLP trace exporter (OTEL_EXPORTER_OTLP_*)"), err)
	}
	return exp, nil
}
