package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// testPNG encodes a w x h PNG of seeded noise, which compresses about as
// badly as a photo, so its size is that of a real picture.
func testPNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rnd := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(rnd.Uint32()), G: uint8(x * 7), B: uint8(y * 13), A: 255})
		}
	}
	var buf bytes.Buffer
	NewWithT(t).Expect(png.Encode(&buf, img)).To(Succeed())
	return buf.Bytes()
}

// wireImages returns the base64 data of every image part of a recorded
// request body, in the protocol's own shape: OpenAI image_url parts with a
// data: URL in user messages (tool messages carry text only), Anthropic
// image blocks with a base64 source inside tool_result content.
func wireImages(t *testing.T, proto string, body []byte) (images []string, placement []string) {
	t.Helper()
	g := NewWithT(t)
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	g.Expect(json.Unmarshal(body, &req)).To(Succeed())
	type block struct {
		Type     string `json:"type"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
		Source *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		} `json:"source"`
		Content json.RawMessage `json:"content"`
	}
	for _, m := range req.Messages {
		var blocks []block
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue // a plain string
		}
		for _, b := range blocks {
			switch {
			case proto == provider.OpenAI && b.Type == "image_url":
				g.Expect(b.ImageURL).NotTo(BeNil())
				g.Expect(b.ImageURL.URL).To(HavePrefix("data:image/png;base64,"))
				images = append(images, b.ImageURL.URL[len("data:image/png;base64,"):])
				placement = append(placement, m.Role)
			case proto == provider.Anthropic && b.Type == "tool_result":
				var inner []block
				if json.Unmarshal(b.Content, &inner) != nil {
					continue
				}
				for _, ib := range inner {
					if ib.Type == "image" {
						g.Expect(ib.Source.Type).To(Equal("base64"))
						g.Expect(ib.Source.MediaType).To(Equal("image/png"))
						images = append(images, ib.Source.Data)
						placement = append(placement, m.Role+"/tool_result")
					}
				}
			case b.Type == "image":
				images = append(images, b.Source.Data)
				placement = append(placement, m.Role)
			}
		}
	}
	return images, placement
}

// imageTurn runs a turn where the model reads shot.png with file_read and
// then answers, and returns the requests the fake model received.
func imageTurn(t *testing.T, proto string, im Images, pic []byte) ([]fakellm.Recorded, *Output) {
	t.Helper()
	g := NewWithT(t)
	ws := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(ws, "shot.png"), pic, 0o600)).To(Succeed())
	s := fakellm.New()
	t.Cleanup(s.Close)
	s.Script(
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "c1", Name: "file_read", Args: `{"path":"shot.png"}`}}},
		fakellm.Turn{Text: "A striped picture."},
	)
	reg, err := tool.NewRegistry(fs.NewFileRead())
	g.Expect(err).NotTo(HaveOccurred())
	loop := &Loop{Provider: newProvider(t, s, proto), Tools: reg, Images: im}
	out, err := loop.Run(context.Background(), Input{
		History: []llm.Message{{Role: llm.RoleUser, Content: "What is in shot.png?"}},
		Env:     tool.Env{Workspace: ws},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Final).To(Equal("A striped picture."))
	reqs := s.Requests()
	g.Expect(reqs).To(HaveLen(2))
	return reqs, out
}

// An image file the model reads with file_read reaches a vision model as
// an image part of the follow-up request, in each protocol's shape, with
// the exact bytes of the file; the tool's text says what it is.
func TestToolImagesReachAVisionModel(t *testing.T) {
	pic := testPNG(t, 320, 240)
	for _, proto := range protocols {
		t.Run(proto, func(t *testing.T) {
			g := NewWithT(t)
			reqs, out := imageTurn(t, proto, Images{Accept: true}, pic)
			first, _ := wireImages(t, proto, reqs[0].Body)
			g.Expect(first).To(BeEmpty())
			images, placement := wireImages(t, proto, reqs[1].Body)
			g.Expect(images).To(Equal([]string{base64.StdEncoding.EncodeToString(pic)}))
			if proto == provider.OpenAI {
				g.Expect(placement).To(Equal([]string{"user"}), "OpenAI tool messages carry text only: a user message after the tool results")
				msgs := reqs[1].Messages
				g.Expect(msgs[len(msgs)-2].Role).To(Equal("tool"))
				g.Expect(msgs[len(msgs)-1].Role).To(Equal("user"))
				g.Expect(msgs[len(msgs)-1].Images).To(Equal(1))
			} else {
				g.Expect(placement).To(Equal([]string{"user/tool_result"}), "inside the tool_result content")
			}
			res := out.New[1]
			g.Expect(res.Role).To(Equal(llm.RoleTool))
			g.Expect(res.Content).To(Equal("Image shot.png: image/png, " + itoa(len(pic)) + " bytes, 320x240 pixels. It is attached for you to look at."))
			g.Expect(res.Images).To(Equal([]llm.Image{{MediaType: "image/png", Data: pic}}), "stored with the history, for later turns")
			t.Logf("%s: follow-up request with one %d-byte PNG: %d bytes (first request %d bytes)", proto, len(pic), len(reqs[1].Body), len(reqs[0].Body))
		})
	}
}

// A model that does not accept images gets no image part, and a short note
// in the tool result saying an image was there; an image over the size
// limit is replaced by a note too.
func TestToolImagesNotShown(t *testing.T) {
	pic := testPNG(t, 64, 48)
	cases := []struct {
		name string
		im   Images
		note string
	}{
		{"model without vision", Images{}, "[image shot.png (image/png, " + itoa(len(pic)) + " bytes) not shown: this model does not accept images]"},
		{"image over the limit", Images{Accept: true, MaxBytes: 100},
			"[image shot.png (image/png, " + itoa(len(pic)) + " bytes) not shown: larger than the 100-byte limit for images sent to the model]"},
	}
	for _, tc := range cases {
		for _, proto := range protocols {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				g := NewWithT(t)
				reqs, _ := imageTurn(t, proto, tc.im, pic)
				images, _ := wireImages(t, proto, reqs[1].Body)
				g.Expect(images).To(BeEmpty())
				for _, m := range reqs[1].Messages {
					g.Expect(m.Images).To(BeZero())
				}
				g.Expect(string(reqs[1].Body)).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString(pic[:30])))
				var results []string
				for _, m := range reqs[1].Messages {
					for _, r := range m.ToolResults {
						results = append(results, r.Content)
					}
				}
				g.Expect(results).To(HaveLen(1))
				g.Expect(results[0]).To(HaveSuffix("It is attached for you to look at.\n" + tc.note))
			})
		}
	}
}

// A request carries at most MaxPerRequest images, the newest; older ones
// give way to a note (they stay in the stored history).
func TestImagesPerRequestAreBounded(t *testing.T) {
	im := Images{Accept: true, MaxPerRequest: 2}
	img := func(b byte) llm.Image { return llm.Image{MediaType: "image/png", Data: []byte{b}} }
	history := []llm.Message{
		{Role: llm.RoleUser, Content: "look", Images: []llm.Image{img(1), img(2)}},
		{Role: llm.RoleAssistant, Content: "ok"},
		{Role: llm.RoleUser, Content: "and these", Images: []llm.Image{img(3)}},
		{Role: llm.RoleTool, Content: "shot", Images: []llm.Image{img(4)}},
	}
	g := NewWithT(t)
	got := im.limit(history)
	g.Expect(got[3].Images).To(Equal([]llm.Image{img(4)}))
	g.Expect(got[2].Images).To(Equal([]llm.Image{img(3)}))
	g.Expect(got[0].Images).To(BeEmpty())
	g.Expect(got[0].Content).To(Equal("look\n[2 earlier image(s) omitted from this request]"))
	g.Expect(history[0].Images).To(HaveLen(2), "the history itself is not modified")

	none := Images{}.limit(history)
	for _, m := range none {
		g.Expect(m.Images).To(BeEmpty(), "a model without vision gets none, even from earlier turns")
	}
	g.Expect(none[3].Content).To(Equal("shot\n[1 earlier image(s) omitted from this request]"))
}

func itoa(n int) string { return strconv.Itoa(n) }
