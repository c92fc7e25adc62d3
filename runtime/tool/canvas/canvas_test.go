package canvas_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/netguard"
	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/canvas"
)

// recordingCanvas is the chat's canvas as the tool sees it (tool.Canvas,
// the boundary to the web client): it records the commands and answers
// with answer.
type recordingCanvas struct {
	got    []tool.CanvasCommand
	answer tool.CanvasAnswer
	err    error
}

func (c *recordingCanvas) Canvas(_ context.Context, cmd tool.CanvasCommand) (tool.CanvasAnswer, error) {
	c.got = append(c.got, cmd)
	return c.answer, c.err
}

func newRegistry(t *testing.T) *tool.Registry {
	t.Helper()
	now := func() time.Time { return time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC) }
	reg, err := tool.NewRegistry(canvas.New(browser.Policy{Guard: netguard.New()}, now))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func run(reg *tool.Registry, c tool.Canvas, args any) tool.Result {
	b, _ := json.Marshal(args)
	return reg.Execute(context.Background(), tool.Env{SessionID: "web:a/c:d", Canvas: c}, llm.ToolCall{ID: "1", Name: canvas.Name, Arguments: string(b)})
}

const form = `{"surfaceUpdate":{"surfaceId":"s","components":[{"id":"root","component":{"Column":{"children":{"explicitList":["b"]}}}},` +
	`{"id":"b","component":{"Button":{"child":"t","action":{"name":"go"}}}},{"id":"t","component":{"Text":{"text":{"literalString":"Go"}}}}]}}
{"dataModelUpdate":{"surfaceId":"s","contents":[{"key":"n","valueNumber":1}]}}

{"beginRendering":{"surfaceId":"s","root":"root"}}
{"deleteSurface":{"surfaceId":"old"}}`

