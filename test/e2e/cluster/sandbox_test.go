package cluster

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

// runtimeAddrs are the servers the runtime container reaches, by name:
// the store, the bus, the blob server, the gateway and the API server. The
// pod runner's pods share the host's network, as a pod's two containers
// share the pod's: only the kernel's network layer keeps the sandbox from
// them.
func runtimeAddrs(t *testing.T) map[string]string {
	t.Helper()
	addrs := map[string]string{"gateway": st.gatewayURL, "apiserver": st.env.Config.Host}
	for _, kv := range st.conn {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PICOBOT_POSTGRES_URL":
			addrs["postgres"] = v
		case "PICOBOT_REDIS_URL":
			addrs["redis"] = v
		case "PICOBOT_S3_ENDPOINT":
			addrs["s3"] = v
		}
	}
	for name, raw := range addrs {
		u, err := url.Parse(raw)
		if err != nil || u.Port() == "" {
			t.Fatalf("no host:port in the %s address %q: %v", name, raw, err)
		}
		addrs[name] = u.Host
	}
	return addrs
}

// A turn whose bash call runs in the session pod's sandbox container,
// through the exec server: the program runs as the sandbox's user and finds
// none of the runtime container's credentials (the model key, the store's
// URL, the ServiceAccount token) and cannot connect to the store, bus, blob
// server, gateway or API server the runtime container uses, while the
// runtime still answers (through them).
func TestToolProgramsRunInTheSandboxContainer(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	addrs := runtimeAddrs(t)
	ns, key := "tenant-sandbox", "tenant-sandbox-key"
	var mu sync.Mutex
	var toolResult string
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
		last := r.Messages[len(r.Messages)-1]
		if last.Role == "tool" {
			mu.Lock()
			toolResult = last.Content
			mu.Unlock()
			return fakellm.Turn{Text: "probe finished"}
		}
		if lastUser(r) != "run the probe" {
			return fakellm.Turn{Text: "ok"}
		}
		rtPID := runtimePID(t, ns, "helper/probe")
		lines := []string{
			"echo uid=$(id -u)",
			"echo pwd=$(pwd)",
			`echo secrets-in-env=$(env | grep -c -e sk-fake -e PICOBOT_ -e AWS_)`,
			`echo secrets-in-proc=$(for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f" 2>/dev/null; done | grep -c -e sk-fake -e POSTGRES_URL -e AWS_SECRET)`,
			fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ 2>&1 | head -3", rtPID),
			"ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1",
			"echo made-in-sandbox > probe.txt && echo wrote-file",
		}
		for _, a := range addrs {
			host, port, _ := strings.Cut(a, ":")
			lines = append(lines, fmt.Sprintf("(exec 3<>/dev/tcp/%s/%s) 2>&1 | tail -1", host, port))
		}
		script := strings.Join(lines, "; ")
		args, _ := json.Marshal(map[string]any{"command": script})
		return fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "b1", Name: "bash", Args: string(args)}}}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0))
	st.waitReady(t, ns, "helper")

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	frames := ws.Exchange(t, gatewaytest.Frame{"id": "p1", "agent": "helper", "chat_id": "probe", "text": "run the probe"})
	ev := gatewaytest.Event(frames, "final")
	g.Expect(ev).NotTo(BeNil(), "%v", frames)
	g.Expect(ev["text"]).To(Equal("probe finished"))

	mu.Lock()
	out := toolResult
	mu.Unlock()
	t.Logf("the probe printed:\n%s", out)
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
	g.Expect(out).NotTo(ContainSubstring("sk-fake"))

	// The pod runs two processes: the sandbox container's exec server as
	// its own user, and the runtime.
	busy := st.busyPod(ns, "helper", "helper/probe")
	g.Expect(busy).NotTo(BeEmpty())
	for _, p := range st.pods(t, ns, "helper") {
		if p.Name != busy {
			continue
		}
		g.Expect(p.Spec.InitContainers).To(HaveLen(1))
		pid := st.runner.ContainerPID(p.UID, "sandbox")
		g.Expect(pid).NotTo(BeZero())
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(status)).To(MatchRegexp(`(?m)^Uid:\s+65533\s`))
		g.Expect(st.runner.PID(p.UID)).NotTo(Equal(pid))
	}
}

