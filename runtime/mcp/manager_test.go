package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/mcp"
	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/test/services"
)

// everything is server-everything over stdio.
func everything(name string) picobotv1alpha1.MCPServer {
	return picobotv1alpha1.MCPServer{
		Name:      name,
		Transport: "stdio",
		Command:   ref.node,
		Args:      []string{ref.everything, "stdio"},
	}
}

// connect builds a manager, connects it and closes it when the test ends.
func connect(t *testing.T, servers []picobotv1alpha1.MCPServer, opts ...mcp.Option) *mcp.Manager {
	t.Helper()
	m := mcp.NewManager(servers, opts...)
	t.Cleanup(func() { _ = m.Close() })
	NewWithT(t).Expect(m.Connect(t.Context())).To(Succeed())
	return m
}

func registry(t *testing.T, m *mcp.Manager) *tool.Registry {
	t.Helper()
	reg, err := tool.NewRegistry(m.Tools()...)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return reg
}

func execute(ctx context.Context, reg *tool.Registry, name, args string) tool.Result {
	return reg.Execute(ctx, tool.Env{}, llm.ToolCall{ID: "call-1", Name: name, Arguments: args})
}

func TestStdioToolsAndCalls(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	m := connect(t, []picobotv1alpha1.MCPServer{everything("everything")})
	reg := registry(t, m)

	names := reg.Names()
	g.Expect(names).To(ContainElements("mcp_everything_echo", "mcp_everything_get_sum", "mcp_everything_get_tiny_image"))
	for _, n := range names {
		g.Expect(n).To(MatchRegexp(`^mcp_everything_[a-z0-9_]+$`))
		tl, _ := reg.Get(n)
		g.Expect(len([]rune(tl.Description()))).To(BeNumerically("<=", 400))
		var schema map[string]any
		g.Expect(json.Unmarshal(tl.Schema(), &schema)).To(Succeed())
		g.Expect(schema).To(HaveKeyWithValue("type", "object"))
		g.Expect(schema).To(HaveKey("properties"))
	}
	echo, _ := reg.Get("mcp_everything_echo")
	g.Expect(echo.Description()).To(Equal("Echoes back the input string"))
	g.Expect(string(echo.Schema())).To(ContainSubstring(`"message"`))

	st := m.Status()
	g.Expect(st).To(HaveLen(1))
	g.Expect(st[0].Connected).To(BeTrue())
	g.Expect(st[0].Error).To(BeEmpty())
	g.Expect(st[0].Tools).To(ConsistOf(names))

	cases := []struct {
		name, tool, args string
		want             tool.Result
		match            string
	}{
		{name: "echo returns text", tool: "mcp_everything_echo", args: `{"message":"hello 世界"}`,
			want: tool.Result{Content: "Echo: hello 世界"}},
		{name: "numbers reach the server", tool: "mcp_everything_get_sum", args: `{"a": 2, "b": 40.5}`,
			want: tool.Result{Content: "The sum of 2 and 40.5 is 42.5."}},
		{name: "images are summarised", tool: "mcp_everything_get_tiny_image", args: ``,
			match: `^Here's the image you requested:\n\[image image/png, \d+ bytes\]\nThe image above is the MCP logo\.$`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := execute(t.Context(), reg, tc.tool, tc.args)
			if tc.match != "" {
				g.Expect(got.IsError).To(BeFalse(), got.Content)
				g.Expect(got.Content).To(MatchRegexp(tc.match))
				if tc.tool == "mcp_everything_get_tiny_image" {
					// The image itself, for the agent loop to show a
					// model that accepts images.
					g.Expect(got.Artifacts).To(HaveLen(1))
					g.Expect(got.Artifacts[0].MediaType).To(Equal("image/png"))
					g.Expect(string(got.Artifacts[0].Data)).To(HavePrefix("\x89PNG\r\n\x1a\n"), "decoded from the wire's base64")
					g.Expect(got.Artifacts[0].PresentToUser).To(BeFalse())
				}
				return
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestCallErrorsBecomeToolErrors(t *testing.T) {
	needServers(t)
	t.Parallel()
	m := connect(t, []picobotv1alpha1.MCPServer{everything("everything")})
	reg := registry(t, m)

	cases := []struct {
		name, tool, args string
		want             []string
	}{
		{name: "server rejects bad argument types", tool: "mcp_everything_get_sum", args: `{"a":"two","b":1}`,
			want: []string{"a"}},
		{name: "invalid JSON never reaches the server", tool: "mcp_everything_echo", args: `{"message":`,
			want: []string{"invalid arguments for mcp_everything_echo", "not valid JSON", "Fix the arguments"}},
		{name: "arguments must be an object", tool: "mcp_everything_echo", args: `["hello"]`,
			want: []string{"must be a JSON object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := execute(t.Context(), reg, tc.tool, tc.args)
			g.Expect(got.IsError).To(BeTrue(), got.Content)
			for _, w := range tc.want {
				g.Expect(got.Content).To(ContainSubstring(w))
			}
		})
	}

	t.Run("unknown tool", func(t *testing.T) {
		g := NewWithT(t)
		got, err := mcp.CallByOriginalName(t.Context(), m, "everything", "no-such-tool", `{}`)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.IsError).To(BeTrue())
		g.Expect(got.Content).To(ContainSubstring("no-such-tool"))
	})

	t.Run("cancelled call", func(t *testing.T) {
		g := NewWithT(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		got := execute(ctx, reg, "mcp_everything_echo", `{"message":"late"}`)
		g.Expect(got.IsError).To(BeTrue())
		g.Expect(got.Content).To(ContainSubstring("mcp_everything_echo was cancelled"))
	})

	// The server still answers after all of that.
	NewWithT(t).Expect(execute(t.Context(), reg, "mcp_everything_echo", `{"message":"still here"}`)).
		To(Equal(tool.Result{Content: "Echo: still here"}))
}

func TestCallTimeout(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	srv := everything("slow")
	srv.Timeout = picobotv1alpha1.NewDuration(3 * time.Second)
	m := connect(t, []picobotv1alpha1.MCPServer{srv})
	reg := registry(t, m)

	got := execute(t.Context(), reg, "mcp_slow_trigger_long_running_operation", `{"duration": 600, "steps": 2}`)
	g.Expect(got.IsError).To(BeTrue())
	g.Expect(got.Content).To(ContainSubstring("MCP server slow did not answer the call of trigger-long-running-operation within 3s"))
	// The cancelled call does not wedge the session.
	g.Expect(execute(t.Context(), reg, "mcp_slow_echo", `{"message":"ok"}`)).To(Equal(tool.Result{Content: "Echo: ok"}))
}

func TestTraitsFromSettings(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	srv := everything("everything")
	srv.Tools = []picobotv1alpha1.MCPToolSetting{
		{Name: "echo", ReadOnly: ptr.To(true)},
		{Name: "get-sum", ReadOnly: ptr.To(true), Exclusive: ptr.To(true)},
		{Name: "get-env", ReadOnly: ptr.To(false)},
		// The registered name does not match: settings use the server's names.
		{Name: "mcp_everything_get_tiny_image", ReadOnly: ptr.To(true)},
	}
	reg := registry(t, connect(t, []picobotv1alpha1.MCPServer{srv}))

	traits := func(name string) tool.Traits {
		tl, ok := reg.Get(name)
		g.Expect(ok).To(BeTrue(), name)
		return tl.Traits()
	}
	g.Expect(traits("mcp_everything_echo")).To(Equal(tool.Traits{ReadOnly: true}))
	g.Expect(traits("mcp_everything_get_sum")).To(Equal(tool.Traits{ReadOnly: true, Exclusive: true}))
	g.Expect(traits("mcp_everything_get_env")).To(Equal(tool.Traits{}))
	// The server hints readOnly for this one, but only local settings count.
	g.Expect(traits("mcp_everything_get_tiny_image")).To(Equal(tool.Traits{}))

	calls := func(names ...string) []llm.ToolCall {
		var out []llm.ToolCall
		for i, n := range names {
			out = append(out, llm.ToolCall{ID: strconv.Itoa(i), Name: n, Arguments: `{}`})
		}
		return out
	}
	g.Expect(reg.Concurrent(calls("mcp_everything_echo", "mcp_everything_echo"))).To(BeTrue())
	// Concurrent calls share the session safely.
	results := make([]tool.Result, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			results[i] = execute(t.Context(), reg, "mcp_everything_echo", fmt.Sprintf(`{"message":"%d"}`, i))
		})
	}
	wg.Wait()
	for i, r := range results {
		g.Expect(r).To(Equal(tool.Result{Content: fmt.Sprintf("Echo: %d", i)}))
	}
	g.Expect(reg.Concurrent(calls("mcp_everything_echo", "mcp_everything_get_sum"))).To(BeFalse())
	g.Expect(reg.Concurrent(calls("mcp_everything_echo", "mcp_everything_get_tiny_image"))).To(BeFalse())
}

func TestNameCollisionsGetSuffixes(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	// "a-b" and "a_b" are different servers whose tool names sanitise alike.
	m := connect(t, []picobotv1alpha1.MCPServer{everything("a-b"), everything("a_b")})
	reg := registry(t, m)
	g.Expect(reg.Names()).To(ContainElements("mcp_a_b_echo", "mcp_a_b_echo_2"))

	st := m.Status()
	g.Expect(st[0].Tools).To(ContainElement("mcp_a_b_echo"))
	g.Expect(st[1].Tools).To(ContainElement("mcp_a_b_echo_2"))
	g.Expect(st[1].ToolNames).To(HaveKeyWithValue("mcp_a_b_echo_2", "echo"))
	// Both reach their own server.
	g.Expect(execute(t.Context(), reg, "mcp_a_b_echo_2", `{"message":"second"}`)).To(Equal(tool.Result{Content: "Echo: second"}))
}

// startEverythingHTTP runs server-everything in an HTTP mode ("sse" or
// "streamableHttp") as a separate process on a free loopback port and returns
// its base URL once it accepts connections.
func startEverythingHTTP(t *testing.T, mode string) string {
	t.Helper()
	var lastErr error
	for range 3 { // a lost race for the free port is retried
		base, err := tryStartEverythingHTTP(t, mode)
		if err == nil {
			return base
		}
		lastErr = err
	}
	t.Fatalf("failed to start server-everything %s: %v", mode, lastErr)
	return ""
}

func tryStartEverythingHTTP(t *testing.T, mode string) (string, error) {
	port, err := services.FreePort()
	if err != nil {
		return "", err
	}
	logPath := filepath.Join(t.TempDir(), "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(ref.node, ref.everything, mode)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for range 600 { // up to about a minute on a loaded machine
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return "", fmt.Errorf("server exited: %s", log)
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = conn.Close()
			t.Cleanup(stop)
			return "http://" + addr, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return "", errors.New("server did not accept connections")
}

func TestRemoteTransports(t *testing.T) {
	needServers(t)
	t.Parallel()
	cases := []struct {
		mode      string
		transport picobotv1alpha1.MCPTransport
		path      string
	}{
		{"streamableHttp", "streamable-http", "/mcp"},
		{"sse", "sse", "/sse"},
	}
	for _, tc := range cases {
		t.Run(string(tc.transport), func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			base := startEverythingHTTP(t, tc.mode)
			m := connect(t, []picobotv1alpha1.MCPServer{{Name: "remote", Transport: tc.transport, URL: base + tc.path}})
			st := m.Status()
			g.Expect(st[0].Connected).To(BeTrue(), st[0].Error)
			g.Expect(st[0].Transport).To(Equal(string(tc.transport)))
			reg := registry(t, m)
			g.Expect(reg.Names()).To(ContainElement("mcp_remote_get_sum"))
			g.Expect(execute(t.Context(), reg, "mcp_remote_echo", `{"message":"over http"}`)).To(Equal(tool.Result{Content: "Echo: over http"}))
			g.Expect(execute(t.Context(), reg, "mcp_remote_get_sum", `{"a":1,"b":2}`)).To(Equal(tool.Result{Content: "The sum of 1 and 2 is 3."}))
			g.Expect(m.Close()).To(Succeed())
		})
	}
}

func TestHeadersFromSecret(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	upstream, err := url.Parse(startEverythingHTTP(t, "streamableHttp"))
	g.Expect(err).NotTo(HaveOccurred())

	// A real reverse proxy in front of the server records what arrives.
	var mu sync.Mutex
	var seen []string
	upstreamTransport := http.DefaultTransport.(*http.Transport).Clone()
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = upstreamTransport
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Team"))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		front.Close()
		upstreamTransport.CloseIdleConnections()
	})

	var asked []string
	headers := func(secret string) (map[string]string, error) {
		// Servers connect concurrently.
		mu.Lock()
		asked = append(asked, secret)
		mu.Unlock()
		if secret != "remote-headers" {
			return nil, errors.New("secret not found")
		}
		// Values read from files usually end in a newline.
		return map[string]string{"Authorization": "Bearer t0ken\n", "x-team": "blue"}, nil
	}
	m := connect(t, []picobotv1alpha1.MCPServer{
		{Name: "remote", Transport: "streamable-http", URL: front.URL + "/mcp",
			HeadersSecretRef: &corev1.LocalObjectReference{Name: "remote-headers"}},
		{Name: "missing", Transport: "streamable-http", URL: front.URL + "/mcp",
			HeadersSecretRef: &corev1.LocalObjectReference{Name: "nope"}},
	}, mcp.WithHeadersResolver(headers))
	mu.Lock()
	g.Expect(asked).To(ConsistOf("remote-headers", "nope"))
	mu.Unlock()

	st := m.Status()
	g.Expect(st[0].Connected).To(BeTrue(), st[0].Error)
	g.Expect(st[1].Connected).To(BeFalse())
	g.Expect(st[1].Error).To(Equal(`failed to read headers secret "nope": secret not found`))

	reg := registry(t, m)
	g.Expect(execute(t.Context(), reg, "mcp_remote_echo", `{"message":"authorised"}`)).To(Equal(tool.Result{Content: "Echo: authorised"}))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(seen).NotTo(BeEmpty())
	for _, s := range seen {
		g.Expect(s).To(Equal("Bearer t0ken|blue"))
	}
}

