-- Why a turn failed, as its client was told, so the error shows again after
-- a reload. Kept beside the messages: the model's history never sees it.

CREATE TABLE turn_errors (
    tenant     text        NOT NULL CHECK (tenant <> ''),
    session_id text        NOT NULL CHECK (session_id <> ''),
    message_id text        NOT NULL CHECK (message_id <> ''),
    code       text        NOT NULL CHECK (code <> ''),
    message    text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, session_id, message_id)
);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE turn_errors ENABLE ROW LEVEL SECURITY;
ALTER TABLE turn_errors FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON turn_errors
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON turn_errors TO %I', r);
    END LOOP;
END $$;
