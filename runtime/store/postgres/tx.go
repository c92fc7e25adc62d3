package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/picobot/picobot/runtime/store"
)

// batch sends the tenant's set_config and the statements build queues in one
// round trip, then hands the results to read. pgx runs a batch as a single
// implicit transaction (one Sync), so the transaction-local tenant covers
// every statement and a failure anywhere undoes all of them. Statements that
// need to look at results before deciding what to write use beginBatch.
func (s *Store) batch(ctx context.Context, build func(b *pgx.Batch, tenant string), read func(br pgx.BatchResults) error) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return err
	}
	pool, err := s.poolFor(tenant)
	if err != nil {
		return err
	}
	var br pgx.BatchResults
	for attempt := 0; ; attempt++ {
		b := &pgx.Batch{}
		b.Queue(sqlSetTenant, tenant)
		build(b, tenant)
		br = pool.SendBatch(ctx, b)
		_, err := br.Exec()
		if err == nil {
			break
		}
		err = errors.Join(fmt.Errorf("failed to set tenant: %w", err), br.Close())
		if attempt == staleRetries || !staleConn(err) {
			return err
		}
	}
	if err := read(br); err != nil {
		_ = br.Close() // reports err again
		return err
	}
	return br.Close()
}

// staleRetries is how many times a batch is sent again on another pooled
// connection when the first one turns out to have died while idle.
const staleRetries = 2

// staleConn reports whether err, read as the first result of a batch, says
// that the pooled connection was dead before the server ran any of it: pgx
// sent nothing (SafeToRetry), or the server had already begun terminating
// it (PostgreSQL restarted or shut down: admin, crash or startup
// shutdown, SQLSTATE 57P01-57P03) and answered that instead of a result.
// Nothing of the batch ran then (its transaction commits only at its end),
// so sending it again is safe, writes included. A connection lost after
// the server answered is not this: the batch may have committed.
func staleConn(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03")
}

// beginBatch starts an explicit transaction scoped to ctx's tenant and runs
// the statements build queues, all in one round trip; read consumes their
// results. The caller continues on the returned transaction and must commit
// or roll it back.
func (s *Store) beginBatch(ctx context.Context, build func(b *pgx.Batch, tenant string),
	read func(br pgx.BatchResults) error) (pgx.Tx, string, error) {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return nil, "", err
	}
	pool, err := s.poolFor(tenant)
	if err != nil {
		return nil, "", err
	}
	var br pgx.BatchResults
	var tx pgx.Tx
	fail := func(err error) (pgx.Tx, string, error) {
		_ = br.Close()
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return nil, "", err
	}
	for attempt := 0; ; attempt++ {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		b.Queue(sqlSetTenant, tenant)
		build(b, tenant)
		br = pool.SendBatch(ctx, b)
		tx = br.Tx()
		_, err := br.Exec()
		if err == nil {
			break
		}
		if attempt == staleRetries || !staleConn(err) {
			return fail(fmt.Errorf("failed to begin transaction: %w", err))
		}
		_, _, _ = fail(err)
	}
	if _, err := br.Exec(); err != nil {
		return fail(fmt.Errorf("failed to set tenant: %w", err))
	}
	if err := read(br); err != nil {
		return fail(err)
	}
	if err := br.Close(); err != nil {
		return fail(err)
	}
	return tx, tenant, nil
}

// one runs a statement returning exactly one row; the tenant is prepended to
// args as $1. No row is store.ErrNotFound.
func one[T any](ctx context.Context, s *Store, scan pgx.RowToFunc[T], query string, args ...any) (T, error) {
	var out T
	err := s.batch(ctx, func(b *pgx.Batch, tenant string) {
		b.Queue(query, append([]any{tenant}, args...)...)
	}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectExactlyOneRow(rows, scan)
		return err
	})
	return out, classify(err)
}

// many runs a query; the tenant is prepended to args as $1.
func many[T any](ctx context.Context, s *Store, scan pgx.RowToFunc[T], query string, args ...any) ([]T, error) {
	var out []T
	err := s.batch(ctx, func(b *pgx.Batch, tenant string) {
		b.Queue(query, append([]any{tenant}, args...)...)
	}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scan)
		return err
	})
	return out, classify(err)
}

// exec runs a statement; the tenant is prepended to args as $1.
func exec(ctx context.Context, s *Store, query string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := s.batch(ctx, func(b *pgx.Batch, tenant string) {
		b.Queue(query, append([]any{tenant}, args...)...)
	}, func(br pgx.BatchResults) error {
		var err error
		tag, err = br.Exec()
		return err
	})
	return tag, classify(err)
}
