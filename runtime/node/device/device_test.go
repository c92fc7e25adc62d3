package device_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/embedded/embeddedtest"
	"github.com/picobot/picobot/runtime/node"
	"github.com/picobot/picobot/runtime/node/device"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/test/controlplane"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, embeddedtest.LeakOptions()...)
}

// paired is a node client connected to a real gateway (embeddedtest) and
// the gateway's node service.
type paired struct {
	svc   *node.Service
	ctx   context.Context // the gateway's tenant
	id    string
	state chan string
	url   string // the gateway's
}

// pair starts a gateway and a node client with cfg (ID and Gateway set
// here) and waits until the node is pending; approve approves it.
func pair(tb testing.TB, cfg device.Config, approve bool) *paired {
	tb.Helper()
	g := NewWithT(tb)
	env := embeddedtest.Start(tb, embeddedtest.Options{Nodes: true, APIKey: cfg.APIKey})
	p := &paired{svc: env.Runtime.Nodes(), ctx: store.WithTenant(context.Background(), env.Runtime.Tenant()), id: "box-1",
		state: make(chan string, 8), url: env.URL}
	cfg.Gateway, cfg.ID, cfg.Reconnect = env.URL, p.id, -1
	cfg.OnState = func(s node.State) { p.state <- s.State }
	n, err := device.New(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("node client: %v", err)
		}
	})
	g.Eventually(p.state).WithTimeout(30 * time.Second).Should(Receive(Equal("pending")))
	if approve {
		_, err := p.svc.Decide(p.ctx, p.id, node.DecisionApprove)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(p.state).WithTimeout(30 * time.Second).Should(Receive(Equal("approved")))
	}
	return p
}

func (p *paired) run(argv ...string) (node.Result, error) {
	params, _ := json.Marshal(node.RunParams{Command: argv})
	return p.svc.Invoke(p.ctx, p.id, node.Invoke{Action: node.ActionRun, Params: params}, 30*time.Second)
}

// TestRunAsksTheDeviceOwner: through a real gateway, a pending node takes
// no calls; once approved, an allowlisted command runs at once, another
// waits for the owner's answer at the node's prompt (yes runs it, no does
// not, silence is a denial), and an action the node does not offer is
// refused by the node.
func TestRunAsksTheDeviceOwner(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	allow := filepath.Join(dir, "allowlist")
	g.Expect(os.WriteFile(allow, []byte("# ok\necho **\nuname -s\n"), 0o600)).To(Succeed())
	inR, inW := io.Pipe()
	defer func() { _ = inW.Close() }()
	outR, outW := io.Pipe()
	defer func() { _ = outR.Close() }()
	questions := make(chan string, 4)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := outR.Read(buf)
			if err != nil {
				return
			}
			if s := string(buf[:n]); strings.Contains(s, "Allow?") {
				questions <- s
			}
		}
	}()
	p := pair(t, device.Config{Capabilities: []string{node.ActionRun}, Allowlist: allow, Prompt: device.NewTerminal(inR, outW)}, false)

	_, err := p.run("echo", "early")
	g.Expect(err).To(MatchError(node.ErrNotApproved))
	_, err = p.svc.Decide(p.ctx, p.id, node.DecisionApprove)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(p.state).Should(Receive(Equal("approved")))

	r, err := p.run("echo", "hi", "there")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Code).To(BeEmpty(), r.Error)
	g.Expect(*r.ExitCode).To(Equal(0))
	g.Expect(r.Stdout).To(Equal("hi there\n"))
	g.Expect(questions).NotTo(Receive(), "an allowlisted command runs without asking")

	marker := filepath.Join(dir, "made")
	answer := func(reply string) (node.Result, error) {
		type out struct {
			r   node.Result
			err error
		}
		c := make(chan out, 1)
		go func() {
			r, err := p.run("touch", marker)
			c <- out{r, err}
		}()
		var q string
		g.Eventually(questions).WithTimeout(20 * time.Second).Should(Receive(&q))
		g.Expect(q).To(ContainSubstring("touch " + marker))
		_, err := io.WriteString(inW, reply+"\n")
		g.Expect(err).NotTo(HaveOccurred())
		o := <-c
		return o.r, o.err
	}
	r, err = answer("n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Code).To(Equal(node.CodeDenied))
	g.Expect(marker).NotTo(BeAnExistingFile())
	r, err = answer("y")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Code).To(BeEmpty(), r.Error)
	g.Expect(marker).To(BeAnExistingFile())

	// Unanswered: the call's time runs out at the prompt, a denial.
	params, _ := json.Marshal(node.RunParams{Command: []string{"touch", marker + "2"}})
	r, err = p.svc.Invoke(p.ctx, p.id, node.Invoke{Action: node.ActionRun, Params: params}, 6*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Code).To(Equal(node.CodeDenied))
	g.Expect(r.Error).To(ContainSubstring("did not answer"))
	g.Expect(marker + "2").NotTo(BeAnExistingFile())
	<-questions

	r, err = p.svc.Invoke(p.ctx, p.id, node.Invoke{Action: node.ActionNotify, Params: []byte(`{"body":"x"}`)}, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Code).To(Equal(node.CodeUnsupported))
	g.Expect(r.Error).To(ContainSubstring("notify is not supported on this node"))
}

