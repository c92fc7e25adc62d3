package gateway_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
	"github.com/picobot/picobot/runtime/provider/fakellm"
)

// TestAuditOfToolCalls: a turn whose model calls the calculator and a tool
// the agent does not have leaves one audit record per call — the API key
// that sent the message, agent, session, tool, the digest of the arguments
// (not the arguments), outcome and duration — which GET /api/v1/audit
// lists newest first, filtered and a page at a time, to the tenant alone.
func TestAuditOfToolCalls(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	calcArgs := `{"function":"evaluate","expression":"6*7"}`
	e.llm.Script(fakellm.Turn{ToolCalls: []fakellm.Call{{Name: "calculator", Args: calcArgs}, {Name: "launch_missiles", Args: `{"target":"moon"}`}}},
		fakellm.Turn{Text: "42, and no missiles."})
	status, body := e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "a1", "agent": "assistant", "chat_id": "tab1", "text": "compute"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("text", "42, and no missiles."))

	status, body = e.a.Do(t, http.MethodGet, "/api/v1/audit", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body).To(HaveKeyWithValue("next_cursor", ""))
	recs := body["records"].([]any)
	g.Expect(recs).To(HaveLen(2))
	sum := sha256.Sum256([]byte(calcArgs))
	common := And(HaveKeyWithValue("actor", "key:a"), HaveKeyWithValue("agent", "assistant"),
		HaveKeyWithValue("session_id", "web:assistant/tab1:default"), HaveKeyWithValue("duration_ms", BeNumerically(">=", 0)),
		HaveKeyWithValue("created_at", Not(BeEmpty())), HaveKeyWithValue("id", Not(BeEmpty())))
	g.Expect(recs).To(ConsistOf(
		And(common, HaveKeyWithValue("tool", "calculator"), HaveKeyWithValue("outcome", "ok"),
			HaveKeyWithValue("args_digest", "sha256:"+hex.EncodeToString(sum[:]))),
		And(common, HaveKeyWithValue("tool", "launch_missiles"), HaveKeyWithValue("outcome", "error")),
	))
	g.Expect(recs).NotTo(ContainElement(HaveKeyWithValue("args_digest", ContainSubstring("6*7"))), "never the arguments")

	// One record a page: the cursor walks both, then ends.
	var seen []any
	cursor := ""
	for range 3 {
		status, body = e.a.Do(t, http.MethodGet, "/api/v1/audit?limit=1&cursor="+url.QueryEscape(cursor), nil)
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
		seen = append(seen, body["records"].([]any)...)
		if cursor = body["next_cursor"].(string); cursor == "" {
			break
		}
	}
	g.Expect(seen).To(Equal(recs))

	for q, n := range map[string]int{
		"?tool=calculator": 1, "?agent=assistant": 2, "?agent=keyless": 0,
		"?session=" + url.QueryEscape("web:assistant/tab1:default"): 2, "?since=2999-01-01T00:00:00Z": 0,
	} {
		status, body = e.a.Do(t, http.MethodGet, "/api/v1/audit"+q, nil)
		g.Expect(status).To(Equal(http.StatusOK), q)
		g.Expect(body["records"]).To(HaveLen(n), q)
	}

	status, body = gatewaytest.Client{URL: e.url, Key: keyB}.Do(t, http.MethodGet, "/api/v1/audit", nil)
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	g.Expect(body["records"]).To(BeEmpty(), "tenant B sees none of A's calls")

	for _, q := range []string{"?since=yesterday", "?limit=0", "?limit=1001", "?limit=x", "?cursor=not-ours"} {
		status, body = e.a.Do(t, http.MethodGet, "/api/v1/audit"+q, nil)
		g.Expect(status).To(Equal(http.StatusBadRequest), q)
		g.Expect(errCode(body)).To(Equal("bad_request"), q)
	}
	status, _ = gatewaytest.Client{URL: e.url, Key: "wrong-key-0123456789"}.Do(t, http.MethodGet, "/api/v1/audit", nil)
	g.Expect(status).To(Equal(http.StatusUnauthorized))
}
