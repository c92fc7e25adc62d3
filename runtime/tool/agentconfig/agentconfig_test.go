package agentconfig_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/agentconfig"
	"github.com/picobot/picobot/runtime/tool/delegate"
)

// TestRefusedOutsideTheRootAgentsChats: a sub-agent run (by depth or by
// its session's channel) and a scheduled run get a tool error naming why,
// before the configuration is touched (the Source is nil: any use of it
// would panic).
func TestRefusedOutsideTheRootAgentsChats(t *testing.T) {
	reg, err := tool.NewRegistry(agentconfig.New(agentconfig.Config{})...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	cases := []struct {
		name, session string
		depth         int
		want          string
	}{
		{"sub-agent by depth", "web:c1:default", 1, "a sub-agent run may not use it"},
		{"sub-agent session", "delegate:run-1:default", 0, "a sub-agent run may not use it"},
		{"scheduled run", "cron:job-1:default", 0, "a scheduled run may not use it"},
	}
	for _, tc := range cases {
		for _, call := range []llm.ToolCall{{ID: "1", Name: agentconfig.ReloadName, Arguments: `{}`},
			{ID: "2", Name: agentconfig.GatewayName, Arguments: `{"action":"config.patch","patch":{"instructions":"x"}}`}} {
			t.Run(tc.name+"/"+call.Name, func(t *testing.T) {
				g := NewWithT(t)
				res := reg.Execute(delegate.WithDepth(context.Background(), tc.depth), tool.Env{SessionID: tc.session}, call)
				g.Expect(res.IsError).To(BeTrue())
				g.Expect(res.Content).To(ContainSubstring(tc.want))
			})
		}
	}
}

// TestGatewayArguments: bad arguments are tool errors saying what to send.
func TestGatewayArguments(t *testing.T) {
	reg, err := tool.NewRegistry(agentconfig.New(agentconfig.Config{})...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for args, want := range map[string]string{
		`{"action":"config.patch"}`:                  "config.patch needs patch",
		`{"action":"config.apply"}`:                  "config.apply needs spec",
		`{"action":"restart"}`:                       "restart is disabled",
		`{"action":"update.run"}`:                    "action",
		`{"action":"restart","delayMs":-1}`:          "delayMs",
		`{"action":"config.schema","path":"nope.x"}`: `no field "nope"`,
	} {
		res := reg.Execute(context.Background(), tool.Env{SessionID: "web:c1:default"}, llm.ToolCall{ID: "1", Name: agentconfig.GatewayName, Arguments: args})
		NewWithT(t).Expect(res.IsError).To(BeTrue(), args)
		NewWithT(t).Expect(res.Content).To(ContainSubstring(want), args)
	}
}

// TestSchemaIsCompact: config.schema without a path lists spec's fields in
// a few kilobytes; a path gives the field's schema from the CRD.
func TestSchemaIsCompact(t *testing.T) {
	g := NewWithT(t)
	top, err := agentconfig.SchemaOf("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(top)).To(BeNumerically("<", 6000))
	g.Expect(top).To(And(ContainSubstring(`"instructions"`), ContainSubstring(`"model"`)))
	exec, err := agentconfig.SchemaOf("spec.tools.exec")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exec).To(ContainSubstring(`"security"`))
}
