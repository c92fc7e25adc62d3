package gateway_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/gateway/gatewaytest"
)

// TestSearchFindsTheChatsMessages: GET /api/v1/search finds the messages
// of the caller's chat by their words through the store's full-text index,
// newest first with their dialog, a snippet around the word found; another
// chat's or tenant's messages are never found.
func TestSearchFindsTheChatsMessages(t *testing.T) {
	g := NewWithT(t)
	e := start(t, nil)
	e.echo()
	long := "Before the trip " + strings.Repeat("we talk about many other things first, ", 8) + "then the Hangzhou itinerary, and more words after it " + strings.Repeat("to fill the line ", 8)
	for i, text := range []string{"Plan my trip to Hangzhou", long, "nothing to see"} {
		status, body := e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "m" + string(rune('1'+i)), "agent": "assistant", "chat_id": "tab1", "text": text})
		g.Expect(status).To(Equal(http.StatusOK), "%v", body)
	}
	status, body := e.a.Do(t, http.MethodPost, "/api/v1/send", frame{"id": "o1", "agent": "assistant", "chat_id": "tab2", "text": "Hangzhou in another chat"})
	g.Expect(status).To(Equal(http.StatusOK), "%v", body)

	find := func(c gatewaytest.Client, q string) (int, []any) {
		status, body := c.Do(t, http.MethodGet, "/api/v1/search?agent=assistant&chat_id=tab1&q="+url.QueryEscape(q), nil)
		hits, _ := body["hits"].([]any)
		return status, hits
	}
	status, hits := find(e.a, "hangz")
	g.Expect(status).To(Equal(http.StatusOK))
	// Each user message and its echoed answer: newest first.
	g.Expect(hits).To(HaveLen(4))
	first := hits[0].(map[string]any)
	g.Expect(first).To(HaveKeyWithValue("session", "web:assistant/tab1:default"))
	g.Expect(first).To(HaveKeyWithValue("dialog_id", "default"))
	g.Expect(first).To(HaveKeyWithValue("title", "Plan my trip to Hangzhou"))
	g.Expect(first).To(HaveKeyWithValue("role", "assistant"))
	g.Expect(first["snippet"]).To(HavePrefix("…"), "a long message is cut around the word")
	g.Expect(first["snippet"]).To(ContainSubstring("then the Hangzhou itinerary"))
	g.Expect(hits[3].(map[string]any)).To(HaveKeyWithValue("snippet", "Plan my trip to Hangzhou"))
	g.Expect(hits[3].(map[string]any)).To(HaveKeyWithValue("role", "user"))

	_, hits = find(e.a, "trip hangzhou plan")
	g.Expect(hits).To(HaveLen(2), "every word")
	_, hits = find(gatewaytest.Client{URL: e.url, Key: keyB}, "hangzhou")
	g.Expect(hits).To(BeEmpty(), "another tenant finds nothing")

	status, body = e.a.Do(t, http.MethodGet, "/api/v1/search?agent=assistant&chat_id=tab1", nil)
	g.Expect(status).To(Equal(http.StatusBadRequest))
	g.Expect(errCode(body)).To(Equal(gateway.CodeBadRequest))
	status, body = e.a.Do(t, http.MethodGet, "/api/v1/search?agent=nobody&chat_id=tab1&q=x", nil)
	g.Expect(status).To(Equal(http.StatusNotFound))
	g.Expect(errCode(body)).To(Equal(gateway.CodeUnknownAgent))
	status, _ = e.a.Do(t, http.MethodGet, "/api/v1/search?agent=assistant&chat_id=tab1&q=x&limit=1000", nil)
	g.Expect(status).To(Equal(http.StatusBadRequest))
}
