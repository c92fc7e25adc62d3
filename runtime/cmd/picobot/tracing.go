package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/picobot/picobot/runtime/tracing/otlp"
)

// tracingFlags are the tracing flags of serve, gateway and session; the
// rest of the configuration is the standard OTEL_* environment
// (docs/tracing.md).
type tracingFlags struct {
	endpoint, protocol *string
}

func bindTracingFlags(fs *flag.FlagSet) tracingFlags {
	return tracingFlags{endpoint: fs.String("otlp-endpoint", "", otlp.EndpointFlagHelp),
		protocol: fs.String("otlp-protocol", "", otlp.ProtocolFlagHelp)}
}

// start returns the process's TracerProvider, nil when tracing is off, and
// what flushes and stops it on exit.
func (f tracingFlags) start(ctx context.Context, service string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	tp, err := otlp.NewProvider(ctx, otlp.Config{Endpoint: *f.endpoint, Protocol: *f.protocol, ServiceName: service})
	if err != nil || tp == nil {
		return nil, func() {}, err
	}
	log.Info("Tracing turns over OTLP")
	return tp, func() {
		// Spans not exported yet get a bounded time to leave.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("Failed to flush the last traces", "err", err)
		}
	}, nil
}
