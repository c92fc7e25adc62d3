package imagetool_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
	"github.com/picobot/picobot/runtime/tool/imagetool"
	"github.com/picobot/picobot/runtime/tool/web"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

var protocols = []string{provider.OpenAI, provider.Anthropic}

func dotPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(w/2, h/2, color.RGBA{R: 255, A: 255})
	var buf bytes.Buffer
	NewWithT(t).Expect(png.Encode(&buf, img)).To(Succeed())
	return buf.Bytes()
}

// harness is the image tool on a fake image model of one protocol, a
// workspace with dot.png and a local web server reachable through a guard
// that allows it (web_fetch's tests do the same).
type harness struct {
	llm   *fakellm.Server
	reg   *tool.Registry
	env   tool.Env
	pic   []byte
	site  string
	guard *netguard.Guard
}

func newHarness(t *testing.T, proto string) *harness {
	t.Helper()
	g := NewWithT(t)
	h := &harness{llm: fakellm.New(), pic: dotPNG(t, 40, 20), env: tool.Env{Workspace: t.TempDir()}}
	t.Cleanup(h.llm.Close)
	g.Expect(os.WriteFile(filepath.Join(h.env.Workspace, "dot.png"), h.pic, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(h.env.Workspace, "big.png"), append(dotPNG(t, 40, 20), make([]byte, 3<<20)...), 0o600)).To(Succeed())
	mux := http.NewServeMux()
	mux.HandleFunc("/dot.png", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream") // judged by the bytes
		_, _ = w.Write(h.pic)
	})
	mux.HandleFunc("/page", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>not a picture</body></html>"))
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dot.png", http.StatusFound)
	})
	mux.HandleFunc("/huge.png", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(h.pic)
		_, _ = w.Write(make([]byte, 2<<20))
	})
	srv := httptest.NewServer(mux)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	h.site = fmt.Sprintf("http://pics.test:%d", port)
	h.guard = netguard.New(
		netguard.WithResolver(netguard.ResolverFunc(func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "pics.test" {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		})),
		netguard.AllowPrefixes(netip.MustParsePrefix("127.0.0.1/32")),
	)
	t.Cleanup(func() {
		h.guard.CloseIdleConnections()
		srv.Close()
	})
	base := h.llm.URL()
	if proto == provider.Anthropic {
		base = h.llm.AnthropicURL()
	}
	p, err := provider.New(provider.Config{Provider: proto, Model: "eye-model", BaseURL: base, APIKey: "sk-eye"})
	g.Expect(err).NotTo(HaveOccurred())
	reg, err := tool.NewRegistry(imagetool.New(imagetool.Config{Provider: p, Model: proto + "/eye-model", Guard: h.guard}))
	g.Expect(err).NotTo(HaveOccurred())
	h.reg = reg
	return h
}

func (h *harness) call(args string) tool.Result {
	return h.reg.Execute(context.Background(), h.env, llm.ToolCall{ID: "c1", Name: "image", Arguments: args})
}

