// Package postgres is the cluster-mode store.Store on PostgreSQL (pgx/v5).
//
// Tenant isolation is enforced by the database: every table has a row-level
// security policy comparing its tenant column with what
// picobot_role_binding() says of the connection's role (migration 0006),
// which the planner folds into each plan as a constant. For a tenant role
// (one login per tenant, made by TenantRoles) that is the tenant the owner
// recorded for the role, so nothing a tenant's connection sends can reach
// another tenant's rows. For a platform role (the gateway's and the
// scheduler's, which serve every tenant) it is the transaction-local setting
// picobot.tenant, which every operation sets first, in the same transaction
// as its statements (an explicit one, or the implicit transaction of a
// one-round-trip pgx batch); tenant roles send it too, and it is ignored. The
// policies are FORCEd, so they bind the tables' owner too; the store connects
// as a role that is neither superuser nor BYPASSRLS (Open refuses those), so
// they always apply. Migrate creates the schema with an owner connection and
// grants the platform role what it needs.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/picobot/picobot/runtime/store"
)

// Store is a store.Store on a pgxpool. Reconnecting after a lost server is
// the pool's job; an operation that fails mid-way rolls back and returns its
// error, so a caller never sees half a write.
type Store struct {
	pool *pgxpool.Pool
	// route, when set, picks a tenant's pool instead of pool: the tests run
	// the conformance suite, which writes as several tenants, with each
	// tenant on its own tenant role.
	route func(tenant string) (*pgxpool.Pool, error)
}

// poolFor returns the pool serving tenant.
func (s *Store) poolFor(tenant string) (*pgxpool.Pool, error) {
	if s.route != nil {
		return s.route(tenant)
	}
	return s.pool, nil
}

var _ store.Store = (*Store)(nil)

// Open connects to PostgreSQL as the application role in dsn (a URL or
// key=value string, with pgxpool's pool_* settings). It fails when that role
// would bypass row-level security.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("failed to parse PostgreSQL DSN: %w", err)
	}
	return OpenConfig(ctx, cfg)
}

// OpenConfig is Open with a pool configuration built by the caller.
//
// The store's sessions commit durably (synchronous_commit=on) unless the
// DSN chooses a level itself: a turn's message is acknowledged on the bus
// once its commit returns, and a server running with
// synchronous_commit=off acknowledges commits it loses in a crash, which
// would answer a message twice or with another one's answer.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config) (*Store, error) {
	if _, chosen := cfg.ConnConfig.RuntimeParams["synchronous_commit"]; !chosen {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create PostgreSQL pool: %w", err)
	}
	var bypass bool
	if err := pool.QueryRow(ctx, sqlRoleBypassesRLS).Scan(&bypass); err != nil {
		pool.Close()
		return nil, fmt.Errorf("failed to check PostgreSQL role %q: %w", cfg.ConnConfig.User, err)
	}
	if bypass {
		pool.Close()
		return nil, fmt.Errorf("failed to open store: PostgreSQL role %q is a superuser or has BYPASSRLS, "+
			"so tenant isolation would not apply; connect as the application role", cfg.ConnConfig.User)
	}
	return &Store{pool: pool}, nil
}

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() error {
	if s.pool != nil {
		s.pool.Close()
	}
	return nil
}

// PostgreSQL error codes the store turns into sentinel errors.
const (
	codeUniqueViolation          = "23505"
	codeCheckViolation           = "23514"
	codeNotNullViolation         = "23502"
	codeCharacterNotInRepertoire = "22021"
	codeUntranslatableCharacter  = "22P05"
)

// classify maps constraint errors to sentinels, dropping the server's text
// (which names constraints) from what callers see; other errors pass through
// for the operator's logs.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeUniqueViolation:
			return store.ErrExists
		case codeCheckViolation, codeNotNullViolation, codeCharacterNotInRepertoire, codeUntranslatableCharacter:
			return fmt.Errorf("%w: rejected by the database", store.ErrInvalid)
		}
	}
	return err
}

// unreachable reports a failure to reach the server rather than an answer of
// it: no connection could be made, the connection broke, or the server is
// shutting down or starting up (a restart).
func unreachable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's own limit
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08 is "connection exception"; 57P01-57P03 are the
		// administrator's shutdown, a crash's, and "cannot connect now".
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) && !ne.Timeout() ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}
