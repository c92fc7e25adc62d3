-- Notices a tenant was given once across all its runtimes (a soft limit
-- reached, a chat told that the model budget is spent): a claim is an
-- atomic insert-if-absent, renewed only once the last claim expired, so of
-- many runtimes noticing at once exactly one tells.

CREATE TABLE quota_notices (
    tenant     text        NOT NULL CHECK (tenant <> ''),
    key        text        NOT NULL CHECK (key <> ''),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE quota_notices ENABLE ROW LEVEL SECURITY;
ALTER TABLE quota_notices FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON quota_notices
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON quota_notices TO %I', r);
    END LOOP;
END $$;
