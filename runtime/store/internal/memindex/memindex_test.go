package memindex

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

func TestPlanTerms(t *testing.T) {
	docs := map[string]int64{"rare": 3, "mid": 900, "common": 60_000, "also": 700}
	cases := []struct {
		name  string
		terms []string
		want  Plan
	}{
		{"rarest first within the budget", []string{"common", "mid", "rare", "also"}, Plan{Terms: []string{"rare", "also"}}},
		{"absent terms dropped", []string{"nowhere", "rare"}, Plan{Terms: []string{"rare"}}},
		{"nothing present", []string{"nowhere"}, Plan{}},
		{"only common terms rank recent matches", []string{"common"}, Plan{Terms: []string{"common"}, Recent: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			NewWithT(t).Expect(PlanTerms(c.terms, docs, PostingBudget)).To(Equal(c.want))
		})
	}
}

func TestLiteralsQuoteEverything(t *testing.T) {
	g := NewWithT(t)
	g.Expect(IDF(1, 100)).To(BeNumerically(">", IDF(50, 100)))
	g.Expect(FTSMatch([]string{`a"b`, "火锅"})).To(Equal(`"a""b" OR "火锅"`))
	x := Of(store.Memory{Key: "food pref", Content: "火锅 food"})
	g.Expect(x.TSVector()).To(Equal(`'food':1B,4 'pref':2B '火锅':3`))
	key, content := x.FTSColumns()
	g.Expect(key).To(Equal("food pref"))
	g.Expect(content).To(Equal("火锅 food"))
}

func TestDedupeKeepsTheLastOfAKey(t *testing.T) {
	ms := []store.Memory{{Agent: "a", Key: "k", Content: "1"}, {Agent: "b", Key: "k"}, {Agent: "a", Key: "k", Content: "2"}}
	NewWithT(t).Expect(Dedupe(ms)).To(Equal([]store.Memory{{Agent: "b", Key: "k"}, {Agent: "a", Key: "k", Content: "2"}}))
}
