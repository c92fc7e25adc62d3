package deadletter

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/sessionrt"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/services"
)

// TestGaugeCountsEachTenantsDeadLetters reads the dead-letter streams of a
// real Redis for the namespaces a real API server has Agents in.
func TestGaugeCountsEachTenantsDeadLetters(t *testing.T) {
	g := NewWithT(t)
	env, kube, skip, err := controlplane.Connect()
	g.Expect(err).NotTo(HaveOccurred())
	if skip != "" {
		t.Skip(skip)
	}
	defer func() { _ = env.Stop() }()
	url := services.RedisFor(t)
	b, err := redisbus.Open(url, redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = b.Close() }()
	ctx := context.Background()

	for _, ns := range []string{"team-a", "team-b"} {
		g.Expect(kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		g.Expect(kube.Create(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: ns}})).To(Succeed())
	}
	for i, ns := range []string{"team-a", "team-a", "team-a", "team-b", "team-c"} {
		g.Expect(b.Publish(ctx, sessionrt.DeadLetterStream(ns), bus.Message{ID: ns + string(rune('0'+i)), Payload: []byte("{}")})).To(Succeed())
	}
	reg := prometheus.NewRegistry()
	gauge, err := New(kube, b, reg)
	g.Expect(err).NotTo(HaveOccurred())
	gauge.Update(ctx)
	g.Expect(testutil.ToFloat64(gauge.gauge.WithLabelValues("team-a"))).To(Equal(3.0))
	g.Expect(testutil.ToFloat64(gauge.gauge.WithLabelValues("team-b"))).To(Equal(1.0))
	g.Expect(testutil.CollectAndCount(reg, "picobot_dead_letter_messages")).To(Equal(2), "team-c has no Agent")

	g.Expect(kube.Delete(ctx, &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "helper", Namespace: "team-b"}})).To(Succeed())
	gauge.Update(ctx)
	g.Expect(testutil.CollectAndCount(reg, "picobot_dead_letter_messages")).To(Equal(1), "team-b's series goes with its last Agent")
}
