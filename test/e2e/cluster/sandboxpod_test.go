package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	goimage "image"
	"image/color"
	"image/png"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

// The documented names and labels of sandbox pods (docs/sandbox.md; the
// operator's podspec package, which this module's tests outside the
// operator cannot import).
const (
	labelSandboxPlacement = "agents.picobot.io/sandbox-placement"
	labelSandbox          = "agents.picobot.io/sandbox"
	labelComponent        = "app.kubernetes.io/component"
	sandboxPolicy         = "picobot-sandbox-pods"
	sessionPolicy         = "picobot-session-pods"
	sandboxPort           = 7443
)

// pairName is the name of a session pod's sandbox pod, Secret and address
// ConfigMap.
func pairName(pod string) string { return pod + "-sandbox" }

// inSandboxPods labels a tenant manifest's namespace with the sandbox
// placement "pod" (the platform team's label), so its session pods run
// their tools in sandbox pods.
func inSandboxPods(manifest, ns string) string {
	head := "kind: Namespace\nmetadata:\n  name: " + ns + "\n"
	if !strings.Contains(manifest, head) {
		panic("no Namespace " + ns + " in the manifest")
	}
	return strings.Replace(manifest, head, head+"  labels:\n    "+labelSandboxPlacement+": pod\n", 1)
}

// sandboxPodOf is the sandbox pod of session pod name (nil when none is).
func sandboxPodOf(tb testing.TB, ns, name string) *corev1.Pod {
	tb.Helper()
	var p corev1.Pod
	if err := st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pairName(name)}, &p); err != nil {
		return nil
	}
	return &p
}

// sessionPodsOf lists the session pods (not sandbox pods) of Agent helper.
func sessionPodsOf(tb testing.TB, ns string) []corev1.Pod {
	tb.Helper()
	var out []corev1.Pod
	for _, p := range st.pods(tb, ns, "helper") {
		if p.Labels[labelComponent] == "session" {
			out = append(out, p)
		}
	}
	return out
}

// runningSandboxPod waits for the running sandbox pod of session pod name
// whose address the pair's ConfigMap publishes.
func runningSandboxPod(tb testing.TB, g Gomega, ns, name string) *corev1.Pod {
	tb.Helper()
	var sb *corev1.Pod
	g.Eventually(func() string {
		sb = sandboxPodOf(tb, ns, name)
		if sb == nil || sb.DeletionTimestamp != nil || sb.Status.Phase != corev1.PodRunning {
			return "no running sandbox pod"
		}
		var cm corev1.ConfigMap
		if err := st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pairName(name)}, &cm); err != nil {
			return err.Error()
		}
		if want := net.JoinHostPort(sb.Status.PodIP, strconv.Itoa(sandboxPort)); cm.Data[paircred.KeyAddress] != want {
			return fmt.Sprintf("address %q, want %q", cm.Data[paircred.KeyAddress], want)
		}
		return "published"
	}, 60*time.Second, 200*time.Millisecond).Should(Equal("published"))
	return sb
}

