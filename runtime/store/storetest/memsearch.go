package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

// searchFixture is the memories testMemorySearch starts from.
var searchFixture = []store.Memory{
	{Agent: "helper", Key: "favourite_food", Content: "用户最喜欢吃四川火锅，尤其是麻辣口味", Category: store.MemoryKnowledge,
		Kind: store.MemoryFact, Source: store.SourceUser, Importance: 0.6},
	{Agent: "helper", Key: "pet", Content: "The user's cat is called Miso and loves tuna", Category: store.MemoryKnowledge,
		Kind: store.MemoryFact, Source: store.SourceUser, Importance: 0.5},
	{Agent: "helper", Key: "travel", Content: "计划明年春天去京都看樱花 (Kyoto cherry blossoms)", Category: store.MemoryKnowledge,
		Kind: store.MemoryDecision, Source: store.SourceAgent, Importance: 0.9},
	{Agent: "helper", Key: "editor", Content: "Prefers Neovim with a dark theme", Category: store.MemoryKnowledge,
		Importance: 0.4},
	{Agent: "helper", Key: "timeline/web:c1:d1/1", Content: "讨论了火锅店的选择，决定去春熙路那家", Category: store.MemoryTimeline,
		Kind: store.MemoryNote, Source: store.SourceAgent, SessionID: "web:c1:d1", Importance: 0.3},
	{Agent: "helper", Key: "timeline/web:c2:d1/1", Content: "Talked about the cat's vet appointment", Category: store.MemoryTimeline,
		Kind: store.MemoryNote, Source: store.SourceAgent, SessionID: "web:c2:d1", Importance: 0.3},
}

