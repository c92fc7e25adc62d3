package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"

	"github.com/picobot/picobot/runtime/agenthost"
	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/tool/messaging"
)

// filesAgentYAML declares "assistant" with send_message, which attaches
// files to its reply when it targets the current conversation.
const filesAgentYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: assistant
spec:
  model:
    provider: openai
    model: fake
    baseURL: %s
    apiKeySecretRef: {name: llm, key: apiKey}
  tools:
    allow: ["send_message"]
`

// filesEnv is a gateway over the embedded runtime whose agent has the real
// messaging feature; files holds what it may send.
type filesEnv struct {
	*env
	files string
}

func startWithFiles(t *testing.T) *filesEnv {
	t.Helper()
	files := t.TempDir()
	e := startAgents(t, func(llmURL string) string { return fmt.Sprintf(filesAgentYAML, llmURL) },
		[]agenthost.Feature{messaging.NewFeature(messaging.Options{ExtraRoots: []string{files}})}, nil)
	return &filesEnv{env: e, files: files}
}

// attach scripts a turn that sends a file of content to the current
// conversation (chat tab1 of channel) and then answers text.
func (e *filesEnv) attach(t *testing.T, channel, name string, content []byte, text string) {
	t.Helper()
	path := filepath.Join(e.files, name)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	args := fmt.Sprintf(`{"target_chat_id":%q,"content":"see file","files":[%q]}`, channel+":assistant/tab1", path)
	e.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "send_message", Args: args}}}, fakellm.Turn{Text: text})
}

// TestToolFilesReachTheClient runs send_message to the current conversation
// over a real WebSocket: the tool_result and final events carry the file's
// reference, GET /api/v1/artifacts/{id} serves its bytes to the tenant only,
// the history links it, and the REST and OpenAI answers carry it too.
func TestToolFilesReachTheClient(t *testing.T) {
	g := NewWithT(t)
	e := startWithFiles(t)
	png := append([]byte("\x89PNG\r\n\x1a\n"), []byte("chart pixels")...)
	e.attach(t, "web", "chart.png", png, "Here is the chart.")

	ws := e.a.Dial(t)
	frames := ws.Exchange(t, frame{"id": "m1", "agent": "assistant", "chat_id": "tab1", "text": "show me the chart"})
	g.Expect(gatewaytest.ErrorFrame(frames)).To(BeNil())
	events := 0
	for _, f := range frames {
		if f["type"] == "event" {
			events++
			g.Expect(f).To(HaveKeyWithValue("session", "web:assistant/tab1:default"), "every event frame names its session (docs/protocol.md)")
		}
	}
	g.Expect(events).To(BeNumerically(">=", 2))
	result := gatewaytest.Event(frames, "tool_result")
	g.Expect(result).To(HaveKeyWithValue("name", "send_message"))
	g.Expect(result["content"]).To(HavePrefix("Attached chart.png to your reply"))
	files, ok := result["attachments"].([]any)
	g.Expect(ok).To(BeTrue(), "tool_result has attachments: %v", result)
	g.Expect(files).To(HaveLen(1))
	file := files[0].(map[string]any)
	id, _ := file["id"].(string)
	g.Expect(id).NotTo(BeEmpty())
	g.Expect(file).To(Equal(map[string]any{"id": id, "name": "chart.png", "media_type": "image/png", "url": "/api/v1/artifacts/" + id}))
	final := gatewaytest.Event(frames, "final")
	g.Expect(final).To(HaveKeyWithValue("text", "Here is the chart."))
	g.Expect(final["attachments"]).To(Equal([]any{file}))

	// The bytes, for this tenant only.
	res, err := e.a.Request(http.MethodGet, "/api/v1/artifacts/"+id, nil, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(http.StatusOK))
	g.Expect(res.Body).To(Equal(png))
	g.Expect(res.Header.Get("Content-Type")).To(Equal("image/png"))
	status, body := gatewaytest.Client{URL: e.url, Key: keyB}.Do(t, http.MethodGet, "/api/v1/artifacts/"+id, nil)
	g.Expect(status).To(Equal(http.StatusNotFound))
	g.Expect(errCode(body)).To(Equal(gateway.CodeUnknownArtifact))

	// The history links the file in the tool result and the reply.
	link := "![chart.png](/api/v1/artifacts/" + id + ")"
	status, body = e.a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("web:assistant/tab1:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	msgs := body["messages"].([]any)
	g.Expect(msgs).To(HaveLen(4))
	g.Expect(msgs[2].(map[string]any)["content"]).To(HaveSuffix("\n\n" + link))
	g.Expect(msgs[3].(map[string]any)["content"]).To(Equal("Here is the chart.\n\n" + link))

	// REST send: the answer lists the reply's files; none is an empty list.
	e.attach(t, "web", "notes.txt", []byte("plain notes"), "Notes attached.")
	status, body = e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m2", "agent": "assistant", "chat_id": "tab1", "text": "and the notes?"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("text", "Notes attached."))
	g.Expect(body["attachments"]).To(HaveLen(1))
	notes := body["attachments"].([]any)[0].(map[string]any)
	g.Expect(notes).To(HaveKeyWithValue("name", "notes.txt"))
	g.Expect(notes).To(HaveKeyWithValue("media_type", HavePrefix("text/plain")))
	status, raw := e.a.Raw(t, http.MethodGet, notes["url"].(string), nil)
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(string(raw)).To(Equal("plain notes"))
	e.llm.Script(fakellm.Turn{Text: "Nothing to attach."})
	status, body = e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m3", "agent": "assistant", "chat_id": "tab1", "text": "thanks"})
	g.Expect(status).To(Equal(http.StatusOK))
	g.Expect(body["attachments"]).To(Equal([]any{}))

	// OpenAI clients get the files as markdown links after the text, in
	// both modes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang guard only
	defer cancel()
	client := sdk(e.env, keyA)
	e.attach(t, "openai", "plot.png", png, "Plotted.")
	oa, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "assistant", User: openai.String("tab1"),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("plot it")}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(oa.Choices[0].Message.Content).To(MatchRegexp(`^Plotted\.\n\n!\[plot\.png\]\(/api/v1/artifacts/[^)]+\)$`))
	e.attach(t, "openai", "plot2.png", png, "Plotted again.")
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "assistant", User: openai.String("tab1"),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("plot it again")}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	g.Expect(stream.Err()).NotTo(HaveOccurred())
	g.Expect(acc.Choices[0].Message.Content).To(MatchRegexp(`^Plotted again\.\n\n!\[plot2\.png\]\(/api/v1/artifacts/[^)]+\)$`))
}

// TestStopKeepsThePartialReply stops a streaming turn with the stop frame:
// the history keeps the text streamed so far, marked [stopped].
func TestStopKeepsThePartialReply(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.llm.Script(fakellm.Turn{Text: strings.Repeat("slow ", 400), ChunkDelay: 20 * time.Millisecond})
	ws := e.a.Dial(t)
	ws.Write(t, frame{"type": "send", "id": "long", "agent": "assistant", "chat_id": "tab1", "text": "talk"})
	var streamed strings.Builder
	var stopErr frame
	for stopSent := false; ; {
		f := ws.Read(t)
		if ev, ok := f["event"].(map[string]any); ok && ev["kind"] == "delta" {
			streamed.WriteString(ev["text"].(string))
			if !stopSent && strings.Count(streamed.String(), "slow") >= 3 {
				stopSent = true
				ws.Write(t, frame{"type": "stop", "id": "s1", "agent": "assistant", "chat_id": "tab1"})
			}
		}
		if f["type"] == "error" && f["id"] == "long" {
			stopErr = f
		}
		if f["type"] == "done" && f["id"] == "long" {
			break
		}
	}
	g.Expect(stopErr).To(HaveKeyWithValue("code", gateway.CodeStopped))
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("web:assistant/tab1:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK))
	msgs := body["messages"].([]any)
	g.Expect(msgs).To(HaveLen(2))
	last := msgs[1].(map[string]any)
	g.Expect(last).To(HaveKeyWithValue("role", "assistant"))
	g.Expect(last).To(HaveKeyWithValue("content", strings.TrimSpace(streamed.String())+"\n\n[stopped]"))
}
