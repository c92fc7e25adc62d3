// Package pgtest makes throwaway migrated databases on the test PostgreSQL
// server (test/services) for tests and benchmarks that log in as the schema
// owner, an application role or tenant roles.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/test/services"
)

// Database is one migrated database.
type Database struct {
	// Owner is the schema owner's DSN (the server's admin user).
	Owner string
	// App is the application role's DSN ("" when New was given no role).
	App string
	// Base is the DSN without a user, which tenant roles log in to.
	Base string
}

var seq atomic.Int64

// New creates a database named after prefix, migrated to the latest schema,
// on the test server, and drops it when tb ends. With appRole set, that
// role is created (LOGIN with appPassword, once per server) and granted the
// application's rights. A server that cannot be started skips tb, or fails
// it under CI (services.Unavailable).
func New(tb testing.TB, prefix, appRole, appPassword string) Database {
	tb.Helper()
	admin, stop, err := services.Postgres()
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			tb.Fatal(reason)
		}
		tb.Skip(reason)
	}
	tb.Cleanup(stop)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("failed to connect to the test PostgreSQL: %v", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := pgx.Identifier{fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), seq.Add(1))}
	sqls := []string{"CREATE DATABASE " + name.Sanitize()}
	if appRole != "" {
		sqls = append(sqls, fmt.Sprintf(`DO $$ BEGIN CREATE ROLE %s LOGIN PASSWORD '%s'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
			pgx.Identifier{appRole}.Sanitize(), appPassword))
	}
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			tb.Fatalf("failed to run %q: %v", sql, err)
		}
	}
	tb.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return // the server is gone, and the database with it
		}
		defer func() { _ = c.Close(context.Background()) }()
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("failed to parse the test PostgreSQL DSN: %v", err)
	}
	u.Path = "/" + name[0]
	if err := postgres.Migrate(ctx, u.String(), appRole); err != nil {
		tb.Fatal(err)
	}
	db := Database{Owner: u.String()}
	if appRole != "" {
		u.User = url.UserPassword(appRole, appPassword)
		db.App = u.String()
	}
	u.User = nil
	db.Base = u.String()
	return db
}