// imagePart returns the base64 data and media type of the one image of the
// recorded request, read from the body in the protocol's shape.
func imagePart(t *testing.T, proto string, body []byte) (data, mediaType string) {
	t.Helper()
	var req struct {
		Messages []struct {
			Content []struct {
				Type     string `json:"type"`
				ImageURL struct {
					URL string `json:"url"`
				} `json:"image_url"`
				Source struct {
					Type      string `json:"type"`
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
			} `json:"content"`
		} `json:"messages"`
	}
	g := NewWithT(t)
	g.Expect(json.Unmarshal(body, &req)).To(Succeed(), string(body))
	g.Expect(req.Messages).To(HaveLen(1))
	for _, c := range req.Messages[0].Content {
		switch {
		case proto == provider.OpenAI && c.Type == "image_url":
			g.Expect(c.ImageURL.URL).To(HavePrefix("data:"))
			mt, b64, ok := strings.Cut(c.ImageURL.URL[len("data:"):], ";base64,")
			g.Expect(ok).To(BeTrue())
			return b64, mt
		case proto == provider.Anthropic && c.Type == "image":
			g.Expect(c.Source.Type).To(Equal("base64"))
			return c.Source.Data, c.Source.MediaType
		}
	}
	t.Fatalf("no image part in %s", body)
	return "", ""
}

// The image tool sends the image and the prompt (the reference's default
// when none is given) to the image model, on both protocols, and returns
// its answer; model asks another model at the same endpoint; an image URL is
// fetched through the guard.
func TestImageAsksTheImageModel(t *testing.T) {
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			h := newHarness(t, proto)
			want := base64.StdEncoding.EncodeToString(h.pic)

			h.llm.Script(fakellm.Turn{Text: "A red dot on black."})
			res := h.call(`{"image":"dot.png"}`)
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			g.Expect(res.Content).To(Equal(web.WrapUntrusted("dot.png", "A red dot on black.") +
				fmt.Sprintf("\n\n[dot.png: image/png, %d bytes, 40x20 pixels; answered by eye-model]", len(h.pic))))
			reqs := h.llm.Requests()
			g.Expect(reqs).To(HaveLen(1))
			g.Expect(reqs[0].Model).To(Equal("eye-model"))
			g.Expect(reqs[0].Tools).To(BeEmpty())
			g.Expect(reqs[0].Messages).To(HaveLen(1))
			g.Expect(reqs[0].Messages[0].Role).To(Equal("user"))
			g.Expect(reqs[0].Messages[0].Content).To(Equal(imagetool.DefaultPrompt))
			g.Expect(reqs[0].Messages[0].Images).To(Equal(1))
			data, mt := imagePart(t, proto, reqs[0].Body)
			g.Expect(data).To(Equal(want))
			g.Expect(mt).To(Equal("image/png"))

			h.llm.Script(fakellm.Turn{Text: "One dot."})
			res = h.call(`{"image":"dot.png","prompt":"How many dots?","model":"other-eye"}`)
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			g.Expect(res.Content).To(ContainSubstring(web.BeginUntrusted+` source="dot.png">>>`+"\nOne dot.\n"+web.EndUntrusted+"\n\n[dot.png"),
				"the answer inside the untrusted-content markers")
			last := h.llm.Requests()[1]
			g.Expect(last.Model).To(Equal("other-eye"), "the model override")
			g.Expect(last.Messages[0].Content).To(Equal("How many dots?"))

			h.llm.Script(fakellm.Turn{Text: "From the web."})
			res = h.call(fmt.Sprintf(`{"image":%q}`, h.site+"/dot.png"))
			g.Expect(res.IsError).To(BeFalse(), res.Content)
			g.Expect(res.Content).To(ContainSubstring("\nFrom the web.\n" + web.EndUntrusted + "\n\n[" + h.site + "/dot.png: image/png"))
			data, _ = imagePart(t, proto, h.llm.Requests()[2].Body)
			g.Expect(data).To(Equal(want), "the fetched bytes")
		})
	}
}

