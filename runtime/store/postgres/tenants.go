package postgres

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Tenant roles give each tenant its own PostgreSQL login, so that isolation
// does not depend on what a tenant's pods send: the row-level security
// policies compare every row's tenant with the binding of the connection's
// role (picobot_role_binding()), which for a tenant role is the tenant
// recorded for it in tenant_roles (a table only the owner reads or writes),
// whatever picobot.tenant the client sets. A role's row is written once and
// never rebound, which lets the planner fold the binding into plans. A
// tenant role logs in, has DML on the application tables and EXECUTE on
// picobot_role_binding() and picobot_tenant(), and nothing else: NOINHERIT, no CREATEDB or CREATEROLE,
// neither superuser nor BYPASSRLS nor REPLICATION, a member of no role and
// with no members, so SET ROLE leads nowhere.

// DefaultTenantRolePrefix starts every tenant role's name.
const DefaultTenantRolePrefix = "picobot_t_"

// maxRoleName is PostgreSQL's NAMEDATALEN - 1.
const maxRoleName = 63

// scramIterations is PostgreSQL's default scram_iterations.
const scramIterations = 4096

// PasswordFunc returns the password of a tenant role for a generation (the
// number of rotations plus one), so a caller can derive passwords from a key
// it keeps instead of storing them.
type PasswordFunc func(tenant string, generation int64) (string, error)

// TenantRole is a tenant's login role as provisioned.
type TenantRole struct {
	Tenant   string
	Role     string
	Password string
	// Generation counts rotations (1 before the first).
	Generation int64
}

// TenantRolesOptions tune TenantRoles. Zero values pick the defaults.
type TenantRolesOptions struct {
	// Prefix starts the role names (DefaultTenantRolePrefix when empty).
	// Role names are per server, not per database: installations sharing a
	// server need different prefixes.
	Prefix string
	// ConnLimit caps each tenant role's connections (CONNECTION LIMIT), so
	// one tenant cannot take the server's; 0 leaves them uncapped.
	ConnLimit int
}

// TenantRoles creates, rotates and drops tenant roles. It connects as the
// schema owner (who needs CREATEROLE), whose DSN never leaves the system
// namespace; the operator calls it.
type TenantRoles struct {
	pool   *pgxpool.Pool
	prefix string
	limit  int
}

// NewTenantRoles connects to the database at ownerDSN, migrated by Migrate.
func NewTenantRoles(ctx context.Context, ownerDSN string, opts TenantRolesOptions) (*TenantRoles, error) {
	cfg, err := pgxpool.ParseConfig(ownerDSN)
	if err != nil {
		return nil, fmt.Errorf("failed to parse PostgreSQL owner DSN: %w", err)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultTenantRolePrefix
	}
	if len(opts.Prefix) > 32 {
		return nil, fmt.Errorf("failed to use tenant role prefix %q: longer than 32 bytes", opts.Prefix)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create PostgreSQL pool: %w", err)
	}
	return &TenantRoles{pool: pool, prefix: opts.Prefix, limit: opts.ConnLimit}, nil
}

// Close closes the owner connections.
func (r *TenantRoles) Close() { r.pool.Close() }

// RoleName is the role a tenant gets: the prefix and the tenant, or, when
// that exceeds PostgreSQL's 63 bytes, a cut of the tenant and a hash of it.
func (r *TenantRoles) RoleName(tenant string) string {
	name := r.prefix + tenant
	if len(name) <= maxRoleName {
		return name
	}
	sum := sha256.Sum256([]byte(tenant))
	suffix := "_" + hex.EncodeToString(sum[:5])
	return name[:maxRoleName-len(suffix)] + suffix
}

// Ensure makes tenant's role exist with the password of its current
// generation, the attributes, memberships and privileges described above,
// and the mapping to tenant; it repairs any of them that drifted. It is
// idempotent, so a reconciler can call it every time.
func (r *TenantRoles) Ensure(ctx context.Context, tenant string, password PasswordFunc) (TenantRole, error) {
	return r.provision(ctx, tenant, password, false)
}

// Rotate moves tenant's role to the next generation's password. Sessions
// already open stay open (PostgreSQL checks passwords at login only).
func (r *TenantRoles) Rotate(ctx context.Context, tenant string, password PasswordFunc) (TenantRole, error) {
	return r.provision(ctx, tenant, password, true)
}

func (r *TenantRoles) provision(ctx context.Context, tenant string, password PasswordFunc, rotate bool) (TenantRole, error) {
	if tenant == "" {
		return TenantRole{}, errors.New("failed to provision tenant role: empty tenant")
	}
	var out TenantRole
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockTenantRole, tenant); err != nil {
			return err
		}
		role, gen, err := r.mapRole(ctx, tx, tenant, rotate)
		if err != nil {
			return err
		}
		pw, err := password(tenant, gen)
		if err != nil {
			return err
		}
		if err := r.shapeRole(ctx, tx, role, pw); err != nil {
			return err
		}
		if err := grantApp(ctx, tx, role); err != nil {
			return err
		}
		out = TenantRole{Tenant: tenant, Role: role, Password: pw, Generation: gen}
		return nil
	})
	if err != nil {
		return TenantRole{}, fmt.Errorf("failed to provision the role of tenant %q: %w", tenant, err)
	}
	return out, nil
}