func TestFilesystemServer(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("buy milk\nwalk the dog\n"), 0o644)).To(Succeed())
	// "." is the work dir: the server's allowed directory follows it.
	m := connect(t, []picobotv1alpha1.MCPServer{{
		Name: "files", Transport: "stdio", Command: ref.node, Args: []string{ref.filesystem, "."},
		Tools: []picobotv1alpha1.MCPToolSetting{{Name: "read_text_file", ReadOnly: ptr.To(true)}},
	}}, mcp.WithWorkDir(dir))
	reg := registry(t, m)
	g.Expect(reg.Names()).To(ContainElements("mcp_files_read_text_file", "mcp_files_list_directory", "mcp_files_write_file"))

	read, _ := reg.Get("mcp_files_read_text_file")
	g.Expect(read.Traits()).To(Equal(tool.Traits{ReadOnly: true}))
	write, _ := reg.Get("mcp_files_write_file")
	g.Expect(write.Traits()).To(Equal(tool.Traits{}))

	args, _ := json.Marshal(map[string]string{"path": filepath.Join(dir, "notes.txt")})
	got := execute(t.Context(), reg, "mcp_files_read_text_file", string(args))
	g.Expect(got).To(Equal(tool.Result{Content: "buy milk\nwalk the dog\n"}))

	// Outside the allowed directory the server refuses: a tool error.
	args, _ = json.Marshal(map[string]string{"path": "/etc/hostname"})
	got = execute(t.Context(), reg, "mcp_files_read_text_file", string(args))
	g.Expect(got.IsError).To(BeTrue())
	g.Expect(got.Content).To(ContainSubstring("outside allowed directories"))
}

