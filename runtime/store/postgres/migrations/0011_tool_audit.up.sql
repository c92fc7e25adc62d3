-- The audit log of tool calls: who asked, which agent ran which tool in
-- which session, a SHA-256 digest of the arguments (never the arguments),
-- the outcome and the duration. Rows are only added, and deleted past the
-- tenant's retention; GET /api/v1/audit reads them newest first.

CREATE TABLE tool_audit (
    tenant      text        NOT NULL CHECK (tenant <> ''),
    id          text        NOT NULL CHECK (id <> ''),
    actor       text        NOT NULL,
    agent       text        NOT NULL CHECK (agent <> ''),
    session_id  text        NOT NULL,
    tool        text        NOT NULL CHECK (tool <> ''),
    args_digest text        NOT NULL CHECK (args_digest LIKE 'sha256:%'),
    outcome     text        NOT NULL CHECK (outcome IN ('ok', 'error')),
    duration_us bigint      NOT NULL CHECK (duration_us >= 0),
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- Pages newest first, and retention, walk this index.
CREATE INDEX tool_audit_by_time ON tool_audit (tenant, created_at DESC, id DESC);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE tool_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE tool_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tool_audit
    USING (tenant = CASE picobot_role_binding() WHEN '' THEN current_setting('picobot.tenant', true) ELSE picobot_role_binding() END)
    WITH CHECK (tenant = CASE picobot_role_binding() WHEN '' THEN current_setting('picobot.tenant', true) ELSE picobot_role_binding() END);

-- Roles recorded before this table existed get the same rights on it as on
-- the others; grantApp grants it to roles recorded later.
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM tenant_roles
        WHERE role_name <> current_user AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name)
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON tool_audit TO %I', r);
    END LOOP;
END $$;
