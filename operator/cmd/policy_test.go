package main

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestPolicyFlags: the runtime policy's flags parse into the policy, and
// malformed ones are refused with a message naming the flag.
func TestPolicyFlags(t *testing.T) {
	g := NewWithT(t)
	p := policyOptions{allowedImages: "a.example/x:1, b.example/*", allowedRuntimeClasses: "gvisor",
		defaultRequests: "cpu=100m,memory=256Mi", maxRes: "cpu=2", maxWarmPerAgent: 5, maxSessionsPerAgent: -1,
		maxWarmPerNamespace: 0, maxSessionsPerNS: 500}
	pol, err := p.policy()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pol.AllowedImages).To(Equal([]string{"a.example/x:1", "b.example/*"}))
	g.Expect(pol.AllowedRuntimeClasses).To(Equal([]string{"gvisor"}))
	g.Expect(pol.DefaultResources.Requests.Memory().Cmp(resource.MustParse("256Mi"))).To(Equal(0))
	g.Expect(pol.DefaultResources.Limits).To(BeNil())
	g.Expect(pol.MaxResources.Cpu().Cmp(resource.MustParse("2"))).To(Equal(0))
	g.Expect(*pol.MaxWarmPodsPerAgent).To(BeEquivalentTo(5))
	g.Expect(pol.MaxSessionsPerAgent).To(BeNil(), "negative: no maximum")
	g.Expect(*pol.MaxWarmPodsPerNamespace).To(BeEquivalentTo(0), "zero: no warm pods")
	g.Expect(*pol.MaxSessionsPerNamespace).To(BeEquivalentTo(500))

	for flagValue, want := range map[string]string{
		"cpu":          `failed to parse --max-resources "cpu": "cpu" is not name=quantity`,
		"cpu=lots":     `failed to parse --max-resources "cpu=lots": cpu: quantities must match the regular expression`,
		"=1,memory=1G": `failed to parse --max-resources "=1,memory=1G": "=1" is not name=quantity`,
	} {
		_, err := (&policyOptions{maxRes: flagValue}).policy()
		g.Expect(err).To(MatchError(ContainSubstring(want)), flagValue)
	}
}
