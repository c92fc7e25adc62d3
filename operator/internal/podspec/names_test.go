package podspec

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

// TestLongNamesFitLabelsAndNames: object names reach 253 characters; the
// label values and names derived from them stay within Kubernetes' limits,
// stay readable where they fit, and stay distinct.
func TestLongNamesFitLabelsAndNames(t *testing.T) {
	g := NewWithT(t)
	for _, n := range []int{1, 63, 64, 100, 253} {
		name := strings.Repeat("a", n)
		v := LabelValue(name)
		g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), "label of a %d-character name: %q", n, v)
		sa := ServiceAccountName(name)
		g.Expect(validation.IsDNS1123Subdomain(sa)).To(BeEmpty(), "ServiceAccount of a %d-character name: %q", n, sa)
		if n <= 63 {
			g.Expect(v).To(Equal(name))
		}
		if n <= 253-len("picobot-agent-") {
			g.Expect(sa).To(Equal("picobot-agent-" + name))
		}
		a := &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name}}
		for k, v := range SessionLabels(a) {
			g.Expect(validation.IsValidLabelValue(v)).To(BeEmpty(), "session label %s of a %d-character name", k, n)
		}
	}
	long1, long2 := strings.Repeat("b", 100)+"x", strings.Repeat("b", 100)+"y"
	g.Expect(LabelValue(long1)).NotTo(Equal(LabelValue(long2)))
	g.Expect(LabelValue(long1)).To(HavePrefix(strings.Repeat("b", 46) + "-"))
	g.Expect(ServiceAccountName(strings.Repeat("c", 253) + "1")).NotTo(Equal(ServiceAccountName(strings.Repeat("c", 253) + "2")))
}
