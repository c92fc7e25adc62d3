package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/internal/memindex"
)

// Memory search: memories.terms holds the memory's search terms as a
// tsvector written from Go; triggers (migration 0002) derive from it
// memory_postings, a B-tree inverted index, and memory_term_stats, the
// number of memories holding each term. A search looks up its terms' counts,
// plans which to rank on (memindex.PlanTerms), sums per memory the inverse
// document frequency of the planned terms it holds — a key match counting
// half again, as in the SQLite store — and orders by that, importance and
// recency. Every table carries the tenant under row-level security, and the
// search uses only leakproof operators (text equality), so the policy and
// the indexes work together. Nothing the user typed is parsed as query
// syntax: terms travel as array parameters.

const (
	// memoryFilters are the MemoryQuery filters shared by the searches: $1
	// tenant, $3 agent, $4 category, $5 session, $6 kinds (NULL for all), $7
	// since, $8 until.
	memoryFilters = `m.tenant = $1 AND m.agent = $3
	AND ($4 = '' OR m.category = $4)
	AND ($5 = '' OR m.session_id = $5)
	AND ($6::text[] IS NULL OR m.kind = ANY ($6::text[]))
	AND ($7::timestamptz IS NULL OR m.updated_at >= $7)
	AND ($8::timestamptz IS NULL OR m.updated_at <= $8)`

	// sqlSearchMemories: $2 are the planned terms, $10 their weights, $11
	// the most postings read per term (all of them unless the plan is
	// Recent), $12 the most candidates read from memories, best first (the
	// best nearly always pass the filters, and reading every match would be
	// wasted), $9 the limit.
	sqlSearchMemories = `WITH q AS (SELECT * FROM unnest($2::text[], $10::float8[]) AS q (term, w)),
c AS (
	SELECT p.memory_id, sum(q.w * CASE WHEN p.in_key THEN 1.5 ELSE 1.0 END) AS score
	FROM q JOIN LATERAL (
		SELECT memory_id, in_key FROM memory_postings
		WHERE tenant = $1 AND agent = $3 AND term = q.term LIMIT $11
	) AS p ON true
	GROUP BY p.memory_id
	ORDER BY score DESC, p.memory_id
	LIMIT $12
)
SELECT ` + memoryColumnsM + `, c.score::float8
FROM c JOIN memories AS m ON m.tenant = $1 AND m.id = c.memory_id
WHERE ` + memoryFilters + `
ORDER BY c.score DESC, m.importance DESC, m.updated_at DESC, m.id
LIMIT $9`

	// sqlSearchMemoriesSubstring counts the query words ($2) found in the
	// key or content of the $10 most recently written memories; strpos
	// takes them literally (no LIKE wildcards to escape).
	sqlSearchMemoriesSubstring = `SELECT * FROM (
	SELECT r.*, (SELECT count(*) FROM unnest($2::text[]) AS w WHERE strpos(lower(r.key || ' ' || r.content), w) > 0)::float8 AS score
	FROM (SELECT ` + memoryColumnsM + ` FROM memories AS m WHERE ` + memoryFilters + ` ORDER BY m.updated_at DESC LIMIT $10) AS r
) AS s WHERE score > 0
ORDER BY score DESC, importance DESC, updated_at DESC, id
LIMIT $9`

	// sqlTermDocs counts the agent's memories holding each term ($3); the
	// empty term counts all of them.
	sqlTermDocs = `SELECT term, docs FROM memory_term_stats WHERE tenant = $1 AND agent = $2 AND term = ANY ($3::text[])`

	// sqlImportMemories upserts rows given as parallel arrays. A missing
	// time takes the other one, or now.
	sqlImportMemories = `INSERT INTO memories (tenant, agent, id, key, content, category, kind, source, session_id, importance,
	created_at, updated_at, terms)
SELECT $1, t.agent, t.id, t.key, t.content, t.category, t.kind, t.source, t.session_id, t.importance,
	COALESCE(t.created_at, t.updated_at, now()), COALESCE(t.updated_at, t.created_at, now()), t.terms::tsvector
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
	$10::float8[], $11::timestamptz[], $12::timestamptz[], $13::text[])
	AS t (agent, id, key, content, category, kind, source, session_id, importance, created_at, updated_at, terms)
` + memoryUpsert

	// memoryUpsert replaces the memory of the same (agent, key), keeping its
	// id and created_at.
	memoryUpsert = `ON CONFLICT (tenant, agent, key) DO UPDATE SET
	content = EXCLUDED.content,
	terms = EXCLUDED.terms,
	category = EXCLUDED.category,
	kind = EXCLUDED.kind,
	source = EXCLUDED.source,
	session_id = EXCLUDED.session_id,
	importance = EXCLUDED.importance,
	updated_at = EXCLUDED.updated_at`

	sqlPruneMemories = `DELETE FROM memories WHERE tenant = $1 AND agent = $2 AND category = $3 AND updated_at < $4`
)

// importChunk is the number of rows of one import statement.
const importChunk = 2000

