-- Full-text search over memories in an FTS5 table keyed by the memories
-- rowid. The store segments text in Go (runtime/memory/segment: Chinese as
-- character bigrams, other scripts as words) and writes the space-separated
-- terms, so the unicode61 tokenizer only splits on the spaces. Contentless:
-- the terms are not stored twice; contentless_delete lets rows be removed.

CREATE VIRTUAL TABLE memory_fts USING fts5(
    key_terms,
    content_terms,
    content = '',
    contentless_delete = 1,
    tokenize = "unicode61 remove_diacritics 0 categories 'L* N* Co M*'"
);

-- Rows written before this migration are indexed by unicode61's words (enough
-- for space-separated text); the store re-segments a memory whenever it is
-- written again, and the substring fallback covers the rest.
INSERT INTO memory_fts (rowid, key_terms, content_terms) SELECT rowid, key, content FROM memories;

-- Deleting a memory, by any statement, removes its terms.
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    DELETE FROM memory_fts WHERE rowid = old.rowid;
END;

-- Timeline retention deletes by age.
CREATE INDEX memories_by_age ON memories (tenant, agent, category, updated_at);
