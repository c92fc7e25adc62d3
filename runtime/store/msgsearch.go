package store

import (
	"context"
	"strings"
	"unicode"
)

// MessageSearcher finds the messages of a chat by their words: conversation
// search. Both stores index the text of user and assistant messages as it
// is appended (SQLite in an FTS5 table, PostgreSQL in a tsvector column with
// a GIN index), so a search reads the index, not every message.
type MessageSearcher interface {
	// SearchMessages returns the chat's user and assistant messages that
	// hold every word of q.Text, each as the start of one of their words
	// ("plan" finds "planning"; case does not matter), newest first, with
	// the title of their dialog. Messages of deleted dialogs are left out;
	// archived ones are kept. A query without a word (only punctuation)
	// finds nothing; whatever it holds, the database never parses it as a
	// query language.
	SearchMessages(ctx context.Context, q MessageQuery) ([]MessageHit, error)
}

// Limits of a MessageQuery.
const (
	MaxMessageQueryBytes = 1 << 10
	// MaxMessageQueryTerms caps the words of a query that are searched.
	MaxMessageQueryTerms = 8
	DefaultMessageHits   = 20
	MaxMessageHits       = 100
)

// MessageQuery selects the messages SearchMessages looks at.
type MessageQuery struct {
	// Channel and ChatID name the chat (Session.Channel, Session.ChatID):
	// both required.
	Channel, ChatID string
	Text            string
	// Limit caps the hits (DefaultMessageHits when 0, at most
	// MaxMessageHits).
	Limit int
}

// MessageHit is a message found by SearchMessages.
type MessageHit struct {
	Message
	// Title is the title of the message's dialog.
	Title string `json:"title"`
}

// Validate checks a query for SearchMessages.
func (q MessageQuery) Validate() error {
	if err := required("channel", q.Channel, "chat_id", q.ChatID); err != nil {
		return err
	}
	switch {
	case len(q.Text) > MaxMessageQueryBytes:
		return invalid("query is %d bytes; at most %d", len(q.Text), MaxMessageQueryBytes)
	case q.Limit < 0 || q.Limit > MaxMessageHits:
		return invalid("limit %d is not between 0 and %d", q.Limit, MaxMessageHits)
	}
	return noNUL("query", q.Text)
}

// HitLimit is the number of hits the query asks for.
func (q MessageQuery) HitLimit() int {
	if q.Limit == 0 {
		return DefaultMessageHits
	}
	return q.Limit
}

// MessageSearchTerms are the words of a query the stores search for: runs
// of letters, digits and marks, lower-cased, the first
// MaxMessageQueryTerms of them (repeats dropped). Only these reach the
// database, so a query cannot carry FTS5 or tsquery syntax.
func MessageSearchTerms(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r)
	}) {
		w = strings.ToLower(w)
		if seen[w] {
			continue
		}
		seen[w] = true
		out = append(out, w)
		if len(out) == MaxMessageQueryTerms {
			break
		}
	}
	return out
}
