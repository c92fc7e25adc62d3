package sqlite

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"github.com/picobot/picobot/runtime/store"
)

// SearchMessages implements store.MessageSearcher: the FTS5 table
// message_fts, each query word a quoted prefix term (implicit AND).
func (s *Store) SearchMessages(ctx context.Context, q store.MessageQuery) ([]store.MessageHit, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	terms := store.MessageSearchTerms(q.Text)
	if len(terms) == 0 {
		return nil, nil
	}
	match := make([]string, len(terms))
	for i, t := range terms {
		match[i] = `"` + t + `"*` // a term holds letters and digits only: no quote to escape
	}
	// The chat's session ids ("<channel>:<chat_id>:<dialog>") hold its
	// words in a row: a phrase of them keeps the index's walk to the chat
	// (the join checks the chat exactly).
	query := "session_id : \"" + strings.Join(words(q.Channel+" "+q.ChatID), " ") + "\" AND content : (" + strings.Join(match, " ") + ")"
	var out []store.MessageHit
	err := s.read(ctx, func(tx *txn, tenant string) error {
		var err error
		out, err = queryAll(ctx, tx, scanMessageHit, sqlSearchMessages, query, tenant, q.Channel, q.ChatID, q.HitLimit())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to search the messages of chat %q: %w", q.ChatID, classify(err))
	}
	return out, nil
}

// words splits s as the unicode61 tokenizer does: runs of letters and
// digits.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r) })
}

func scanMessageHit(row scanner) (store.MessageHit, error) {
	var h store.MessageHit
	m, err := scanMessage(hitRow{row, &h.Title})
	h.Message = m
	return h, err
}

// hitRow scans a message's columns and then the dialog's title.
type hitRow struct {
	scanner
	title *string
}

func (r hitRow) Scan(dest ...any) error { return r.scanner.Scan(append(dest, r.title)...) }