// TestAnswersPassTheRateLimit: while other clients of the node's API key
// use up the key's rate limit (the gateway answers them 429), the node's
// answers still reach the calls waiting on them; the gateway asked for
// them, and dropping one would leave its call waiting out its timeout.
func TestAnswersPassTheRateLimit(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	allow := filepath.Join(dir, "allowlist")
	g.Expect(os.WriteFile(allow, []byte("echo **\n"), 0o600)).To(Succeed())
	const key = "sk-node-limit-0123456789"
	p := pair(t, device.Config{Capabilities: []string{node.ActionRun}, Allowlist: allow, APIKey: key}, true)

	ctx, cancel := context.WithCancel(context.Background())
	var limited atomic.Int64
	var hammer sync.WaitGroup
	hammer.Go(func() {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/nodes", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			_ = res.Body.Close()
			if res.StatusCode == http.StatusTooManyRequests {
				limited.Add(1)
			}
		}
	})
	defer func() { cancel(); hammer.Wait() }()
	g.Eventually(limited.Load).WithTimeout(30*time.Second).Should(BeNumerically(">", 0), "the key's limit is used up")
	before := limited.Load()
	for i := range 10 {
		params, _ := json.Marshal(node.RunParams{Command: []string{"echo", strconv.Itoa(i)}})
		r, err := p.svc.Invoke(p.ctx, p.id, node.Invoke{Action: node.ActionRun, Params: params}, 10*time.Second)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Stdout).To(Equal(strconv.Itoa(i) + "\n"))
	}
	g.Expect(limited.Load()).To(BeNumerically(">", before), "other requests were refused meanwhile")
}

func TestAllowlistPatterns(t *testing.T) {
	dir := t.TempDir()
	allow := filepath.Join(dir, "allowlist")
	if err := os.WriteFile(allow, []byte("echo **\nuname -a\nls /tmp/*\n# rm **\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := device.New(device.Config{Gateway: "http://127.0.0.1:1", ID: "x", Capabilities: []string{node.ActionRun}, Allowlist: allow})
	if err != nil {
		t.Fatal(err)
	}
	for argv, want := range map[string]bool{
		"echo":        true,
		"echo a b":    true,
		"/bin/echo a": false,
		"uname -a":    true,
		"uname":       false,
		"uname -a -r": false,
		"ls /tmp/x":   true,
		"ls /tmp/x/y": false,
		"rm -rf /":    false,
		"sh -c echo":  false,
	} {
		r := n.Handle(context.Background(), node.Invoke{Action: node.ActionRun, TimeoutMS: 2000,
			Params: must(json.Marshal(node.RunParams{Command: strings.Fields(argv)}))})
		// Without a prompter a command off the allowlist is denied; one on
		// it runs (and may fail: only the denial matters here).
		denied := r.Code == node.CodeDenied
		if denied == want {
			t.Errorf("%q: allowed=%t, want %t (%s)", argv, !denied, want, r.Error)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkNodeRunRoundTrip is the round trip of `nodes run ["echo","hi"]`
// from the gateway's node service over the WebSocket to a node client and
// back (the command allowlisted, so no prompt), p50/p99.
func BenchmarkNodeRunRoundTrip(b *testing.B) {
	dir := b.TempDir()
	allow := filepath.Join(dir, "allowlist")
	if err := os.WriteFile(allow, []byte("echo **\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	p := pair(b, device.Config{Capabilities: []string{node.ActionRun}, Allowlist: allow}, true)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		r, err := p.run("echo", "hi")
		if err != nil || r.Stdout != "hi\n" {
			b.Fatalf("run: %v %+v", err, r)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkNodeIdleRSS is the resident memory of the picobot-node binary
// paired, approved and idle for a second. Target: under 20 MB.
func BenchmarkNodeIdleRSS(b *testing.B) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "picobot-node")
	build := exec.Command("go", "build", "-o", bin, "./runtime/cmd/picobot-node")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	env := embeddedtest.Start(b, embeddedtest.Options{Nodes: true})
	svc, ctx := env.Runtime.Nodes(), store.WithTenant(context.Background(), env.Runtime.Tenant())
	for i := 0; i < b.N; i++ {
		state := b.TempDir()
		cmd := exec.Command(bin, "--url", env.URL, "--state", state, "--no-prompt")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var id string
		deadline := time.Now().Add(30 * time.Second)
		for id == "" && time.Now().Before(deadline) {
			list, _ := svc.List(ctx, store.NodePending)
			for _, n := range list {
				if n.Connected {
					id = n.ID
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if id == "" {
			b.Fatal("the node did not pair")
		}
		if _, err := svc.Decide(ctx, id, node.DecisionApprove); err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Second) // idle
		b.ReportMetric(float64(rssKB(cmd.Process.Pid))/1024, "MB-rss-idle")
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

func rssKB(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
