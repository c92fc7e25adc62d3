package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
)

// Prepared statements. SQLite parses every statement it runs and the driver
// (modernc.org/sqlite) keeps no statement cache, so without one a turn's
// dozen queries spent more CPU in SQLite's parser than in running them (14%
// of all CPU in the gateway turn benchmark). database/sql's Stmt is that
// cache: prepared once per connection, reused by any transaction on that
// connection through Tx.StmtContext. A query is prepared after the
// transaction that first ran it has ended, because the writer pool has a
// single connection and the transaction holds it.

// maxStmts bounds the cache; query texts beyond it (there are few dynamic
// ones) run unprepared, as before.
const maxStmts = 256

// stmtCache holds one DB's prepared statements by query text.
type stmtCache struct {
	db *sql.DB
	m  sync.Map // query → *sql.Stmt
	n  atomic.Int32
}

// prepare prepares queries not yet cached. A query that fails to prepare
// runs unprepared; its error is reported where it runs.
func (c *stmtCache) prepare(ctx context.Context, queries []string) {
	for _, q := range queries {
		if c.n.Load() >= maxStmts || ctx.Err() != nil {
			return
		}
		if _, ok := c.m.Load(q); ok {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		if _, loaded := c.m.LoadOrStore(q, st); loaded {
			_ = st.Close() //nolint:sqlclosecheck // another transaction cached it first; the rest stay open until Close
			continue
		}
		c.n.Add(1)
	}
}

// get returns query's statement, preparing it when it is not cached yet;
// nil when it cannot be (the cache is full, or it fails to prepare): the
// caller runs it unprepared. Only for callers holding no connection of db.
func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	v, ok := c.m.Load(query)
	if !ok {
		c.prepare(ctx, []string{query})
		v, ok = c.m.Load(query)
	}
	if !ok {
		return nil
	}
	return v.(*sql.Stmt)
}

// close closes every cached statement.
func (c *stmtCache) close() error {
	var errs []error
	c.m.Range(func(_, v any) bool {
		errs = append(errs, v.(*sql.Stmt).Close())
		return true
	})
	return errors.Join(errs...)
}

// txn is a transaction whose statements come from the cache when prepared.
type txn struct {
	*sql.Tx
	stmts  *stmtCache // nil: nothing cached (migrations)
	missed []string
	// detached: statements run with their context's values but cannot be
	// cancelled by it (a group commit; see groupcommit.go).
	detached bool
}

func (t *txn) bind(ctx context.Context) context.Context {
	if t.detached {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

func (t *txn) stmt(ctx context.Context, query string) *sql.Stmt {
	if t.stmts == nil {
		return nil
	}
	if v, ok := t.stmts.m.Load(query); ok {
		return t.StmtContext(ctx, v.(*sql.Stmt))
	}
	t.missed = append(t.missed, query)
	return nil
}

// ExecContext runs a statement in the transaction.
func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = t.bind(ctx)
	if st := t.stmt(ctx, query); st != nil { //nolint:sqlclosecheck // a Tx.StmtContext statement closes with its transaction
		return st.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// QueryContext runs a query in the transaction.
func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = t.bind(ctx)
	if st := t.stmt(ctx, query); st != nil { //nolint:sqlclosecheck // a Tx.StmtContext statement closes with its transaction
		return st.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs a query returning at most one row in the transaction.
func (t *txn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = t.bind(ctx)
	if st := t.stmt(ctx, query); st != nil { //nolint:sqlclosecheck // a Tx.StmtContext statement closes with its transaction
		return st.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}
