package helm

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/quota"
)

// TestQuotaDefaultsReachTheGatewayAndOperator: quotaDefaults' session and
// message caps and budget reach the gateway and the operator (which passes
// them on to session pods) as one PICOBOT_QUOTA_DEFAULTS the runtime reads,
// -1 caps left out; with no default set neither gets the variable, and the
// schema refuses a budget the runtime would.
func TestQuotaDefaultsReachTheGatewayAndOperator(t *testing.T) {
	g := NewWithT(t)
	defaultsOf := func(args ...string) map[string]string {
		objs := objects(t, mustRender(t, "default", args...))
		out := map[string]string{}
		for _, name := range []string{"picobot-gateway", "picobot-operator"} {
			for _, c := range podContainers(t, find(objs, "Deployment", name)) {
				for _, e := range c.env {
					if e["name"] == quota.DefaultsEnv {
						out[name] = e["value"].(string)
					}
				}
			}
		}
		return out
	}
	g.Expect(defaultsOf()).To(BeEmpty(), "every default is -1 or unset")

	got := defaultsOf("--set", "quotaDefaults.maxConcurrentSessions=20", "--set", "quotaDefaults.messagesPerMinute=0",
		"--set", "quotaDefaults.maxSessionPods=50", "--set", "quotaDefaults.budget.dayTokens=2000000",
		"--set-string", "quotaDefaults.budget.monthCost=300.50")
	g.Expect(got).To(HaveLen(2))
	g.Expect(got["picobot-gateway"]).To(Equal(got["picobot-operator"]))
	d, err := quota.ParseDefaults(got["picobot-gateway"])
	g.Expect(err).NotTo(HaveOccurred(), got["picobot-gateway"])
	g.Expect(quota.LimitsOf(quota.WithDefaults(nil, d))).To(Equal(quota.Limits{MaxSessions: 20, MessagesPerMinute: 0}))
	b, err := quota.BudgetOf(quota.WithDefaults(nil, d))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b).To(Equal(quota.Budget{DayTokens: 2000000, MonthCostMicros: 300_500_000, SoftLimitPercent: quota.DefaultSoftLimitPercent}))
	g.Expect(d.MaxWarmPods).To(BeNil(), "-1 is no cap, left out")

	for _, bad := range [][]string{
		{"--set", "quotaDefaults.budget.dayTokens=0"},
		{"--set-string", "quotaDefaults.budget.dayCost=12,50"},
		{"--set", "quotaDefaults.budget.dayTokns=5"},
		{"--set", "quotaDefaults.messagesPerMinute=-2"},
	} {
		_, err := renderChart("default", bad...)
		g.Expect(err).To(MatchError(ContainSubstring("quotaDefaults")), "%v", bad)
	}
}
