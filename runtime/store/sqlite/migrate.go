package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/store/internal/migration"
)

// Migrations are the same hand-written scheme as the PostgreSQL store's
// (numbered files, a schema_migrations table), without its advisory lock:
// each migration is checked and applied inside one BEGIN IMMEDIATE
// transaction, which already excludes every other writer of the file.

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// migrate applies the pending migrations on the writer connection.
func migrate(ctx context.Context, db *sql.DB, clk clock.PassiveClock) error {
	ms, err := migration.Load(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, sqlCreateMigrationsTable); err != nil {
		return fmt.Errorf("failed to create schema_migrations: %w", err)
	}
	for _, m := range ms {
		err := inTx(ctx, db, nil, func(tx *txn) error {
			var applied bool
			if err := tx.QueryRowContext(ctx, sqlMigrationApplied, m.Version).Scan(&applied); err != nil {
				return err
			}
			if applied {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, sqlRecordMigration, m.Version, m.Name, micros(clk.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("failed to apply migration %q: %w", m.Name, err)
		}
	}
	return nil
}