// A namespace whose session pods run their tools in sandbox pods (the
// platform's sandbox placement "pod"), end to end: a warm session pod comes
// with its sandbox pod and keeps it when a chat claims it; one turn runs
// bash, the file tools and an MCP stdio server in the sandbox pod, whose
// programs find none of the runtime's credentials and reach none of the
// store, bus, blob server, gateway or API server (the same attacks as in
// the sandbox container); the pair's objects and the sandbox pods'
// NetworkPolicy are there; a killed sandbox pod is replaced, the next
// tool call going to the replacement; and the runtime's own reads of the
// workspace reach the sandbox pod's: the image tool shows the image model
// a picture a program drew there, and send_message attaches the files a
// program wrote to the reply.
//
// The pod runner gives each pod a loopback address of its own, so the
// runtime reaches the sandbox pod over TCP and TLS as in a cluster; it
// enforces no NetworkPolicy (what keeps the programs from the servers here
// is the sandbox's Landlock port rules and the user boundary, as for the
// container) and mounts each pod's workspace at its own local folder (the
// runtime's workspace paths are mapped onto the sandbox pod's; in a
// cluster both are /workspace/workspaces).
func TestToolsRunInTheSandboxPod(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	addrs := runtimeAddrs(t)
	ns, key := "tenant-sandbox-pod", "tenant-sandbox-pod-key"
	var mu sync.Mutex
	var results []string
	pic := redDotPNG(t)
	var seen []fakellm.Recorded // the image model's requests
	var drawn []string          // the tool results of "draw and attach"
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		if len(r.Messages) == 1 && r.Messages[0].Images > 0 { // the image tool's question
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
			return fakellm.Turn{Text: "A red dot on black."}
		}
		if turn, ok := drawAndAttach(r, pic, &mu, &drawn); ok {
			return turn
		}
		if last := r.Messages[len(r.Messages)-1]; last.Role == "tool" {
			mu.Lock()
			results = results[:0]
			for _, m := range r.Messages {
				if m.Role == "tool" {
					results = append(results, m.Content)
				}
			}
			mu.Unlock()
			return fakellm.Turn{Text: "probe finished"}
		}
		args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		switch lastUser(r) {
		case "run the pod probe":
		case "again":
			return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "a1", Name: "bash", Args: args(map[string]any{"command": "echo again-$(id -u); cat note.txt 2>&1 | head -1"})}}}
		default:
			return fakellm.Turn{Text: "ok"}
		}
		rtPID := runtimePID(t, ns, "helper/podprobe")
		environ := fmt.Sprintf("/proc/%d/environ", rtPID)
		lines := []string{
			"echo uid=$(id -u)",
			`echo secrets-in-env=$(env | grep -c -e sk-fake -e PICOBOT_ -e AWS_)`,
			`echo secrets-in-proc=$(for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done | grep -c -e sk-fake -e POSTGRES_URL -e AWS_SECRET -e SANDBOX_TOKEN -e 'BEGIN EC')`,
			fmt.Sprintf("tr '\\0' '\\n' < %s 2>&1 | head -3", environ),
			"ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1",
			"echo made-in-sandbox > probe.txt && echo wrote-file",
		}
		for _, a := range addrs {
			host, port, _ := strings.Cut(a, ":")
			lines = append(lines, fmt.Sprintf("(exec 3<>/dev/tcp/%s/%s) 2>&1 | tail -1", host, port))
		}
		return fakellm.Turn{ToolCalls: []fakellm.Call{
			{ID: "b1", Name: "bash", Args: args(map[string]any{"command": strings.Join(lines, "; ")})},
			{ID: "w1", Name: "file_write", Args: args(map[string]any{"path": "note.txt", "content": "ordinary job"})},
			{ID: "r1", Name: "file_read", Args: args(map[string]any{"path": "note.txt"})},
			{ID: "r2", Name: "file_read", Args: args(map[string]any{"path": environ})},
			{ID: "r3", Name: "file_read", Args: args(map[string]any{"path": saTokenPath})},
			{ID: "m1", Name: "mcp_probe_probe", Args: args(map[string]any{"read": []string{environ, saTokenPath}, "write": "job.txt",
				"connect": []string{addrs["postgres"], addrs["redis"]}})},
		}}
	})
	// The agent's model sees images, so it has the image tool.
	manifest := strings.Replace(fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 1), "    model: fake-model\n", "    model: fake-model\n    vision: true\n", 1)
	st.apply(t, inSandboxPods(manifest, ns)+fsAgent+sandboxtest.MCPProbeServers(st.mcpProbe))
	st.waitReady(t, ns, "helper")
	// The warm pod has registered (it waits for wakes): a chat sent while
	// it still starts may go to a pod the operator makes for that chat.
	g.Eventually(func(g Gomega) {
		a := &picobotv1alpha1.Agent{}
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "helper"}, a)).To(Succeed())
		g.Expect(a.Status.WarmPods).To(HaveValue(Equal(int32(1))))
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed())

	// The warm pod and its sandbox pod, before any chat (the pool may hold
	// one more for a moment): every session pod has a running sandbox pod.
	warm := map[string]*corev1.Pod{}
	g.Eventually(func() string {
		pods := sessionPodsOf(t, ns)
		if len(pods) == 0 {
			return "no session pod"
		}
		clear(warm)
		for _, p := range pods {
			g.Expect(p.Labels).To(HaveKeyWithValue(labelSandbox, "pod"))
			g.Expect(p.Spec.InitContainers).To(BeEmpty(), "no sandbox container")
			sb := sandboxPodOf(t, ns, p.Name)
			if sb == nil || sb.Status.Phase != corev1.PodRunning {
				return "no running sandbox pod of " + p.Name
			}
			warm[p.Name] = sb
		}
		return ""
	}, 60*time.Second, 200*time.Millisecond).Should(BeEmpty())

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	frames := ws.Exchange(t, gatewaytest.Frame{"id": "p1", "agent": "helper", "chat_id": "podprobe", "text": "run the pod probe"})
	ev := gatewaytest.Event(frames, "final")
	g.Expect(ev).NotTo(BeNil(), "%v", frames)
	g.Expect(ev["text"]).To(Equal("probe finished"))

	// The chat claimed the warm pod, which kept its sandbox pod.
	busy := st.busyPod(ns, "helper", "helper/podprobe")
	g.Expect(warm).To(HaveKey(busy), "a warm pod served the chat")
	sb := runningSandboxPod(t, g, ns, busy)
	g.Expect(sb.UID).To(Equal(warm[busy].UID), "the claimed pod kept its sandbox pod")

	mu.Lock()
	got := append([]string(nil), results...)
	mu.Unlock()
	t.Logf("the tools returned:\n%s", strings.Join(got, "\n---\n"))
	g.Expect(got).To(HaveLen(6))
	out := got[0]
	g.Expect(out).To(ContainSubstring("uid=65533"))
	g.Expect(out).To(ContainSubstring("secrets-in-env=0"))
	g.Expect(out).To(ContainSubstring("secrets-in-proc=0"))
	g.Expect(out).To(MatchRegexp(`/proc/\d+/environ: Permission denied`))
	g.Expect(out).To(ContainSubstring("serviceaccount': No such file or directory"))
	g.Expect(out).To(ContainSubstring("wrote-file"))
	for name, a := range addrs {
		host, port, _ := strings.Cut(a, ":")
		g.Expect(out).To(ContainSubstring(fmt.Sprintf("/dev/tcp/%s/%s: Permission denied", host, port)), "the sandbox reached %s", name)
	}
	g.Expect(out).To(ContainSubstring("[exit code 0]"))
	g.Expect(got[1]).To(Equal("Created note.txt (12 bytes written)."))
	g.Expect(got[2]).To(Equal("     1\tordinary job"))
	g.Expect(got[3]).To(MatchRegexp(`error: permission denied for /proc/\d+/environ`))
	g.Expect(got[4]).To(ContainSubstring("does not exist"))
	mcpOut := got[5]
	g.Expect(mcpOut).To(ContainSubstring("env: " + sandboxtest.MCPProbeDeclaredEnv))
	g.Expect(mcpOut).To(MatchRegexp(`read /proc/\d+/environ: error: open /proc/\d+/environ: permission denied`))
	g.Expect(mcpOut).To(ContainSubstring("read " + saTokenPath + ": error: open " + saTokenPath + ": no such file or directory"))
	g.Expect(mcpOut).To(ContainSubstring(`wrote job.txt: "written by the probe"`))
	for _, a := range []string{addrs["postgres"], addrs["redis"]} {
		g.Expect(mcpOut).To(MatchRegexp(`connect %s: error: dial tcp \S+: connect: permission denied`, regexp.QuoteMeta(a)))
	}
	for _, line := range strings.Split(mcpOut, "\n") {
		g.Expect(line).NotTo(MatchRegexp(`^env: (PICOBOT_|AWS_|KUBECONFIG)`), "a variable of the runtime's reached the MCP server")
	}
	for _, o := range got {
		g.Expect(o).NotTo(ContainSubstring("sk-fake"))
	}

	// The programs ran in the sandbox pod: its process is the sandbox's
	// user, its workspace holds what the tools wrote, the runtime's does not.
	pid := st.runner.PID(sb.UID)
	g.Expect(pid).NotTo(BeZero())
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(status)).To(MatchRegexp(`(?m)^Uid:\s+65533\s`))

	// The pair's objects: the sandbox pod and its address ConfigMap
	// controlled by the session pod, the Secret handed to it; the
	// NetworkPolicies.
	var session corev1.Pod
	g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: busy}, &session)).To(Succeed())
	g.Expect(sb.OwnerReferences).To(HaveLen(1))
	g.Expect(sb.OwnerReferences[0].UID).To(Equal(session.UID))
	g.Expect(*sb.Spec.AutomountServiceAccountToken).To(BeFalse())
	g.Eventually(func() []string {
		var sec corev1.Secret
		if err := st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: pairName(busy)}, &sec); err != nil {
			return []string{err.Error()}
		}
		var owners []string
		for _, o := range sec.OwnerReferences {
			owners = append(owners, string(o.UID))
		}
		return owners
	}, 30*time.Second, 200*time.Millisecond).Should(Equal([]string{string(session.UID)}))
	// NetworkPolicies: the sandbox pods' own, and the session pods' rule
	// to their exec port (the client's scheme has no networking types).
	policy := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"})
		g.Expect(st.kube.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed())
		return u
	}
	sel, _, _ := unstructured.NestedStringMap(policy(sandboxPolicy).Object, "spec", "podSelector", "matchLabels")
	g.Expect(sel).To(HaveKeyWithValue(labelComponent, "sandbox"))
	egress, _, _ := unstructured.NestedSlice(policy(sessionPolicy).Object, "spec", "egress")
	g.Expect(egress).NotTo(BeEmpty())
	// The rule whose peer selects sandbox pods opens their exec port alone.
	var toSandbox []any
	for _, r := range egress {
		to, _, _ := unstructured.NestedSlice(r.(map[string]any), "to")
		for _, peer := range to {
			if l, _, _ := unstructured.NestedStringMap(peer.(map[string]any), "podSelector", "matchLabels"); l[labelComponent] == "sandbox" {
				toSandbox, _, _ = unstructured.NestedSlice(r.(map[string]any), "ports")
			}
		}
	}
	g.Expect(toSandbox).To(HaveLen(1), "one rule from session pods to sandbox pods, on one port")
	g.Expect(toSandbox[0]).To(HaveKeyWithValue("port", BeNumerically("==", sandboxPort)))

	// The sandbox pod dies: the operator replaces it (a new address, an
	// empty workspace), and the next tool call goes there.
	g.Expect(st.runner.Kill(sb.UID)).To(BeTrue())
	g.Eventually(func() bool {
		p := sandboxPodOf(t, ns, busy)
		return p != nil && p.UID != sb.UID && p.Status.Phase == corev1.PodRunning
	}, 60*time.Second, 200*time.Millisecond).Should(BeTrue())
	replacement := runningSandboxPod(t, g, ns, busy)
	g.Expect(replacement.UID).NotTo(Equal(sb.UID))
	frames = ws.Exchange(t, gatewaytest.Frame{"id": "p2", "agent": "helper", "chat_id": "podprobe", "text": "again"})
	ev = gatewaytest.Event(frames, "final")
	g.Expect(ev).NotTo(BeNil(), "%v", frames)
	mu.Lock()
	last := results[len(results)-1]
	mu.Unlock()
	g.Expect(last).To(ContainSubstring("again-65533"))
	g.Expect(last).To(ContainSubstring("No such file or directory"), "the replacement's workspace starts empty")

	// A program draws a chart and writes a report in the sandbox pod; the
	// image tool shows the chart to the image model (the agent's own, which
	// sees images), send_message attaches both to the reply.
	frames = ws.Exchange(t, gatewaytest.Frame{"id": "p3", "agent": "helper", "chat_id": "podprobe", "text": "draw and attach"})
	ev = gatewaytest.Event(frames, "final")
	g.Expect(ev).NotTo(BeNil(), "%v", frames)
	g.Expect(ev["text"]).To(Equal("attached"))
	mu.Lock()
	gotDrawn, gotSeen := append([]string(nil), drawn...), append([]fakellm.Recorded(nil), seen...)
	mu.Unlock()
	t.Logf("draw and attach:\n%s", strings.Join(gotDrawn, "\n---\n"))
	g.Expect(gotDrawn).To(HaveLen(3))
	g.Expect(gotDrawn[0]).To(ContainSubstring("drawn"))
	g.Expect(gotDrawn[1]).To(ContainSubstring("A red dot on black."))
	g.Expect(gotDrawn[1]).To(ContainSubstring("out/chart.png: image/png, "))
	g.Expect(gotDrawn[2]).To(HavePrefix("Attached chart.png, report.txt to your reply"))
	g.Expect(gotSeen).To(HaveLen(1))
	g.Expect(string(gotSeen[0].Body)).To(ContainSubstring("data:image/png;base64,"+base64.StdEncoding.EncodeToString(pic)),
		"the image model got the program's picture")
	atts, _ := ev["attachments"].([]any)
	g.Expect(atts).To(HaveLen(2), "%v", ev)
	want := map[string][]byte{"chart.png": pic, "report.txt": []byte("tickets: 42\n")}
	for _, a := range atts {
		att := a.(map[string]any)
		name, _ := att["name"].(string)
		g.Expect(want).To(HaveKey(name))
		status, body := c.Raw(t, http.MethodGet, att["url"].(string), nil)
		g.Expect(status).To(Equal(http.StatusOK))
		g.Expect(body).To(Equal(want[name]), name)
	}
	// On the pods' volumes (folders of the local pod runner): the chart is
	// in the sandbox pod's workspace, not in the session pod's.
	g.Expect(chartsIn(ns + "_" + pairName(busy))).To(HaveLen(1))
	g.Expect(chartsIn(ns+"_"+busy)).To(BeEmpty(), "the runtime's own folder holds none of the programs' files")
}

