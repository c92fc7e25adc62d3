-- The policies learn a connection's tenant when a statement is planned, not
-- each time it runs.
--
-- Until now every statement ran (SELECT picobot_tenant()): a SECURITY
-- DEFINER PL/pgSQL call (a privilege switch, a GUC nest level to set and
-- restore search_path, an SPI query of tenant_roles), about 20% of a turn's
-- store work over comparing with the picobot.tenant setting directly; a view
-- over tenant_roles in its place still cost 10%, the price of reading a
-- table in every statement.
--
-- picobot_role_binding() returns what tenant_roles says of session_user: its
-- tenant for a tenant role, '' for a platform role, NULL for a role with no
-- row. It is declared IMMUTABLE so that the planner evaluates it once, while
-- planning, and the policy folds to a constant: "tenant = 'team-a'" for a
-- tenant role, "tenant = current_setting('picobot.tenant', true)" (exactly
-- the old policy) for a platform role, "tenant = NULL" (nothing) otherwise.
-- A cached plan then costs nothing more to run than the old policy.
--
-- IMMUTABLE is a promise about session_user's row, and it holds:
-- session_user cannot change in a session (SET ROLE changes current_user
-- only; SET SESSION AUTHORIZATION is for superusers, and plans are made again
-- when the user changes), and a role's row is written once: TenantRoles
-- binds a new role and never rebinds it, platform roles are recorded with ON
-- CONFLICT DO NOTHING, and Drop deletes the row with the role, after which
-- the role cannot log in (a connection still open keeps its own tenant until
-- it closes, never another's). Policies store the call, not its value, so
-- nothing of it outlives a session.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION %1$I.picobot_role_binding() RETURNS text
        LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        DECLARE
            bound text;
        BEGIN
            SELECT r.tenant_name INTO bound FROM %1$I.tenant_roles AS r WHERE r.role_name = session_user;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
            RETURN coalesce(bound, '');
        END
        $body$ $f$, current_schema());
END $do$;
REVOKE ALL ON FUNCTION picobot_role_binding() FROM PUBLIC;

-- The policies call it with the querying role's privileges: every role
-- already recorded may execute it (grantApp grants it to roles recorded
-- later, as it grants picobot_tenant()).
DO $$
DECLARE
    r text;
BEGIN
    FOR r IN SELECT role_name FROM tenant_roles
        WHERE role_name <> current_user AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION picobot_role_binding() TO %I', r);
    END LOOP;
END $$;

DO $$
DECLARE
    t text;
    tenant constant text := $p$CASE picobot_role_binding() WHEN '' THEN current_setting('picobot.tenant', true) ELSE picobot_role_binding() END$p$;
BEGIN
    FOREACH t IN ARRAY ARRAY['sessions', 'messages', 'current_dialogs', 'session_leases', 'memories',
        'cron_runs', 'agent_runs', 'deliveries', 'artifacts', 'memory_postings', 'memory_term_stats',
        'cron_jobs', 'tasks', 'agenda_items']
    LOOP
        EXECUTE format('ALTER POLICY tenant_isolation ON %I USING (tenant = %s) WITH CHECK (tenant = %s)', t, tenant, tenant);
    END LOOP;
END $$;
