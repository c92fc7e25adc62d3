package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/client"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/device"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestNodesInClusterMode: a node client connects to the gateway with the
// tenant's key and is approved over REST; the agent's nodes tool, running
// in a session pod, reaches it through Redis (the tenant's own channels,
// within its ACL) and the gateway that holds its connection; revoking it
// there disconnects it.
func TestNodesInClusterMode(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-nodes", "tenant-nodes-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if len(last.ToolResults) > 0 {
			return fakellm.Turn{Text: "model saw: " + last.ToolResults[0].Content}
		}
		if args, ok := strings.CutPrefix(lastUser(r), "NODES "); ok {
			return fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "nodes", Args: args}}}
		}
		return fakellm.Turn{Text: "ok"}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0)+"  tools:\n    allow: [nodes]\n")
	st.waitReady(t, ns, "helper")

	allow := filepath.Join(t.TempDir(), "allowlist")
	g.Expect(os.WriteFile(allow, []byte("echo **\n"), 0o600)).To(Succeed())
	states := make(chan string, 8)
	n, err := device.New(device.Config{Gateway: st.gatewayURL, APIKey: key, ID: "cluster-box", Name: "box",
		Capabilities: []string{node.ActionRun}, Allowlist: allow, Reconnect: -1,
		OnState: func(s node.State) { states <- s.State }})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	g.Eventually(states).WithTimeout(30 * time.Second).Should(Receive(Equal("pending")))

	c, err := client.New(st.gatewayURL, client.Options{APIKey: key})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.DecideNode(ctx, "cluster-box", node.DecisionApprove)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(states).WithTimeout(30 * time.Second).Should(Receive(Equal("approved")))

	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(t)
	final := func(id, text string) string {
		frames := ws.Exchange(t, gatewaytest.Frame{"id": id, "agent": "helper", "chat_id": "nodes", "text": text})
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "%v", frames)
		return ev["text"].(string)
	}
	g.Expect(final("m1", `NODES {"action":"status"}`)).To(And(ContainSubstring("cluster-box"), ContainSubstring(`"connected": true`)))
	g.Expect(final("m2", `NODES {"action":"run","command":["echo","from","the","pod"]}`)).To(
		And(ContainSubstring("exit code 0"), ContainSubstring("from the pod")))

	_, err = c.DecideNode(ctx, "cluster-box", node.DecisionRevoke)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(MatchError(device.ErrRefused)))
	g.Expect(final("m3", `NODES {"action":"run","node":"cluster-box","command":["echo","hi"]}`)).To(ContainSubstring("error:"))
}