// fsAgent opens /proc and the ServiceAccount token's folder to the file
// tools (spec.tools.fs.allowedPaths), so their own path checks let the
// attacks through and only the sandbox container's user stands in the way.
const fsAgent = `  tools:
    fs:
      allowedPaths:
      - {path: /proc, access: ReadOnly}
      - {path: /var/run/secrets/kubernetes.io, access: ReadOnly}
`

// A turn whose file tools and MCP stdio server run in the session pod's
// sandbox container. Through the tools the model reads the runtime's
// /proc/<pid>/environ and the ServiceAccount token (both opened to the file
// tools by the Agent) and has the MCP server dump its environment and read
// them too, and connect to the store and the bus: the kernel refuses the
// sandbox's user, the MCP server sees only the Agent's env, and the
// ordinary jobs (a file written then read, an MCP
// call) work.
func TestFileToolsAndMCPRunInTheSandboxContainer(t *testing.T) {
	needStack(t)
	g := NewWithT(t)
	addrs := runtimeAddrs(t)
	ns, key := "tenant-sandbox-fs", "tenant-sandbox-fs-key"
	var mu sync.Mutex
	var results []string
	st.llm.Respond(func(r fakellm.Recorded) fakellm.Turn {
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
		if lastUser(r) != "run the file probe" {
			return fakellm.Turn{Text: "ok"}
		}
		rtPID := runtimePID(t, ns, "helper/fsprobe")
		environ := fmt.Sprintf("/proc/%d/environ", rtPID)
		args := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		return fakellm.Turn{ToolCalls: []fakellm.Call{
			{ID: "w1", Name: "file_write", Args: args(map[string]any{"path": "note.txt", "content": "ordinary job"})},
			{ID: "r1", Name: "file_read", Args: args(map[string]any{"path": "note.txt"})},
			{ID: "r2", Name: "file_read", Args: args(map[string]any{"path": environ})},
			{ID: "r3", Name: "file_read", Args: args(map[string]any{"path": saTokenPath})},
			{ID: "m1", Name: "mcp_probe_probe", Args: args(map[string]any{"read": []string{environ, saTokenPath}, "write": "job.txt",
				"connect": []string{addrs["postgres"], addrs["redis"]}})},
		}}
	})
	st.apply(t, fmt.Sprintf(tenantManifest, ns, key, st.llm.URL(), "1m", 0)+fsAgent+sandboxtest.MCPProbeServers(st.mcpProbe))
	st.waitReady(t, ns, "helper")

	c := gatewaytest.Client{URL: st.gatewayURL, Key: key}
	ws := c.Dial(t)
	frames := ws.Exchange(t, gatewaytest.Frame{"id": "f1", "agent": "helper", "chat_id": "fsprobe", "text": "run the file probe"})
	ev := gatewaytest.Event(frames, "final")
	g.Expect(ev).NotTo(BeNil(), "%v", frames)
	g.Expect(ev["text"]).To(Equal("probe finished"))

	mu.Lock()
	got := append([]string(nil), results...)
	mu.Unlock()
	t.Logf("the tools returned:\n%s", strings.Join(got, "\n---\n"))
	g.Expect(got).To(HaveLen(5))
	g.Expect(got[0]).To(Equal("Created note.txt (12 bytes written)."))
	g.Expect(got[1]).To(Equal("     1\tordinary job"))
	g.Expect(got[2]).To(MatchRegexp(`error: permission denied for /proc/\d+/environ`))
	g.Expect(got[3]).To(ContainSubstring("does not exist"))
	mcpOut := got[4]
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
	for _, out := range got {
		g.Expect(out).NotTo(ContainSubstring("sk-fake"))
	}
}

// runtimePID is the host pid of the runtime of the session pod of Agent
// "helper" in ns that serves chatKey (0 when none does): the process whose
// environment the sandbox's programs go after.
func runtimePID(tb testing.TB, ns, chatKey string) int {
	tb.Helper()
	busy := st.busyPod(ns, "helper", chatKey)
	for _, p := range st.pods(tb, ns, "helper") {
		if p.Name == busy {
			return st.runner.PID(p.UID)
		}
	}
	return 0
}

// saTokenPath is where a pod's ServiceAccount token is mounted; the sandbox
// container has none.
const saTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"
