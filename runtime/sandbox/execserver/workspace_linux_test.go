//go:build linux

package execserver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/tool"
	browsertool "github.com/picobot/picobot/runtime/tool/browser"
	"github.com/picobot/picobot/runtime/tool/builtin"
	"github.com/picobot/picobot/runtime/tool/imagetool"
	"github.com/picobot/picobot/runtime/tool/messaging"
)

// relayedPod is a sandbox pod as a session pod's runtime reaches it: the
// runtime's workspace folder (ws, under its own root) is not the sandbox
// pod's (p.ws), as in two pods, and the runtime's tools reach the server
// through the runtime's relay at socket, which copies the uploads over.
type relayedPod struct {
	p      *pod
	ws     string
	socket string
	client *execserver.Client
}

func newRelayedSandboxPod(t testing.TB) *relayedPod {
	t.Helper()
	p := newSandboxPod(t)
	runtimeRoot := filepath.Join(p.root, "runtime-workspaces")
	r := &relayedPod{p: p, ws: filepath.Join(runtimeRoot, "s1"), socket: filepath.Join(p.root, "relay.sock")}
	must(t, os.MkdirAll(filepath.Join(r.ws, "uploads"), 0o700))
	remote, err := execserver.NewRemoteClient(execserver.RemoteConfig{CertPEM: p.cred.CertPEM, Token: p.cred.Token, Root: runtimeRoot,
		Address: func(context.Context, string) (string, error) { return p.addr, nil }})
	must(t, err)
	relay := &execserver.Relay{Socket: r.socket, Client: remote, Mirror: []string{"uploads"}}
	l, err := relay.Listen()
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); must(t, <-done) })
	r.client = execserver.NewClient(r.socket)
	return r
}

// run runs argv in the runtime's workspace through the relay, stdin on
// its input, and returns its output.
func (r *relayedPod) run(t testing.TB, stdin []byte, argv ...string) string {
	t.Helper()
	out, w, err := os.Pipe()
	must(t, err)
	defer func() { _ = out.Close() }()
	in, inW, err := os.Pipe()
	must(t, err)
	go func() { _, _ = inW.Write(stdin); _ = inW.Close() }()
	proc, err := r.client.Start(execserver.Request{Workspace: r.ws, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + r.ws}, Argv: argv}, in, w, w)
	_ = w.Close()
	_ = in.Close()
	must(t, err)
	b, _ := io.ReadAll(out)
	_, _, _ = proc.Wait()
	proc.Close()
	return string(b)
}

// env is a tool call's environment in the runtime's workspace.
func (r *relayedPod) env() tool.Env {
	return tool.Env{Workspace: r.ws, SessionID: "web:bot/alice:default", Agent: "bot"}
}

func dotPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(w/2, h/2, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	must(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// The runtime's workspace and the sandbox pod's are different folders (as
// in two pods): the runtime's paths are mapped onto the server's, and the
// files the runtime itself writes there (a chat message's uploads) are
// copied over before the next program, again when they change.
func TestSandboxPodRelayMirrorsUploads(t *testing.T) {
	g := NewWithT(t)
	r := newRelayedSandboxPod(t)
	must(t, os.WriteFile(filepath.Join(r.ws, "uploads", "data.csv"), []byte("a,b\n1,2\n"), 0o600))

	g.Expect(r.run(t, nil, "sh", "-c", `pwd; cat uploads/data.csv; echo "$HOME"`)).To(Equal(r.p.ws + "\na,b\n1,2\n" + r.p.ws + "\n"))
	g.Expect(os.ReadFile(filepath.Join(r.p.ws, "uploads", "data.csv"))).To(BeEquivalentTo("a,b\n1,2\n"))
	must(t, os.WriteFile(filepath.Join(r.ws, "uploads", "data.csv"), []byte("changed\n"), 0o600))
	g.Expect(r.run(t, nil, "cat", "uploads/data.csv")).To(Equal("changed\n"))
}

// A program in a sandbox pod draws a chart and writes a report: the image
// tool shows the chart to the image model and send_message attaches both
// to the reply, reading them from the sandbox pod's workspace through the
// relay (the runtime's own folder never holds them). The reads keep the
// file tools' confinement (no "..", no symlink out) and the attachment
// bound.
func TestSandboxPodRuntimeReadsProgramsFiles(t *testing.T) {
	g := NewWithT(t)
	r := newRelayedSandboxPod(t)
	pic := dotPNG(t, 40, 20)
	out := r.run(t, []byte(base64.StdEncoding.EncodeToString(pic)), "sh", "-c",
		`mkdir out && base64 -d > out/chart.png && echo 'tickets: 42' > out/report.txt && ln -s /etc/hostname out/link.txt && `+
			`head -c 2000000 /dev/zero > out/big.bin && echo written`)
	g.Expect(out).To(Equal("written\n"))
	g.Expect(filepath.Join(r.p.ws, "out", "chart.png")).To(BeAnExistingFile())
	g.Expect(filepath.Join(r.ws, "out")).NotTo(BeAnExistingFile(), "the runtime's folder holds none of the programs' files")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The image tool reads the chart with the agent's file_read (the
	// sandbox's), and the image model gets the picture.
	model := fakellm.New()
	defer model.Close()
	model.Script(fakellm.Turn{Text: "A red dot on black."})
	prov, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "eye-model", BaseURL: model.URL(), APIKey: "sk-eye"})
	g.Expect(err).NotTo(HaveOccurred())
	set, err := builtin.New(builtin.Config{ExecServer: r.socket})
	g.Expect(err).NotTo(HaveOccurred())
	defer set.Close()
	fileRead, ok := set.Registry.Get("file_read")
	g.Expect(ok).To(BeTrue())
	reg, err := tool.NewRegistry(imagetool.New(imagetool.Config{Provider: prov, Model: "openai/eye-model", FileRead: fileRead}))
	g.Expect(err).NotTo(HaveOccurred())
	res := reg.Execute(ctx, r.env(), llm.ToolCall{ID: "c1", Name: "image", Arguments: `{"image":"out/chart.png","prompt":"What is it?"}`})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(ContainSubstring("A red dot on black."))
	g.Expect(res.Content).To(ContainSubstring("out/chart.png: image/png, "))
	g.Expect(res.Content).To(ContainSubstring("40x20 pixels"))
	reqs := model.Requests()
	g.Expect(reqs).To(HaveLen(1))
	g.Expect(reqs[0].Messages).To(HaveLen(1))
	g.Expect(reqs[0].Messages[0].Images).To(Equal(1))
	g.Expect(string(reqs[0].Body)).To(ContainSubstring("data:image/png;base64," + base64.StdEncoding.EncodeToString(pic)))

	// send_message to this conversation attaches what the program wrote.
	feat := messaging.NewFeature(messaging.Options{Files: execserver.WorkspaceFiles(r.client), MaxFileBytes: 1 << 20})
	parts, err := feat.Build(ctx, &feature.Agent{Spec: &picobotv1alpha1.Agent{ObjectMeta: metav1.ObjectMeta{Name: "bot"}}, Host: &feature.Host{Tenant: "t"}})
	g.Expect(err).NotTo(HaveOccurred())
	reg, err = tool.NewRegistry(parts.Tools...)
	g.Expect(err).NotTo(HaveOccurred())
	send := func(files ...string) tool.Result {
		raw, _ := json.Marshal(map[string]any{"target_chat_id": "web:bot/alice", "content": "here", "files": files})
		return reg.Execute(ctx, r.env(), llm.ToolCall{ID: "s1", Name: "send_message", Arguments: string(raw)})
	}
	res = send("out/chart.png", "out/report.txt")
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HavePrefix("Attached chart.png, report.txt to your reply"))
	g.Expect(res.Artifacts).To(Equal([]tool.Artifact{
		{Name: "chart.png", MediaType: "image/png", Data: pic, PresentToUser: true},
		{Name: "report.txt", MediaType: "text/plain; charset=utf-8", Data: []byte("tickets: 42\n"), PresentToUser: true},
	}))
	for file, want := range map[string]string{
		"out/link.txt":    "leads outside the workspace",
		"../s2/x.txt":     "outside the workspace",
		"/etc/hostname":   "outside the workspace",
		"out/big.bin":     "has 2000000 bytes, more than the 1048576 byte limit",
		"out/missing.txt": "does not exist",
		"out":             "is a folder",
	} {
		res = send(file)
		g.Expect(res.IsError).To(BeTrue(), file)
		g.Expect(res.Content).To(ContainSubstring(want), file)
		g.Expect(res.Content).To(HaveSuffix(". Nothing was sent."), file)
		g.Expect(res.Content).NotTo(ContainSubstring(".. "), file)
	}
}

