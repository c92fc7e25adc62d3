package browser

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// A screenshot of the real browser reaches a vision model as an image part
// of the step after it, on both protocols: the PNG Chromium made, in the
// request body the fake model recorded.
func TestScreenshotReachesTheModel(t *testing.T) {
	requireChromium(t)
	srv := testSite(t)
	for _, proto := range []string{provider.OpenAI, provider.Anthropic} {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			h := newHarness(t, Options{})
			s := fakellm.New()
			defer s.Close()
			s.Script(
				fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "browser", Args: fmt.Sprintf(`{"action":"open","url":%q}`, srv.URL)}}},
				fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c2", Name: "browser", Args: `{"action":"screenshot","present_to_user":false}`}}},
				fakellm.Turn{Text: "A shop page."},
			)
			base := s.URL()
			if proto == provider.Anthropic {
				base = s.AnthropicURL()
			}
			p, err := provider.New(provider.Config{Provider: proto, Model: "seer", BaseURL: base, APIKey: "k"})
			g.Expect(err).NotTo(HaveOccurred())
			loop := &agent.Loop{Provider: p, Tools: h.reg, Images: agent.Images{Accept: true}}
			out, err := loop.Run(context.Background(), agent.Input{History: []llm.Message{{Role: llm.RoleUser, Content: "What does the shop look like?"}}, Env: h.env})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Final).To(Equal("A shop page."))
			g.Expect(out.Artifacts).To(HaveLen(1))
			shot := out.Artifacts[0].Data

			reqs := s.Requests()
			g.Expect(reqs).To(HaveLen(3))
			for _, r := range reqs[:2] {
				for _, m := range r.Messages {
					g.Expect(m.Images).To(BeZero(), "no image before the screenshot")
				}
			}
			var body struct {
				Messages []struct {
					Role    string          `json:"role"`
					Content json.RawMessage `json:"content"`
				} `json:"messages"`
			}
			g.Expect(json.Unmarshal(reqs[2].Body, &body)).To(Succeed())
			last := body.Messages[len(body.Messages)-1]
			var parts []struct {
				Type     string `json:"type"`
				ImageURL struct {
					URL string `json:"url"`
				} `json:"image_url"`
				Source struct {
					Type      string `json:"type"`
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
				Content []struct {
					Type   string `json:"type"`
					Source struct {
						Type      string `json:"type"`
						MediaType string `json:"media_type"`
						Data      string `json:"data"`
					} `json:"source"`
				} `json:"content"`
			}
			g.Expect(last.Role).To(Equal("user"))
			g.Expect(json.Unmarshal(last.Content, &parts)).To(Succeed())
			var sent string
			if proto == provider.OpenAI {
				// The user message after the tool message: text, then the image.
				g.Expect(parts).To(HaveLen(2))
				g.Expect(parts[1].Type).To(Equal("image_url"))
				sent = parts[1].ImageURL.URL[len("data:image/png;base64,"):]
				g.Expect(parts[1].ImageURL.URL).To(HavePrefix("data:image/png;base64,"))
			} else {
				g.Expect(parts).To(HaveLen(1))
				g.Expect(parts[0].Type).To(Equal("tool_result"))
				g.Expect(parts[0].Content).To(HaveLen(2))
				g.Expect(parts[0].Content[1].Type).To(Equal("image"))
				g.Expect(parts[0].Content[1].Source.MediaType).To(Equal("image/png"))
				sent = parts[0].Content[1].Source.Data
			}
			g.Expect(sent).To(Equal(base64.StdEncoding.EncodeToString(shot)))
			cfg, err := png.DecodeConfig(bytes.NewReader(shot))
			g.Expect(err).NotTo(HaveOccurred())
			t.Logf("%s: screenshot %dx%d, %d bytes; request with it %d bytes", proto, cfg.Width, cfg.Height, len(shot), len(reqs[2].Body))
		})
	}
}
