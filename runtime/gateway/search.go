package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/picobot/picobot/runtime/store"
)

// Conversation search answers.
const (
	// snippetRunes is about how much of a found message an answer shows.
	snippetRunes  = 160
	snippetBefore = 40
)

// SearchHit is a message found by GET /api/v1/search, as clients see it.
type SearchHit struct {
	Session   string `json:"session"`
	DialogID  string `json:"dialog_id"`
	Title     string `json:"title"`
	Seq       int64  `json:"seq"`
	Role      string `json:"role"`
	Snippet   string `json:"snippet"`
	CreatedAt string `json:"created_at"`
}

// search finds the chat's messages by their words (q), newest first.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	c, ok := chatOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	text := strings.TrimSpace(q.Get("q"))
	if text == "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "q is required: the words to find")
		return
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxMessageHits {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "limit must be a number from 1 to "+strconv.Itoa(store.MaxMessageHits))
			return
		}
		limit = n
	}
	hits, err := s.backend.SearchMessages(r.Context(), c, text, limit)
	if err != nil {
		s.fail(w, r, err, CodeUnknownAgent)
		return
	}
	terms := store.MessageSearchTerms(text)
	out := make([]SearchHit, len(hits))
	for i, h := range hits {
		dialog := h.SessionID[strings.LastIndexByte(h.SessionID, ':')+1:]
		out[i] = SearchHit{Session: h.SessionID, DialogID: dialog, Title: h.Title, Seq: h.Seq, Role: string(h.Role),
			Snippet: snippet(h.Content, terms), CreatedAt: h.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
	}
	writeJSON(w, http.StatusOK, map[string]any{"hits": out})
}

// snippet is the part of content around the first query word it holds, on
// one line, with "…" where it was cut.
func snippet(content string, terms []string) string {
	text := strings.Join(strings.Fields(content), " ")
	runes := []rune(text)
	if len(runes) <= snippetRunes {
		return text
	}
	lower := strings.ToLower(text)
	at := -1
	for _, t := range terms {
		if i := strings.Index(lower, t); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	start := 0
	if at > 0 {
		// ToLower keeps the byte length of most text; count runes up to at
		// in the lower-cased string, which is what at indexes.
		start = max(0, utf8.RuneCountInString(lower[:at])-snippetBefore)
	}
	end := min(len(runes), start+snippetRunes)
	start = max(0, end-snippetRunes)
	out := strings.TrimSpace(string(runes[start:end]))
	if start > 0 {
		out = "…" + out
	}
	if end < len(runes) {
		out += "…"
	}
	return out
}