func TestEnvironment(t *testing.T) {
	needServers(t)
	// t.Setenv: not parallel.
	g := NewWithT(t)
	t.Setenv("PICOBOT_MCPTEST_API_KEY", "must-not-leak")
	t.Setenv("PICOBOT_MCPTEST_PLAIN", "inherited")
	t.Setenv("PICOBOT_MCPTEST_OVERRIDDEN", "from-runtime")
	dir := t.TempDir()

	secrets := func(sel corev1.SecretKeySelector) (string, error) {
		if sel.Name == "creds" && sel.Key == "token" {
			return "s3cr3t", nil
		}
		return "", fmt.Errorf("secret %s has no key %s", sel.Name, sel.Key)
	}
	srv := everything("env")
	srv.Env = []corev1.EnvVar{
		{Name: "PICOBOT_MCPTEST_OVERRIDDEN", Value: "from-spec"},
		{Name: "GITHUB_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
		{Name: "OPTIONAL_MISSING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "other", Optional: ptr.To(true)}}},
	}
	bad := everything("bad")
	bad.Env = []corev1.EnvVar{{Name: "REQUIRED", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "missing"}}}}
	m := connect(t, []picobotv1alpha1.MCPServer{srv, bad}, mcp.WithSecretResolver(secrets), mcp.WithWorkDir(dir))

	st := m.Status()
	g.Expect(st[1].Connected).To(BeFalse())
	g.Expect(st[1].Error).To(Equal(`failed to read key "missing" of secret "creds" for env REQUIRED: secret creds has no key missing`))

	got := execute(t.Context(), registry(t, m), "mcp_env_get_env", `{}`)
	g.Expect(got.IsError).To(BeFalse(), got.Content)
	var env map[string]string
	g.Expect(json.Unmarshal([]byte(got.Content), &env)).To(Succeed())
	g.Expect(env).NotTo(HaveKey("PICOBOT_MCPTEST_API_KEY"))
	g.Expect(env).NotTo(HaveKey("OPTIONAL_MISSING"))
	// Only the sandbox's allowlist of the runtime's environment is passed.
	g.Expect(env).NotTo(HaveKey("PICOBOT_MCPTEST_PLAIN"))
	g.Expect(env).To(HaveKeyWithValue("PATH", os.Getenv("PATH")))
	g.Expect(env).To(HaveKeyWithValue("PICOBOT_MCPTEST_OVERRIDDEN", "from-spec"))
	// Given explicitly, a secret-looking name is passed.
	g.Expect(env).To(HaveKeyWithValue("GITHUB_TOKEN", "s3cr3t"))
	g.Expect(env).To(HaveKeyWithValue("PWD", dir))
	g.Expect(env).To(HaveKeyWithValue("HOME", dir))
}

