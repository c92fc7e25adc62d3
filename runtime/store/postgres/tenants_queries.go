package postgres

// SQL of tenant role provisioning (tenants.go), run as the schema owner.
// Role names cannot be bind parameters; the Go side sanitises them with
// pgx.Identifier and builds the rest of those statements.
const (
	// sqlLockTenantRole serialises provisioners of one tenant (two operator
	// replicas during a leader hand-over) for the rest of the transaction.
	sqlLockTenantRole = `SELECT pg_advisory_xact_lock(hashtextextended('picobot-tenant-role:' || $1, 0))`

	sqlTenantRoleByTenant = `SELECT role_name, generation FROM tenant_roles WHERE tenant_name = $1`
	sqlTenantRoleByName   = `SELECT tenant_name FROM tenant_roles WHERE role_name = $1`
	sqlInsertTenantRole   = `INSERT INTO tenant_roles (role_name, tenant_name) VALUES ($1, $2) RETURNING generation`
	sqlBumpTenantRole     = `UPDATE tenant_roles SET generation = generation + 1 WHERE tenant_name = $1 RETURNING generation`
	sqlDeleteTenantRole   = `DELETE FROM tenant_roles WHERE tenant_name = $1 RETURNING role_name`

	// sqlRegisterPlatformRole records a role that serves every tenant (it
	// chooses one per transaction with picobot.tenant). A role already bound
	// to a tenant stays bound.
	sqlRegisterPlatformRole = `INSERT INTO tenant_roles (role_name, tenant_name) VALUES ($1, NULL) ON CONFLICT (role_name) DO NOTHING`

	// sqlRoleAttributes reads what a role could use to escape row-level
	// security or act for others.
	sqlRoleAttributes = `SELECT rolsuper OR rolbypassrls OR rolreplication OR rolcreaterole OR rolcreatedb
FROM pg_roles WHERE rolname = $1`

	// sqlRoleMemberships lists every membership a role has or grants: a
	// tenant role must be neither a member of another role (SET ROLE to it)
	// nor have members (who could SET ROLE to the tenant).
	sqlRoleMemberships = `SELECT g.rolname, m.rolname
FROM pg_auth_members a
JOIN pg_roles g ON g.oid = a.roleid
JOIN pg_roles m ON m.oid = a.member
WHERE g.rolname = $1 OR m.rolname = $1`
)
