// Package otlp builds the OpenTelemetry SDK's TracerProvider of a PicoBot
// process, exporting spans over OTLP (gRPC or HTTP/protobuf) in batches.
//
// Tracing is off unless asked for. It is on when the process is given an
// OTLP endpoint (the --otlp-endpoint flag, OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp, and off
// again with OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true. Everything
// else is the standard OTEL_* environment the SDK and the exporters read
// themselves: OTEL_EXPORTER_OTLP_{,TRACES_}{HEADERS,TIMEOUT,COMPRESSION,
// CERTIFICATE,INSECURE}, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*,
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (docs/tracing.md).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/picobot/picobot/runtime/buildinfo"
)

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL that PicoBot exports with.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultProtocol is the protocol when none is given, the OpenTelemetry
// specification's default.
const DefaultProtocol = ProtocolHTTP

// Environment variables read here (the exporters and the SDK read the rest).
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvExporter       = "OTEL_TRACES_EXPORTER"
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// EnvPrefix starts the name of every OpenTelemetry SDK variable: the
// operator passes those it has on to session pods.
const EnvPrefix = "OTEL_"

// Flag help of the commands' tracing flags.
const (
	EndpointFlagHelp = "OTLP endpoint to export traces to, as a URL: http://collector:4318 (HTTP) or http://collector:4317 (gRPC); https for TLS. Turns tracing on (default $OTEL_EXPORTER_OTLP_ENDPOINT; empty: off, see docs/tracing.md)."
	ProtocolFlagHelp = "OTLP protocol: grpc or http/protobuf (default $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)."
)

// Config chooses the exporter; the zero value reads the environment alone.
type Config struct {
	// Endpoint is the collector's base URL (as OTEL_EXPORTER_OTLP_ENDPOINT:
	// the HTTP exporter adds /v1/traces when it has no path); it wins over
	// the environment. Setting it turns tracing on.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP; it wins over the environment.
	Protocol string
	// ServiceName is service.name when OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES do not say it.
	ServiceName string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
}

func (c Config) getenv(k string) string {
	if c.Getenv == nil {
		return os.Getenv(k)
	}
	return c.Getenv(k)
}

// Enabled reports whether the configuration asks for traces, and an error
// for a setting PicoBot cannot honour.
func (c Config) Enabled() (bool, error) {
	if strings.EqualFold(c.getenv(EnvSDKDisabled), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(c.getenv(EnvExporter)); exp {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
	default:
		return false, fmt.Errorf("failed to configure tracing: %s=%q is not supported (want otlp or none)", EnvExporter, exp)
	}
	return c.Endpoint != "" || c.getenv(EnvEndpoint) != "" || c.getenv(EnvTracesEndpoint) != "", nil
}

// protocol is the protocol to export with.
func (c Config) protocol() (string, error) {
	p := c.Protocol
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		if p == "" {
			p = c.getenv(k)
		}
	}
	switch p = strings.TrimSpace(p); p {
	case "":
		return DefaultProtocol, nil
	case ProtocolGRPC, ProtocolHTTP:
		return p, nil
	}
	return "", fmt.Errorf("failed to configure tracing: OTLP protocol %q is not supported (want %s or %s)", p, ProtocolGRPC, ProtocolHTTP)
}

// NewProvider returns the process's TracerProvider exporting over OTLP, or
// nil (tracing off) when cfg does not ask for traces. Shut it down on exit:
// that flushes the spans not exported yet.
func NewProvider(ctx context.Context, cfg Config) (*sdktrace.TracerProvider, error) {
	on, err := cfg.Enabled()
	if err != nil || !on {
		return nil, err
	}
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, err
	}
	name := cfg.ServiceName
	if name == "" {
		name = "picobot"
	}
	// Later sources win: the environment names the service over the default.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", name),
		attribute.String("service.version", buildinfo.Read().Version)), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && res == nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("failed to build the trace resource: %w", err)
	}
	// The sampler is the environment's (OTEL_TRACES_SAMPLER), by default
	// parent-based always-on: every turn is traced unless told otherwise.
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

func newExporter(ctx context.Context, cfg Config) (*otlptrace.Exporter, error) {
	proto, err := cfg.protocol()
	if err != nil {
		return nil, err
	}
	var u *url.URL
	if cfg.Endpoint != "" {
		if u, err = url.Parse(cfg.Endpoint); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("failed to configure tracing: OTLP endpoint %q is not an http or https URL with a host", cfg.Endpoint)
		}
	}
	var exp *otlptrace.Exporter
	switch proto {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if u != nil {
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("failed to create the OTLP %s trace exporter", proto), err)
	}
	return exp, nil
}
