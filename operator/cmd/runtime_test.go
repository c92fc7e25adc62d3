package main

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSessionMetricsFlags: --session-metrics-port and --session-metrics-from
// parse into the port and the peers the session pods' NetworkPolicy admits
// (the chart passes networkPolicy.metricsFrom as JSON); a malformed value is
// refused naming the flag, and a misspelt selector is not read as "anyone".
func TestSessionMetricsFlags(t *testing.T) {
	g := NewWithT(t)
	var r runtimeOptions
	fs := newFlagSet()
	r.bindFlags(fs)
	g.Expect(fs.Parse(nil)).To(Succeed())
	port, from, err := r.sessionMetrics()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(port).To(BeZero(), "off by default (the chart turns it on)")
	g.Expect(from).To(BeNil(), "from anyone by default")

	g.Expect(fs.Parse([]string{"--session-metrics-port=9090",
		`--session-metrics-from=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}},{"ipBlock":{"cidr":"10.1.0.0/16"}}]`})).To(Succeed())
	port, from, err = r.sessionMetrics()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(port).To(BeEquivalentTo(9090))
	g.Expect(from).To(Equal([]networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16"}},
	}))

	for _, tc := range []struct {
		port int
		from string
		want string
	}{
		{70000, "", "--session-metrics-port: 70000 is not a port"},
		{-1, "", "--session-metrics-port: -1 is not a port"},
		{9090, `{"namespaceSelector":{}}`, "--session-metrics-from: not a JSON list of NetworkPolicyPeer objects"},
		{9090, `[{"namespaceSelecter":{}}]`, `unknown field "namespaceSelecter"`},
		{9090, `[{}]`, "--session-metrics-from: peer 0 names no podSelector, namespaceSelector or ipBlock"},
	} {
		_, _, err := (&runtimeOptions{metricsPort: tc.port, metricsFrom: tc.from}).sessionMetrics()
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.from)
	}
}

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

// TestQuotaDefaultsEnv: the chart's default quota reaches session pods as it
// is; none set passes nothing, and one the runtime would refuse stops the
// operator at start naming what is wrong.
func TestQuotaDefaultsEnv(t *testing.T) {
	g := NewWithT(t)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "PICOBOT_QUOTA_DEFAULTS" {
				return v
			}
			return ""
		}
	}
	got, err := quotaDefaultsEnv(env(`{"budget":{"dayTokens":1000}}`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]corev1.EnvVar{{Name: "PICOBOT_QUOTA_DEFAULTS", Value: `{"budget":{"dayTokens":1000}}`}}))
	got, err = quotaDefaultsEnv(env(""))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
	_, err = quotaDefaultsEnv(env(`{"budget":{"dayTokns":1000}}`))
	g.Expect(err).To(MatchError(ContainSubstring(`unknown field "dayTokns"`)))
}
