package agentspec_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/agentspec"
)

func TestRootAgent(t *testing.T) {
	agent := func(name string, role picobotv1alpha1.AgentRole) picobotv1alpha1.Agent {
		a := picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if role != "" {
			a.Spec.Role = &role
		}
		return a
	}
	cases := []struct {
		name    string
		agents  []picobotv1alpha1.Agent
		want    string
		wantErr string
	}{
		{name: "the only agent", agents: []picobotv1alpha1.Agent{agent("assistant", "")}, want: "assistant"},
		{name: "the only agent even when named", agents: []picobotv1alpha1.Agent{agent("assistant", picobotv1alpha1.AgentRoleNamed)}, want: "assistant"},
		{name: "role root wins over the name root",
			agents: []picobotv1alpha1.Agent{agent("root", ""), agent("boss", picobotv1alpha1.AgentRoleRoot), agent("helper", "")}, want: "boss"},
		{name: "the agent named root among several", agents: []picobotv1alpha1.Agent{agent("helper", ""), agent("root", "")}, want: "root"},
		{name: "several roots", agents: []picobotv1alpha1.Agent{agent("b", picobotv1alpha1.AgentRoleRoot), agent("a", picobotv1alpha1.AgentRoleRoot)},
			wantErr: "no root agent: several Agents say spec.role: root (a, b); keep it on one"},
		{name: "several, none root", agents: []picobotv1alpha1.Agent{agent("b", ""), agent("a", "")},
			wantErr: "no root agent among the Agents a, b: set spec.role: root on the one that should run jobs naming no agent"},
		{name: "none", wantErr: "no root agent: there is no Agent"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := agentspec.RootAgent(tc.agents)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(agentspec.ErrNoRootAgent))
				g.Expect(err).To(MatchError(tc.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
