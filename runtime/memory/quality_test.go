package memory_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"unicode"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/memory/segment"
	"github.com/picobot/picobot/runtime/store/storetest"
)

// TestSegmentationQuality compares ways of cutting text into search terms on
// the labelled recall set, each ranked by the same in-memory BM25 with
// OR-joined terms (what the stores do), to justify the choice of character
// bigrams. A jieba-style dictionary segmenter (github.com/yanyiwu/gojieba,
// cgo) was measured the same way outside the module; its figures are in the
// memory notes of the report. The stores' own figures, ranking and fallback
// included, come from storetest's RecallQuality.
func TestSegmentationQuality(t *testing.T) {
	set, err := storetest.LoadRecallSet()
	if err != nil {
		t.Fatal(err)
	}
	segmenters := []struct {
		name  string
		terms func(string) []string
	}{
		{"bigram (chosen)", func(s string) []string { return texts(segment.Terms(s, 0)) }},
		{"bigram+unigram", bigramsAndUnigrams},
		{"unigram", unigrams},
		{"no CJK segmentation", runs},
	}
	results := map[string]storetest.Quality{}
	for _, sg := range segmenters {
		docs := make([][]string, len(set.Memories))
		for i, m := range set.Memories {
			docs[i] = sg.terms(m.Key + " " + m.Content)
		}
		idx := newBM25(docs)
		q, err := set.Evaluate(func(query string) ([]string, error) {
			var keys []string
			for _, i := range idx.search(sg.terms(query), 5) {
				keys = append(keys, set.Memories[i].Key)
			}
			return keys, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		results[sg.name] = q
		t.Logf("%-20s %s", sg.name, q)
	}
	g := NewWithT(t)
	chosen := results["bigram (chosen)"]
	g.Expect(chosen.RecallAt5).To(BeNumerically(">", results["no CJK segmentation"].RecallAt5+0.2),
		"Chinese needs segmenting at all")
	g.Expect(chosen.PrecisionOfReturned).To(BeNumerically(">", results["unigram"].PrecisionOfReturned),
		"single characters match too much")
	g.Expect(chosen.RecallAt5).To(BeNumerically(">=", 0.8))
}

func texts(ts []segment.Term) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Text
	}
	return out
}

// unigrams cuts CJK text into single characters and other text into words.
func unigrams(s string) []string {
	var out []string
	for _, w := range runs(s) {
		r := []rune(w)
		if unicode.Is(unicode.Han, r[0]) {
			for _, c := range r {
				out = append(out, string(c))
			}
			continue
		}
		out = append(out, w)
	}
	return out
}

func bigramsAndUnigrams(s string) []string {
	return append(texts(segment.Terms(s, 0)), unigrams(s)...)
}

// runs splits at anything but letters and digits and at script changes
// between Han and the rest, keeping a Han run whole: what a word tokenizer
// without Chinese support (FTS5 unicode61, PostgreSQL's default parser) does.
func runs(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush()
			continue
		}
		if len(cur) > 0 && unicode.Is(unicode.Han, cur[len(cur)-1]) != unicode.Is(unicode.Han, r) {
			flush()
		}
		cur = append(cur, r)
	}
	flush()
	return out
}

// bm25 is Okapi BM25 (k1 1.2, b 0.75) over term lists.
type bm25 struct {
	docs  []map[string]int
	lens  []float64
	avg   float64
	df    map[string]int
	count float64
}

func newBM25(docs [][]string) *bm25 {
	x := &bm25{df: map[string]int{}, count: float64(len(docs))}
	for _, d := range docs {
		tf := map[string]int{}
		for _, t := range d {
			tf[t]++
		}
		for t := range tf {
			x.df[t]++
		}
		x.docs = append(x.docs, tf)
		x.lens = append(x.lens, float64(len(d)))
		x.avg += float64(len(d))
	}
	x.avg /= x.count
	return x
}

// search returns the indexes of the best n documents matching any term.
func (x *bm25) search(terms []string, n int) []int {
	slices.Sort(terms)
	terms = slices.Compact(terms)
	type scored struct {
		doc   int
		score float64
	}
	var hits []scored
	for i, tf := range x.docs {
		score := 0.0
		for _, t := range terms {
			f := float64(tf[t])
			if f == 0 {
				continue
			}
			idf := math.Log(1 + (x.count-float64(x.df[t])+0.5)/(float64(x.df[t])+0.5))
			score += idf * f * 2.2 / (f + 1.2*(0.25+0.75*x.lens[i]/x.avg))
		}
		if score > 0 {
			hits = append(hits, scored{i, score})
		}
	}
	slices.SortStableFunc(hits, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	out := make([]int, 0, n)
	for _, h := range hits[:min(n, len(hits))] {
		out = append(out, h.doc)
	}
	return out
}
