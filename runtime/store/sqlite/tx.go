package sqlite

import (
	"context"
	"database/sql"
)

// one runs a query returning exactly one row, in a write transaction when
// write is set; the tenant is prepended to args as ?1. No row is
// store.ErrNotFound.
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
		err = s.read(ctx, run)
	}
	return out, classify(err)
}

// many runs a read query; the tenant is prepended to args as ?1.
func many[T any](ctx context.Context, s *Store, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := s.read(ctx, func(tx *txn, tenant string) error {
		var err error
		out, err = queryAll(ctx, tx, scan, query, append([]any{tenant}, args...)...)
		return err
	})
	return out, classify(err)
}

// queryAll collects a query's rows, closing them and checking Err.
func queryAll[T any](ctx context.Context, tx *txn, scan func(scanner) (T, error), query string, args ...any) (_ []T, err error) {
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
