// Package segment turns memory text into search terms, the same way for the
// index and for queries, so both stores (PostgreSQL with the `simple` text
// search configuration, SQLite FTS5) match Chinese and English alike.
//
// Latin, Cyrillic, Hangul and other space-separated scripts are split into
// lower-cased words. Chinese and Japanese text has no spaces, so each run of
// Han/kana characters is cut into overlapping character bigrams (我喜欢猫 →
// 我喜 喜欢 欢猫); a run of one character is kept as a unigram. Bigrams need no
// dictionary, cost nothing at build time and, measured on the labelled set in
// runtime/memory/testdata, recall as well as a jieba-style dictionary
// segmenter does (see the memory package's quality test).
package segment

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits keep a term list, and what the stores build from it, bounded
// whatever the input: a pasted file in a user message or a long summary.
const (
	// MaxTermBytes is the longest term kept; longer words (hashes, URLs) are
	// cut to it.
	MaxTermBytes = 64
	// MaxQueryTerms caps the distinct terms of a query.
	MaxQueryTerms = 32
	// MaxIndexTerms caps the distinct terms indexed for one text.
	MaxIndexTerms = 4096
)

// Term is one search term and the position (0-based, in terms) of its first
// occurrence.
type Term struct {
	Text string
	Pos  int
}

// Terms returns the distinct terms of text in order of first appearance,
// stop-words dropped, at most limit of them (no limit when limit <= 0).
func Terms(text string, limit int) []Term {
	seen := map[string]struct{}{}
	var out []Term
	pos := 0
	emit := func(t string) bool {
		p := pos
		pos++
		if _, dup := seen[t]; dup {
			return true
		}
		seen[t] = struct{}{}
		out = append(out, Term{Text: t, Pos: p})
		return limit <= 0 || len(out) < limit
	}
	scan(text, emit)
	return out
}

// QueryTerms returns the distinct terms of a query, at most MaxQueryTerms.
func QueryTerms(query string) []string {
	ts := Terms(query, MaxQueryTerms)
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Text
	}
	return out
}

// Words splits a query into lower-cased words for substring matching, the
// fallback when full-text search finds nothing: words of spaced scripts, and
// the single characters of Chinese/Japanese runs — bigrams miss one-character
// words (虾, 车, 辣), which this recovers. Stop-words are dropped; at most
// maxWords words of at most MaxTermBytes each.
func Words(query string, maxWords int) []string {
	seen := map[string]struct{}{}
	var out []string
	add := func(w string) bool {
		if _, dup := seen[w]; dup || isStop(w) {
			return true
		}
		seen[w] = struct{}{}
		out = append(out, w)
		return len(out) < maxWords
	}
	for _, w := range strings.FieldsFunc(fold(query), func(r rune) bool { return !isWordRune(r) && !isCJK(r) }) {
		var word []rune
		flush := func() bool {
			defer func() { word = word[:0] }()
			return len(word) < 2 || add(clip(string(word)))
		}
		for _, r := range w {
			if !isCJK(r) {
				word = append(word, r)
				continue
			}
			if !flush() || !add(string(r)) {
				return out
			}
		}
		if !flush() {
			return out
		}
	}
	return out
}

// scan feeds the terms of text to emit until it returns false.
func scan(text string, emit func(string) bool) {
	text = fold(text)
	var word []rune // a run of letters/digits of a spaced script
	var cjk []rune  // a run of Han/kana characters
	flushWord := func() bool {
		defer func() { word = word[:0] }()
		if len(word) == 0 {
			return true
		}
		w := clip(string(word))
		if len(word) == 1 || isStop(w) {
			return true
		}
		return emit(w)
	}
	flushCJK := func() bool {
		defer func() { cjk = cjk[:0] }()
		switch len(cjk) {
		case 0:
			return true
		case 1:
			if isStop(string(cjk)) {
				return true
			}
			return emit(string(cjk))
		}
		for i := 0; i+1 < len(cjk); i++ {
			if !emit(string(cjk[i : i+2])) {
				return false
			}
		}
		return true
	}
	for _, r := range text {
		switch {
		case isCJK(r):
			if !flushWord() {
				return
			}
			cjk = append(cjk, r)
		case isWordRune(r):
			if !flushCJK() {
				return
			}
			word = append(word, r)
		default:
			if !flushWord() || !flushCJK() {
				return
			}
		}
	}
	if flushWord() {
		flushCJK()
	}
}

// fold lower-cases text and maps full-width ASCII (ＡＢＣ１２３, common in
// Chinese input) to its plain form.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 0xFF01 && r <= 0xFF5E {
			r -= 0xFEE0
		}
		return unicode.ToLower(r)
	}, s)
}

// isCJK reports characters of scripts written without spaces.
// The prolonged sound mark (ー) and iteration mark (々) are Common script but
// belong to the words around them.
func isCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) || unicode.Is(unicode.Katakana, r) ||
		r == 'ー' || r == '々'
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// clip cuts a term to MaxTermBytes on a rune boundary.
func clip(s string) string {
	if len(s) <= MaxTermBytes {
		return s
	}
	s = s[:MaxTermBytes]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func isStop(w string) bool {
	_, ok := stopWords[w]
	return ok
}

// stopWords are words too common to tell memories apart: English function
// words and Chinese single-character particles and pronouns (bigrams are
// specific enough to keep).
var stopWords = func() map[string]struct{} {
	words := strings.Fields(`a about above after again all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers him his how i if in into is it its itself just me more most my no nor not now of off on
once only or other our ours out over own please same she should so some such than that the their theirs them
then there these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours
的 了 是 在 我 你 他 她 它 们 吗 呢 吧 啊 呀 和 与 及 也 都 就 又 还 很 个 这 那 有 没 不 要 会 能 把 被 给 对 从 向 于 之 其 或 而 但`)
	m := make(map[string]struct{}, len(words))
	for _, w := range words {
		m[w] = struct{}{}
	}
	return m
}()
