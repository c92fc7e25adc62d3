package bot_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/bot"
)

// bot_status is declared to every agent, bot_connector to every agent with
// channels: their schemas stay short, and bot_connector is not built
// without channels.
func TestSchemasStayShort(t *testing.T) {
	g := NewWithT(t)
	f := bot.NewFeature(bot.Config{})
	agent := func(channels ...picobotv1alpha1.Channel) *feature.Agent {
		return &feature.Agent{Host: &feature.Host{Mode: feature.ModeEmbedded, Tenant: "t"},
			Spec: &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: picobotv1alpha1.AgentSpec{Channels: channels}}}
	}
	parts, err := f.Build(t.Context(), agent())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parts.Tools).To(HaveLen(1))
	parts, err = f.Build(t.Context(), agent(picobotv1alpha1.Channel{Type: "web"}))
	g.Expect(err).NotTo(HaveOccurred())
	reg, err := tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reg.Names()).To(Equal([]string{"bot_connector", "bot_status"}))
	for _, d := range reg.Definitions() {
		n := len(d.Name) + len(d.Description) + len(d.Parameters)
		t.Logf("%s: %d bytes", d.Name, n)
		g.Expect(n).To(BeNumerically("<", 700), "%s is sent with every request", d.Name)
	}
}