func TestCanvasCommands(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	c := &recordingCanvas{}

	res := run(reg, c, map[string]string{"action": "present"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	res = run(reg, c, map[string]string{"action": "navigate", "url": "https://1.1.1.1/docs"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	res = run(reg, c, map[string]string{"action": "a2ui_push", "jsonl": form})
	g.Expect(res.Content).To(Equal("Pushed 4 A2UI message(s) to the canvas."))
	res = run(reg, c, map[string]string{"action": "a2ui_push", "text": "Hello"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	res = run(reg, c, map[string]string{"action": "a2ui_reset", "surfaceId": "s"})
	g.Expect(res.Content).To(Equal("Removed surface s from the canvas."))
	res = run(reg, c, map[string]string{"action": "hide"})
	g.Expect(res.Content).To(Equal("The canvas is hidden."))

	g.Expect(c.got).To(HaveLen(6))
	g.Expect(c.got[1].URL).To(Equal("https://1.1.1.1/docs"))
	g.Expect(c.got[2].Messages).To(HaveLen(4))
	g.Expect(string(c.got[2].Messages[3])).To(Equal(`{"deleteSurface":{"surfaceId":"old"}}`))
	g.Expect(string(c.got[3].Messages[0])).To(ContainSubstring(`"literalString":"Hello"`))
	g.Expect(c.got[4].SurfaceID).To(Equal("s"))
	for _, cmd := range c.got {
		g.Expect(cmd.Wait).To(BeZero(), "%s does not wait for the client", cmd.Action)
		g.Expect(cmd.SessionID).To(Equal("web:a/c:d"))
	}
}

func TestCanvasEvalAndSnapshot(t *testing.T) {
	g := NewWithT(t)
	reg := newRegistry(t)
	c := &recordingCanvas{answer: tool.CanvasAnswer{Value: `{"a":1}`}}
	res := run(reg, c, map[string]any{"action": "eval", "javaScript": "({a: 1})", "timeoutMs": 2500})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HaveSuffix("\n" + `{"a":1}`))
	g.Expect(c.got[0].Wait).To(Equal(2500 * time.Millisecond))
	g.Expect(c.got[0].JavaScript).To(Equal("({a: 1})"))

	png := []byte("\x89PNG\r\n\x1a\nfake")
	c = &recordingCanvas{answer: tool.CanvasAnswer{Image: png, MediaType: "image/png"}}
	res = run(reg, c, map[string]string{"action": "snapshot"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(HaveSuffix("\nMEDIA:canvas-20261206-120000.000.png"))
	g.Expect(res.Artifacts).To(HaveLen(1))
	g.Expect(res.Artifacts[0].Data).To(Equal(png))
	g.Expect(res.Artifacts[0].MediaType).To(Equal("image/png"))
	g.Expect(c.got[0].Wait).To(Equal(canvas.DefaultTimeout))
	g.Expect(c.got[0].Format).To(Equal("png"))

	c = &recordingCanvas{answer: tool.CanvasAnswer{Error: "ReferenceError: x is not defined"}}
	res = run(reg, c, map[string]string{"action": "eval", "javaScript": "x"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(Equal("error: the canvas says: ReferenceError: x is not defined"))

	c = &recordingCanvas{err: errors.New("no web client answered within 15s")}
	res = run(reg, c, map[string]string{"action": "snapshot"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(Equal("error: no web client answered within 15s"))

	res = run(reg, nil, map[string]string{"action": "present"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("this turn has no chat with a canvas"))
}

// TestCanvasRefusesBadArguments: every mistake is a tool error naming it,
// and nothing reaches the canvas.
func TestCanvasRefusesBadArguments(t *testing.T) {
	reg := newRegistry(t)
	for _, tt := range []struct {
		name string
		args any
		want string
	}{
		{"unknown action", map[string]string{"action": "fly"}, "action"},
		{"no action", map[string]string{}, "action"},
		{"unknown parameter", map[string]string{"action": "present", "node": "mac"}, "node"},
		{"parameter of another action", map[string]string{"action": "hide", "url": "https://1.1.1.1/"}, "url is not a parameter of hide (it takes no other parameter)"},
		{"javaScript for snapshot", map[string]string{"action": "snapshot", "javaScript": "1"}, "javaScript is not a parameter of snapshot (it takes outputFormat, timeoutMs)"},
		{"loopback url", map[string]string{"action": "navigate", "url": "http://127.0.0.1:8080/"}, "refused: 127.0.0.1 is a loopback address"},
		{"metadata url", map[string]string{"action": "present", "url": "http://169.254.169.254/latest/meta-data/"}, "refused"},
		{"file url", map[string]string{"action": "navigate", "url": "file:///etc/passwd"}, "refused"},
		{"javascript url", map[string]string{"action": "navigate", "url": "javascript:alert(1)"}, "refused"},
		{"eval without code", map[string]string{"action": "eval"}, "eval needs javaScript"},
		{"eval code too long", map[string]string{"action": "eval", "javaScript": strings.Repeat("1", canvas.MaxJavaScriptBytes+1)}, "javaScript is 32769 bytes; the limit is 32768"},
		{"timeout too long", map[string]any{"action": "eval", "javaScript": "1", "timeoutMs": 600000}, "timeoutMs"},
		{"bad format", map[string]string{"action": "snapshot", "outputFormat": "gif"}, "outputFormat"},
		{"push without content", map[string]string{"action": "a2ui_push"}, "a2ui_push needs jsonl"},
		{"push with both", map[string]string{"action": "a2ui_push", "jsonl": form, "text": "x"}, "not both"},
		{"v0.9 createSurface", map[string]string{"action": "a2ui_push", "jsonl": `{"deleteSurface":{"surfaceId":"a"}}` + "\n" + `{"createSurface":{"surfaceId":"a","catalogId":"c"}}`},
			"jsonl refused: line 2: createSurface is an A2UI v0.9 message; the canvas renders A2UI v0.8 only"},
		{"v0.9 updateComponents", map[string]string{"action": "a2ui_push", "jsonl": `{"updateComponents":{"surfaceId":"a","components":[]}}`}, "line 1: updateComponents is an A2UI v0.9 message"},
		{"v0.9 version", map[string]string{"action": "a2ui_push", "jsonl": `{"version":"v0.9","deleteSurface":{"surfaceId":"a"}}`}, "line 1: version \"v0.9\""},
		{"not json", map[string]string{"action": "a2ui_push", "jsonl": `{"beginRendering":`}, "line 1: not a JSON object"},
		{"two messages on a line", map[string]string{"action": "a2ui_push", "jsonl": `{"beginRendering":{"surfaceId":"a","root":"r"},"deleteSurface":{"surfaceId":"a"}}`}, "exactly one key"},
		{"unknown message", map[string]string{"action": "a2ui_push", "jsonl": `{"renderSurface":{}}`}, `unknown A2UI v0.8 message "renderSurface"`},
		{"unknown component", map[string]string{"action": "a2ui_push", "jsonl": `{"surfaceUpdate":{"surfaceId":"a","components":[{"id":"x","component":{"Marquee":{}}}]}}`}, `unknown component "Marquee"`},
		{"two component types", map[string]string{"action": "a2ui_push", "jsonl": `{"surfaceUpdate":{"surfaceId":"a","components":[{"id":"x","component":{"Text":{},"Card":{}}}]}}`}, "exactly one component type"},
		{"no surface id", map[string]string{"action": "a2ui_push", "jsonl": `{"beginRendering":{"root":"r"}}`}, "beginRendering.surfaceId is required"},
		{"no root", map[string]string{"action": "a2ui_push", "jsonl": `{"beginRendering":{"surfaceId":"a"}}`}, "beginRendering.root is required"},
		{"no contents", map[string]string{"action": "a2ui_push", "jsonl": `{"dataModelUpdate":{"surfaceId":"a"}}`}, "dataModelUpdate.contents is required"},
		{"blank jsonl", map[string]string{"action": "a2ui_push", "jsonl": "\n \n"}, "holds no A2UI message"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &recordingCanvas{}
			res := run(reg, c, tt.args)
			g.Expect(res.IsError).To(BeTrue(), res.Content)
			g.Expect(res.Content).To(ContainSubstring(tt.want))
			g.Expect(c.got).To(BeEmpty())
		})
	}
}

func TestParseJSONLLimits(t *testing.T) {
	g := NewWithT(t)
	_, err := canvas.ParseJSONL(strings.Repeat(`{"deleteSurface":{"surfaceId":"a"}}`+"\n", canvas.MaxMessages+1))
	g.Expect(err).To(MatchError(ContainSubstring("more than 200 messages")))
	_, err = canvas.ParseJSONL(strings.Repeat(" ", canvas.MaxJSONLBytes+1))
	g.Expect(err).To(MatchError(ContainSubstring("the limit is 131072")))
}

// TestCanvasFollowsTheBrowsersDomains: with the Agent's browser limited to
// some domains, the canvas opens no other page either.
func TestCanvasFollowsTheBrowsersDomains(t *testing.T) {
	g := NewWithT(t)
	reg, err := tool.NewRegistry(canvas.New(browser.Policy{Guard: netguard.New(), Domains: browser.Domains{"example.com"}}, nil))
	g.Expect(err).NotTo(HaveOccurred())
	c := &recordingCanvas{}
	res := run(reg, c, map[string]string{"action": "navigate", "url": "https://1.1.1.1/"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("refused: 1.1.1.1 is not in the allowed domains (example.com)"))
	g.Expect(c.got).To(BeEmpty())
}
