package embedded

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/provider/fakellm"
)

const webSearchAgentsYAML = `apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: searcher
spec:
  model: {provider: openai, model: test-model, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:web"]
    webSearch: {provider: searxng, baseURL: "%[2]s/", count: 2}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: claude-searcher
spec:
  model: {provider: anthropic, model: test-model, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:web"]
    webSearch: {provider: searxng, baseURL: "%[2]s"}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: brave-searcher
spec:
  model: {provider: openai, model: test-model, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:web"]
    webSearch: {provider: brave, apiKeySecretRef: {name: search, key: apiKey}}
---
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: plain
spec:
  model: {provider: openai, model: test-model, baseURL: %[1]s, apiKeySecretRef: {name: llm, key: apiKey}}
  tools:
    allow: ["group:web"]
`

// searxngServer is a SearXNG instance on loopback speaking its JSON API;
// hits counts the searches it answered.
func searxngServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			http.Error(w, "403 Forbidden", http.StatusForbidden)
			return
		}
		hits.Add(1)
		q := r.URL.Query().Get("q")
		var results []map[string]any
		for i := 1; i <= 8; i++ {
			results = append(results, map[string]any{"url": fmt.Sprintf("https://r%d.example.org/", i), "title": fmt.Sprintf("Hit %d for %s", i, q),
				"content": "Some text.", "engine": "duckduckgo", "engines": []string{"duckduckgo"}, "positions": []int{i},
				"parsed_url": []string{"https", fmt.Sprintf("r%d.example.org", i), "/", "", "", ""}, "template": "default.html",
				"score": 1.0, "category": "general", "publishedDate": nil})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"query": q, "number_of_results": 0, "results": results,
			"answers": []any{}, "corrections": []any{}, "infoboxes": []any{}, "suggestions": []any{}, "unresponsive_engines": []any{}})
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// web_search through the registry in embedded mode, on both model
// protocols: declared only for agents with spec.tools.webSearch, the
// self-hosted SearXNG on loopback reached (its host is the author's, not the
// model's), the Agent's count used, the answer cached, the results handed to
// the model inside the untrusted-content markers, and a missing Brave key or
// an invalid count returned to the model as a tool error, never a failed turn.
func TestWebSearchTurn(t *testing.T) {
	g := NewWithT(t)
	s := fakellm.New()
	t.Cleanup(s.Close)
	searx, hits := searxngServer(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "agents.yaml"), fmt.Appendf(nil, webSearchAgentsYAML, s.URL(), searx.URL), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretYAML), 0o600)).To(Succeed())
	e := start(t, dir, s)
	c := dial(t, e)

	turn := func(agent, chat string, args string) (toolResult map[string]any, sent fakellm.Recorded) {
		t.Helper()
		before := len(s.Requests())
		s.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "web_search", Args: args}}}, fakellm.Turn{Text: "Here is what I found."})
		fs := exchange(t, c, frame{"v": 1, "type": "send", "id": chat, "agent": agent, "chat_id": chat, "text": "search"})
		g.Expect(event(fs, "final")["text"]).To(Equal("Here is what I found."), "the turn ends normally")
		reqs := s.Requests()
		g.Expect(reqs).To(HaveLen(before + 2))
		g.Expect(reqs[before].Tools).To(ContainElement("web_search"))
		return event(fs, "tool_result"), reqs[before+1]
	}
	lastResult := func(r fakellm.Recorded) fakellm.ToolResult {
		for i := len(r.Messages) - 1; i >= 0; i-- {
			if n := len(r.Messages[i].ToolResults); n > 0 {
				return r.Messages[i].ToolResults[n-1]
			}
		}
		t.Fatal("the follow-up request carries no tool result")
		return fakellm.ToolResult{}
	}

	res, next := turn("searcher", "c1", `{"query":"picobot operator"}`)
	g.Expect(res).NotTo(HaveKeyWithValue("is_error", true), "%v", res["content"])
	g.Expect(next.Protocol).To(Equal(fakellm.ProtocolOpenAI))
	sent := lastResult(next)
	g.Expect(sent.Content).To(HavePrefix("Web search (searxng) for \"picobot operator\": 2 results.\n"))
	g.Expect(sent.Content).To(ContainSubstring("<<<EXTERNAL_UNTRUSTED_CONTENT source=\"searxng search: picobot operator\">>>\n1. Hit 1 for picobot operator\n   https://r1.example.org/\n"))
	g.Expect(sent.Content).NotTo(ContainSubstring("Hit 3"), "the Agent's count is 2")
	g.Expect(sent.Content).To(HaveSuffix("<<<END_EXTERNAL_UNTRUSTED_CONTENT>>>"))
	g.Expect(hits.Load()).To(BeEquivalentTo(1))

	res, next = turn("claude-searcher", "c2", `{"query":"picobot operator","count":3}`)
	g.Expect(res).NotTo(HaveKeyWithValue("is_error", true), "%v", res["content"])
	g.Expect(next.Protocol).To(Equal(fakellm.ProtocolAnthropic))
	g.Expect(lastResult(next).Content).To(ContainSubstring("3. Hit 3 for picobot operator"))
	g.Expect(hits.Load()).To(BeEquivalentTo(2))

	res, _ = turn("claude-searcher", "c3", `{"query":"picobot operator","count":3}`)
	g.Expect(res["content"]).To(ContainSubstring("(from cache, searched"))
	g.Expect(hits.Load()).To(BeEquivalentTo(2), "the same search within 15 minutes is not sent again")

	res, next = turn("searcher", "c4", `{"query":"x","count":11}`)
	g.Expect(res["is_error"]).To(BeTrue())
	g.Expect(lastResult(next).Content).To(ContainSubstring("invalid arguments for web_search"))

	res, _ = turn("brave-searcher", "c5", `{"query":"x"}`)
	g.Expect(res["is_error"]).To(BeTrue())
	g.Expect(res["content"]).To(ContainSubstring(`No Brave Search key: Secret "search" has no key "apiKey".`))
	g.Expect(res["content"]).To(ContainSubstring("PICOBOT_SECRET_SEARCH_APIKEY"))
	g.Expect(hits.Load()).To(BeEquivalentTo(2))

	// Without spec.tools.webSearch the tool is not declared at all.
	s.Script(fakellm.Turn{Text: "hi"})
	exchange(t, c, frame{"v": 1, "type": "send", "id": "c6", "agent": "plain", "chat_id": "c6", "text": "hello"})
	reqs := s.Requests()
	g.Expect(reqs[len(reqs)-1].Tools).To(Equal([]string{"http_request", "web_fetch"}))
}