func TestFailingServersDoNotStopOthers(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	m := connect(t, []picobotv1alpha1.MCPServer{
		everything("everything"),
		{Name: "missing", Transport: "stdio", Command: "picobot-no-such-mcp-server"},
		{Name: "crashing", Transport: "stdio", Command: ref.node, Args: []string{"-e", "console.error('boom: bad config'); process.exit(3)"}},
		{Name: "nowhere", Transport: "streamable-http", URL: "http://127.0.0.1:1/mcp"},
	})
	st := m.Status()
	g.Expect(st).To(HaveLen(4))
	g.Expect(st[0].Connected).To(BeTrue())
	g.Expect(st[1].Connected).To(BeFalse())
	g.Expect(st[1].Error).To(Equal(`failed to connect: exec: "picobot-no-such-mcp-server": executable file not found in $PATH`))
	g.Expect(st[2].Connected).To(BeFalse())
	g.Expect(st[2].Error).To(HavePrefix("failed to connect: "))
	g.Expect(st[2].Error).To(HaveSuffix("; stderr: boom: bad config"))
	g.Expect(st[3].Connected).To(BeFalse())
	g.Expect(st[3].Error).To(ContainSubstring("connection refused"))
	for _, s := range st[1:] {
		g.Expect(s.Tools).To(BeEmpty())
	}

	reg := registry(t, m)
	for _, n := range reg.Names() {
		g.Expect(n).To(HavePrefix("mcp_everything_"))
	}
	g.Expect(execute(t.Context(), reg, "mcp_everything_echo", `{"message":"fine"}`)).To(Equal(tool.Result{Content: "Echo: fine"}))

	text := m.StatusText()
	g.Expect(text).To(HavePrefix("MCP servers: 1 of 4 connected.\n\neverything (stdio): connected, "))
	g.Expect(text).To(ContainSubstring("\n  - mcp_everything_echo\n"))
	g.Expect(text).To(ContainSubstring("\n  - mcp_everything_get_sum (get-sum)\n"))
	g.Expect(text).To(ContainSubstring("\n\nmissing (stdio): failed: failed to connect: exec: \"picobot-no-such-mcp-server\": executable file not found in $PATH\n"))
	g.Expect(text).To(ContainSubstring("\n\ncrashing (stdio): failed: failed to connect: "))
	g.Expect(text).To(ContainSubstring("\n\nnowhere (streamable-http): failed: "))
}

