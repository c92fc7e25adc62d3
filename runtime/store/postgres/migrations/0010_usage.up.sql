-- What each tenant's agents used per UTC day (tokens, their cost, model
-- calls, turns, tool calls, sessions): the accounting behind budgets and
-- GET /api/v1/usage. Rows only grow, by atomic increments, so concurrent
-- turns in many runtimes all count.

CREATE TABLE usage_daily (
    tenant        text   NOT NULL CHECK (tenant <> ''),
    agent         text   NOT NULL CHECK (agent <> ''),
    day           date   NOT NULL,
    input_tokens  bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost_micros   bigint NOT NULL DEFAULT 0 CHECK (cost_micros >= 0),
    model_calls   bigint NOT NULL DEFAULT 0 CHECK (model_calls >= 0),
    turns         bigint NOT NULL DEFAULT 0 CHECK (turns >= 0),
    tool_calls    bigint NOT NULL DEFAULT 0 CHECK (tool_calls >= 0),
    sessions      bigint NOT NULL DEFAULT 0 CHECK (sessions >= 0),
    PRIMARY KEY (tenant, agent, day)
);

-- The same policy as every tenant-scoped table (0006_tenant_binding).
ALTER TABLE usage_daily ENABLE ROW LEVEL SECURITY;
ALTER TABLE usage_daily FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON usage_daily
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON usage_daily TO %I', r);
    END LOOP;
END $$;
