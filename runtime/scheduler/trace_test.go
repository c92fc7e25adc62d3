package scheduler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/tracing/otlp"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
)

// TestFireIsATrace: each fire is a cron.fire trace of its own (exported
// over OTLP to a real receiver) and the run works under it: a span the
// runner starts from its context is the fire's child.
func TestFireIsATrace(t *testing.T) {
	g := NewWithT(t)
	rcv := tracingtest.Start(t)
	tp, err := otlp.NewProvider(context.Background(), otlp.Config{Endpoint: rcv.HTTPEndpoint, Getenv: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	clk := clocktesting.NewFakeClock(t0)
	st := newSQLite(t)
	runner := &schedulertest.Runner{Now: clk.Now, Result: func(scheduler.RunRequest) (scheduler.RunResult, error) {
		return scheduler.RunResult{Outcome: store.OutcomeOK, Message: "fine"}, nil
	}}
	traced := runnerFunc(func(ctx context.Context, req scheduler.RunRequest) (scheduler.RunResult, error) {
		_, span := tracing.Start(ctx, "the run's turn")
		defer span.End()
		return runner.Run(ctx, req)
	})
	at := t0.Add(90 * time.Second)
	start(t, scheduler.Options{Store: st, Runner: traced, Clock: clk, TracerProvider: tp},
		job("nightly", picobotv1alpha1.Schedule{At: new(at.UnixMilli())}, func(s *picobotv1alpha1.CronJobSpec) {
			s.DeliveryPolicy = picobotv1alpha1.DeliveryNever
		}))
	clk.SetTime(at)
	run := finished(t, st, "nightly", 1)[0]
	// The fire's span ends just after the run is recorded: flush until the
	// receiver has it.
	var fire tracingtest.Span
	g.Eventually(func() error {
		if err := tp.ForceFlush(context.Background()); err != nil {
			return err
		}
		var err error
		fire, err = tracingtest.Find(rcv.Spans(), tracing.SpanCronFire)
		return err
	}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
	g.Expect(fire.ParentID).To(BeEmpty(), "a fire starts its own trace")
	g.Expect(fire.Attrs).To(HaveKeyWithValue("picobot.tenant", tenant))
	g.Expect(fire.Attrs).To(HaveKeyWithValue("picobot.cronjob", "nightly"))
	g.Expect(fire.Attrs).To(HaveKeyWithValue("picobot.run_id", run.RunID))
	g.Expect(fire.Attrs).To(HaveKeyWithValue("picobot.outcome", "ok"))
	g.Expect(fire.Kind).To(Equal(tracepb.Span_SPAN_KIND_INTERNAL))
	g.Expect(tracingtest.Tree(rcv.Trace(fire.TraceID))).To(Equal(tracing.SpanCronFire + "\n  the run's turn\n"))
}

type runnerFunc func(context.Context, scheduler.RunRequest) (scheduler.RunResult, error)

func (f runnerFunc) Run(ctx context.Context, req scheduler.RunRequest) (scheduler.RunResult, error) {
	return f(ctx, req)
}
