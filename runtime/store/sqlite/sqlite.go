// Package sqlite is the embedded-mode store.Store on SQLite
// (modernc.org/sqlite, pure Go), one file per workspace:
// {workspace}/picobot.db.
//
// SQLite allows one writer at a time, so the store funnels every write
// through a single connection (BEGIN IMMEDIATE, so a transaction never has to
// upgrade its lock and fail) and reads through a pool of read-only
// connections, which WAL mode lets run beside the writer. busy_timeout covers
// another process (a CLI command) holding the file briefly. Embedded mode
// normally serves one tenant, but the store filters on tenant in every
// statement anyway: the conformance suite proves isolation for both stores.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/picobot/picobot/runtime/store"
)

// FileName is the database's name inside a workspace.
const FileName = "picobot.db"

// busyTimeout is how long a statement waits for a lock another process holds.
const busyTimeout = 5 * time.Second

// Store is a store.Store on a SQLite file.
type Store struct {
	writer *sql.DB
	reader *sql.DB
	clock  clock.PassiveClock
	// writeStmts and readStmts are the prepared statements of writer and
	// reader.
	writeStmts, readStmts *stmtCache
	// writes go to the writer goroutine (groupcommit.go).
	writes     chan *writeReq
	quit       chan struct{}
	writerDone chan struct{}
	closeOnce  sync.Once
	groups     atomic.Int64 // group commits run (tests)
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithClock sets the clock that stamps records and judges lease expiry
// (embedded mode is one process, so its clock is the only one); tests pass a
// fake one to expire leases without sleeping.
func WithClock(c clock.PassiveClock) Option {
	return func(s *Store) { s.clock = c }
}

// Open opens (creating if needed) the database at path and brings its schema
// up to date. synchronous=NORMAL under WAL keeps the file consistent through
// crashes and may lose only the last transactions on power loss, which is
// the usual trade for a desktop app.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	s := &Store{clock: clock.RealClock{}}
	for _, o := range opts {
		o(s)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve SQLite path %q: %w", path, err)
	}
	params := url.Values{}
	params.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	params.Set("_foreign_keys", "1")
	writerParams := url.Values{}
	for k, v := range params {
		writerParams[k] = v
	}
	writerParams.Set("_journal_mode", "WAL")
	writerParams.Set("_synchronous", "NORMAL")
	writerParams.Set("_txlock", "immediate")

	writer, err := sql.Open("sqlite", fileURI(abs, writerParams))
	if err != nil {
		return nil, fmt.Errorf("failed to open SQLite database %q: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)
	if err := migrate(ctx, writer, s.clock); err != nil {
		return nil, errors.Join(err, writer.Close())
	}

	params.Set("_query_only", "1")
	reader, err := sql.Open("sqlite", fileURI(abs, params))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("failed to open SQLite database %q: %w", path, err), writer.Close())
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	reader.SetMaxOpenConns(readers)
	reader.SetMaxIdleConns(readers)
	if err := reader.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("failed to open SQLite database %q: %w", path, err), reader.Close(), writer.Close())
	}
	s.writer, s.reader = writer, reader
	s.writeStmts, s.readStmts = &stmtCache{db: writer}, &stmtCache{db: reader}
	s.startWriter()
	return s, nil
}

// fileURI builds a file: URI, so a path holding '?', '#' or '%' reaches
// SQLite intact (a plain name is cut at the first '?').
func fileURI(abs string, params url.Values) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: params.Encode()}).String()
}

// Close closes the database.
func (s *Store) Close() error {
	s.stopWriter()
	return errors.Join(s.readStmts.close(), s.writeStmts.close(), s.reader.Close(), s.writer.Close())
}

// now reads the store's clock in the schema's unit.
func (s *Store) now() int64 {
	return micros(s.clock.Now())
}

// write runs fn in a write transaction scoped to ctx's tenant.
func (s *Store) write(ctx context.Context, fn func(tx *txn, tenant string) error) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	req := &writeReq{ctx: ctx, tenant: tenant, fn: fn, done: make(chan error, 1)}
	select {
	case s.writes <- req:
	case <-s.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once taken, a write runs to its end: its outcome is reported even
	// when ctx ends meanwhile.
	return <-req.done
}

// read runs fn in a read transaction (one snapshot) scoped to ctx's tenant.
func (s *Store) read(ctx context.Context, fn func(tx *txn, tenant string) error) error {
	tenant, err := store.TenantFrom(ctx)
	if err != nil {
		return err
	}
	return inTx(ctx, s.reader, s.readStmts, func(tx *txn) error {
		return fn(tx, tenant)
	})
}

// inTx runs fn in a transaction of db, with statements from stmts (nil: no
// cache).
func inTx(ctx context.Context, db *sql.DB, stmts *stmtCache, fn func(tx *txn) error) (err error) {
	sqlTx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("failed to begin transaction: %w", err)
	}
	tx := &txn{Tx: sqlTx, stmts: stmts}
	defer func() {
		// After the commit or rollback below: the connection is free.
		if len(tx.missed) > 0 {
			stmts.prepare(ctx, tx.missed)
		}
	}()
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// classify maps constraint errors to sentinels, dropping SQLite's text (which
// names tables and columns) from what callers see; other errors pass through
// for the logs.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return store.ErrExists
		case sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL, sqlite3.SQLITE_CONSTRAINT_DATATYPE:
			return fmt.Errorf("%w: rejected by the database", store.ErrInvalid)
		}
	}
	return err
}