// mapRole returns tenant's role and generation, recording a new mapping (or
// the next generation, with rotate) as needed.
func (r *TenantRoles) mapRole(ctx context.Context, tx pgx.Tx, tenant string, rotate bool) (string, int64, error) {
	var role string
	var gen int64
	err := tx.QueryRow(ctx, sqlTenantRoleByTenant, tenant).Scan(&role, &gen)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		role = r.RoleName(tenant)
		var other *string
		switch err := tx.QueryRow(ctx, sqlTenantRoleByName, role).Scan(&other); {
		case err == nil && other == nil:
			return "", 0, fmt.Errorf("role %q is a platform role, not a tenant's", role)
		case err == nil:
			return "", 0, fmt.Errorf("role %q already belongs to tenant %q", role, *other)
		case !errors.Is(err, pgx.ErrNoRows):
			return "", 0, err
		}
		if err := tx.QueryRow(ctx, sqlInsertTenantRole, role, tenant).Scan(&gen); err != nil {
			return "", 0, err
		}
	case err != nil:
		return "", 0, err
	case rotate:
		if err := tx.QueryRow(ctx, sqlBumpTenantRole, tenant).Scan(&gen); err != nil {
			return "", 0, err
		}
	}
	return role, gen, nil
}

// shapeRole creates role or brings an existing one back to a tenant role's
// shape. The attributes that only a superuser may change (SUPERUSER,
// BYPASSRLS, REPLICATION) are left out of the statements, so a CREATEROLE
// owner can run them; a role that has one is refused instead.
func (r *TenantRoles) shapeRole(ctx context.Context, tx pgx.Tx, role, password string) error {
	verifier, err := scramVerifier(password)
	if err != nil {
		return err
	}
	ident := pgx.Identifier{role}.Sanitize()
	attrs := fmt.Sprintf("LOGIN NOINHERIT NOCREATEDB NOCREATEROLE CONNECTION LIMIT %d PASSWORD %s",
		connLimit(r.limit), quoteLiteral(verifier))
	var privileged bool
	switch err := tx.QueryRow(ctx, sqlRoleAttributes, role).Scan(&privileged); {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := tx.Exec(ctx, "CREATE ROLE "+ident+" "+attrs); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		if _, err := tx.Exec(ctx, "ALTER ROLE "+ident+" "+attrs); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, sqlRoleAttributes, role).Scan(&privileged); err != nil {
			return err
		}
		if privileged {
			return fmt.Errorf("role %q is a superuser or has BYPASSRLS or REPLICATION; refusing to hand it to a tenant", role)
		}
	}
	return revokeMemberships(ctx, tx, role)
}

func connLimit(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// revokeMemberships removes every membership role has or grants.
func revokeMemberships(ctx context.Context, tx pgx.Tx, role string) error {
	rows, err := tx.Query(ctx, sqlRoleMemberships, role)
	if err != nil {
		return err
	}
	pairs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var p [2]string
		err := row.Scan(&p[0], &p[1])
		return p, err
	})
	if err != nil {
		return err
	}
	for _, p := range pairs {
		stmt := "REVOKE " + pgx.Identifier{p[0]}.Sanitize() + " FROM " + pgx.Identifier{p[1]}.Sanitize()
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("failed to revoke membership of %q in %q: %w", p[1], p[0], err)
		}
	}
	return nil
}

// Drop removes tenant's role and mapping (a namespace that is gone). Rows
// of the tenant stay; an unknown tenant is not an error. It fails when the
// role still holds privileges in another database.
func (r *TenantRoles) Drop(ctx context.Context, tenant string) error {
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLockTenantRole, tenant); err != nil {
			return err
		}
		var role string
		switch err := tx.QueryRow(ctx, sqlDeleteTenantRole, tenant).Scan(&role); {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		ident := pgx.Identifier{role}.Sanitize()
		for _, stmt := range []string{"DROP OWNED BY " + ident, "DROP ROLE IF EXISTS " + ident} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("failed to drop the role of tenant %q: %w", tenant, err)
	}
	return nil
}

// scramVerifier computes the SCRAM-SHA-256 verifier PostgreSQL stores for a
// password (RFC 5802 and 7677, the format of PQencryptPasswordConn), so the
// password itself never reaches the server and cannot land in its logs.
// Passwords here are generated, printable ASCII, for which SASLprep is the
// identity.
func scramVerifier(password string) (string, error) {
	if password == "" {
		return "", errors.New("empty password")
	}
	for _, c := range password {
		if c < 0x21 || c > 0x7e {
			return "", errors.New("password must be printable ASCII without spaces")
		}
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings,
// on since PostgreSQL 9.1, makes backslashes ordinary).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