func testMemorySearch(t *testing.T, newStore NewStore) {
	st := newStore(t)
	ctx := ctxFor(t, tenantA)
	for _, m := range searchFixture {
		_, err := st.PutMemory(ctx, m)
		gomega.NewWithT(t).Expect(err).NotTo(gomega.HaveOccurred())
	}
	search := func(g gomega.Gomega, q store.MemoryQuery) []store.MemoryHit {
		if q.Agent == "" {
			q.Agent = "helper"
		}
		hits, err := st.SearchMemories(ctx, q)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(hits).NotTo(gomega.BeNil())
		return hits
	}
	knowledge := func(text string) store.MemoryQuery {
		return store.MemoryQuery{Text: text, Category: store.MemoryKnowledge}
	}

	t.Run("FullText", func(t *testing.T) {
		cases := []struct {
			name, query string
			want        []string
		}{
			{"Chinese word", "火锅", []string{"favourite_food"}},
			{"Chinese phrase, any term may match", "喜欢麻辣的东西", []string{"favourite_food"}},
			{"English words", "cat tuna", []string{"pet"}},
			{"case and full-width folding", "ＮＥＯＶＩＭ", []string{"editor"}},
			{"mixed scripts", "京都 cherry", []string{"travel"}},
			{"key terms match too", "favourite food", []string{"favourite_food"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				g := gomega.NewWithT(t)
				hits := search(g, knowledge(c.query))
				g.Expect(keys(hits)).To(gomega.Equal(c.want))
				g.Expect(hits[0].Substring).To(gomega.BeFalse())
				g.Expect(hits[0].Score).To(gomega.BeNumerically(">", 0))
				g.Expect(hits[0].Tenant).To(gomega.Equal(tenantA))
			})
		}
	})

	t.Run("RelevanceThenImportance", func(t *testing.T) {
		g := gomega.NewWithT(t)
		for _, m := range []store.Memory{
			{Agent: "ranker", Key: "alpha", Content: "standup every weekday", Category: store.MemoryKnowledge, Importance: 0.2},
			{Agent: "ranker", Key: "beta", Content: "standup every weekday", Category: store.MemoryKnowledge, Importance: 0.8},
			{Agent: "ranker", Key: "standup", Content: "at ten", Category: store.MemoryKnowledge, Importance: 0.1},
			{Agent: "ranker", Key: "gamma", Content: "standup weekday retro", Category: store.MemoryKnowledge, Importance: 0.1},
		} {
			_, err := st.PutMemory(ctx, m)
			g.Expect(err).NotTo(gomega.HaveOccurred())
		}
		// gamma matches both terms; the key match of "standup" outranks a
		// content match; equal matches go by importance.
		hits := search(g, store.MemoryQuery{Agent: "ranker", Text: "standup retro"})
		g.Expect(keys(hits)).To(gomega.Equal([]string{"gamma", "standup", "beta", "alpha"}))
		hits = search(g, store.MemoryQuery{Agent: "ranker", Text: "weekday", Limit: 2})
		g.Expect(keys(hits)).To(gomega.Equal([]string{"beta", "alpha"}))
	})

	t.Run("Filters", func(t *testing.T) {
		g := gomega.NewWithT(t)
		g.Expect(keys(search(g, store.MemoryQuery{Text: "火锅"}))).To(gomega.ConsistOf("favourite_food", "timeline/web:c1:d1/1"))
		g.Expect(keys(search(g, store.MemoryQuery{Text: "火锅", Category: store.MemoryTimeline}))).
			To(gomega.Equal([]string{"timeline/web:c1:d1/1"}))
		g.Expect(keys(search(g, store.MemoryQuery{Text: "cat", Category: store.MemoryTimeline, SessionID: "web:c2:d1"}))).
			To(gomega.Equal([]string{"timeline/web:c2:d1/1"}))
		g.Expect(search(g, store.MemoryQuery{Text: "cat", SessionID: "web:c1:d1"})).To(gomega.BeEmpty())
		g.Expect(keys(search(g, store.MemoryQuery{Text: "京都", Kinds: []store.MemoryKind{store.MemoryDecision}}))).
			To(gomega.Equal([]string{"travel"}))
		g.Expect(search(g, store.MemoryQuery{Text: "京都", Kinds: []store.MemoryKind{store.MemoryFact, store.MemoryFocus}})).To(gomega.BeEmpty())
		g.Expect(keys(search(g, store.MemoryQuery{Text: "neovim", Kinds: []store.MemoryKind{""}}))).To(gomega.Equal([]string{"editor"}))
		g.Expect(search(g, store.MemoryQuery{Agent: "nobody", Text: "火锅"})).To(gomega.BeEmpty())

		// Time range on UpdatedAt, with times given through ImportMemories.
		n, err := st.ImportMemories(ctx, []store.Memory{
			{Agent: "dated", Key: "old", Content: "quarterly budget review", Category: store.MemoryKnowledge, UpdatedAt: t0.Add(-30 * 24 * time.Hour)},
			{Agent: "dated", Key: "new", Content: "quarterly budget approved", Category: store.MemoryKnowledge, UpdatedAt: t0},
		})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.Equal(2))
		dated := store.MemoryQuery{Agent: "dated", Text: "budget"}
		g.Expect(keys(search(g, dated))).To(gomega.ConsistOf("old", "new"))
		since, until := dated, dated
		since.Since = t0.Add(-24 * time.Hour)
		until.Until = t0.Add(-24 * time.Hour)
		g.Expect(keys(search(g, since))).To(gomega.Equal([]string{"new"}))
		g.Expect(keys(search(g, until))).To(gomega.Equal([]string{"old"}))
		exact := dated
		exact.Since, exact.Until = t0, t0
		g.Expect(keys(search(g, exact))).To(gomega.Equal([]string{"new"}), "bounds are inclusive")
	})

	t.Run("SubstringFallback", func(t *testing.T) {
		g := gomega.NewWithT(t)
		hits := search(g, knowledge("Mis"))
		g.Expect(keys(hits)).To(gomega.Equal([]string{"pet"}), "a word prefix full-text search cannot find")
		g.Expect(hits[0].Substring).To(gomega.BeTrue())
		g.Expect(keys(search(g, knowledge("樱")))).To(gomega.Equal([]string{"travel"}), "a single Han character")
		only := knowledge("Mis")
		only.FullTextOnly = true
		g.Expect(search(g, only)).To(gomega.BeEmpty())
		g.Expect(search(g, knowledge("zzzz"))).To(gomega.BeEmpty())
		g.Expect(search(g, store.MemoryQuery{Text: "Mis", Category: store.MemoryTimeline})).To(gomega.BeEmpty(), "filters apply to the fallback")
	})

	t.Run("HostileQueries", func(t *testing.T) {
		g := gomega.NewWithT(t)
		for _, q := range []string{"", "   ", "!!! ??? 。，、", "the of and is", "的 了 吗",
			`"`, `'`, `\`, `*`, `NEAR(`, `AND OR NOT`, `-`, `^`, `:*`, `&|!()<->`, `%_`, `'; DROP TABLE memories; --`} {
			_, err := st.SearchMemories(ctx, store.MemoryQuery{Agent: "helper", Text: q})
			g.Expect(err).NotTo(gomega.HaveOccurred(), "query %q", q)
		}
		g.Expect(search(g, knowledge("!!! ??? 。，、"))).To(gomega.BeEmpty())
		g.Expect(search(g, knowledge("the of and is"))).To(gomega.BeEmpty())
		g.Expect(keys(search(g, knowledge(`"cat" OR NEAR(tuna) AND * ^ -- ' \ :* &|!`)))).To(gomega.Equal([]string{"pet"}))
		g.Expect(keys(search(g, knowledge(`%iso_`)))).To(gomega.Equal([]string{"pet"}), "LIKE wildcards are literal")
		big := strings.Repeat("火锅 ", store.MaxMemoryQueryBytes/8)
		g.Expect(keys(search(g, knowledge(big)))).To(gomega.Equal([]string{"favourite_food"}))
		_, err := st.SearchMemories(ctx, store.MemoryQuery{Agent: "helper", Text: strings.Repeat("x", store.MaxMemoryQueryBytes+1)})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = st.SearchMemories(ctx, store.MemoryQuery{Agent: "helper", Text: "a\x00b"})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = st.SearchMemories(ctx, store.MemoryQuery{Text: "cat"})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid), "agent is required")
		_, err = st.SearchMemories(ctx, store.MemoryQuery{Agent: "helper", Text: "cat", Kinds: []store.MemoryKind{"gossip"}})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		_, err = st.SearchMemories(ctx, store.MemoryQuery{Agent: "helper", Text: "cat", Since: t0, Until: t0.Add(-time.Hour)})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
	})

	t.Run("WritesReindex", func(t *testing.T) {
		g := gomega.NewWithT(t)
		_, err := st.PutMemory(ctx, store.Memory{Agent: "helper", Key: "pet", Content: "The user's dog is Rex",
			Category: store.MemoryKnowledge, Importance: 0.5})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(search(g, knowledge("tuna"))).To(gomega.BeEmpty(), "the old content is no longer indexed")
		g.Expect(keys(search(g, knowledge("rex")))).To(gomega.Equal([]string{"pet"}))
		g.Expect(st.DeleteMemory(ctx, "helper", "editor")).To(gomega.Succeed())
		g.Expect(search(g, knowledge("neovim"))).To(gomega.BeEmpty())
	})

	t.Run("TenantIsolation", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ctxB := ctxFor(t, tenantB)
		hits, err := st.SearchMemories(ctxB, store.MemoryQuery{Agent: "helper", Text: "火锅"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(hits).To(gomega.BeEmpty())
		hits, err = st.SearchMemories(ctxB, store.MemoryQuery{Agent: "helper", Text: "火"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(hits).To(gomega.BeEmpty(), "nor through the fallback")
		_, err = st.ImportMemories(ctxB, []store.Memory{{Agent: "helper", Key: "secret_b", Content: "tenant b hotpot 火锅",
			Category: store.MemoryKnowledge}})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(keys(search(g, store.MemoryQuery{Text: "hotpot 火锅"}))).NotTo(gomega.ContainElement("secret_b"))
		n, err := st.PruneMemories(ctxB, "helper", store.MemoryKnowledge, t0.Add(100*365*24*time.Hour))
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.Equal(int64(1)), "only tenant b's own memory")
		_, err = st.SearchMemories(t.Context(), store.MemoryQuery{Agent: "helper", Text: "火锅"})
		g.Expect(err).To(gomega.MatchError(store.ErrNoTenant))
	})

	t.Run("ImportAndPrune", func(t *testing.T) {
		g := gomega.NewWithT(t)
		old := t0.Add(-100 * 24 * time.Hour)
		n, err := st.ImportMemories(ctx, []store.Memory{
			{Agent: "pruner", Key: "tl-old", Content: "old summary", Category: store.MemoryTimeline, Importance: 0.3, CreatedAt: old},
			{Agent: "pruner", Key: "tl-new", Content: "first draft", Category: store.MemoryTimeline, Importance: 0.3, CreatedAt: t0},
			{Agent: "pruner", Key: "fact-old", Content: "old fact", Category: store.MemoryKnowledge, Importance: 0.5, CreatedAt: old},
			{Agent: "pruner", Key: "tl-new", Content: "new summary", Category: store.MemoryTimeline, Importance: 0.3, CreatedAt: t0},
		})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.Equal(3), "the last of a repeated key wins")
		got, err := st.GetMemory(ctx, "pruner", "tl-new")
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(got.Content).To(gomega.Equal("new summary"))
		g.Expect(got.CreatedAt).To(gomega.Equal(t0))
		g.Expect(got.UpdatedAt).To(gomega.Equal(t0), "a missing UpdatedAt takes CreatedAt")
		g.Expect(got.ID).NotTo(gomega.BeEmpty())
		g.Expect(search(g, store.MemoryQuery{Agent: "pruner", Text: "draft"})).To(gomega.BeEmpty())

		deleted, err := st.PruneMemories(ctx, "pruner", store.MemoryTimeline, t0.Add(-90*24*time.Hour))
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(deleted).To(gomega.Equal(int64(1)))
		g.Expect(keys(search(g, store.MemoryQuery{Agent: "pruner", Text: "old"}))).To(gomega.Equal([]string{"fact-old"}),
			"knowledge is kept, and the pruned memory left the index")

		_, err = st.ImportMemories(ctx, []store.Memory{{Agent: "pruner", Key: "bad", Category: "gossip"}})
		g.Expect(err).To(gomega.MatchError(store.ErrInvalid))
		n, err = st.ImportMemories(ctx, nil)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(n).To(gomega.BeZero())
	})

	t.Run("CommonTerms", func(t *testing.T) {
		g := gomega.NewWithT(t)
		// More memories hold "routine" than a search ranks; the rare term
		// decides, and a query of only the common word still answers.
		ms := make([]store.Memory, 0, 1700)
		for i := range 1700 {
			ms = append(ms, store.Memory{Agent: "busy", Key: fmt.Sprintf("r-%04d", i), Content: fmt.Sprintf("routine note %d", i),
				Category: store.MemoryKnowledge, Importance: 0.5})
		}
		ms = append(ms, store.Memory{Agent: "busy", Key: "special", Content: "routine check of the aquarium filter",
			Category: store.MemoryKnowledge, Importance: 0.1})
		_, err := st.ImportMemories(ctx, ms)
		g.Expect(err).NotTo(gomega.HaveOccurred())
		hits := search(g, store.MemoryQuery{Agent: "busy", Text: "routine aquarium"})
		g.Expect(keys(hits)).To(gomega.Equal([]string{"special"}))
		hits = search(g, store.MemoryQuery{Agent: "busy", Text: "routine", Limit: 3})
		g.Expect(hits).To(gomega.HaveLen(3))
		for _, h := range hits {
			g.Expect(h.Content).To(gomega.ContainSubstring("routine"))
		}
	})

	t.Run("RecallQuality", func(t *testing.T) { testRecallQuality(t, newStore) })

	t.Run("ListByKeyPrefix", func(t *testing.T) {
		g := gomega.NewWithT(t)
		ms, err := st.ListMemories(ctx, store.MemoryFilter{Agent: "helper", KeyPrefix: "timeline/web:c1:"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ms).To(gomega.HaveLen(1))
		g.Expect(ms[0].Key).To(gomega.Equal("timeline/web:c1:d1/1"))
		ms, err = st.ListMemories(ctx, store.MemoryFilter{Agent: "helper", KeyPrefix: "%"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(ms).To(gomega.BeEmpty(), "the prefix is literal")
	})
}

func keys(hits []store.MemoryHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Key
	}
	return out
}
