-- Background delegate runs: the mode and parent agent of a run, and the
-- completion slot a background run reserves in its parent session; and the
-- signals background runs send to their parent sessions (emit_signal).

ALTER TABLE agent_runs ADD COLUMN mode TEXT NOT NULL DEFAULT 'foreground' CHECK (mode IN ('foreground', 'background'));
ALTER TABLE agent_runs ADD COLUMN parent_agent TEXT NOT NULL DEFAULT '';
ALTER TABLE agent_runs ADD COLUMN completion TEXT NOT NULL DEFAULT ''
    CHECK (completion IN ('', 'reserved', 'ready', 'delivered', 'closed'));

CREATE INDEX agent_runs_by_completion ON agent_runs (tenant, completion) WHERE completion IN ('reserved', 'ready');
CREATE INDEX agent_runs_by_updated ON agent_runs (tenant, updated_at);

CREATE TABLE agent_signals (
    tenant     TEXT    NOT NULL CHECK (tenant <> ''),
    id         TEXT    NOT NULL CHECK (id <> ''),
    run_id     TEXT    NOT NULL CHECK (run_id <> ''),
    session_id TEXT    NOT NULL CHECK (session_id <> ''),
    delivery   TEXT    NOT NULL CHECK (delivery IN ('queue', 'steer')),
    kind       TEXT    NOT NULL DEFAULT '',
    body       TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('pending', 'consumed', 'superseded')),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE INDEX agent_signals_by_session ON agent_signals (tenant, session_id, state, created_at);
CREATE INDEX agent_signals_by_run ON agent_signals (tenant, run_id);
