package embedded_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool/todo"
)

// TestDelegatePlanItems: with an active todo plan in the session,
// plan_item_id binds a run to one of its items — the item is done when
// its foreground run succeeded, and back to pending with a note when it
// failed — and an id that is not an item of the plan is an error naming
// the plan's items, before any run starts. Without a plan the id is only
// recorded.
func TestDelegatePlanItems(t *testing.T) {
	g := NewWithT(t)
	e := startDelegates(t, func(agent, user string, _ fakellm.Recorded) fakellm.Turn {
		switch {
		case agent == "researcher" && strings.Contains(user, "fail"):
			return fakellm.Turn{Text: "x", Status: 400}
		case agent == "researcher":
			return fakellm.Turn{Text: "found"}
		case strings.Contains(user, "PLAN"):
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "p1", Name: "todo", Args: `{"action":"create","title":"Trip","items":["find flights","find hotels"]}`}}}
		case strings.Contains(user, "FIRST"):
			return call(`{"target":"researcher","task":"find flights","plan_item_id":"1"}`)
		case strings.Contains(user, "SECOND"):
			return call(`{"target":"researcher","task":"please fail","plan_item_id":"2"}`)
		default:
			return call(`{"target":"researcher","task":"t","plan_item_id":"9"}`)
		}
	})
	out, err := e.send("plan", "no plan yet: BAD")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(ContainSubstring(`"status": "succeeded"`), "without a plan the id is recorded only")

	_, err = e.send("plan", "PLAN it")
	g.Expect(err).NotTo(HaveOccurred())
	plans := todo.Persistent(e.st)
	item := func(id int) todo.Item {
		p, ok, err := plans.Get(tenantCtx, out.SessionID)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue())
		return p.Items[id-1]
	}
	g.Expect(item(1).Status).To(Equal(todo.ItemPending))

	out, err = e.send("plan", "FIRST")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(ContainSubstring(`"status": "succeeded"`))
	g.Expect(item(1)).To(And(HaveField("Status", todo.ItemDone), HaveField("Note", HavePrefix("run "))))

	out, err = e.send("plan", "SECOND")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(ContainSubstring(`"status": "failed"`))
	g.Expect(item(2)).To(And(HaveField("Status", todo.ItemPending), HaveField("Note", HaveSuffix(" failed"))))

	runs := len(e.requestsOf("researcher"))
	out, err = e.send("plan", "BAD")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Text).To(ContainSubstring(`plan_item_id "9" is not an item of the active plan "Trip", which has items 1, 2`))
	g.Expect(e.requestsOf("researcher")).To(HaveLen(runs), "no run started")
}
