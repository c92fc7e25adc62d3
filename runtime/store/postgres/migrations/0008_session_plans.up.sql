-- The todo tool's plan of each session, so a plan survives a restart and
-- the session moving to another pod.

CREATE TABLE session_plans (
    tenant     text        NOT NULL CHECK (tenant <> ''),
    session_id text        NOT NULL CHECK (session_id <> ''),
    plan       text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE session_plans ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_plans FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON session_plans
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON session_plans TO %I', r);
    END LOOP;
END $$;
