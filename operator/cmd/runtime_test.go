package main

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
)

// TestTracingEnv: session pods get the operator's OTEL_* settings, sorted
// (a stable pod spec), without its service name and without anything else
// of its environment.
func TestTracingEnv(t *testing.T) {
	g := NewWithT(t)
	got := tracingEnv([]string{"PATH=/bin", "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_SERVICE_NAME=picobot-operator",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector.monitoring:4318", "PICOBOT_REDIS_URL=redis://x", "OTEL_TRACES_SAMPLER_ARG=0.25"})
	g.Expect(got).To(Equal([]corev1.EnvVar{
		{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector.monitoring:4318"},
		{Name: "OTEL_TRACES_SAMPLER", Value: "parentbased_traceidratio"},
		{Name: "OTEL_TRACES_SAMPLER_ARG", Value: "0.25"},
	}))
	g.Expect(tracingEnv([]string{"HOME=/root"})).To(BeEmpty(), "no OTEL_* setting: session pods trace nothing")
}
