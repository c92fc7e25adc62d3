package sqlite

import (
	"context"
	"database/sql"

	"github.com/picobot/picobot/runtime/store"
)

// one runs a query returning exactly one row, in a write transaction when
// write is set, else as a lone read (autocommitReader); the tenant is
// prepended to args as ?1. No row is store.ErrNotFound.
func one[T any](ctx context.Context, s *Store, write bool, scan func(scanner) (T, error), query string, args ...any) (T, error) {
	var out T
	run := func(tx *txn, tenant string) error {
		var err error
		out, err = scan(tx.QueryRowContext(ctx, query, append([]any{tenant}, args...)...))
		return err
	}
	var err error
	if write {
		err = s.write(ctx, run)
	} else {
		var tenant string
		if tenant, err = store.TenantFrom(ctx); err == nil {
			out, err = scan(s.autocommit().QueryRowContext(ctx, query, append([]any{tenant}, args...)...))
		}
	}
	return out, classify(err)
}

// many runs a read query; the tenant is prepended to args as ?1.
func many[T any](ctx context.Context, s *Store, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return nil, err
	}
	out, err := queryAll(ctx, s.autocommit(), scan, query, append([]any{tenant}, args...)...)
	return out, classify(err)
}

// querier runs queries: a transaction (txn) or the reader pool outside one
// (autocommitReader).
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// autocommitReader runs single-statement reads on the reader pool without
// an explicit transaction: SQLite reads each statement from one snapshot
// of its own, and the BEGIN and COMMIT around a lone query were over a third
// of its CPU in the gateway benchmark.
// Statements come from the reader's cache, prepared on first use (no
// transaction holds a reader connection meanwhile).
type autocommitReader struct{ stmts *stmtCache }

func (s *Store) autocommit() autocommitReader { return autocommitReader{s.readStmts} }

// QueryContext implements querier.
func (r autocommitReader) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := r.stmts.get(ctx, query); st != nil { //nolint:sqlclosecheck // cached statements close with the store
		return st.QueryContext(ctx, args...)
	}
	return r.stmts.db.QueryContext(ctx, query, args...)
}

// QueryRowContext implements querier.
func (r autocommitReader) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := r.stmts.get(ctx, query); st != nil { //nolint:sqlclosecheck // cached statements close with the store
		return st.QueryRowContext(ctx, args...)
	}
	return r.stmts.db.QueryRowContext(ctx, query, args...)
}

// queryAll collects a query's rows, closing them and checking Err.
func queryAll[T any](ctx context.Context, tx querier, scan func(scanner) (T, error), query string, args ...any) (_ []T, err error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// exec runs a write statement; the tenant is prepended to args as ?1.
func exec(ctx context.Context, s *Store, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := s.write(ctx, func(tx *txn, tenant string) error {
		var err error
		res, err = tx.ExecContext(ctx, query, append([]any{tenant}, args...)...)
		return err
	})
	return res, classify(err)
}
