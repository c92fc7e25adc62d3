-- PicoBot state, one row per tenant-scoped record. Every table carries the
-- tenant in its primary key (so equal ids in two tenants never collide) and is
-- guarded by row-level security against the transaction's picobot.tenant
-- setting, FORCEd so that the owner is subject to it too. The application
-- connects as a role that is neither superuser nor owner.

CREATE TABLE sessions (
    tenant             text        NOT NULL CHECK (tenant <> ''),
    id                 text        NOT NULL,
    channel            text        NOT NULL,
    chat_id            text        NOT NULL,
    dialog_id          text        NOT NULL,
    agent              text        NOT NULL DEFAULT '',
    title              text        NOT NULL DEFAULT '',
    title_is_default   boolean     NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    last_message_at    timestamptz NOT NULL,
    archived_at        timestamptz,
    deleted_at         timestamptz,
    last_compressed_at timestamptz,
    -- last_seq is the Seq of the session's newest message. Appends lock this
    -- row and move it forward, which serialises concurrent appenders.
    last_seq           bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX sessions_by_chat ON sessions (tenant, channel, chat_id, last_message_at DESC);

CREATE TABLE messages (
    tenant       text        NOT NULL,
    session_id   text        NOT NULL,
    seq          bigint      NOT NULL CHECK (seq > 0),
    id           text        NOT NULL CHECK (id <> ''),
    role         text        NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      text        NOT NULL DEFAULT '',
    tool_calls   jsonb,
    tool_call_id text        NOT NULL DEFAULT '',
    name         text        NOT NULL DEFAULT '',
    is_error     boolean     NOT NULL DEFAULT false,
    images       jsonb,
    meta         jsonb,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, session_id, seq),
    UNIQUE (tenant, session_id, id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);

CREATE TABLE current_dialogs (
    tenant     text        NOT NULL,
    channel    text        NOT NULL,
    chat_id    text        NOT NULL,
    dialog_id  text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, channel, chat_id)
);

-- A lease is not tied to a stored session: a runtime may claim a session
-- before its first message creates it.
CREATE TABLE session_leases (
    tenant      text        NOT NULL,
    session_id  text        NOT NULL,
    holder      text        NOT NULL CHECK (holder <> ''),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

CREATE TABLE memories (
    tenant     text             NOT NULL,
    agent      text             NOT NULL,
    key        text             NOT NULL,
    id         text             NOT NULL,
    content    text             NOT NULL,
    category   text             NOT NULL CHECK (category IN ('knowledge', 'timeline')),
    kind       text             NOT NULL DEFAULT '' CHECK (kind IN ('', 'decision', 'fact', 'focus', 'note')),
    source     text             NOT NULL DEFAULT '' CHECK (source IN ('', 'user', 'agent', 'tool')),
    session_id text             NOT NULL DEFAULT '',
    importance double precision NOT NULL DEFAULT 0 CHECK (importance >= 0 AND importance <= 1),
    created_at timestamptz      NOT NULL,
    updated_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, agent, key),
    UNIQUE (tenant, id)
);
-- Recall filters by category first (knowledge every turn, timeline on demand).
CREATE INDEX memories_by_category ON memories (tenant, agent, category);

CREATE TABLE cron_runs (
    tenant         text        NOT NULL,
    run_id         text        NOT NULL,
    job            text        NOT NULL,
    scheduled_time timestamptz NOT NULL,
    state          text        NOT NULL CHECK (state IN ('claimed', 'running', 'done')),
    outcome        text        NOT NULL DEFAULT '' CHECK (outcome IN ('', 'ok', 'alert', 'failed', 'refused', 'skipped')),
    message        text        NOT NULL DEFAULT '',
    started_at     timestamptz,
    finished_at    timestamptz,
    delivery       text        NOT NULL DEFAULT '' CHECK (delivery IN ('', 'pending', 'delivered', 'suppressed', 'failed')),
    PRIMARY KEY (tenant, run_id),
    -- One run per tick: the claim is an insert that this constraint lets only
    -- one scheduler win.
    UNIQUE (tenant, job, scheduled_time)
);

CREATE TABLE agent_runs (
    tenant        text        NOT NULL,
    id            text        NOT NULL,
    agent         text        NOT NULL,
    session_id    text        NOT NULL DEFAULT '',
    parent_run_id text        NOT NULL DEFAULT '',
    status        text        NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    input         text        NOT NULL DEFAULT '',
    result        text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX agent_runs_by_session ON agent_runs (tenant, session_id, created_at DESC);
CREATE INDEX agent_runs_by_parent ON agent_runs (tenant, parent_run_id);

CREATE TABLE deliveries (
    tenant       text        NOT NULL,
    id           text        NOT NULL,
    channel      text        NOT NULL,
    chat_id      text        NOT NULL,
    session_id   text        NOT NULL DEFAULT '',
    status       text        NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts     integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    delivered_at timestamptz,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX deliveries_by_status ON deliveries (tenant, status, created_at);

CREATE TABLE artifacts (
    tenant     text        NOT NULL,
    id         text        NOT NULL,
    session_id text        NOT NULL DEFAULT '',
    name       text        NOT NULL,
    media_type text        NOT NULL DEFAULT '',
    blob_key   text        NOT NULL,
    size       bigint      NOT NULL CHECK (size >= 0),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX artifacts_by_session ON artifacts (tenant, session_id, created_at);

-- Row-level security on every table. current_setting(..., true) is NULL (or
-- '') when no tenant is set, which matches no row: a query that forgot the
-- tenant sees nothing and can write nothing. FORCE subjects the tables' owner
-- too; only superusers and BYPASSRLS roles escape, and the store refuses to
-- run as one.

ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sessions
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON messages
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE current_dialogs ENABLE ROW LEVEL SECURITY;
ALTER TABLE current_dialogs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON current_dialogs
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE session_leases ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_leases FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON session_leases
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE memories FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memories
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE cron_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE cron_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON cron_runs
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE agent_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_runs
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON deliveries
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

ALTER TABLE artifacts ENABLE ROW LEVEL SECURITY;
ALTER TABLE artifacts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON artifacts
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));
