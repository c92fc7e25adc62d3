-- Conversation search: the words of user and assistant messages as a
-- tsvector (the 'simple' configuration: lower-cased words, no stemming, as
-- SQLite's unicode61 tokenizer), kept by PostgreSQL itself, with a GIN
-- index. Row-level security on messages scopes every search to its tenant.

ALTER TABLE messages ADD COLUMN search tsvector GENERATED ALWAYS AS (
    CASE WHEN role IN ('user', 'assistant') THEN to_tsvector('simple', content) ELSE NULL END
) STORED;

CREATE INDEX messages_search ON messages USING gin (search);
