-- Full-text search over memories. Debian's PostgreSQL has no Chinese parser,
-- so the store segments text in Go (runtime/memory/segment: Chinese as
-- character bigrams, other scripts as words) and writes the terms as a
-- tsvector literal, which PostgreSQL stores verbatim: no parser, dictionary
-- or locale is involved. Key terms carry weight B.
--
-- The index is a table of postings rather than a GIN index on the tsvector:
-- under row-level security PostgreSQL evaluates a query's non-leakproof
-- operators, tsvector @@ tsquery among them, only after the policy, so a GIN
-- index on memories.terms is never used and every search would read the
-- whole table. Text equality is leakproof, so the postings' B-tree serves
-- searches under the policy. Statement triggers derive postings and per-term
-- counts from memories.terms, whatever statement writes memories.

ALTER TABLE memories ADD COLUMN terms tsvector NOT NULL DEFAULT ''::tsvector;

-- memory_postings lists the memories holding each term of an agent.
CREATE TABLE memory_postings (
    tenant    text    NOT NULL,
    agent     text    NOT NULL,
    term      text    NOT NULL,
    memory_id text    NOT NULL,
    in_key    boolean NOT NULL,
    -- in_key rides along in the index, so searches read postings from the
    -- index alone.
    PRIMARY KEY (tenant, agent, term, memory_id) INCLUDE (in_key)
);

-- memory_term_stats counts them (and, as term '', the agent's memories): a
-- search ranks on its rarer terms first and
-- skips those too common to tell memories apart ("用户", "user"), whose
-- matches would cost more to rank than they say (memsearch.go).
CREATE TABLE memory_term_stats (
    tenant text   NOT NULL,
    agent  text   NOT NULL,
    term   text   NOT NULL,
    docs   bigint NOT NULL,
    PRIMARY KEY (tenant, agent, term)
);

-- Existing rows: the `simple` configuration's words (enough for
-- space-separated text); the store re-segments a memory whenever it is
-- written again, and the substring fallback covers the rest. The owner lifts
-- FORCE for the backfill only, as row-level security would hide every row.
ALTER TABLE memories NO FORCE ROW LEVEL SECURITY;
UPDATE memories SET terms = setweight(to_tsvector('simple', key), 'B') || to_tsvector('simple', content);
INSERT INTO memory_postings (tenant, agent, term, memory_id, in_key)
SELECT m.tenant, m.agent, u.lexeme, m.id, 'B' = ANY (u.weights)
FROM memories AS m, unnest(m.terms) AS u;
INSERT INTO memory_term_stats (tenant, agent, term, docs)
SELECT tenant, agent, term, count(*) FROM memory_postings GROUP BY 1, 2, 3
UNION ALL
SELECT tenant, agent, '', count(*) FROM memories GROUP BY 1, 2;
ALTER TABLE memories FORCE ROW LEVEL SECURITY;

ALTER TABLE memory_postings ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_postings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_postings
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE memory_term_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_term_stats FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memory_term_stats
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

-- The trigger functions run as the caller (SECURITY INVOKER), so row-level
-- security binds them as it binds the statement that fired them. Counts are
-- applied by one statement per trigger, in term order, so concurrent writers
-- lock the rows they share in the same order and cannot deadlock.
CREATE FUNCTION memory_terms_apply(
    old_tenants text[], old_agents text[], old_ids text[], old_terms tsvector[],
    new_tenants text[], new_agents text[], new_ids text[], new_terms tsvector[]) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM memory_postings AS p
    USING unnest(old_tenants, old_agents, old_ids, old_terms) AS o (tenant, agent, id, terms), unnest(o.terms) AS u
    WHERE p.tenant = o.tenant AND p.agent = o.agent AND p.term = u.lexeme AND p.memory_id = o.id;

    INSERT INTO memory_postings (tenant, agent, term, memory_id, in_key)
    SELECT n.tenant, n.agent, u.lexeme, n.id, 'B' = ANY (u.weights)
    FROM unnest(new_tenants, new_agents, new_ids, new_terms) AS n (tenant, agent, id, terms), unnest(n.terms) AS u;

    INSERT INTO memory_term_stats AS s (tenant, agent, term, docs)
    SELECT d.tenant, d.agent, d.term, sum(d.delta)
    FROM (
        SELECT o.tenant, o.agent, u.lexeme AS term, -1 AS delta
        FROM unnest(old_tenants, old_agents, old_ids, old_terms) AS o (tenant, agent, id, terms), unnest(o.terms) AS u
        UNION ALL
        SELECT n.tenant, n.agent, u.lexeme, 1
        FROM unnest(new_tenants, new_agents, new_ids, new_terms) AS n (tenant, agent, id, terms), unnest(n.terms) AS u
        -- The empty term counts the memories themselves.
        UNION ALL
        SELECT o.tenant, o.agent, '', -1 FROM unnest(old_tenants, old_agents) AS o (tenant, agent)
        UNION ALL
        SELECT n.tenant, n.agent, '', 1 FROM unnest(new_tenants, new_agents) AS n (tenant, agent)
    ) AS d
    GROUP BY 1, 2, 3
    HAVING sum(d.delta) <> 0
    ORDER BY 1, 2, 3
    ON CONFLICT (tenant, agent, term) DO UPDATE SET docs = s.docs + EXCLUDED.docs;
$$;

CREATE FUNCTION memory_terms_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_terms_apply(NULL, NULL, NULL, NULL, array_agg(tenant), array_agg(agent), array_agg(id), array_agg(terms))
    FROM new_rows;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_terms_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_terms_apply(array_agg(tenant), array_agg(agent), array_agg(id), array_agg(terms), NULL, NULL, NULL, NULL)
    FROM old_rows;
    RETURN NULL;
END $$;

CREATE FUNCTION memory_terms_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_terms_apply(o.tenants, o.agents, o.ids, o.terms, n.tenants, n.agents, n.ids, n.terms)
    FROM (SELECT array_agg(tenant) AS tenants, array_agg(agent) AS agents, array_agg(id) AS ids, array_agg(terms) AS terms
            FROM old_rows) AS o,
        (SELECT array_agg(tenant) AS tenants, array_agg(agent) AS agents, array_agg(id) AS ids, array_agg(terms) AS terms
            FROM new_rows) AS n;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_terms_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_terms_inserted();
CREATE TRIGGER memory_terms_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_terms_deleted();
CREATE TRIGGER memory_terms_update AFTER UPDATE ON memories
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION memory_terms_updated();

-- Timeline retention deletes by age; the substring fallback reads the newest.
CREATE INDEX memories_by_age ON memories (tenant, agent, category, updated_at);
