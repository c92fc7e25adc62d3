package storetest

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
)

//go:embed testdata/recall_set.json
var recallSetJSON []byte

// RecallSet is a small labelled set for measuring recall quality: memories
// (Chinese, English and mixed) and queries with the keys of the memories
// judged relevant.
type RecallSet struct {
	Memories []struct {
		Key     string `json:"key"`
		Content string `json:"content"`
	} `json:"memories"`
	Queries []struct {
		Query    string   `json:"query"`
		Relevant []string `json:"relevant"`
	} `json:"queries"`
}

// LoadRecallSet returns the labelled set in testdata/recall_set.json.
func LoadRecallSet() (RecallSet, error) {
	var s RecallSet
	if err := json.Unmarshal(recallSetJSON, &s); err != nil {
		return s, fmt.Errorf("failed to parse the recall set: %w", err)
	}
	return s, nil
}

// Quality is how well a search ranks the recall set, over all queries.
type Quality struct {
	Queries int
	// PrecisionAt5 is relevant hits in the top 5 over 5 (the textbook
	// measure; with one to two relevant memories per query its ceiling is
	// well under 1).
	PrecisionAt5 float64
	// PrecisionOfReturned is relevant hits over hits returned (at most 5):
	// how much of what would be injected into a prompt is on topic.
	PrecisionOfReturned float64
	// RecallAt5 is relevant hits in the top 5 over relevant memories.
	RecallAt5 float64
	// MRR is the mean reciprocal rank of the first relevant hit.
	MRR float64
	// Misses lists queries whose top 5 holds no relevant memory.
	Misses []string
}

func (q Quality) String() string {
	return fmt.Sprintf("P@5 %.3f, precision of returned %.3f, R@5 %.3f, MRR %.3f over %d queries; no relevant hit for %q",
		q.PrecisionAt5, q.PrecisionOfReturned, q.RecallAt5, q.MRR, q.Queries, q.Misses)
}

// Evaluate scores search, which returns the keys of its ranked hits for a
// query, on the set.
func (s RecallSet) Evaluate(search func(query string) ([]string, error)) (Quality, error) {
	var q Quality
	for _, c := range s.Queries {
		keys, err := search(c.Query)
		if err != nil {
			return q, fmt.Errorf("query %q: %w", c.Query, err)
		}
		keys = keys[:min(5, len(keys))]
		found, first := 0, 0
		for i, k := range keys {
			if slices.Contains(c.Relevant, k) {
				found++
				if first == 0 {
					first = i + 1
				}
			}
		}
		q.Queries++
		q.PrecisionAt5 += float64(found) / 5
		if len(keys) > 0 {
			q.PrecisionOfReturned += float64(found) / float64(len(keys))
		}
		q.RecallAt5 += float64(found) / float64(len(c.Relevant))
		if first > 0 {
			q.MRR += 1 / float64(first)
		} else {
			q.Misses = append(q.Misses, c.Query)
		}
	}
	n := float64(max(q.Queries, 1))
	q.PrecisionAt5 /= n
	q.PrecisionOfReturned /= n
	q.RecallAt5 /= n
	q.MRR /= n
	return q, nil
}

// MeasureRecallQuality stores the recall set as knowledge of agent "quality"
// in tenant A and scores SearchMemories (with its substring fallback, as
// memory_recall uses it) on it.
func MeasureRecallQuality(tb testing.TB, st store.Store) Quality {
	tb.Helper()
	set, err := LoadRecallSet()
	if err != nil {
		tb.Fatal(err)
	}
	ctx := store.WithTenant(tb.Context(), tenantA)
	ms := make([]store.Memory, len(set.Memories))
	for i, m := range set.Memories {
		ms[i] = store.Memory{Agent: "quality", Key: m.Key, Content: m.Content, Category: store.MemoryKnowledge, Importance: 0.5}
	}
	if _, err := st.ImportMemories(ctx, ms); err != nil {
		tb.Fatal(err)
	}
	q, err := set.Evaluate(func(query string) ([]string, error) {
		hits, err := st.SearchMemories(ctx, store.MemoryQuery{Agent: "quality", Text: query, Category: store.MemoryKnowledge, Limit: 5})
		return keys(hits), err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return q
}

// Recall-quality floors the conformance suite holds every store to; the
// measured figures are in runtime/memory's quality test and the notes.
const (
	minRecallAt5           = 0.75
	minPrecisionOfReturned = 0.6
)

func testRecallQuality(t *testing.T, newStore NewStore) {
	q := MeasureRecallQuality(t, newStore(t))
	t.Logf("recall quality: %s", q)
	g := gomega.NewWithT(t)
	g.Expect(q.RecallAt5).To(gomega.BeNumerically(">=", minRecallAt5), q.String())
	g.Expect(q.PrecisionOfReturned).To(gomega.BeNumerically(">=", minPrecisionOfReturned), q.String())
}