// SearchMemories implements store.MemorySearcher.
func (s *Store) SearchMemories(ctx context.Context, q store.MemoryQuery) ([]store.MemoryHit, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("failed to search memories: %w", err)
	}
	pq := memindex.ParseQuery(q.Text)
	if len(pq.Terms) == 0 && (q.FullTextOnly || len(pq.Words) == 0) {
		return []store.MemoryHit{}, nil
	}
	var kinds []string
	if len(q.Kinds) > 0 {
		kinds = store.KindStrings(q.Kinds)
	}
	args := []any{q.Agent, string(q.Category), q.SessionID, kinds, nullTime(q.Since), nullTime(q.Until), store.SearchLimit(q.Limit)}
	fail := func(err error) ([]store.MemoryHit, error) {
		return nil, fmt.Errorf("failed to search memories of agent %q: %w", q.Agent, err)
	}
	if len(pq.Terms) > 0 {
		counts, err := many(ctx, s, scanTermDocs, sqlTermDocs, q.Agent, append([]string{""}, pq.Terms...))
		if err != nil {
			return fail(err)
		}
		docs := make(map[string]int64, len(counts))
		for _, c := range counts {
			docs[c.term] = c.docs
		}
		if plan := memindex.PlanTerms(pq.Terms, docs, memindex.PostingBudget); len(plan.Terms) > 0 {
			total := docs[""]
			weights := make([]float64, len(plan.Terms))
			for i, t := range plan.Terms {
				weights[i] = memindex.IDF(docs[t], total)
			}
			postings, matches := int64(math.MaxInt32), int64(0)
			for _, t := range plan.Terms {
				matches += docs[t]
			}
			if plan.Recent {
				postings, matches = memindex.RecentCandidates, memindex.RecentCandidates
			}
			limit := int64(store.SearchLimit(q.Limit))
			var hits []store.MemoryHit
			for n := max(4*limit, 40) + memindex.MaxTies; ; n *= 4 {
				hits, err = many(ctx, s, scanHit(false), sqlSearchMemories,
					slices.Concat([]any{plan.Terms}, args, []any{weights, postings, n})...)
				if err != nil {
					return fail(err)
				}
				if int64(len(hits)) >= limit || n >= matches {
					break
				}
			}
			if len(hits) > 0 {
				return hits, nil
			}
		}
	}
	if q.FullTextOnly || len(pq.Words) == 0 {
		return []store.MemoryHit{}, nil
	}
	hits, err := many(ctx, s, scanHit(true), sqlSearchMemoriesSubstring,
		slices.Concat([]any{pq.Words}, args, []any{memindex.FallbackScan})...)
	if err != nil {
		return fail(err)
	}
	return nonNil(hits), nil
}

type termDocs struct {
	term string
	docs int64
}

func scanTermDocs(row pgx.CollectableRow) (termDocs, error) {
	var t termDocs
	err := row.Scan(&t.term, &t.docs)
	return t, err
}

func nonNil(hits []store.MemoryHit) []store.MemoryHit {
	if hits == nil {
		return []store.MemoryHit{}
	}
	return hits
}

func scanHit(substring bool) pgx.RowToFunc[store.MemoryHit] {
	return func(row pgx.CollectableRow) (store.MemoryHit, error) {
		h := store.MemoryHit{Substring: substring}
		m, err := scanMemory(scoreRow{row, &h.Score})
		h.Memory = m
		return h, err
	}
}

// scoreRow reads a trailing score column after the memory's.
type scoreRow struct {
	pgx.CollectableRow
	score *float64
}

func (r scoreRow) Scan(dest ...any) error {
	return r.CollectableRow.Scan(append(dest, r.score)...)
}

// ImportMemories implements store.MemorySearcher: one transaction, rows sent
// as arrays in chunks.
func (s *Store) ImportMemories(ctx context.Context, ms []store.Memory) (n int, err error) {
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			return 0, fmt.Errorf("failed to import memory %q: %w", m.Key, err)
		}
	}
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return 0, fmt.Errorf("failed to import memories: %w", err)
	}
	ms = memindex.Dedupe(ms)
	pool, err := s.poolFor(tenant)
	if err != nil {
		return 0, fmt.Errorf("failed to import memories: %w", err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("failed to import memories: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreClosed(tx.Rollback(context.WithoutCancel(ctx))))
		}
	}()
	if _, err := tx.Exec(ctx, sqlSetTenant, tenant); err != nil {
		return 0, fmt.Errorf("failed to import memories: failed to set tenant: %w", err)
	}
	for start := 0; start < len(ms); start += importChunk {
		if _, err := tx.Exec(ctx, sqlImportMemories, importArgs(tenant, ms[start:min(start+importChunk, len(ms))])...); err != nil {
			return 0, fmt.Errorf("failed to import memories: %w", classify(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("failed to import memories: %w", classify(err))
	}
	return len(ms), nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// importArgs turns memories into the parallel arrays of sqlImportMemories.
func importArgs(tenant string, ms []store.Memory) []any {
	n := len(ms)
	agent, id, key, content := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	category, kind, source, session := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	importance := make([]float64, n)
	created, updated := make([]*time.Time, n), make([]*time.Time, n)
	terms := make([]string, n)
	for i, m := range ms {
		if m.ID == "" {
			m.ID = store.NewID()
		}
		agent[i], id[i], key[i], content[i] = m.Agent, m.ID, m.Key, m.Content
		category[i], kind[i], source[i], session[i] = string(m.Category), string(m.Kind), string(m.Source), m.SessionID
		importance[i] = m.Importance
		created[i], updated[i] = nullTime(m.CreatedAt), nullTime(m.UpdatedAt)
		terms[i] = memindex.Of(m).TSVector()
	}
	return []any{tenant, agent, id, key, content, category, kind, source, session, importance, created, updated, terms}
}

// PruneMemories implements store.MemorySearcher.
func (s *Store) PruneMemories(ctx context.Context, agent string, category store.MemoryCategory, before time.Time) (int64, error) {
	tag, err := exec(ctx, s, sqlPruneMemories, agent, string(category), micro(before))
	if err != nil {
		return 0, fmt.Errorf("failed to prune %s memories of agent %q: %w", category, agent, err)
	}
	return tag.RowsAffected(), nil
}
