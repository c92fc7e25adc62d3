package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/metrics"
)

type answer struct{}

func (answer) Complete(context.Context, llm.Request, func(llm.Delta)) (*llm.Response, error) {
	return &llm.Response{Usage: llm.Usage{InputTokens: 10, OutputTokens: 2}}, nil
}

// exemplarTraces returns the trace ids of the exemplars of family name's
// histogram buckets.
func exemplarTraces(fams []*dto.MetricFamily, name string) []string {
	var ids []string
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == metrics.ExemplarTraceID {
						ids = append(ids, l.GetValue())
					}
				}
			}
		}
	}
	return ids
}

// TestExemplarsCarryTraceIDs: a turn and a model call timed under a sampled
// span leave its trace id as the exemplar of their latency buckets, shown
// in the OpenMetrics exposition; an unsampled or untraced turn leaves none.
func TestExemplarsCarryTraceIDs(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	p := m.Model("default", "assistant", "openai/fake", false, answer{})

	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "turn")
	traceID := span.SpanContext().TraceID().String()
	ctx, turn := m.StartTurn(ctx, "default", "assistant")
	_, err = p.Complete(ctx, llm.Request{}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	turn.End(metrics.OutcomeOK)
	span.End()

	fams, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exemplarTraces(fams, "picobot_turn_duration_seconds")).To(ContainElement(traceID))
	g.Expect(exemplarTraces(fams, "picobot_model_call_duration_seconds")).To(ConsistOf(traceID))

	srv := httptest.NewServer(metrics.Handler(reg))
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(hangGuard(t), http.MethodGet, srv.URL, nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Header.Get("Content-Type")).To(HavePrefix("application/openmetrics-text"))
	g.Expect(string(body)).To(ContainSubstring(`# {trace_id="` + traceID + `"}`))

	// Not sampled, and no trace at all: no exemplar.
	reg2 := prometheus.NewRegistry()
	m2, err := metrics.New(reg2, metrics.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	uctx, uspan := never.Tracer("test").Start(context.Background(), "turn")
	_, t2 := m2.StartTurn(uctx, "default", "assistant")
	t2.End(metrics.OutcomeOK)
	uspan.End()
	_, t3 := m2.StartTurn(context.Background(), "default", "assistant")
	t3.End(metrics.OutcomeOK)
	fams, err = reg2.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exemplarTraces(fams, "picobot_turn_duration_seconds")).To(BeEmpty())
}
