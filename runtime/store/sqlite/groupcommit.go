package sqlite

import (
	"context"
	"errors"
	"fmt"
)

// Group commit. SQLite has one writer at a time and a commit costs about as
// much as the writes it commits (WAL frames, locks): with many sessions
// appending at once, a commit per write was about an eighth of all CPU in
// the gateway's 100-session benchmark. Writes therefore go through one
// goroutine, which runs whatever writes are waiting when it is free in one
// transaction, each in its own savepoint: a write that fails is undone alone
// and the others commit. A lone write runs in its own transaction, as before.

// maxGroup caps the writes committed together.
const maxGroup = 64

// errClosed is returned by writes after Close.
var errClosed = errors.New("the SQLite store is closed")

// writeReq is one write waiting for the writer.
type writeReq struct {
	ctx    context.Context
	tenant string
	fn     func(tx *txn, tenant string) error
	done   chan error
}

// startWriter starts the goroutine that runs writes.
func (s *Store) startWriter() {
	s.writes = make(chan *writeReq)
	s.quit = make(chan struct{})
	s.writerDone = make(chan struct{})
	go s.writeLoop()
}

// stopWriter stops it; writes then fail with errClosed.
func (s *Store) stopWriter() {
	s.closeOnce.Do(func() { close(s.quit) })
	<-s.writerDone
}

func (s *Store) writeLoop() {
	defer close(s.writerDone)
	batch := make([]*writeReq, 0, maxGroup)
	for {
		select {
		case <-s.quit:
			return
		case req := <-s.writes:
			batch = append(batch[:0], req)
		}
	more: // take the writes already waiting, without waiting for more
		for len(batch) < maxGroup {
			select {
			case req := <-s.writes:
				batch = append(batch, req)
			default:
				break more
			}
		}
		if len(batch) == 1 {
			req := batch[0]
			req.done <- inTx(req.ctx, s.writer, s.writeStmts, func(tx *txn) error { return req.fn(tx, req.tenant) })
			continue
		}
		s.runGroup(batch)
	}
}

// runGroup commits several writes in one transaction, each in a savepoint.
// A write whose context ended before its turn does not run. The writes run
// with contexts that cannot be cancelled: the driver interrupts the whole
// connection when a statement's context ends, which would roll back the
// other writes of the group.
func (s *Store) runGroup(batch []*writeReq) {
	s.groups.Add(1)
	errs := make([]error, len(batch))
	var missed []string
	// finish answers every write: its own error, else how the transaction
	// ended.
	finish := func(end error) {
		if len(missed) > 0 {
			s.writeStmts.prepare(context.Background(), missed)
		}
		for i, req := range batch {
			if errs[i] == nil {
				errs[i] = end
			}
			req.done <- errs[i]
		}
	}
	sqlTx, err := s.writer.BeginTx(context.Background(), nil)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("failed to begin transaction: %w", err)
		}
		finish(nil)
		return
	}
	tx := &txn{Tx: sqlTx, stmts: s.writeStmts, detached: true}
	for i, req := range batch {
		if err := req.ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if _, err := sqlTx.Exec("SAVEPOINT w"); err != nil {
			errs[i] = err
			continue
		}
		errs[i] = req.fn(tx, req.tenant)
		var err error
		if errs[i] != nil {
			_, err = sqlTx.Exec("ROLLBACK TO w")
		}
		if err == nil {
			_, err = sqlTx.Exec("RELEASE w")
		}
		if err != nil {
			// The transaction is in an unknown state: none of it commits.
			_ = sqlTx.Rollback()
			missed = tx.missed
			finish(fmt.Errorf("failed to end a write of a group commit: %w", err))
			return
		}
	}
	missed = tx.missed
	finish(sqlTx.Commit())
}
