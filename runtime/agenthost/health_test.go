package agenthost_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/modelcheck"
)

// A built agent reports its model (probed with its key, or "no model
// configured") and its features' checks, and /health answers with the
// host's health service — what a session pod's /health shows.
func TestHealthOfABuiltAgent(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(t)
	f.llm.SetAPIKey("sk-pod")
	svc := health.NewService(health.Source{Kind: health.Optional, Name: "programs", Run: func(context.Context) []health.Check {
		return []health.Check{{Name: "git", OK: true, Message: "/usr/bin/git"}}
	}})
	h := f.host(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "llm"}, Data: map[string][]byte{"apiKey": []byte("sk-pod")}})
	h.Health = svc
	checks := []health.Check{{Name: "browser executable", OK: true, Message: "/usr/bin/chromium"}}
	h.Features = []agenthost.Feature{&fake{name: "browser", events: &events{}, checks: checks}}
	b := build(t, h, agentWith("helper", picobotv1alpha1.AgentSpec{
		Model: &picobotv1alpha1.ModelSpec{ModelRef: picobotv1alpha1.ModelRef{Provider: "openai", Model: "m", BaseURL: f.llm.URL(),
			APIKeySecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "llm"}, Key: "apiKey"}}}}))
	probe := modelcheck.NewProber()
	g.Expect(b.ModelCheck(ctx, probe)).To(Equal(health.Check{Name: "agent helper", OK: true, Message: "openai/m at " + f.llm.URL() + " answers"}))
	g.Expect(b.FeatureChecks(ctx)).To(Equal(checks))

	reply, err := say(b, "alice", "/health")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reply.Failed).To(BeFalse())
	g.Expect(reply.Text).To(Equal(svc.Report(ctx).Text()))
	g.Expect(reply.Text).To(ContainSubstring("[ok  ] programs: git"))
	g.Expect(f.llm.Requests()).To(BeEmpty(), "/health never reaches the model")

	bare := build(t, h, agentWith("bare", picobotv1alpha1.AgentSpec{}))
	c := bare.ModelCheck(ctx, probe)
	g.Expect(c.OK).To(BeFalse())
	g.Expect(c.Message).To(HavePrefix("no model configured: spec.model is not set"))
	g.Expect(f.llm.ModelListings()).To(Equal(1), "only the configured model was probed")
}
