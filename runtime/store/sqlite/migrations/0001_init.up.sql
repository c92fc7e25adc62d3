-- PicoBot state for embedded mode. The same tables as the PostgreSQL store;
-- SQLite has no row-level security, so every statement the store runs filters
-- on tenant, and tenant leads every primary key (equal ids in two tenants
-- never collide). Times are INTEGER microseconds since the Unix epoch (UTC),
-- the precision PostgreSQL keeps, so both stores return the same values.

CREATE TABLE sessions (
    tenant             TEXT    NOT NULL CHECK (tenant <> ''),
    id                 TEXT    NOT NULL,
    channel            TEXT    NOT NULL,
    chat_id            TEXT    NOT NULL,
    dialog_id          TEXT    NOT NULL,
    agent              TEXT    NOT NULL DEFAULT '',
    title              TEXT    NOT NULL DEFAULT '',
    title_is_default   INTEGER NOT NULL DEFAULT 1,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    last_message_at    INTEGER NOT NULL,
    archived_at        INTEGER,
    deleted_at         INTEGER,
    last_compressed_at INTEGER,
    -- last_seq is the Seq of the session's newest message.
    last_seq           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX sessions_by_chat ON sessions (tenant, channel, chat_id, last_message_at DESC);

CREATE TABLE messages (
    tenant       TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    seq          INTEGER NOT NULL CHECK (seq > 0),
    id           TEXT    NOT NULL CHECK (id <> ''),
    role         TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      TEXT    NOT NULL DEFAULT '',
    tool_calls   TEXT,
    tool_call_id TEXT    NOT NULL DEFAULT '',
    name         TEXT    NOT NULL DEFAULT '',
    is_error     INTEGER NOT NULL DEFAULT 0,
    images       TEXT,
    meta         TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id, seq),
    UNIQUE (tenant, session_id, id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
) STRICT;

CREATE TABLE current_dialogs (
    tenant     TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    chat_id    TEXT    NOT NULL,
    dialog_id  TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel, chat_id)
) STRICT;

-- A lease is not tied to a stored session: a runtime may claim a session
-- before its first message creates it.
CREATE TABLE session_leases (
    tenant      TEXT    NOT NULL,
    session_id  TEXT    NOT NULL,
    holder      TEXT    NOT NULL CHECK (holder <> ''),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
) STRICT;

CREATE TABLE memories (
    tenant     TEXT    NOT NULL,
    agent      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    content    TEXT    NOT NULL,
    category   TEXT    NOT NULL CHECK (category IN ('knowledge', 'timeline')),
    kind       TEXT    NOT NULL DEFAULT '' CHECK (kind IN ('', 'decision', 'fact', 'focus', 'note')),
    source     TEXT    NOT NULL DEFAULT '' CHECK (source IN ('', 'user', 'agent', 'tool')),
    session_id TEXT    NOT NULL DEFAULT '',
    importance REAL    NOT NULL DEFAULT 0 CHECK (importance >= 0 AND importance <= 1),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent, key),
    UNIQUE (tenant, id)
) STRICT;
-- Recall filters by category first (knowledge every turn, timeline on demand).
CREATE INDEX memories_by_category ON memories (tenant, agent, category);

CREATE TABLE cron_runs (
    tenant         TEXT    NOT NULL,
    run_id         TEXT    NOT NULL,
    job            TEXT    NOT NULL,
    scheduled_time INTEGER NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('claimed', 'running', 'done')),
    outcome        TEXT    NOT NULL DEFAULT '' CHECK (outcome IN ('', 'ok', 'alert', 'failed', 'refused', 'skipped')),
    message        TEXT    NOT NULL DEFAULT '',
    started_at     INTEGER,
    finished_at    INTEGER,
    delivery       TEXT    NOT NULL DEFAULT '' CHECK (delivery IN ('', 'pending', 'delivered', 'suppressed', 'failed')),
    PRIMARY KEY (tenant, run_id),
    -- One run per tick: the claim is an insert this constraint lets only one
    -- scheduler win.
    UNIQUE (tenant, job, scheduled_time)
) STRICT;

CREATE TABLE agent_runs (
    tenant        TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    agent         TEXT    NOT NULL,
    session_id    TEXT    NOT NULL DEFAULT '',
    parent_run_id TEXT    NOT NULL DEFAULT '',
    status        TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    input         TEXT    NOT NULL DEFAULT '',
    result        TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX agent_runs_by_session ON agent_runs (tenant, session_id, created_at DESC);
CREATE INDEX agent_runs_by_parent ON agent_runs (tenant, parent_run_id);

CREATE TABLE deliveries (
    tenant       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    channel      TEXT    NOT NULL,
    chat_id      TEXT    NOT NULL,
    session_id   TEXT    NOT NULL DEFAULT '',
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX deliveries_by_status ON deliveries (tenant, status, created_at);

CREATE TABLE artifacts (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    session_id TEXT    NOT NULL DEFAULT '',
    name       TEXT    NOT NULL,
    media_type TEXT    NOT NULL DEFAULT '',
    blob_key   TEXT    NOT NULL,
    size       INTEGER NOT NULL CHECK (size >= 0),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX artifacts_by_session ON artifacts (tenant, session_id, created_at);
