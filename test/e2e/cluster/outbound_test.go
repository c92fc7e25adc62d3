package cluster

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestSendMessageThroughTheTenantsOutboundStream runs a turn whose tool
// call sends a message to another chat: the session pod, connected with
// its tenant's own PostgreSQL role and Redis user from the Secret the
// operator wrote, queues it on the tenant's outbound stream; the gateway's
// relay delivers it into the other chat and answers the pod with the
// delivery result, which the model sees before it replies.
func TestSendMessageThroughTheTenantsOutboundStream(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ns, key := "tenant-out", "tenant-out-key"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "tool":
			return fakellm.Turn{Text: "told bob: " + last.Content}
		case lastUser(r) == "tell bob the build is green":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "s1", Name: "send_message",
				Args: `{"target_chat_id":"web:bob","content":"the build is green"}`}}}
		}
		return fakellm.Turn{Text: "ok"}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "30s", 1))
	st.waitReady(t, ns, "helper")

	// The namespace's pods connect as the tenant, not as the platform.
	sec := &corev1.Secret{}
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "picobot-runtime-connection"}, sec)).To(Succeed())
	for k, want := range map[string]string{"PICOBOT_POSTGRES_URL": fmt.Sprintf("pbe2e_%d_%s", os.Getpid(), ns),
		"PICOBOT_REDIS_URL": fmt.Sprintf("pbe2e-%d-%s", os.Getpid(), ns)} {
		u, err := url.Parse(string(sec.Data[k]))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(u.User.Username()).To(Equal(want), k)
	}

	ws := gatewaytest.Client{URL: st.gatewayURL, Key: key}.Dial(t)
	final := func(frames []gatewaytest.Frame) string {
		g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
		ev := gatewaytest.Event(frames, "final")
		g.Expect(ev).NotTo(BeNil(), "no final event in %v", frames)
		return ev["text"].(string)
	}
	// Bob's chat exists once bob wrote in it.
	g.Expect(final(ws.Exchange(t, gatewaytest.Frame{"id": "b1", "agent": "helper", "chat_id": "bob", "text": "hi"}))).To(Equal("ok"))
	reply := final(ws.Exchange(t, gatewaytest.Frame{"id": "a1", "agent": "helper", "chat_id": "alice", "text": "tell bob the build is green"}))
	g.Expect(reply).To(HavePrefix("told bob: Delivered to "), "the model saw the real delivery result")

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	g.Eventually(func() string {
		_, body := c.Do(t, "GET", "/api/v1/sessions/web:helper%2Fbob:default/messages", nil)
		return fmt.Sprint(body["messages"])
	}, 30*time.Second, 250*time.Millisecond).Should(ContainSubstring("the build is green"))
	// It travelled on the tenant's own stream; the shared one is gone.
	n, err := st.redis.XLen(context.Background(), wake.OutboundStream(ns)).Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeNumerically(">=", 1))
	g.Expect(st.redis.Exists(context.Background(), "picobot/outbound").Val()).To(BeZero())
}