// What the runtime writes into the workspace (a node's photo) lands in the
// sandbox pod's, where the programs read it, as the sandbox's user; a path
// out of the workspace is refused.
func TestSandboxPodRuntimeWritesForThePrograms(t *testing.T) {
	g := NewWithT(t)
	r := newRelayedSandboxPod(t)
	files := execserver.WorkspaceFiles(r.client)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	photo := append([]byte("\xff\xd8\xff\xe0"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 1000)...)
	g.Expect(files.WriteFile(ctx, r.env(), "nodes/n1/snap.jpg", photo)).To(Succeed())
	g.Expect(r.run(t, nil, "sh", "-c", "stat -c '%u %s' nodes/n1/snap.jpg")).To(Equal("65533 4004\n"))
	g.Expect(os.ReadFile(filepath.Join(r.p.ws, "nodes", "n1", "snap.jpg"))).To(Equal(photo))
	g.Expect(filepath.Join(r.ws, "nodes")).NotTo(BeAnExistingFile())
	// Read back through the same path, and replaced.
	got, err := files.ReadFile(ctx, r.env(), "nodes/n1/snap.jpg", 1<<20)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(photo))
	g.Expect(files.WriteFile(ctx, r.env(), "nodes/n1/snap.jpg", []byte("v2"))).To(Succeed())
	g.Expect(r.run(t, nil, "cat", "nodes/n1/snap.jpg")).To(Equal("v2"))

	r.run(t, nil, "ln", "-s", "/tmp", "out")
	for p, want := range map[string]string{
		"../s2/x":             "outside the workspace",
		"/etc/x":              "outside the workspace",
		"out/podrelay-escape": "leads outside the workspace",
		"nodes/n1/a/b":        "",
	} {
		err := files.WriteFile(ctx, r.env(), p, []byte("x"))
		if want == "" {
			g.Expect(err).NotTo(HaveOccurred(), p)
			continue
		}
		g.Expect(err).To(MatchError(ContainSubstring(want)), p)
	}
	g.Expect("/tmp/podrelay-escape").NotTo(BeAnExistingFile())
	g.Expect(strings.TrimSpace(r.run(t, nil, "cat", "nodes/n1/a/b"))).To(Equal("x"))
}

