package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/services"
)

// openaiNPM is the official openai npm client the end-to-end test drives,
// pinned (6.x: the 7.x line needs Node 22, Debian ships 20).
var openaiNPM = services.NPMPackage{Name: "openai", Version: "6.30.1"}

// npmRun is what testdata/openai_npm.cjs prints.
type npmRun struct {
	Retry struct {
		Text     string `json:"text"`
		Attempts int    `json:"attempts"`
		Replayed string `json:"replayed"`
	} `json:"retry"`
	Stream []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
		Finish  string `json:"finish"`
		Usage   int    `json:"usage"`
	} `json:"stream"`
	Stateless  string `json:"stateless"`
	ClientTool struct {
		Finish string `json:"finish"`
		Name   string `json:"name"`
		Args   string `json:"args"`
		Answer string `json:"answer"`
	} `json:"clientTool"`
	RunTools struct {
		Answer string   `json:"answer"`
		Ran    []string `json:"ran"`
	} `json:"runTools"`
}

// TestOpenAINPMClient drives the endpoint with the official openai npm
// client (installed once into the cache; a missing node or npm fails the
// test under CI and skips it loudly elsewhere): a retried request with an
// Idempotency-Key runs one turn, a stream survives a slow bash call (quiet
// but for keep-alive comments) and a slow step, a stateless history reaches the model as sent, and client tools
// make the round trip, by hand and through the client's runTools.
func TestOpenAINPMClient(t *testing.T) {
	prefix, node, err := services.NPMInstall("openai", openaiNPM)
	if err != nil {
		reason, fatal := services.Unavailable("the openai npm client", err)
		if fatal {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	g := NewWithT(t)
	e := start(t, func(c *gateway.Config) { c.StreamKeepAlive = 100 * time.Millisecond })
	e.llm.Script(
		// 1: slower than the client's timeout, so it retries.
		fakellm.Turn{Text: "Booked.", Delay: 2500 * time.Millisecond},
		// 2: a slow tool (quiet for 1.5 s: keep-alive comments), then a
		// slow step.
		fakellm.Turn{Text: "Let me compute.", ToolCalls: []fakellm.Call{{Name: "bash", Args: `{"command":"sleep 1.5; echo $((6*7))"}`}}},
		fakellm.Turn{Text: "It is 42.", Delay: 800 * time.Millisecond},
		// 3: the stateless history.
		fakellm.Turn{Text: "Bonjour."},
		// 4: a client tool by hand.
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_paris", Name: "get_weather", Args: `{"city":"Paris"}`}}},
		fakellm.Turn{Text: "Sunny in Paris."},
		// 5: runTools.
		fakellm.Turn{ToolCalls: []fakellm.Call{{ID: "call_rome", Name: "get_weather", Args: `{"city":"Rome"}`}}},
		fakellm.Turn{Text: "Rainy in Rome."},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard only
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "openai_npm.cjs"))
	cmd.Env = append(os.Environ(), "OPENAI_MODULE="+filepath.Join(prefix, "node_modules", "openai"),
		"BASE_URL="+e.url+"/v1", "API_KEY="+keyA)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "node: %s", stderr.String())
	var run npmRun
	g.Expect(json.Unmarshal(out, &run)).To(Succeed(), "%s", out)
	reqs := e.llm.Requests()
	g.Expect(reqs).To(HaveLen(8), "one model call per scripted turn: no retry ran a turn twice")
	g.Expect(e.llm.Pending()).To(BeZero())

	// 1: a retry got the one turn's answer (the first attempt timed out
	// before the model answered), waiting for it or replayed.
	g.Expect(run.Retry.Text).To(Equal("Booked."))
	g.Expect(run.Retry.Attempts).To(BeNumerically(">=", 2), "the client retried")
	g.Expect(run.Retry.Replayed).To(BeElementOf("", "true"))
	g.Expect(contents(reqs[0])).To(Equal([]string{"user:book it"}))
	status, body := e.a.Do(t, http.MethodGet, "/api/v1/sessions/"+url.PathEscape("openai:assistant/npm-retry:default")+"/messages", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	users := 0
	for _, m := range body["messages"].([]any) {
		if m.(map[string]any)["role"] == "user" {
			users++
		}
	}
	g.Expect(users).To(Equal(1), "the message is stored once")

	// 2: the role chunk first, the text of both steps, stop, usage.
	g.Expect(run.Stream).NotTo(BeEmpty())
	g.Expect(run.Stream[0].Role).To(Equal("assistant"))
	var text strings.Builder
	finish := ""
	for _, c := range run.Stream {
		text.WriteString(c.Content)
		if c.Finish != "" {
			finish = c.Finish
		}
	}
	g.Expect(text.String()).To(Equal("Let me compute.\n\nIt is 42."))
	g.Expect(finish).To(Equal("stop"))
	g.Expect(run.Stream[len(run.Stream)-1].Usage).To(BeNumerically(">", 0))
	g.Expect(reqs[2].Messages[len(reqs[2].Messages)-1].ToolResults[0].Content).To(ContainSubstring("42"))

	// 3: exactly the client's turns, its system message with the agent's.
	g.Expect(run.Stateless).To(Equal("Bonjour."))
	g.Expect(contents(reqs[3])).To(Equal([]string{"user:Hello?", "assistant:Hi.", "user:Say hello."}))
	g.Expect(reqs[3].System).To(ContainSubstring("You are a test assistant.\n\nAnswer in French."))

	// 4 and 5: the client ran its tool and the model got the result.
	g.Expect(run.ClientTool.Finish).To(Equal("tool_calls"))
	g.Expect(run.ClientTool.Name).To(Equal("get_weather"))
	g.Expect(run.ClientTool.Args).To(Equal(`{"city":"Paris"}`))
	g.Expect(run.ClientTool.Answer).To(Equal("Sunny in Paris."))
	g.Expect(reqs[4].Tools).To(ConsistOf("bash", "calculator", "get_weather"))
	last := func(i int) fakellm.Message { return reqs[i].Messages[len(reqs[i].Messages)-1] }
	g.Expect(last(5).ToolResults).To(Equal([]fakellm.ToolResult{{CallID: "call_paris", Content: "sunny, Paris"}}))
	g.Expect(run.RunTools.Answer).To(Equal("Rainy in Rome."))
	g.Expect(run.RunTools.Ran).To(Equal([]string{"Rome"}))
	g.Expect(reqs[6].Stream).To(BeTrue())
	g.Expect(last(7).ToolResults).To(Equal([]fakellm.ToolResult{{CallID: "call_rome", Content: "rainy, Rome"}}))
}
