package sqlite

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/internal/memindex"
)

// Memory search: memories.rowid keys the FTS5 table memory_fts, written in
// the same transaction as the memory (the terms come from Go, so no trigger
// can compute them); a trigger removes them when the memory goes.

const (
	sqlDeleteMemoryTerms = `DELETE FROM memory_fts WHERE rowid = ?1`
	sqlInsertMemoryTerms = `INSERT INTO memory_fts (rowid, key_terms, content_terms) VALUES (?1, ?2, ?3)`

	// memoryFilters are the MemoryQuery filters shared by both searches:
	// ?1 tenant, ?3 agent, ?4 category, ?5 session, ?6 kinds (JSON array or
	// NULL), ?7 since, ?8 until (micros or NULL).
	memoryFilters = `m.tenant = ?1 AND m.agent = ?3
	AND (?4 = '' OR m.category = ?4)
	AND (?5 = '' OR m.session_id = ?5)
	AND (?6 IS NULL OR m.kind IN (SELECT value FROM json_each(?6)))
	AND (?7 IS NULL OR m.updated_at >= ?7)
	AND (?8 IS NULL OR m.updated_at <= ?8)`

	// Search reads the postings of each planned term (sqlMatchTerm, ?1 a
	// MATCH expression) and scores the matches in Go: the sum, over the
	// query terms a memory holds, of the term's inverse document frequency,
	// a key match adding half again (the PostgreSQL store scores the same
	// way, over the highest rowid as the number of memories). That is BM25 without its term-frequency and length
	// parts, which short memories barely exercise, and without bm25()'s
	// per-match reads of the document sizes and per-query recount of each
	// term's documents — most of a search's cost. sqlMatchRecentTerm reads
	// only the ?2 most recently created matches (FTS5 walks rowids newest
	// first and stops), for a query whose terms are all too common to read
	// every match. sqlRankCandidates then reads the ranking columns of the
	// best candidates (rowids from ?10 on) that pass the filters, by rowid
	// (NOT INDEXED keeps the planner off the tenant/agent indexes); Go orders
	// them, and sqlReadCandidates reads the winners whole.
	sqlMatchTerm       = `SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?1`
	sqlMatchRecentTerm = sqlMatchTerm + ` ORDER BY rowid DESC LIMIT ?2`
	sqlMemoryCount     = `SELECT coalesce(max(rowid), 0) FROM memories`
	sqlRankCandidates  = `SELECT m.rowid, m.importance, m.updated_at, m.id FROM memories AS m NOT INDEXED
WHERE m.rowid IN (%s) AND ` + memoryFilters
	sqlReadCandidates = `SELECT rowid, ` + memoryColumns + ` FROM memories NOT INDEXED WHERE rowid IN (%s)`

	// sqlSearchMemoriesSubstring counts the query words (?2, a JSON array)
	// found in the key or content of the ?10 most recently written memories.
	// SQLite's lower() folds ASCII only, which the words (lower-cased in Go)
	// then match.
	sqlSearchMemoriesSubstring = `SELECT * FROM (
	SELECT r.*, (SELECT count(*) FROM json_each(?2) w WHERE instr(lower(r.key || ' ' || r.content), w.value) > 0) AS score
	FROM (SELECT m.tenant, m.agent, m.id, m.key, m.content, m.category, m.kind, m.source, m.session_id,
			m.importance, m.created_at, m.updated_at
		FROM memories m WHERE ` + memoryFilters + `
		ORDER BY m.updated_at DESC LIMIT ?10) AS r
) WHERE score > 0
ORDER BY score DESC, importance DESC, updated_at DESC, id
LIMIT ?9`

	// sqlTermDocs counts the memories holding a term (in every tenant:
	// embedded mode has one), up to ?2.
	sqlTermDocs = `SELECT count(*) FROM (SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?1 LIMIT ?2)`

	sqlPruneMemories = `DELETE FROM memories WHERE tenant = ?1 AND agent = ?2 AND category = ?3 AND updated_at < ?4`
)

// putMemory upserts m and its terms in tx. Zero times take the other one,
// or now when both are zero.
func putMemory(ctx context.Context, tx *txn, tenant string, m store.Memory, now int64) (store.Memory, error) {
	created, updated := now, now
	switch {
	case !m.CreatedAt.IsZero() && !m.UpdatedAt.IsZero():
		created, updated = micros(m.CreatedAt), micros(m.UpdatedAt)
	case !m.CreatedAt.IsZero():
		created, updated = micros(m.CreatedAt), micros(m.CreatedAt)
	case !m.UpdatedAt.IsZero():
		created, updated = micros(m.UpdatedAt), micros(m.UpdatedAt)
	}
	var rowid int64
	out, err := scanMemory(rowidScanner{tx.QueryRowContext(ctx, sqlPutMemory, tenant, m.Agent, m.ID, m.Key, m.Content,
		string(m.Category), string(m.Kind), string(m.Source), m.SessionID, m.Importance, created, updated), &rowid})
	if err != nil {
		return store.Memory{}, err
	}
	if _, err := tx.ExecContext(ctx, sqlDeleteMemoryTerms, rowid); err != nil {
		return store.Memory{}, fmt.Errorf("failed to unindex memory: %w", err)
	}
	key, content := memindex.Of(m).FTSColumns()
	if _, err := tx.ExecContext(ctx, sqlInsertMemoryTerms, rowid, key, content); err != nil {
		return store.Memory{}, fmt.Errorf("failed to index memory: %w", err)
	}
	return out, nil
}

