package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/operator/internal/scheduler"
	rtscheduler "github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/scheduler/agentjobs"
	"github.com/picobot/picobot/runtime/scheduler/schedulertest"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/tracing"
	"github.com/picobot/picobot/runtime/tracing/otlp"
	"github.com/picobot/picobot/runtime/tracing/tracingtest"
)

// TestFireLinksToTheTurnThatMadeTheCronJob: a CronJob an agent's tool call
// makes (agentjobs, as the cron tools do in a session pod) carries that
// call's trace context in an annotation, and the operator's fire of it, a
// trace of its own exported to a real OTLP receiver, links to the call.
func TestFireLinksToTheTurnThatMadeTheCronJob(t *testing.T) {
	need(t)
	g := NewWithT(t)
	rcv := tracingtest.Start(t)
	tp, err := otlp.NewProvider(context.Background(), otlp.Config{Endpoint: rcv.HTTPEndpoint, Getenv: func(string) string { return "" }})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ns := newNamespace(t)
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	clk := clocktesting.NewFakeClock(now)

	// The turn's tool call makes the job.
	callCtx, call := tp.Tracer("test").Start(context.Background(), tracing.SpanTool)
	spec := picobotv1alpha1.CronJobSpec{Schedule: picobotv1alpha1.Schedule{Cron: "0 * * * * *"},
		AgentRef: &corev1.LocalObjectReference{Name: "ops"}, Prompt: "Check the disk", DeliveryPolicy: picobotv1alpha1.DeliveryNever}
	cj, err := agentjobs.New(k8s, ns, "ops", clk.Now).Create(callCtx, "disk", "Disk", spec)
	g.Expect(err).NotTo(HaveOccurred())
	call.End()
	g.Expect(cj.Annotations).To(HaveKeyWithValue(rtscheduler.AnnotationOrigin, tracing.Traceparent(callCtx)))
	g.Expect(scheduler.JobFrom(cj).Origin).To(Equal(tracing.Traceparent(callCtx)))

	st := schedulertest.Open(t, pg.NewDatabase(t))
	runner := &schedulertest.Runner{Now: clk.Now, Result: func(rtscheduler.RunRequest) (rtscheduler.RunResult, error) {
		return rtscheduler.RunResult{Outcome: store.OutcomeOK, Message: "fine"}, nil
	}}
	_, r := operator(t, ns, "", scheduler.Config{Store: st, Runner: runner, Clock: clk, Tuning: rtscheduler.Options{TracerProvider: tp}}, nil)
	g.Eventually(func() int { return scheduled(r) }).WithTimeout(eventually).WithPolling(poll).Should(BeNumerically(">=", 1))
	clk.SetTime(now.Add(30 * time.Second))

	var fire tracingtest.Span
	g.Eventually(func() error {
		if err := tp.ForceFlush(context.Background()); err != nil {
			return err
		}
		for _, s := range rcv.Spans() {
			if s.Name == tracing.SpanCronFire && s.Attrs["picobot.cronjob"] == "disk" {
				fire = s
				return nil
			}
		}
		return errors.New("no fire of disk yet")
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	sc := call.SpanContext()
	g.Expect(fire.ParentID).To(BeEmpty(), "a fire is a trace of its own")
	g.Expect(fire.Links).To(Equal([]string{sc.TraceID().String() + "/" + sc.SpanID().String()}), "linked to the tool call that made the job")
}
