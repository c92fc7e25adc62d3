package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/picobot/picobot/runtime/store/internal/migration"
)

// The migration runner is hand-written rather than golang-migrate or goose:
// it is a page of code, needs no new module graph, and does the two things we
// need that those tools leave to the caller — holding a PostgreSQL advisory
// lock so replicas starting together do not race, and granting the
// application role its privileges after every run.

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrationLockKey is the pg_advisory_lock key serialising migrations
// ("picobot" in ASCII); advisory locks are per database, so clusters hosting
// several PicoBot databases migrate them independently.
const migrationLockKey int64 = 0x7069636f626f74

// appTables are the tables the application role reads and writes; every one
// has row-level security. schema_migrations is deliberately absent.
var appTables = []string{
	"sessions", "messages", "current_dialogs", "session_leases", "memories",
	"cron_runs", "agent_runs", "deliveries", "artifacts", "cron_jobs", "memory_postings", "memory_term_stats",
	"tasks", "agenda_items", "agent_signals", "session_plans", "turn_errors", "usage_daily", "quota_notices", "tool_audit", "nodes",
}

// Migrate brings the database at ownerDSN to the newest schema and, when
// appRole is set, grants that role the privileges the store needs (and no
// more: it cannot change the schema, and as neither owner nor superuser it is
// held to row-level security), and records it as a platform role: one that
// serves every tenant, choosing one per transaction with picobot.tenant (the
// gateway's and the scheduler's; tenants' pods get tenant roles, see
// TenantRoles). appRole must exist; creating it is the deployment's job
// (Helm chart, DBA, or the tests' setup).
//
// Each migration runs in its own transaction under an advisory lock, so
// replicas that start together apply each migration once and a failed one
// leaves the schema at the previous version.
func Migrate(ctx context.Context, ownerDSN, appRole string) (err error) {
	conn, err := pgx.Connect(ctx, ownerDSN)
	if err != nil {
		return fmt.Errorf("failed to connect to PostgreSQL for migration: %w", err)
	}
	defer func() {
		err = errors.Join(err, conn.Close(context.WithoutCancel(ctx)))
	}()
	ms, err := migration.Load(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, sqlLockMigrations, migrationLockKey); err != nil {
		return fmt.Errorf("failed to lock migrations: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), sqlUnlockMigrations, migrationLockKey); uerr != nil {
			err = errors.Join(err, fmt.Errorf("failed to unlock migrations: %w", uerr))
		}
	}()
	if _, err := conn.Exec(ctx, sqlCreateMigrationsTable); err != nil {
		return fmt.Errorf("failed to create schema_migrations: %w", err)
	}
	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// No arguments: pgx uses the simple protocol, which runs a file of
			// several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlRecordMigration, m.Version, m.Name)
			return err
		}); err != nil {
			return fmt.Errorf("failed to apply migration %q: %w", m.Name, err)
		}
	}
	if appRole != "" {
		if err := grantApp(ctx, conn, appRole); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, sqlRegisterPlatformRole, appRole); err != nil {
			return fmt.Errorf("failed to register platform role %q: %w", appRole, err)
		}
	}
	return nil
}

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]bool, error) {
	rows, err := conn.Query(ctx, sqlAppliedMigrations)
	if err != nil {
		return nil, fmt.Errorf("failed to read schema_migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("failed to read schema_migrations: %w", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// execQuerier is what grantApp needs of a connection or transaction.
type execQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// grantApp grants role DML on the application tables and EXECUTE on
// picobot_role_binding(), which the policies call with the querying role's
// privileges, and on picobot_tenant(). Identifiers cannot be bind
// parameters, hence Sanitize.
func grantApp(ctx context.Context, conn execQuerier, appRole string) error {
	role := pgx.Identifier{appRole}.Sanitize()
	var schema string
	if err := conn.QueryRow(ctx, sqlCurrentSchema).Scan(&schema); err != nil {
		return fmt.Errorf("failed to read current schema: %w", err)
	}
	tables := make([]string, len(appTables))
	for i, t := range appTables {
		tables[i] = pgx.Identifier{schema, t}.Sanitize()
	}
	stmts := []string{
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize() + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + strings.Join(tables, ", ") + " TO " + role,
		"GRANT EXECUTE ON FUNCTION " + pgx.Identifier{schema, "picobot_role_binding"}.Sanitize() + "() TO " + role,
		"GRANT EXECUTE ON FUNCTION " + pgx.Identifier{schema, "picobot_tenant"}.Sanitize() + "() TO " + role,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("failed to grant role %q access: %w", appRole, err)
		}
	}
	return nil
}
