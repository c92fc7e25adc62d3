package embedded_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/store"
)

// TestRunCards: a chat's client reads the card of a background run its
// turn started — target, task, status, the run's tool steps as they are
// stored, then its result — and cancels one that runs; another chat,
// another agent's chat and another tenant get not_found for the same run
// id, and an ended run cannot be cancelled.
func TestRunCards(t *testing.T) {
	g := NewWithT(t)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e := startBackground(t, func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher" && last.Role == "tool":
			<-release
			return fakellm.Turn{Text: "42 it is"}
		case agent == "researcher":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "calculator", Args: `{"function":"add","a":40,"b":2}`}}}
		case strings.HasPrefix(last.Content, "[Background run "):
			return fakellm.Turn{Text: "continued"}
		case last.Role == "tool":
			return fakellm.Turn{Text: "started"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d1", `{"target":"researcher","task":"`+last.Content+`","mode":"background"}`)}}
		}
	})
	card := func(c gatewaytest.Client, method, id, agent, chat string) (int, gatewaytest.Frame) {
		path := "/api/v1/runs/" + id + "?agent=" + agent + "&chat_id=" + chat
		if method == http.MethodPost {
			path = "/api/v1/runs/" + id + "/cancel?agent=" + agent + "&chat_id=" + chat
		}
		status, out := c.Do(t, method, path, nil)
		run, _ := out["run"].(map[string]any)
		return status, run
	}

	e.send(e.a, "cards", "add 40 and 2")
	runs := e.runs(tenantA, store.AgentRunFilter{})
	g.Expect(runs).To(HaveLen(1))
	id := runs[0].ID
	g.Eventually(func(g Gomega) {
		status, run := card(e.a, http.MethodGet, id, "assistant", "cards")
		g.Expect(status).To(Equal(http.StatusOK))
		g.Expect(run).To(And(HaveKeyWithValue("target", "researcher"), HaveKeyWithValue("task", "add 40 and 2"),
			HaveKeyWithValue("mode", "background"), HaveKeyWithValue("status", "running"),
			HaveKeyWithValue("steps", 1.0), HaveKeyWithValue("last_tool", "calculator")))
		g.Expect(run).NotTo(HaveKey("result"))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	for _, other := range []struct {
		c           gatewaytest.Client
		agent, chat string
	}{{e.a, "assistant", "another-chat"}, {e.a, "researcher", "cards"}, {e.b, "assistant", "cards"}} {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			status, _ := card(other.c, m, id, other.agent, other.chat)
			g.Expect(status).To(Equal(http.StatusNotFound), "%s %s/%s", m, other.agent, other.chat)
		}
	}
	status, _ := card(e.a, http.MethodGet, id, "assistant", "bad:chat")
	g.Expect(status).To(Equal(http.StatusBadRequest))

	close(release)
	g.Eventually(func(g Gomega) {
		_, run := card(e.a, http.MethodGet, id, "assistant", "cards")
		g.Expect(run).To(And(HaveKeyWithValue("status", "succeeded"), HaveKeyWithValue("result", "42 it is")))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	status, _ = card(e.a, http.MethodPost, id, "assistant", "cards")
	g.Expect(status).To(Equal(http.StatusConflict), "an ended run")

	// A run cancelled from its card stops and brings no continuation.
	e.setRespond(func(agent string, req fakellm.Recorded) fakellm.Turn {
		last := lastMessage(req)
		switch {
		case agent == "researcher":
			return fakellm.Turn{Text: "too late", Delay: time.Hour} // only the cancel ends it
		case last.Role == "tool":
			return fakellm.Turn{Text: "started"}
		default:
			return fakellm.Turn{ToolCalls: []fakellm.Call{delegateCall("d2", `{"target":"researcher","task":"forever","mode":"background"}`)}}
		}
	})
	_, session := e.send(e.a, "cards", "go")
	var second string
	for _, r := range e.runs(tenantA, store.AgentRunFilter{Status: store.RunRunning}) {
		second = r.ID
	}
	g.Expect(second).NotTo(BeEmpty())
	status, run := card(e.a, http.MethodPost, second, "assistant", "cards")
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(run).To(And(HaveKeyWithValue("status", "cancelled"), HaveKeyWithValue("completion", "closed"),
		HaveKeyWithValue("result", "cancelled by the user")))
	e.checkNoMoreContinuations(session, 1)
}