func TestStatusTextWithoutConnections(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	none := mcp.NewManager(nil)
	g.Expect(none.Connect(t.Context())).To(Succeed())
	g.Expect(none.Status()).To(BeEmpty())
	g.Expect(none.StatusText()).To(Equal("No MCP servers configured."))
	g.Expect(none.Close()).To(Succeed())

	idle := mcp.NewManager([]picobotv1alpha1.MCPServer{{Name: "github", Transport: "streamable-http", URL: "http://127.0.0.1:1/mcp"}})
	g.Expect(idle.StatusText()).To(Equal("MCP servers: 0 of 1 connected.\n\ngithub (streamable-http): not connected yet"))
	g.Expect(idle.Close()).To(Succeed())
	g.Expect(idle.Connect(t.Context())).To(MatchError(mcp.ErrClosed))
}

func TestConnectStopsWithContext(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	m := mcp.NewManager([]picobotv1alpha1.MCPServer{everything("everything")})
	defer func() { g.Expect(m.Close()).To(Succeed()) }()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	g.Expect(m.Connect(ctx)).To(MatchError(context.Canceled))
	g.Expect(m.Status()[0].Connected).To(BeFalse())
	g.Expect(m.Status()[0].Error).NotTo(BeEmpty())
	g.Expect(m.Tools()).To(BeEmpty())
}

