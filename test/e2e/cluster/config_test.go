package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestConfigToolsInASessionPod: the root agent's session pod, with its own
// ServiceAccount's credentials, patches its Agent through the API server
// with gateway config.patch and switches its next turn to it without a
// restart; a change made with kubectl reaches it with reload_config; an
// invalid patch is refused by the API server and changes nothing.
func TestConfigToolsInASessionPod(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-config", "tenant-config-key"
	var mu sync.Mutex
	systems := map[string]string{} // last user message -> system prompt of its first request
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			return fakellm.Turn{Text: "tool said: " + last.ToolResults[0].Content}
		}
		text := lastUser(r)
		mu.Lock()
		systems[text] = r.System
		mu.Unlock()
		if rest, ok := strings.CutPrefix(text, "call "); ok {
			name, args, _ := strings.Cut(rest, " ")
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: name, Args: args}}}
		}
		return fakellm.Turn{Text: "ok"}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "5m", 0)+"  role: root\n")
	st.waitReady(t, ns, "helper")
	systemOf := func(text string) string {
		mu.Lock()
		defer mu.Unlock()
		return systems[text]
	}

	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(t)
	say := func(id, text string) string {
		frames := ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": "config", "text": text})
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "%v", frames)
		return ev["text"].(string)
	}
	// sayApproved is say for a turn that asks its user to approve a change
	// of the agent's configuration, and gets a yes.
	sayApproved := func(id, text string) string {
		req, frames := ws.SendAnswering(t, id, "helper", "config", text, "approve")
		g.Expect(req).To(HaveKeyWithValue("name", "gateway"))
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "%v", frames)
		return ev["text"].(string)
	}
	agent := func() *picobotv1alpha1.Agent {
		var a picobotv1alpha1.Agent
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, &a)).To(Succeed())
		return &a
	}

	g.Expect(say("m1", "hi one")).To(Equal("ok"))
	g.Expect(systemOf("hi one")).To(ContainSubstring("You are a test agent."))

	g.Expect(sayApproved("m2", `call gateway {"action":"config.patch","patch":{"instructions":"You are patched by the pod."}}`)).
		To(ContainSubstring("tool said: Saved and reloaded: generation 2 of Agent tenant-config/helper"))
	g.Expect(agent().Spec.Instructions).To(Equal("You are patched by the pod."))
	g.Expect(say("m3", "hi two")).To(Equal("ok"))
	g.Expect(systemOf("hi two")).To(ContainSubstring("You are patched by the pod."))

	g.Expect(sayApproved("m4", `call gateway {"action":"config.patch","patch":{"model":{"provider":"nope"}}}`)).
		To(And(ContainSubstring("not saved"), ContainSubstring("spec.model.provider")))
	g.Expect(agent().Spec.Model.Provider).To(Equal(picobotv1alpha1.ProviderOpenAI))

	a := agent()
	before := a.DeepCopy()
	a.Spec.Instructions = "You are changed with kubectl."
	g.Expect(st.kube.Patch(context.Background(), a, client.MergeFrom(before))).To(Succeed())
	g.Expect(say("m5", "call reload_config {}")).To(ContainSubstring("tool said: Reloaded: generation 3"))
	g.Expect(say("m6", "hi three")).To(Equal("ok"))
	g.Expect(systemOf("hi three")).To(ContainSubstring("You are changed with kubectl."))
}
