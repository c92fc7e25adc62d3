-- Tenant roles: the tenant a connection may see comes from the role it logged
-- in as, not from a setting the client chooses.
--
-- tenant_roles maps login roles to tenants. Only the owner reads or writes it
-- (no grant to anyone); TenantRoles in tenants.go fills it as it creates each
-- tenant's role. A row with a tenant binds that role to the tenant whatever
-- it sets; a row without one is a platform role (the gateway's, the
-- scheduler's, the owner's), which serves every tenant and picks one per
-- transaction with the picobot.tenant setting, as before. A role with no row
-- sees nothing.
CREATE TABLE tenant_roles (
    role_name  text   PRIMARY KEY,
    tenant_name text  UNIQUE CHECK (tenant_name <> ''),
    -- generation counts password rotations of a tenant role.
    generation bigint NOT NULL DEFAULT 1 CHECK (generation > 0)
);
REVOKE ALL ON tenant_roles FROM PUBLIC;
INSERT INTO tenant_roles (role_name, tenant_name) VALUES (current_user, NULL);

-- picobot_tenant() is the tenant every policy compares with. It runs as the
-- owner (SECURITY DEFINER) so that a tenant role, which cannot read
-- tenant_roles, learns its own row and nothing else. It keys on session_user,
-- the role that authenticated: SET ROLE changes current_user but not
-- session_user, and SET SESSION AUTHORIZATION is for superusers only. The
-- table is named with its schema and pg_temp comes last on the path, so a
-- temporary table or function of the caller cannot stand in for ours. It is
-- PL/pgSQL, which keeps its query plan for the connection's life; an SQL
-- function that is not inlined (SECURITY DEFINER ones never are) plans its
-- query again in every statement.
DO $do$
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION %1$I.picobot_tenant() RETURNS text
        LANGUAGE plpgsql STABLE SECURITY DEFINER
        SET search_path = pg_catalog, pg_temp
        AS $body$
        DECLARE
            bound text;
        BEGIN
            SELECT r.tenant_name INTO bound FROM %1$I.tenant_roles AS r WHERE r.role_name = session_user;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
            RETURN coalesce(bound, current_setting('picobot.tenant', true));
        END
        $body$ $f$, current_schema());
END $do$;
REVOKE ALL ON FUNCTION picobot_tenant() FROM PUBLIC;

-- Every tenant-scoped table's policy now asks picobot_tenant(), in a scalar
-- subquery: PostgreSQL then runs it once per statement (an InitPlan) and can
-- still use it as an index condition, where a bare call would run per row.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['sessions', 'messages', 'current_dialogs', 'session_leases', 'memories',
        'cron_runs', 'agent_runs', 'deliveries', 'artifacts', 'memory_postings', 'memory_term_stats',
        'cron_jobs', 'tasks', 'agenda_items']
    LOOP
        EXECUTE format('ALTER POLICY tenant_isolation ON %I USING (tenant = (SELECT picobot_tenant())) '
            'WITH CHECK (tenant = (SELECT picobot_tenant()))', t);
    END LOOP;
END $$;