// chartsIn lists the out/chart.png files on the volumes of pod dir (a
// folder of the local pod runner, <namespace>_<pod>).
func chartsIn(dir string) []string {
	var found []string
	_ = filepath.WalkDir(filepath.Join(st.dir, "pods", dir, "volumes"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, filepath.Join("out", "chart.png")) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

// drawAndAttach is the model of "draw and attach" (ok false for another
// request): bash writes a chart and a report, then the image tool looks at
// the chart and send_message attaches both; the tool results are kept in
// drawn. The attached chart comes back to the model (which sees images) as
// a user message with the image after the tool results.
func drawAndAttach(r fakellm.Recorded, pic []byte, mu *sync.Mutex, drawn *[]string) (fakellm.Turn, bool) {
	args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	asked := -1
	for i, m := range r.Messages {
		if m.Role == "user" && m.Images == 0 {
			asked = i
		}
	}
	if asked < 0 || r.Messages[asked].Content != "draw and attach" {
		return fakellm.Turn{}, false
	}
	var tools []string
	for _, m := range r.Messages[asked+1:] {
		if m.Role == "tool" {
			tools = append(tools, m.Content)
		}
	}
	switch len(tools) {
	case 0:
		script := fmt.Sprintf("mkdir -p out && echo %s | base64 -d > out/chart.png && echo 'tickets: 42' > out/report.txt && echo drawn",
			base64.StdEncoding.EncodeToString(pic))
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "d1", Name: "bash", Args: args(map[string]any{"command": script})}}}, true
	case 1:
		return fakellm.Turn{ToolCalls: []fakellm.Call{
			{ID: "d2", Name: "image", Args: args(map[string]any{"image": "out/chart.png", "prompt": "What is on the chart?"})},
			{ID: "d3", Name: "send_message", Args: args(map[string]any{"target_chat_id": "web:helper/podprobe", "content": "here",
				"files": []string{"out/chart.png", "out/report.txt"}})},
		}}, true
	}
	mu.Lock()
	*drawn = tools
	mu.Unlock()
	return fakellm.Turn{Text: "attached"}, true
}

// redDotPNG is a 40x20 PNG with a red dot.
func redDotPNG(t *testing.T) []byte {
	t.Helper()
	img := goimage.NewRGBA(goimage.Rect(0, 0, 40, 20))
	img.Set(20, 10, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