// rowidScanner reads a leading rowid column before the memory's.
type rowidScanner struct {
	row   scanner
	rowid *int64
}

func (r rowidScanner) Scan(dest ...any) error {
	return r.row.Scan(append([]any{r.rowid}, dest...)...)
}

// SearchMemories implements store.MemorySearcher.
func (s *Store) SearchMemories(ctx context.Context, q store.MemoryQuery) ([]store.MemoryHit, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("failed to search memories: %w", err)
	}
	pq := memindex.ParseQuery(q.Text)
	if len(pq.Terms) == 0 && (q.FullTextOnly || len(pq.Words) == 0) {
		return []store.MemoryHit{}, nil
	}
	var kinds *string
	if len(q.Kinds) > 0 {
		b, _ := json.Marshal(store.KindStrings(q.Kinds)) // strings always marshal
		v := string(b)
		kinds = &v
	}
	args := []any{q.Agent, string(q.Category), q.SessionID, kinds, optMicros(q.Since), optMicros(q.Until), store.SearchLimit(q.Limit)}
	var hits []store.MemoryHit
	err := s.read(ctx, func(tx *txn, tenant string) error {
		if len(pq.Terms) > 0 {
			docs, err := termDocs(ctx, tx, pq.Terms)
			if err != nil {
				return err
			}
			if plan := memindex.PlanTerms(pq.Terms, docs, memindex.PostingBudget); len(plan.Terms) > 0 {
				candidates, err := matchTerms(ctx, tx, plan, docs)
				if err != nil {
					return err
				}
				// Read the best candidates first: they nearly always pass
				// the filters, so reading every match would be wasted.
				limit := store.SearchLimit(q.Limit)
				for n := max(4*limit, 40); ; n *= 4 {
					batch := candidates.best(n)
					hits, err = readCandidates(ctx, tx, tenant, args, batch, limit)
					if err != nil || len(hits) >= limit || len(batch) == len(candidates) {
						break
					}
				}
				if err != nil || len(hits) > 0 {
					return err
				}
			}
		}
		if q.FullTextOnly || len(pq.Words) == 0 {
			hits = []store.MemoryHit{}
			return nil
		}
		words, _ := json.Marshal(pq.Words) // strings always marshal
		var err error
		hits, err = queryAll(ctx, tx, scanHit(true), sqlSearchMemoriesSubstring,
			slices.Concat([]any{tenant, string(words)}, args, []any{memindex.FallbackScan})...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to search memories of agent %q: %w", q.Agent, classify(err))
	}
	return hits, nil
}

// candidate is a full-text match.
type candidate struct {
	rowid int64
	score float64
}

// candidates are full-text matches, best first.
type candidates []candidate

// best returns the first n candidates and those after them that tie with
// the n-th (up to memindex.MaxTies), whose order the memories' importance
// decides.
func (c candidates) best(n int) candidates {
	if n >= len(c) {
		return c
	}
	end := min(len(c), n+memindex.MaxTies)
	for n < end && c[n].score == c[n-1].score {
		n++
	}
	return c[:n]
}

// readCandidates reads the candidates that pass the query's filters (args
// as for memoryFilters from ?3) and returns the best limit of them:
// relevance, then importance, then the latest written.
func readCandidates(ctx context.Context, tx *txn, tenant string, args []any, batch candidates, limit int) ([]store.MemoryHit, error) {
	type ranked struct {
		rowid      int64
		importance float64
		updated    int64
		id         string
	}
	score := make(map[int64]float64, len(batch))
	rowids := make([]int64, len(batch))
	for i, c := range batch {
		score[c.rowid] = c.score
		rowids[i] = c.rowid
	}
	rs, err := queryAll(ctx, tx, func(row scanner) (ranked, error) {
		var r ranked
		err := row.Scan(&r.rowid, &r.importance, &r.updated, &r.id)
		return r, err
	}, fmt.Sprintf(sqlRankCandidates, marks(10, len(rowids))), slices.Concat([]any{tenant, nil}, args, anys(rowids))...)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(score[b.rowid], score[a.rowid]), cmp.Compare(b.importance, a.importance),
			cmp.Compare(b.updated, a.updated), cmp.Compare(a.id, b.id))
	})
	rs = rs[:min(limit, len(rs))]
	order := make(map[int64]int, len(rs))
	winners := make([]int64, len(rs))
	for i, r := range rs {
		order[r.rowid], winners[i] = i, r.rowid
	}
	if len(winners) == 0 {
		return []store.MemoryHit{}, nil
	}
	hits := make([]store.MemoryHit, len(rs))
	_, err = queryAll(ctx, tx, func(row scanner) (struct{}, error) {
		var rowid int64
		m, err := scanMemory(rowidScanner{row, &rowid})
		hits[order[rowid]] = store.MemoryHit{Memory: m, Score: score[rowid]}
		return struct{}{}, err
	}, fmt.Sprintf(sqlReadCandidates, marks(1, len(winners))), anys(winners)...)
	return hits, err
}

