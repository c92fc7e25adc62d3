-- The dsh-bot task queue (bot_task) and agenda (bot_agenda) of agents. A
-- task that is due or repeats is run by a scheduled job (job names it); its
-- state follows that job's runs.

CREATE TABLE tasks (
    tenant     text        NOT NULL CHECK (tenant <> ''),
    id         text        NOT NULL CHECK (id <> ''),
    agent      text        NOT NULL DEFAULT '',
    title      text        NOT NULL CHECK (title <> ''),
    note       text        NOT NULL DEFAULT '',
    priority   integer     NOT NULL CHECK (priority BETWEEN 1 AND 5),
    due_at     timestamptz,
    repeat     text        NOT NULL DEFAULT '',
    tz         text        NOT NULL DEFAULT '',
    continuity text        NOT NULL CHECK (continuity IN ('continue', 'fresh')),
    state      text        NOT NULL CHECK (state IN ('queued', 'running', 'awaiting', 'succeeded', 'failed', 'cancelled')),
    awaiting   text        NOT NULL DEFAULT '',
    result     text        NOT NULL DEFAULT '',
    job        text        NOT NULL DEFAULT '',
    version    bigint      NOT NULL CHECK (version > 0),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX tasks_queue ON tasks (tenant, agent, priority, created_at);

ALTER TABLE tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE tasks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tasks
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));

CREATE TABLE agenda_items (
    tenant     text        NOT NULL CHECK (tenant <> ''),
    id         text        NOT NULL CHECK (id <> ''),
    agent      text        NOT NULL DEFAULT '',
    at         timestamptz NOT NULL,
    all_day    boolean     NOT NULL DEFAULT false,
    text       text        NOT NULL CHECK (text <> ''),
    job        text        NOT NULL DEFAULT '',
    done_at    timestamptz,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX agenda_items_at ON agenda_items (tenant, agent, at);

ALTER TABLE agenda_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE agenda_items FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agenda_items
    USING (tenant = current_setting('picobot.tenant', true))
    WITH CHECK (tenant = current_setting('picobot.tenant', true));
