package healthtool_test

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/health/healthtool"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/tool"
)

func TestHealthTool(t *testing.T) {
	g := NewWithT(t)
	svc := health.NewService(health.Source{Kind: health.Feature, Name: "browser", Run: func(context.Context) []health.Check {
		return []health.Check{{Name: "browser executable", Message: "no browser executable at /usr/lib/chromium/chromium", Fix: "apt-get install -y chromium"}}
	}})
	parts, err := healthtool.NewFeature(svc).Build(context.Background(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	reg, err := tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reg.Names()).To(Equal([]string{"health"}))
	tl, _ := reg.Get("health")
	g.Expect(tl.Traits().ReadOnly).To(BeTrue())

	r := reg.Execute(context.Background(), tool.Env{}, llm.ToolCall{Name: "health", Arguments: `{}`})
	g.Expect(r.IsError).To(BeFalse())
	g.Expect(r.Content).To(ContainSubstring("[FAIL] browser: browser executable — no browser executable"))
	g.Expect(r.Content).To(ContainSubstring("fix: apt-get install -y chromium"))

	r = reg.Execute(context.Background(), tool.Env{}, llm.ToolCall{Name: "health", Arguments: `{"json":true}`})
	var rep health.Report
	g.Expect(json.Unmarshal([]byte(r.Content), &rep)).To(Succeed())
	g.Expect(rep.OK).To(BeFalse())

	r = reg.Execute(context.Background(), tool.Env{}, llm.ToolCall{Name: "health", Arguments: `{"json":"yes"}`})
	g.Expect(r.IsError).To(BeTrue())
}
