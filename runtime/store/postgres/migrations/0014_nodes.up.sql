-- Paired devices (`picobot node`): a node says hello with its own id and
-- waits as pending until the tenant's user approves or rejects it; an
-- approved node can be revoked.

CREATE TABLE nodes (
    tenant       text        NOT NULL CHECK (tenant <> ''),
    id           text        NOT NULL CHECK (id <> ''),
    name         text        NOT NULL,
    platform     text        NOT NULL,
    version      text        NOT NULL,
    capabilities text[]      NOT NULL,
    state        text        NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'revoked')),
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE nodes ENABLE ROW LEVEL SECURITY;
ALTER TABLE nodes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON nodes
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON nodes TO %I', r);
    END LOOP;
END $$;
