package outbound

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/runtime/store/sqlite"
	"github.com/picobot/picobot/test/services"
)

// The dispatcher is tested against both real stores: SQLite (embedded mode)
// and PostgreSQL as the unprivileged application role (cluster mode, where
// row-level security applies). One PostgreSQL database serves the package;
// each test uses its own tenant.

const (
	appRole     = "picobot_app"
	appPassword = "picobot-test"
)

var (
	pgStore   *postgres.Store
	pgSkip    string
	sqliteDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "outbound-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sqliteDir = dir

	dsn, stop, err := services.Postgres()
	if err == nil {
		defer stop()
		pgStore, err = setUpPostgres(dsn)
	}
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		pgSkip = reason
	}
	baseline := goleak.IgnoreCurrent()
	code := m.Run()
	if pgStore != nil {
		_ = pgStore.Close()
	}
	if code == 0 {
		if err := goleak.Find(baseline); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// setUpPostgres creates the application role and a migrated database, and
// opens the store as that role.
func setUpPostgres(dsn string) (*postgres.Store, error) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("failed to connect to PostgreSQL: %w", err)
	}
	defer func() { _ = admin.Close(ctx) }()
	if _, err := admin.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN CREATE ROLE %s LOGIN PASSWORD '%s';
EXCEPTION WHEN duplicate_object THEN NULL; END $$`, pgx.Identifier{appRole}.Sanitize(), appPassword)); err != nil {
		return nil, fmt.Errorf("failed to create role: %w", err)
	}
	db := fmt.Sprintf("picobot_outbound_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()); err != nil {
		return nil, fmt.Errorf("failed to create database: %w", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("failed to parse DSN: %w", err)
	}
	u.Path = "/" + db
	if err := postgres.Migrate(ctx, u.String(), appRole); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("failed to parse DSN: %w", err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = appRole, appPassword
	return postgres.OpenConfig(ctx, cfg)
}

// eachStore runs fn against SQLite and PostgreSQL, each in a fresh tenant.
func eachStore(t *testing.T, fn func(t *testing.T, st store.Store, ctx context.Context)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, openSQLite(t), store.WithTenant(t.Context(), "tenant-"+randomID())) })
	t.Run("postgres", func(t *testing.T) {
		if pgStore == nil {
			t.Skip(pgSkip)
		}
		fn(t, pgStore, store.WithTenant(t.Context(), "tenant-"+randomID()))
	})
}

// eachStoreB is eachStore for benchmarks.
func eachStoreB(b *testing.B, fn func(b *testing.B, st store.Store, ctx context.Context)) {
	b.Run("sqlite", func(b *testing.B) { fn(b, openSQLite(b), store.WithTenant(b.Context(), "tenant-"+randomID())) })
	b.Run("postgres", func(b *testing.B) {
		if pgStore == nil {
			b.Skip(pgSkip)
		}
		fn(b, pgStore, store.WithTenant(b.Context(), "tenant-"+randomID()))
	})
}

func openSQLite(t testing.TB) store.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(sqliteDir, fmt.Sprintf("%s.db", randomID())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