func TestRestartAfterCrash(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	m := connect(t, []picobotv1alpha1.MCPServer{everything("everything")})
	reg := registry(t, m)
	pid := mcp.ProcessIDs(m)["everything"]
	g.Expect(pid).NotTo(BeZero())

	g.Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
	g.Eventually(func() bool { return m.Status()[0].Connected }).WithTimeout(time.Minute).Should(BeFalse())
	st := m.Status()[0]
	g.Expect(st.Error).To(HavePrefix("disconnected"))
	g.Expect(st.Tools).NotTo(BeEmpty(), "its tools stay registered")
	g.Expect(m.StatusText()).To(ContainSubstring("; reconnects on the next call\n"))

	// The next call starts it again.
	g.Expect(execute(t.Context(), reg, "mcp_everything_echo", `{"message":"back"}`)).To(Equal(tool.Result{Content: "Echo: back"}))
	g.Expect(m.Status()[0].Connected).To(BeTrue())
	g.Expect(mcp.ProcessIDs(m)["everything"]).NotTo(Equal(pid))
}

func TestCloseKillsProcesses(t *testing.T) {
	needServers(t)
	t.Parallel()
	g := NewWithT(t)
	// The server leaves a background process behind in its group, as a
	// wrapper script (or npx) might.
	m := mcp.NewManager([]picobotv1alpha1.MCPServer{
		{Name: "wrapped", Transport: "stdio", Command: "sh",
			Args: []string{"-c", `sleep 300 >/dev/null 2>&1 & exec "$0" "$1" stdio`, ref.node, ref.everything}},
		everything("plain"),
	})
	g.Expect(m.Connect(t.Context())).To(Succeed())
	pids := mcp.ProcessIDs(m)
	g.Expect(pids).To(HaveLen(2))
	// With namespaces the sandbox's launcher stays as their init.
	launcher := 0
	if sandbox.Probe().Namespaces {
		launcher = 1
	}
	g.Expect(liveInGroup(pids["wrapped"])).To(HaveLen(2+launcher), "node and sleep")
	g.Expect(liveInGroup(pids["plain"])).To(HaveLen(1 + launcher))
	reg := registry(t, m)

	g.Expect(m.Close()).To(Succeed())
	for name, pgid := range pids {
		g.Eventually(func() []int { return liveInGroup(pgid) }).WithTimeout(time.Minute).Should(BeEmpty(), name)
	}
	g.Expect(m.Close()).To(Succeed(), "Close is idempotent")

	got := execute(t.Context(), reg, "mcp_plain_echo", `{"message":"too late"}`)
	g.Expect(got).To(Equal(tool.Errorf("error: MCP server plain is not connected: the runtime is shutting down")))
}

// liveInGroup lists the processes of process group pgid that are not zombies.
func liveInGroup(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ..."; comm may hold spaces.
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(raw[i+1:]))
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if fields[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}