// marks returns n numbered parameters from ?first on, comma-separated.
func marks(first, n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = "?" + strconv.Itoa(first+i)
	}
	return strings.Join(out, ",")
}

func anys[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// keyBonus is what a match in the key adds to one in the content.
const keyBonus = 0.5

// matchTerms returns the full-text matches of plan, best first; docs holds
// each term's document count.
func matchTerms(ctx context.Context, tx *txn, plan memindex.Plan, docs map[string]int64) (candidates, error) {
	var total int64
	if err := tx.QueryRowContext(ctx, sqlMemoryCount).Scan(&total); err != nil {
		return nil, fmt.Errorf("failed to count memories: %w", err)
	}
	scores := map[int64]float64{}
	for _, t := range plan.Terms {
		idf := memindex.IDF(docs[t], total)
		exprs := []struct {
			match  string
			weight float64
		}{{memindex.FTSMatch([]string{t}), idf}, {"key_terms : " + memindex.FTSMatch([]string{t}), keyBonus * idf}}
		if plan.Recent {
			exprs = exprs[:1]
		}
		for _, e := range exprs {
			query, args := sqlMatchTerm, []any{e.match}
			if plan.Recent {
				query, args = sqlMatchRecentTerm, append(args, memindex.RecentCandidates)
			}
			rowids, err := queryAll(ctx, tx, scanRowid, query, args...)
			if err != nil {
				return nil, fmt.Errorf("failed to match terms: %w", err)
			}
			for _, r := range rowids {
				scores[r] += e.weight
			}
		}
	}
	out := make(candidates, 0, len(scores))
	for r, sc := range scores {
		out = append(out, candidate{rowid: r, score: sc})
	}
	slices.SortFunc(out, func(a, b candidate) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		return cmp.Compare(a.rowid, b.rowid)
	})
	return out, nil
}

func scanRowid(row scanner) (int64, error) {
	var r int64
	err := row.Scan(&r)
	return r, err
}

// termDocs returns how many memories hold each of terms, counting no
// further than one past the posting budget: the plan needs exact counts
// only for the terms it can afford, and FTS5 counts by walking postings.
func termDocs(ctx context.Context, tx *txn, terms []string) (map[string]int64, error) {
	docs := make(map[string]int64, len(terms))
	for _, t := range terms {
		var n int64
		if err := tx.QueryRowContext(ctx, sqlTermDocs, memindex.FTSMatch([]string{t}), memindex.PostingBudget+1).Scan(&n); err != nil {
			return nil, fmt.Errorf("failed to count term documents: %w", err)
		}
		docs[t] = n
	}
	return docs, nil
}

func scanHit(substring bool) func(scanner) (store.MemoryHit, error) {
	return func(row scanner) (store.MemoryHit, error) {
		h := store.MemoryHit{Substring: substring}
		var score float64
		m, err := scanMemory(scoreScanner{row, &score})
		h.Memory, h.Score = m, score
		return h, err
	}
}

// scoreScanner reads a trailing score column after the memory's.
type scoreScanner struct {
	row   scanner
	score *float64
}

func (r scoreScanner) Scan(dest ...any) error {
	return r.row.Scan(append(dest, r.score)...)
}

// ImportMemories implements store.MemorySearcher: one write transaction.
func (s *Store) ImportMemories(ctx context.Context, ms []store.Memory) (int, error) {
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			return 0, fmt.Errorf("failed to import memory %q: %w", m.Key, err)
		}
	}
	ms = memindex.Dedupe(ms)
	now := s.now()
	err := s.write(ctx, func(tx *txn, tenant string) error {
		for _, m := range ms {
			if m.ID == "" {
				m.ID = store.NewID()
			}
			if _, err := putMemory(ctx, tx, tenant, m, now); err != nil {
				return fmt.Errorf("memory %q: %w", m.Key, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("failed to import memories: %w", classify(err))
	}
	return len(ms), nil
}

// PruneMemories implements store.MemorySearcher.
func (s *Store) PruneMemories(ctx context.Context, agent string, category store.MemoryCategory, before time.Time) (int64, error) {
	res, err := exec(ctx, s, sqlPruneMemories, agent, string(category), micros(before))
	if err != nil {
		return 0, fmt.Errorf("failed to prune %s memories of agent %q: %w", category, agent, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("failed to prune %s memories of agent %q: %w", category, agent, err)
	}
	return n, nil
}

// optMicros passes a zero time as NULL.
func optMicros(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := micros(t)
	return &v
}
