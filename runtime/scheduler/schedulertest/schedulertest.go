// Package schedulertest holds what tests of the scheduler, the operator's
// scheduler Runnable and embedded mode share: a real PostgreSQL store
// opened as the unprivileged application role, and recording fakes of the
// Runner and Deliverer boundaries.
package schedulertest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/picobot/picobot/runtime/scheduler"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/test/services"
)

const (
	appRole     = "picobot_app"
	appPassword = "picobot-test"
)

// Postgres is a PostgreSQL server for tests, started once per test binary.
type Postgres struct {
	admin *url.URL
	stop  func()
	seq   atomic.Int64
}

// StartPostgres starts a server (or uses PICOBOT_TEST_POSTGRES_URL) and
// creates the application role. Hand an error to services.Unavailable.
func StartPostgres() (*Postgres, error) {
	dsn, stop, err := services.Postgres()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		stop()
		return nil, fmt.Errorf("failed to parse DSN %q: want a postgres:// URL", dsn)
	}
	p := &Postgres{admin: u, stop: stop}
	err = p.exec(context.Background(), "postgres", fmt.Sprintf(`DO $$ BEGIN
	CREATE ROLE %s LOGIN PASSWORD '%s';
EXCEPTION WHEN duplicate_object THEN NULL;
END $$`, pgx.Identifier{appRole}.Sanitize(), appPassword))
	if err != nil {
		stop()
		return nil, err
	}
	return p, nil
}

// Stop stops a server this process started.
func (p *Postgres) Stop() { p.stop() }

func (p *Postgres) url(db, user, password string) string {
	u := *p.admin
	u.Path = "/" + db
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	return u.String()
}

func (p *Postgres) exec(ctx context.Context, db, sql string) error {
	conn, err := pgx.Connect(ctx, p.url(db, "", ""))
	if err != nil {
		return fmt.Errorf("failed to connect to %q: %w", db, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("failed to run %q: %w", sql, err)
	}
	return nil
}

// NewDatabase creates a migrated database dropped when tb ends, and returns
// the application role's DSN for it.
func (p *Postgres) NewDatabase(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("picobot_sched_%d_%d", os.Getpid(), p.seq.Add(1))
	if err := p.exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := p.exec(context.Background(), "postgres", "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Error(err)
		}
	})
	if err := postgres.Migrate(ctx, p.url(name, "", ""), appRole); err != nil {
		tb.Fatal(err)
	}
	return p.url(name, appRole, appPassword)
}

// Open opens a store on dsn as the application role, closed when tb ends.
func Open(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	st, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	return st
}

// Call is one run a Runner saw.
type Call struct {
	Req scheduler.RunRequest
	// Started is when Run was called (the recording clock's time).
	Started time.Time
}

// Runner records runs and answers with Result (ok by default). Safe for
// concurrent use.
type Runner struct {
	// Now stamps Call.Started; time.Now when nil.
	Now func() time.Time
	// Result, when set, decides a run's answer.
	Result func(scheduler.RunRequest) (scheduler.RunResult, error)
	// Block, when set, holds every run until it is closed or ctx ends.
	Block chan struct{}

	mu    sync.Mutex
	calls []Call
	seen  map[string]int
}

// Run implements scheduler.Runner.
func (r *Runner) Run(ctx context.Context, req scheduler.RunRequest) (scheduler.RunResult, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	started := now()
	r.mu.Lock()
	r.calls = append(r.calls, Call{Req: req, Started: started})
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	r.seen[req.Job+"@"+req.ScheduledTime.UTC().Format(time.RFC3339Nano)]++
	r.mu.Unlock()
	if r.Block != nil {
		select {
		case <-r.Block:
		case <-ctx.Done():
			return scheduler.RunResult{}, ctx.Err()
		}
	}
	if r.Result != nil {
		return r.Result(req)
	}
	return scheduler.RunResult{Outcome: store.OutcomeOK, Message: "all good"}, nil
}

// Calls returns the runs seen so far.
func (r *Runner) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Duplicates counts ticks run more than once.
func (r *Runner) Duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.seen {
		if c > 1 {
			n++
		}
	}
	return n
}

// Deliverer records notices and fails with Err when set. Safe for
// concurrent use.
type Deliverer struct {
	mu      sync.Mutex
	notices []scheduler.Notice
	err     error
}

// Deliver implements scheduler.Deliverer.
func (d *Deliverer) Deliver(_ context.Context, n scheduler.Notice) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.notices = append(d.notices, n)
	return d.err
}

// Fail makes every later delivery fail with err (nil: succeed).
func (d *Deliverer) Fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

// Notices returns the notices seen so far.
func (d *Deliverer) Notices() []scheduler.Notice {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]scheduler.Notice(nil), d.notices...)
}
