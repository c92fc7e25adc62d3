// Package memindex holds what the PostgreSQL and SQLite stores share to index
// and search memories: the terms of a memory and of a query (from
// runtime/memory/segment), their encodings (a PostgreSQL tsvector literal,
// FTS5 text and MATCH expressions), the choice of terms a search ranks on,
// and the weight of a term.
package memindex

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/picobot/picobot/runtime/memory/segment"
	"github.com/picobot/picobot/runtime/store"
)

// Bounds that keep a search's cost independent of how many memories there
// are. A term found in thousands of memories ("用户", "user") says little
// about relevance but makes ranking read every one of them.
const (
	// PostingBudget is the most (term, memory) postings a search ranks:
	// terms are taken rarest first while their document counts fit it.
	PostingBudget = 800
	// RecentCandidates is how many matches a search made only of terms over
	// the budget ranks (SQLite: the most recently created; PostgreSQL: the
	// first in index order).
	RecentCandidates = 500
	// FallbackScan is how many of the most recently written memories the
	// substring fallback looks at.
	FallbackScan = 5000
	// MaxTies is how many candidates past the best a search reads to let
	// importance order those tied in relevance: over that many equally
	// relevant memories, importance orders those read, not all of them.
	MaxTies = 100
	// maxFallbackWords caps the words of a substring search.
	maxFallbackWords = 16
)

// Index is the terms of one memory.
type Index struct {
	Key, Content []segment.Term
}

// Of returns the terms of m's key and content, MaxIndexTerms in all.
func Of(m store.Memory) Index {
	key := segment.Terms(m.Key, segment.MaxIndexTerms)
	content := segment.Terms(m.Content, segment.MaxIndexTerms-len(key))
	// Content positions follow the key's, as if the two were one text.
	offset := len(key)
	if n := len(key); n > 0 {
		offset = key[n-1].Pos + 1
	}
	for i := range content {
		content[i].Pos += offset
	}
	return Index{Key: key, Content: content}
}

// maxPos is the largest position a tsvector holds.
const maxPos = 16383

// TSVector returns the index as a PostgreSQL tsvector literal: each term
// quoted (read verbatim, no parser involved) with its first position, weight
// B in the key, D (the default) in the content (the search query weighs them).
func (x Index) TSVector() string {
	type entry struct {
		key, content int // positions, 0 when absent
	}
	order := make([]string, 0, len(x.Key)+len(x.Content))
	entries := map[string]*entry{}
	get := func(t string) *entry {
		e := entries[t]
		if e == nil {
			e = &entry{}
			entries[t] = e
			order = append(order, t)
		}
		return e
	}
	for _, t := range x.Key {
		get(t.Text).key = min(t.Pos+1, maxPos)
	}
	for _, t := range x.Content {
		get(t.Text).content = min(t.Pos+1, maxPos)
	}
	var b strings.Builder
	for i, t := range order {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(t))
		e := entries[t]
		b.WriteByte(':')
		if e.key > 0 {
			b.WriteString(strconv.Itoa(e.key))
			b.WriteByte('B')
			if e.content > 0 && e.content != e.key {
				b.WriteByte(',')
				b.WriteString(strconv.Itoa(e.content))
			}
		} else {
			b.WriteString(strconv.Itoa(e.content))
		}
	}
	return b.String()
}

// FTSColumns returns the key and content terms as space-separated text for
// the FTS5 table.
func (x Index) FTSColumns() (key, content string) {
	return join(x.Key), join(x.Content)
}

func join(ts []segment.Term) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Text
	}
	return strings.Join(parts, " ")
}

// Query is the search form of a query text.
type Query struct {
	// Terms are the full-text terms; none means nothing can match.
	Terms []string
	// Words are the substring-fallback words.
	Words []string
}

// ParseQuery segments text.
func ParseQuery(text string) Query {
	return Query{Terms: segment.QueryTerms(text), Words: segment.Words(text, maxFallbackWords)}
}

// Plan is the terms a search ranks on.
type Plan struct {
	// Terms are OR-joined; none means nothing can match.
	Terms []string
	// Recent: even the rarest term is over the budget, so only the
	// RecentCandidates most recent matches are ranked.
	Recent bool
}

// PlanTerms picks the terms to search for given how many memories hold each
// (docs; a term missing from it is in none): rarest first, while their counts
// add up to at most budget, and at least the rarest one. Terms in no memory
// are dropped.
func PlanTerms(terms []string, docs map[string]int64, budget int64) Plan {
	var present []string
	for _, t := range terms {
		if docs[t] > 0 {
			present = append(present, t)
		}
	}
	if len(present) == 0 {
		return Plan{}
	}
	slices.SortStableFunc(present, func(a, b string) int { return cmp.Compare(docs[a], docs[b]) })
	if docs[present[0]] > budget {
		return Plan{Terms: present[:1], Recent: true}
	}
	total := int64(0)
	n := 0
	for _, t := range present {
		if total+docs[t] > budget {
			break
		}
		total += docs[t]
		n++
	}
	return Plan{Terms: present[:n]}
}

// IDF is the inverse document frequency of a term held by docs of total
// memories, as BM25 weighs it.
func IDF(docs, total int64) float64 {
	d, n := float64(docs), float64(max(total, docs))
	return math.Log(1 + (n-d+0.5)/(d+0.5))
}

// FTSMatch returns terms OR-joined as an FTS5 MATCH expression, each a
// double-quoted string so that no character acts as FTS5 syntax.
func FTSMatch(terms []string) string {
	parts := make([]string, len(terms))
	for i, t := range terms {
		parts[i] = `"` + strings.ReplaceAll(t, `"`, `""`) + `"`
	}
	return strings.Join(parts, " OR ")
}

// quote writes a tsvector/tsquery lexeme literal: single-quoted, with quotes
// doubled and backslashes escaped.
func quote(t string) string {
	t = strings.ReplaceAll(t, `\`, `\\`)
	return "'" + strings.ReplaceAll(t, `'`, `''`) + "'"
}

// Dedupe keeps the last memory of each (Agent, Key), in the order of their
// last appearance, so one bulk upsert never touches a row twice.
func Dedupe(ms []store.Memory) []store.Memory {
	type id struct{ agent, key string }
	last := make(map[id]int, len(ms))
	for i, m := range ms {
		last[id{m.Agent, m.Key}] = i
	}
	if len(last) == len(ms) {
		return ms
	}
	out := make([]store.Memory, 0, len(last))
	for i, m := range ms {
		if last[id{m.Agent, m.Key}] == i {
			out = append(out, m)
		}
	}
	return out
}
