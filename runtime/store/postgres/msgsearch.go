package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store"
)

// SearchMessages implements store.MessageSearcher: the tsvector column
// messages.search, each query word a prefix term (AND).
func (s *Store) SearchMessages(ctx context.Context, q store.MessageQuery) ([]store.MessageHit, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	terms := store.MessageSearchTerms(q.Text)
	if len(terms) == 0 {
		return nil, nil
	}
	query := make([]string, len(terms))
	for i, t := range terms {
		query[i] = "'" + t + "':*" // a term holds letters and digits only: nothing to escape
	}
	out, err := many(ctx, s, scanMessageHit, sqlSearchMessages, strings.Join(query, " & "), q.Channel, q.ChatID, q.HitLimit())
	if err != nil {
		return nil, fmt.Errorf("failed to search the messages of chat %q: %w", q.ChatID, err)
	}
	return out, nil
}

func scanMessageHit(row pgx.CollectableRow) (store.MessageHit, error) {
	var h store.MessageHit
	m, err := scanMessage(hitRow{row, &h.Title})
	h.Message = m
	return h, err
}

// hitRow scans a message's columns and then the dialog's title.
type hitRow struct {
	pgx.CollectableRow
	title *string
}

func (r hitRow) Scan(dest ...any) error { return r.CollectableRow.Scan(append(dest, r.title)...) }
