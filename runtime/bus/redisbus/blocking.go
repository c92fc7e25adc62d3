package redisbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// blockingConn is a connection set aside for blocking reads, with its Redis
// client id, so that another connection can end its wait with CLIENT UNBLOCK.
// go-redis does not watch a context during a read: without this, cancelling a
// consumer would wait out its whole BLOCK.
type blockingConn struct {
	conn *redis.Conn
	id   int64
}

// blockingRead runs XREADGROUP ... BLOCK on a dedicated connection and ends the
// wait early when ctx is cancelled or the bus closes. A connection taken from
// the idle list may have died with a Redis restart: then the read is tried once
// more on a fresh one.
func (b *Bus) blockingRead(ctx context.Context, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	for attempt := 0; ; attempt++ {
		bc, reused, err := b.takeConn(ctx)
		if err != nil {
			return nil, err
		}
		res, err := b.readOn(ctx, bc, args)
		healthy := err == nil || isRedisError(err)
		b.putConn(bc, healthy)
		if healthy || !reused || attempt > 0 || ctx.Err() != nil || b.isClosed() {
			return res, err
		}
	}
}

func (b *Bus) readOn(ctx context.Context, bc *blockingConn, args *redis.XReadGroupArgs) ([]redis.XStream, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, redis.ErrClosed
	}
	b.reads.Add(1)
	b.mu.Unlock()
	defer b.reads.Done()

	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopOnClose := context.AfterFunc(b.closing, cancel)
	defer stopOnClose()

	readDone := make(chan struct{})
	unblocked := make(chan struct{})
	stop := context.AfterFunc(readCtx, func() {
		defer close(unblocked)
		b.unblock(bc.id, readDone)
	})
	// The read itself ignores cancellation (CLIENT UNBLOCK ends it), so that
	// go-redis does not abandon the connection halfway through a reply.
	res, err := bc.conn.XReadGroup(context.WithoutCancel(ctx), args).Result()
	close(readDone)
	if !stop() {
		<-unblocked
	}
	return res, err
}

// unblock ends the blocking command of client id, retrying while the read has
// not reached Redis yet (CLIENT UNBLOCK of a client that is not blocked does
// nothing) until the read returns.
func (b *Bus) unblock(id int64, readDone <-chan struct{}) {
	wait := 5 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := b.client.ClientUnblock(ctx, id).Result()
		cancel()
		if err == nil && n == 1 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-readDone:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// takeConn returns an idle dedicated connection or makes one.
func (b *Bus) takeConn(ctx context.Context) (bc *blockingConn, reused bool, err error) {
	b.mu.Lock()
	if n := len(b.idle); n > 0 {
		bc = b.idle[n-1]
		b.idle = b.idle[:n-1]
		b.mu.Unlock()
		return bc, true, nil
	}
	b.mu.Unlock()
	conn := b.client.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, false, fmt.Errorf("failed to open a connection for blocking reads: %w", err)
	}
	return &blockingConn{conn: conn, id: id}, false, nil
}

// putConn keeps a healthy connection for the next blocking read; a connection
// that failed may be half-way through a reply or dead, so it goes.
func (b *Bus) putConn(bc *blockingConn, healthy bool) {
	b.mu.Lock()
	if healthy && !b.closed && len(b.idle) < maxIdleBlockingConns {
		b.idle = append(b.idle, bc)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	_ = bc.conn.Close()
}

// isRedisError reports an error reply of the server (or a nil reply), after
// which the connection is still in step.
func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
