package v1alpha1_test

import (
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

func TestDurationDecodesWhatIsStored(t *testing.T) {
	cases := []struct {
		stored  string
		want    time.Duration
		invalid string
	}{
		{`"1h30m"`, 90 * time.Minute, ""},
		{`"250ms"`, 250 * time.Millisecond, ""},
		{`"forever"`, 0, "forever"},
		{`""`, 0, ""},
		{`5`, 0, "5"},
	}
	for _, tc := range cases {
		t.Run(tc.stored, func(t *testing.T) {
			g := NewWithT(t)
			var spec picobotv1alpha1.BrowserProfileSpec
			g.Expect(json.Unmarshal([]byte(`{"idleTimeout":`+tc.stored+`}`), &spec)).To(Succeed())
			g.Expect(spec.IdleTimeout.Duration).To(Equal(tc.want))
			g.Expect(spec.IdleTimeout.Invalid).To(Equal(tc.invalid))
			g.Expect(spec.IdleTimeout.Valid()).To(Equal(tc.invalid == ""))
		})
	}
}

func TestDurationEncodesAsAString(t *testing.T) {
	g := NewWithT(t)
	b, err := json.Marshal(picobotv1alpha1.BrowserProfileSpec{IdleTimeout: picobotv1alpha1.NewDuration(90 * time.Minute)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal(`{"idleTimeout":"1h30m0s"}`))
	// An invalid stored value is written back as it was, never as "0s".
	b, err = json.Marshal(picobotv1alpha1.BrowserProfileSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "forever"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(Equal(`{"idleTimeout":"forever"}`))
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&picobotv1alpha1.BrowserProfileSpec{IdleTimeout: picobotv1alpha1.NewDuration(time.Minute)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u["idleTimeout"]).To(Equal("1m0s"))
}

func TestInvalidFieldsNameThePath(t *testing.T) {
	g := NewWithT(t)
	a := &picobotv1alpha1.Agent{Spec: picobotv1alpha1.AgentSpec{
		Runtime:    &picobotv1alpha1.RuntimeSpec{IdleTimeout: &picobotv1alpha1.Duration{Invalid: "forever"}},
		MCPServers: []picobotv1alpha1.MCPServer{{Name: "a"}, {Name: "b", Timeout: &picobotv1alpha1.Duration{Invalid: "soon"}}},
	}}
	g.Expect(a.InvalidFields()).To(Equal([]string{`spec.runtime.idleTimeout: "forever" is not a duration`, `spec.mcpServers[1].timeout: "soon" is not a duration`}))
	g.Expect((&picobotv1alpha1.CronJob{}).InvalidFields()).To(BeEmpty())
}
