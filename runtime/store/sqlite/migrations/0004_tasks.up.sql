-- The dsh-bot task queue (bot_task) and agenda (bot_agenda) of agents. A
-- task that is due or repeats is run by a scheduled job (job names it); its
-- state follows that job's runs.

CREATE TABLE tasks (
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    id         TEXT    NOT NULL CHECK (id <> ''),
    agent      TEXT    NOT NULL DEFAULT '',
    title      TEXT    NOT NULL CHECK (title <> ''),
    note       TEXT    NOT NULL DEFAULT '',
    priority   INTEGER NOT NULL CHECK (priority BETWEEN 1 AND 5),
    due_at     INTEGER,
    repeat     TEXT    NOT NULL DEFAULT '',
    tz         TEXT    NOT NULL DEFAULT '',
    continuity TEXT    NOT NULL CHECK (continuity IN ('continue', 'fresh')),
    state      TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'awaiting', 'succeeded', 'failed', 'cancelled')),
    awaiting   TEXT    NOT NULL DEFAULT '',
    result     TEXT    NOT NULL DEFAULT '',
    job        TEXT    NOT NULL DEFAULT '',
    version    INTEGER NOT NULL CHECK (version > 0),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE INDEX tasks_queue ON tasks (tenant, agent, priority, created_at);

CREATE TABLE agenda_items (
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    id         TEXT    NOT NULL CHECK (id <> ''),
    agent      TEXT    NOT NULL DEFAULT '',
    at         INTEGER NOT NULL,
    all_day    INTEGER NOT NULL DEFAULT 0 CHECK (all_day IN (0, 1)),
    text       TEXT    NOT NULL CHECK (text <> ''),
    job        TEXT    NOT NULL DEFAULT '',
    done_at    INTEGER,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE INDEX agenda_items_at ON agenda_items (tenant, agent, at);