// The browser tool uploads a file a program in the sandbox pod wrote into
// a page's file input of real Chromium, reading it through the relay; a
// file out of the workspace or over the upload limit is refused.
func TestSandboxPodBrowserUploadsProgramsFile(t *testing.T) {
	if err := driver.CheckExecutable(driver.DefaultBin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Chromium is required: %v", err)
		}
		t.Skipf("Chromium is not installed: %v (run hack/chromium.sh)", err)
	}
	g := NewWithT(t)
	r := newRelayedSandboxPod(t)
	g.Expect(r.run(t, nil, "sh", "-c", "echo 'name,score' > cv.csv && ln -s /etc/hostname host && head -c 21000000 /dev/zero > big.bin && echo ok")).To(Equal("ok\n"))
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>Upload</title><label>Attach <input type="file" `+
			`onchange="document.getElementById('out').textContent = 'got ' + this.files[0].name + ' ' + this.files[0].size"></label><p id="out"></p>`)
	}))
	defer site.Close()
	resolver := netguard.ResolverFunc(func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	})
	drv := driver.NewDriver(driver.Config{
		Guard:    netguard.New(netguard.AllowPrefixes(netip.MustParsePrefix("127.0.0.0/8")), netguard.WithResolver(resolver)),
		Resolver: resolver, TempDir: t.TempDir(), Limits: driver.Limits{Navigation: 10 * time.Second, Action: 10 * time.Second},
	})
	defer drv.Close()
	reg, err := tool.NewRegistry(browsertool.NewTool(browsertool.Options{Driver: drv, Agent: "bot", Files: execserver.WorkspaceFiles(r.client)}))
	g.Expect(err).NotTo(HaveOccurred())
	call := func(args map[string]any) tool.Result {
		raw, _ := json.Marshal(args)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return reg.Execute(ctx, r.env(), llm.ToolCall{ID: "b1", Name: "browser", Arguments: string(raw)})
	}
	res := call(map[string]any{"action": "open", "url": site.URL})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	res = call(map[string]any{"action": "snapshot"})
	g.Expect(res.Content).To(ContainSubstring(`button "Attach" [ref=@e1`))
	res = call(map[string]any{"action": "upload", "ref": "@e1", "paths": []string{"cv.csv"}})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(call(map[string]any{"action": "get_text"}).Content).To(ContainSubstring("got cv.csv 11"))
	for p, want := range map[string]string{"host": "leads outside the workspace", "../s2/cv.csv": "outside the workspace", "nope.csv": "does not exist",
		"big.bin": "big.bin has 21000000 bytes, more than the 20971520 byte limit"} {
		res = call(map[string]any{"action": "upload", "ref": "@e1", "paths": []string{p}})
		g.Expect(res.IsError).To(BeTrue(), p)
		g.Expect(res.Content).To(ContainSubstring(want), p)
	}
}

// BenchmarkImageReadSandboxPod is the added latency of the runtime's own
// reads of a workspace file in a sandbox pod, through the relay, TLS and
// the pod's server, against the same read of the runtime's own folder,
// run alternately so both see the same load: "image" is an image tool call
// on a 256x256 PNG of noise (about 260 kB; the image model is the fake
// one, the same for both), "attachment" a send_message attachment's read
// of the same file (WorkspaceFiles against os.ReadFile). Reports p50/p99 of
// each and of the difference.
func BenchmarkImageReadSandboxPod(b *testing.B) {
	r := newRelayedSandboxPod(b)
	img := image.NewRGBA(image.Rect(0, 0, 256, 256))
	noise := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(noise.Uint32())
	}
	var buf bytes.Buffer
	must(b, png.Encode(&buf, img))
	pic := buf.Bytes()
	b.Logf("the image has %d bytes", len(pic))
	local := filepath.Join(b.TempDir(), "s1")
	must(b, os.MkdirAll(local, 0o700))
	must(b, os.WriteFile(filepath.Join(local, "noise.png"), pic, 0o600))
	r.run(b, pic, "sh", "-c", "cat > noise.png")
	model := fakellm.New()
	defer model.Close()
	model.SetRequestLimit(1)
	model.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "noise"} })
	prov, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "eye-model", BaseURL: model.URL(), APIKey: "sk-eye"})
	must(b, err)
	set, err := builtin.New(builtin.Config{ExecServer: r.socket})
	must(b, err)
	defer set.Close()
	fileRead, _ := set.Registry.Get("file_read")
	direct := imagetool.New(imagetool.Config{Provider: prov, Model: "openai/eye-model"})
	relayed := imagetool.New(imagetool.Config{Provider: prov, Model: "openai/eye-model", FileRead: fileRead})
	files := execserver.WorkspaceFiles(r.client)
	args := json.RawMessage(`{"image":"noise.png"}`)
	ctx := context.Background()
	cases := map[string][2]func() error{
		"image": {
			func() error { return resultErr(direct.Run(ctx, tool.Env{Workspace: local}, args)) },
			func() error { return resultErr(relayed.Run(ctx, r.env(), args)) },
		},
		"attachment": {
			func() error { _, err := os.ReadFile(filepath.Join(local, "noise.png")); return err },
			func() error { _, err := files.ReadFile(ctx, r.env(), "noise.png", 20<<20); return err },
		},
	}
	for _, name := range []string{"image", "attachment"} {
		b.Run(name, func(b *testing.B) {
			var here, pod, added []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := cases[name][0](); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := cases[name][1](); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				here, pod, added = append(here, t1.Sub(t0)), append(pod, t2.Sub(t1)), append(added, t2.Sub(t1)-t1.Sub(t0))
			}
			for _, m := range []struct {
				name string
				lat  []time.Duration
			}{{"local", here}, {"pod", pod}, {"added", added}} {
				slices.Sort(m.lat)
				b.ReportMetric(float64(m.lat[len(m.lat)/2].Microseconds())/1000, m.name+"-p50-ms")
				b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Microseconds())/1000, m.name+"-p99-ms")
			}
		})
	}
}

// resultErr is a tool call's failure: its error, or its error result.
func resultErr(res tool.Result, err error) error {
	if err == nil && res.IsError {
		err = errors.New(res.Content)
	}
	return err
}