// Images over maxBytesMb (5 MB by default), images that are not images,
// URLs the guard refuses, redirects and invalid arguments are tool errors,
// and the image model is not asked.
func TestImageRefusals(t *testing.T) {
	h := newHarness(t, provider.OpenAI)
	cases := []struct{ name, args, want string }{
		{"a file over maxBytesMb", `{"image":"big.png","maxBytesMb":1}`, "error: big.png is larger than 1048576 bytes (1.0 MB), the limit for images."},
		{"a URL over maxBytesMb", fmt.Sprintf(`{"image":%q,"maxBytesMb":0.5}`, h.site+"/huge.png"),
			"error: the image at " + h.site + "/huge.png is larger than the 524288-byte (0.5 MB) limit; pass a larger maxBytesMb if that is intended."},
		{"a web page", fmt.Sprintf(`{"image":%q}`, h.site+"/page"),
			`error: ` + h.site + `/page returned text/html; charset=utf-8 content (declared "text/html"), not a PNG, JPEG, GIF or WebP image.`},
		{"a redirect is not followed", fmt.Sprintf(`{"image":%q}`, h.site+"/moved"), "error: " + h.site + "/moved answered HTTP 302 Found.\nThe server redirects to " + h.site + "/dot.png. Redirects are not followed automatically: call image again with that URL if you want it (it will be checked again)."},
		{"a private address", `{"image":"http://10.0.0.1/x.png"}`, "error: refused: "},
		{"another scheme", `{"image":"file:///etc/passwd"}`, `error: image "file:///etc/passwd" has the scheme "file"; pass a workspace path or an http(s) URL.`},
		{"a missing file", `{"image":"nope.png"}`, "error: "},
		{"outside the workspace", `{"image":"../../etc/hostname"}`, "error: "},
		{"an empty image", `{"image":"  "}`, "error: image is empty. Pass a workspace path or an http(s) URL of the image."},
		{"no image argument", `{"prompt":"hi"}`, "error: invalid arguments for image"},
		{"maxBytesMb above 20", `{"image":"dot.png","maxBytesMb":50}`, "error: invalid arguments for image"},
		{"maxBytesMb zero or less", `{"image":"dot.png","maxBytesMb":-1}`, "error: invalid arguments for image"},
		{"an unknown argument", `{"image":"dot.png","detail":"high"}`, "error: invalid arguments for image"},
		{"not JSON", `{"image":`, "error: invalid arguments for image"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := h.call(tc.args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(HavePrefix(tc.want))
		})
	}
	NewWithT(t).Expect(h.llm.Requests()).To(BeEmpty(), "the image model was never asked")

	t.Run("the default limit is 5 MB", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(os.WriteFile(filepath.Join(h.env.Workspace, "huge.png"), append(dotPNG(t, 4, 4), make([]byte, 5<<20)...), 0o600)).To(Succeed())
		res := h.call(`{"image":"huge.png"}`)
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(res.Content).To(Equal("error: huge.png is larger than 5242880 bytes (5.0 MB), the limit for images."))
		h.llm.Script(fakellm.Turn{Text: "big but allowed"})
		res = h.call(`{"image":"huge.png","maxBytesMb":6}`)
		g.Expect(res.IsError).To(BeFalse(), res.Content)
		g.Expect(res.Content).To(ContainSubstring("\nbig but allowed\n" + web.EndUntrusted))
	})

	t.Run("the image model failing is a tool error", func(t *testing.T) {
		g := NewWithT(t)
		h.llm.Script(fakellm.Turn{Status: http.StatusBadRequest, ErrorBody: "model cannot read images"})
		res := h.call(`{"image":"dot.png"}`)
		g.Expect(res.IsError).To(BeTrue())
		g.Expect(res.Content).To(HavePrefix("error: the image model openai/eye-model did not answer: "))
		g.Expect(res.Content).To(ContainSubstring("model cannot read images"))
	})
}

// With the agent's file_read (the sandbox container's in cluster mode),
// workspace images are read through it, with the same limits and errors.
func TestImageReadsWithFileRead(t *testing.T) {
	g := NewWithT(t)
	h := newHarness(t, provider.Anthropic)
	p, err := provider.New(provider.Config{Provider: provider.Anthropic, Model: "eye-model", BaseURL: h.llm.AnthropicURL(), APIKey: "sk-eye"})
	g.Expect(err).NotTo(HaveOccurred())
	reg, err := tool.NewRegistry(imagetool.New(imagetool.Config{Provider: p, Model: "anthropic/eye-model", Guard: h.guard, FileRead: fs.NewFileRead()}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(h.env.Workspace, "notes.txt"), []byte("text\n"), 0o600)).To(Succeed())
	run := func(args string) tool.Result {
		return reg.Execute(context.Background(), h.env, llm.ToolCall{ID: "c", Name: "image", Arguments: args})
	}

	h.llm.Script(fakellm.Turn{Text: "A dot."})
	res := run(`{"image":"dot.png"}`)
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	data, _ := imagePart(t, provider.Anthropic, h.llm.Requests()[0].Body)
	g.Expect(data).To(Equal(base64.StdEncoding.EncodeToString(h.pic)))

	for args, want := range map[string]string{
		`{"image":"big.png","maxBytesMb":1}`: "error: big.png is larger than 1048576 bytes (1.0 MB), the limit for images.",
		`{"image":"notes.txt"}`:              "error: notes.txt is not a PNG, JPEG, GIF or WebP image.",
		`{"image":"missing.png"}`:            "error: ",
		`{"image":"../../etc/hostname"}`:     "error: ",
	} {
		res := run(args)
		g.Expect(res.IsError).To(BeTrue(), args)
		g.Expect(res.Content).To(HavePrefix(want), args)
	}
	g.Expect(h.llm.Requests()).To(HaveLen(1))
}
