-- Background delegate runs: the mode and parent agent of a run, and the
-- completion slot a background run reserves in its parent session; and the
-- signals background runs send to their parent sessions (emit_signal).

ALTER TABLE agent_runs ADD COLUMN mode text NOT NULL DEFAULT 'foreground' CHECK (mode IN ('foreground', 'background'));
ALTER TABLE agent_runs ADD COLUMN parent_agent text NOT NULL DEFAULT '';
ALTER TABLE agent_runs ADD COLUMN completion text NOT NULL DEFAULT ''
    CHECK (completion IN ('', 'reserved', 'ready', 'delivered', 'closed'));

CREATE INDEX agent_runs_by_completion ON agent_runs (tenant, completion) WHERE completion IN ('reserved', 'ready');
CREATE INDEX agent_runs_by_updated ON agent_runs (tenant, updated_at);

CREATE TABLE agent_signals (
    tenant     text        NOT NULL CHECK (tenant <> ''),
    id         text        NOT NULL CHECK (id <> ''),
    run_id     text        NOT NULL CHECK (run_id <> ''),
    session_id text        NOT NULL CHECK (session_id <> ''),
    delivery   text        NOT NULL CHECK (delivery IN ('queue', 'steer')),
    kind       text        NOT NULL DEFAULT '',
    body       text        NOT NULL,
    state      text        NOT NULL CHECK (state IN ('pending', 'consumed', 'superseded')),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX agent_signals_by_session ON agent_signals (tenant, session_id, state, created_at);
CREATE INDEX agent_signals_by_run ON agent_signals (tenant, run_id);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE agent_signals ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_signals FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_signals
    USING (tenant = CASE picobot_role_binding() WHEN '' THEN current_setting('picobot.tenant', true) ELSE picobot_role_binding() END)
    WITH CHECK (tenant = CASE picobot_role_binding() WHEN '' THEN current_setting('picobot.tenant', true) ELSE picobot_role_binding() END);

-- Roles recorded before this table existed (tenant roles, the application
-- role) get the same rights on it as on the others; grantApp grants it to
-- roles recorded later.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM tenant_roles
        WHERE role_name <> current_user AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name)
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON agent_signals TO %I', r);
    END LOOP;
END $$;
