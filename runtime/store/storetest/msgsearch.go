package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
)

// testMessageSearch: conversation search finds a chat's user and assistant
// messages holding every query word as a word prefix, whatever the case,
// newest first with their dialog's title; not tool messages, not other
// chats, tenants or deleted dialogs; hostile text is only words.
func testMessageSearch(t *testing.T, newStore NewStore) {
	g := gomega.NewWithT(t)
	st := newStore(t)
	a, b := ctxFor(t, tenantA), ctxFor(t, tenantB)
	trip := mustCreateSession(a, t, st, newSession("web", "assistant/tab1", "default"))
	_, err := st.UpdateSession(a, trip.ID, store.SessionUpdate{Title: ptr("Trip to Hangzhou")})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	later := mustCreateSession(a, t, st, newSession("web", "assistant/tab1", "d_later"))
	gone := mustCreateSession(a, t, st, newSession("web", "assistant/tab1", "d_gone"))
	other := mustCreateSession(a, t, st, newSession("web", "assistant/tab2", "default"))
	theirs := mustCreateSession(b, t, st, newSession("web", "assistant/tab1", "default"))
	appendAll := func(tenant, sid string, msgs ...store.Message) {
		_, err := st.AppendMessages(ctxFor(t, tenant), sid, msgs...)
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
	appendAll(tenantA, trip.ID,
		userMsg("m1", "Plan my trip to Hangzhou next week"),
		store.Message{ID: "m1/0", Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "web_search", Arguments: `{"q":"hangzhou"}`}}},
		store.Message{ID: "m1/1", Role: llm.RoleTool, ToolCallID: "c1", Name: "web_search", Content: "Hangzhou planning tips from the tool"},
		store.Message{ID: "m1/2", Role: llm.RoleAssistant, Content: "Day 1 in HANGZHOU: West Lake. Day 2: PLANNING the tea fields."})
	appendAll(tenantA, later.ID, userMsg("m2", "what did we plan for Hangzhou?"))
	appendAll(tenantA, gone.ID, userMsg("m3", "Hangzhou plan, deleted"))
	appendAll(tenantA, other.ID, userMsg("m4", "Hangzhou plan in another chat"))
	appendAll(tenantB, theirs.ID, userMsg("m5", "Hangzhou plan of another tenant"))
	_, err = st.UpdateSession(a, gone.ID, store.SessionUpdate{Deleted: ptr(true)})
	g.Expect(err).NotTo(gomega.HaveOccurred())

	search := func(text string) []string {
		hits, err := st.SearchMessages(a, store.MessageQuery{Channel: "web", ChatID: "assistant/tab1", Text: text})
		g.Expect(err).NotTo(gomega.HaveOccurred(), text)
		out := make([]string, len(hits))
		for i, h := range hits {
			out[i] = h.SessionID + " " + h.ID + " " + h.Title
		}
		return out
	}
	g.Expect(search("hangzhou plan")).To(gomega.Equal([]string{
		later.ID + " m2 New chat",
		trip.ID + " m1/2 Trip to Hangzhou",
		trip.ID + " m1 Trip to Hangzhou",
	}), "every word as a word prefix, any case; newest first; no tool message, other chat, tenant or deleted dialog")
	g.Expect(search("tea WEST")).To(gomega.Equal([]string{trip.ID + " m1/2 Trip to Hangzhou"}))
	g.Expect(search("lake tokyo")).To(gomega.BeEmpty(), "every word must be there")
	g.Expect(search("ea")).To(gomega.BeEmpty(), "a word's start, not its middle")
	for _, hostile := range []string{`"`, `*`, `' OR 1=1 --`, `NEAR(a b)`, `hangzhou:* | !x`, `)(`, "   "} {
		g.Expect(search(hostile)).To(gomega.BeEmpty(), hostile)
	}
	g.Expect(search(`"hangzhou" (plan*)`)).To(gomega.HaveLen(3), "query syntax is only words")

	hits, err := st.SearchMessages(a, store.MessageQuery{Channel: "web", ChatID: "assistant/tab1", Text: "hangzhou", Limit: 1})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(hits).To(gomega.HaveLen(1))
	g.Expect(hits[0].Content).To(gomega.Equal("what did we plan for Hangzhou?"))
	g.Expect(hits[0].Role).To(gomega.Equal(llm.RoleUser))
	g.Expect(hits[0].CreatedAt).NotTo(gomega.BeZero())

	hits, err = st.SearchMessages(b, store.MessageQuery{Channel: "web", ChatID: "assistant/tab1", Text: "hangzhou"})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(hits).To(gomega.HaveLen(1))
	g.Expect(hits[0].ID).To(gomega.Equal("m5"), "tenant B finds its own only")

	for name, q := range map[string]store.MessageQuery{
		"no chat":   {Channel: "web", Text: "x"},
		"too long":  {Channel: "web", ChatID: "c", Text: strings.Repeat("x", store.MaxMessageQueryBytes+1)},
		"bad limit": {Channel: "web", ChatID: "c", Text: "x", Limit: store.MaxMessageHits + 1},
	} {
		_, err := st.SearchMessages(a, q)
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), name)
	}
	_, err = st.SearchMessages(t.Context(), store.MessageQuery{Channel: "web", ChatID: "c", Text: "x"})
	g.Expect(err).To(gomega.HaveOccurred(), "no tenant, no search")
}

// BenchmarkSearchMessages measures conversation search on a chat of 20
// dialogs of 1,000 messages beside another chat of as many: per iteration
// one search for a rare pair of words (about 1 message in 100 holds both)
// and one for a word every message of the chat holds (its newest 20 hits).
// Besides the mean it reports p50 and p99 per search in milliseconds.
func BenchmarkSearchMessages(b *testing.B, st store.Store) {
	ctx := store.WithTenant(b.Context(), tenantA)
	words := []string{"river", "mountain", "budget", "flight", "museum", "dinner", "weather", "train", "hotel", "market"}
	for _, chat := range []string{"assistant/bench", "assistant/other"} {
		for d := range 20 {
			sess, err := st.CreateSession(ctx, newSession("web", chat, fmt.Sprintf("d_%02d", d)))
			if err != nil {
				b.Fatal(err)
			}
			msgs := make([]store.Message, 1000)
			for i := range msgs {
				text := fmt.Sprintf("message %d about the %s and the %s near the %s", i, words[i%10], words[(i/10)%10], words[(i*7)%10])
				msgs[i] = userMsg(fmt.Sprintf("m%d", i), text)
			}
			if _, err := st.AppendMessages(ctx, sess.ID, msgs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	var durations []time.Duration
	search := func(text string) {
		begin := time.Now()
		hits, err := st.SearchMessages(ctx, store.MessageQuery{Channel: "web", ChatID: "assistant/bench", Text: text})
		if err != nil || len(hits) == 0 {
			b.Fatalf("search %q: %d hits, %v", text, len(hits), err)
		}
		durations = append(durations, time.Since(begin))
	}
	b.ResetTimer()
	for b.Loop() {
		search("museum budg")
		search("message")
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(percentile(durations, 0.50), "p50-ms")
	b.ReportMetric(percentile(durations, 0.99), "p99-ms")
}
