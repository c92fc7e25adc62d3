package realnode

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// tenant is a tenant namespace (%[1]s) with a model key, a gateway API key
// (%[2]s) and Agent "helper" of the fake model (%[3]s) with a warm pod.
const tenant = `
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Secret
metadata:
  name: model-key
  namespace: %[1]s
stringData:
  apiKey: sk-fake
---
apiVersion: v1
kind: Secret
metadata:
  name: gateway-key
  namespace: %[1]s
  labels:
    gateway.picobot.io/api-key: "true"
stringData:
  key: %[2]s
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: helper
  namespace: %[1]s
spec:
  instructions: You are a test agent.
  model:
    provider: openai
    model: fake-model
    baseURL: %[3]s
    apiKeySecretRef: {name: model-key, key: apiKey}
  runtime:
    idleTimeout: 5m
    warmPool: 1
`

func lastUser(r fakellm.Recorded) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// The release's pods and the session pods the operator starts run the
// image built by hack/realnode-images.sh; a chat through the gateway
// Service reaches a real session pod, whose log shows the turn; a session
// pod killed mid-turn (its container SIGKILLed through containerd) still
// leaves exactly one answer, from another pod.
func TestChatThroughTheGatewayServiceReachesARealSessionPod(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns, key := "tenant-realnode", "tenant-realnode-key"
	var slowOnce atomic.Bool
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		text := lastUser(r)
		if text == "slow" && slowOnce.CompareAndSwap(false, true) {
			return fakellm.Turn{Text: "too late", Delay: 2 * time.Minute} // its pod dies before this answers
		}
		return fakellm.Turn{Text: fmt.Sprintf("real node reply to %q", text)}
	})

	// The release's own pods run the project's image.
	images, err := st.node.Kubectl(ctx, "get", "pods", "-n", systemNamespace, "-o", "jsonpath={.items[*].spec.containers[*].image}")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(images)).To(HaveEach(imageRepo+":"+imageTag), "gateway and operator images")

	_, err = st.node.KubectlIn(ctx, fmt.Sprintf(tenant, ns, key, st.llmURL), "apply", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.node.Kubectl(ctx, "wait", "-n", ns, "--for=condition=Ready", "agent/helper", "--timeout=120s")
	g.Expect(err).NotTo(HaveOccurred())
	// The warm pod is Running: pulled from nothing (imagePullPolicy), its
	// probes passing.
	var warm string
	g.Eventually(func(g Gomega) {
		out, err := st.node.Kubectl(ctx, "get", "pods", "-n", ns, "-l", "agents.picobot.io/agent=helper",
			"--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.Fields(out)).To(HaveLen(1))
		warm = strings.TrimSpace(out)
	}, 3*time.Minute, time.Second).Should(Succeed())

	gw := st.portForward(t, systemNamespace, "svc/"+release+"-gateway", "80")
	c := gatewaytest.Client{URL: "http://" + gw, Key: key}
	ws := c.Dial(t)
	final := func(frames []gatewaytest.Frame) string {
		ev := gatewaytest.Event(frames, "final")
		if ev == nil {
			t.Fatalf("no final event in %v", frames)
		}
		return ev["text"].(string)
	}
	g.Expect(final(ws.Exchange(t, gatewaytest.Frame{"id": "m1", "agent": "helper", "chat_id": "alice", "text": "hello"}))).
		To(Equal(`real node reply to "hello"`))
	served := busyPod(ctx, ns, "helper/alice")
	g.Expect(served).To(Equal(warm), "the warm pod served the chat")

	// kubectl shows the pod runs the project's image and logged the turn.
	image, err := st.node.Kubectl(ctx, "get", "pod", "-n", ns, served, "-o", `jsonpath={.spec.containers[?(@.name=="runtime")].image}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(image).To(Equal(imageRepo + ":" + imageTag))
	g.Eventually(func() string {
		logs, _ := st.node.Kubectl(ctx, "logs", "-n", ns, served, "-c", "runtime")
		return logs
	}, 30*time.Second, time.Second).Should(And(ContainSubstring(`"msg":"Turn done"`), ContainSubstring(`"chat":"helper/alice","id":"helper/alice/m1"`), ContainSubstring(`"outcome":"ok"`)))

	// Kill the session pod's runtime container mid-turn: the next pod
	// reclaims the message and answers it, once.
	before := len(st.llm.Requests())
	ws.Write(t, gatewaytest.Frame{"type": "send", "id": "m2", "agent": "helper", "chat_id": "alice", "text": "slow"})
	g.Eventually(func() int { return len(st.llm.Requests()) }, 60*time.Second, 100*time.Millisecond).Should(BeNumerically(">", before))
	containerID, err := st.node.Kubectl(ctx, "get", "pod", "-n", ns, served, "-o",
		`jsonpath={.status.containerStatuses[?(@.name=="runtime")].containerID}`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(containerID).To(HavePrefix("containerd://"))
	killContainer(t, strings.TrimPrefix(containerID, "containerd://"))
	frames := ws.Until(t, "m2", "done")
	finals := 0
	for _, f := range frames {
		if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == "final" {
			finals++
		}
		g.Expect(f["type"]).NotTo(Equal("error"), "%v", f)
	}
	g.Expect(finals).To(Equal(1))
	g.Expect(final(frames)).To(Equal(`real node reply to "slow"`))
	next := busyPod(ctx, ns, "helper/alice")
	g.Expect(next).NotTo(BeEmpty())
	g.Expect(next).NotTo(Equal(served))
	phase, err := st.node.Kubectl(ctx, "get", "pod", "-n", ns, served, "-o", "jsonpath={.status.phase}")
	if err == nil { // the operator may have reaped it already
		g.Expect(phase).To(Equal("Failed"), "the killed pod is not restarted")
	}
}

// busyPod returns the pod serving a chat, from the pods' registry in Redis.
func busyPod(ctx context.Context, ns, chatKey string) string {
	reg, err := st.redis.HGetAll(ctx, wake.PodsKey(ns, "helper")).Result()
	if err != nil {
		return ""
	}
	for pod, state := range reg {
		if strings.HasSuffix(state, " "+chatKey) {
			return pod
		}
	}
	return ""
}

// killContainer SIGKILLs a container through the node's containerd, as an
// OOM kill or a crash would end it.
func killContainer(tb testing.TB, id string) {
	tb.Helper()
	out, err := st.node.Ctr(context.Background(), "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	if err != nil {
		tb.Fatalf("failed to kill container %s: %v\n%s", id, err, out)
	}
}
