package postgres

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
	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/internal/migration"
	"github.com/picobot/picobot/runtime/store/storetest"
	"github.com/picobot/picobot/test/services"
)

// The tests connect as appRole, a plain login role, the way the runtime does;
// the server's DSN (a superuser) only sets up databases. Each test gets its
// own database cloned from a migrated template.
const (
	appRole     = "picobot_app"
	appPassword = "picobot-test"
)

var (
	adminDSN    *url.URL
	adminConfig *pgx.ConnConfig
	templateDB  string
	skipReason  string
	dbCounter   atomic.Int64
)

func TestMain(m *testing.M) {
	baseline := goleak.IgnoreCurrent()
	code := runSuite(m)
	if code == 0 {
		if err := goleak.Find(baseline); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runSuite(m *testing.M) int {
	dsn, stop, err := services.Postgres()
	if err == nil {
		defer stop()
		err = setUp(dsn)
	}
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			fmt.Fprintln(os.Stderr, reason)
			return 1
		}
		skipReason = reason
		return m.Run()
	}
	defer func() {
		if err := dropDatabase(context.Background(), templateDB); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	return m.Run()
}

// setUp creates the application role and a migrated template database.
func setUp(dsn string) error {
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("failed to parse DSN %q: want a postgres:// URL", dsn)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("failed to parse DSN: %w", err)
	}
	adminDSN, adminConfig = u, cfg
	err = adminExec(ctx, "postgres", fmt.Sprintf(sqlTestCreateRole, pgx.Identifier{appRole}.Sanitize(), appPassword))
	if err != nil {
		return err
	}
	templateDB = fmt.Sprintf("picobot_template_%d", os.Getpid())
	if err := adminExec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{templateDB}.Sanitize()); err != nil {
		return err
	}
	return Migrate(ctx, dbURL(templateDB), appRole)
}

// dbURL returns the superuser's DSN for database name. (A ConnConfig's
// ConnString is the string it was parsed from, so it cannot be edited.)
func dbURL(name string) string {
	u := *adminDSN
	u.Path = "/" + name
	return u.String()
}

// Test-only SQL run as the server's superuser.
const (
	// A concurrent test binary may create the role first.
	sqlTestCreateRole = `DO $$ BEGIN
	CREATE ROLE %s LOGIN PASSWORD '%s';
EXCEPTION WHEN duplicate_object THEN NULL;
END $$`
	sqlTestPoisonTrigger = `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.content = 'poison' THEN RAISE EXCEPTION 'poisoned message'; END IF;
	IF NEW.content = 'slow' THEN PERFORM pg_sleep(60); END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION poison();`
	sqlTestKillSleeper = `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE usename = $1 AND wait_event = 'PgSleep'`
	sqlTestTablesWithTenant = `SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
	EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_isolation')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'
	AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped)
ORDER BY c.relname`
)

// dbConfig returns the superuser's config for database name.
func dbConfig(name string) *pgx.ConnConfig {
	cfg := adminConfig.Copy()
	cfg.Database = name
	return cfg
}

// appConfig returns the application role's config for database name.
func appConfig(name string) *pgx.ConnConfig {
	cfg := dbConfig(name)
	cfg.User, cfg.Password = appRole, appPassword
	return cfg
}

func adminExec(ctx context.Context, database, sql string, args ...any) error {
	conn, err := pgx.ConnectConfig(ctx, dbConfig(database))
	if err != nil {
		return fmt.Errorf("failed to connect to %q: %w", database, err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("failed to run %q: %w", sql, err)
	}
	return nil
}

func dropDatabase(ctx context.Context, name string) error {
	return adminExec(ctx, "postgres", "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// newDatabase clones the template into a database dropped when t ends.
func newDatabase(t testing.TB, fromTemplate bool) string {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	name := fmt.Sprintf("picobot_test_%d_%d", os.Getpid(), dbCounter.Add(1))
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if fromTemplate {
		stmt += " TEMPLATE " + pgx.Identifier{templateDB}.Sanitize()
	}
	if err := adminExec(context.Background(), "postgres", stmt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(context.Background(), name); err != nil {
			t.Error(err)
		}
	})
	return name
}

// newStore opens a store as the application role on a fresh database.
func newStore(t testing.TB) (*Store, string) {
	t.Helper()
	db := newDatabase(t, true)
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig = appConfig(db)
	st, err := OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		st, _ := newStore(t)
		return st
	})
}

// TestRowLevelSecurity checks isolation below the store: a raw connection as
// the application role sees no rows without a tenant and only the set
// tenant's rows with one, whatever the query says.
func TestRowLevelSecurity(t *testing.T) {
	g := NewWithT(t)
	st, db := newStore(t)
	for tenant, n := range map[string]int{"tenant-a": 3, "tenant-b": 2} {
		ctx := store.WithTenant(t.Context(), tenant)
		_, err := st.CreateSession(ctx, store.Session{Channel: "web", ChatID: "c1", DialogID: "d1"})
		g.Expect(err).NotTo(HaveOccurred())
		for i := range n {
			_, err := st.AppendMessages(ctx, "web:c1:d1", store.Message{ID: fmt.Sprint(i), Role: llm.RoleUser, Content: "x"})
			g.Expect(err).NotTo(HaveOccurred())
		}
	}

	conn, err := pgx.ConnectConfig(t.Context(), appConfig(db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	count := func(q pgx.Tx) int {
		var n int
		g.Expect(q.QueryRow(t.Context(), "SELECT count(*) FROM messages").Scan(&n)).To(Succeed())
		return n
	}
	inTenant := func(tenant string, fn func(tx pgx.Tx)) {
		tx, err := conn.Begin(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { g.Expect(tx.Rollback(context.Background())).To(Succeed()) }()
		if tenant != "" {
			_, err = tx.Exec(t.Context(), sqlSetTenant, tenant)
			g.Expect(err).NotTo(HaveOccurred())
		}
		fn(tx)
	}

	inTenant("", func(tx pgx.Tx) {
		g.Expect(count(tx)).To(BeZero(), "no tenant set: no rows, although 5 exist")
		tag, err := tx.Exec(t.Context(), "UPDATE messages SET content = 'changed'")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tag.RowsAffected()).To(BeZero())
	})
	inTenant("tenant-a", func(tx pgx.Tx) { g.Expect(count(tx)).To(Equal(3)) })
	inTenant("tenant-b", func(tx pgx.Tx) { g.Expect(count(tx)).To(Equal(2)) })
	inTenant("tenant-c", func(tx pgx.Tx) { g.Expect(count(tx)).To(BeZero()) })
	inTenant("tenant-a", func(tx pgx.Tx) {
		_, err := tx.Exec(t.Context(), `INSERT INTO sessions (tenant, id, channel, chat_id, dialog_id, created_at,
			updated_at, last_message_at) VALUES ('tenant-b', 'web:c9:d1', 'web', 'c9', 'd1', now(), now(), now())`)
		g.Expect(err).To(MatchError(ContainSubstring("row-level security")), "cannot write another tenant's row")
	})
	inTenant("tenant-a", func(tx pgx.Tx) {
		_, err := tx.Exec(t.Context(), "ALTER TABLE messages DISABLE ROW LEVEL SECURITY")
		g.Expect(err).To(MatchError(ContainSubstring("must be owner")), "the app role cannot lift the policy")
	})

	// Every table with a tenant column is guarded, so a future migration
	// that forgets the policy fails here.
	rows, err := conn.Query(t.Context(), sqlTestTablesWithTenant)
	g.Expect(err).NotTo(HaveOccurred())
	type guard struct {
		Table          string
		Enabled, Force bool
		Policy         bool
	}
	guards, err := pgx.CollectRows(rows, pgx.RowToStructByPos[guard])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(guards).To(HaveLen(len(appTables)))
	for _, gd := range guards {
		g.Expect(gd).To(Equal(guard{Table: gd.Table, Enabled: true, Force: true, Policy: true}))
	}
}

func TestOpenRefusesRoleThatBypassesRLS(t *testing.T) {
	db := newDatabase(t, true)
	_, err := Open(t.Context(), dbURL(db))
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("superuser or has BYPASSRLS")))
}

// A database whose server or settings choose synchronous_commit=off (the
// throwaway test server does, hack/postgres.sh): the store's own sessions
// still commit durably, unless the DSN chooses a level.
func TestStoreCommitsDurably(t *testing.T) {
	g := NewWithT(t)
	db := newDatabase(t, true)
	g.Expect(adminExec(t.Context(), "postgres", "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET synchronous_commit = off")).To(Succeed())
	open := func(level string) string {
		cfg, err := pgxpool.ParseConfig("")
		g.Expect(err).NotTo(HaveOccurred())
		cfg.ConnConfig = appConfig(db)
		if level != "" {
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = level
		}
		st, err := OpenConfig(t.Context(), cfg)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = st.Close() }()
		var v string
		g.Expect(st.pool.QueryRow(t.Context(), "SHOW synchronous_commit").Scan(&v)).To(Succeed())
		return v
	}
	raw, err := pgx.ConnectConfig(t.Context(), appConfig(db))
	g.Expect(err).NotTo(HaveOccurred())
	var own string
	g.Expect(raw.QueryRow(t.Context(), "SHOW synchronous_commit").Scan(&own)).To(Succeed())
	_ = raw.Close(t.Context())
	g.Expect(own).To(Equal("off"), "a session of its own gets the database's setting")
	g.Expect(open("")).To(Equal("on"))
	g.Expect(open("local")).To(Equal("local"), "the DSN's choice")
}

func TestMigrateConcurrentlyAndRepeatedly(t *testing.T) {
	g := NewWithT(t)
	db := newDatabase(t, false)
	dsn := dbURL(db)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(t.Context(), dsn, appRole) })
	}
	wg.Wait()
	for _, err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(Migrate(t.Context(), dsn, appRole)).To(Succeed())

	conn, err := pgx.ConnectConfig(t.Context(), dbConfig(db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	var versions int
	g.Expect(conn.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions)).To(Succeed())
	all, err := migration.Load(migrationFiles, "migrations")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(versions).To(Equal(len(all)), "every migration recorded once")
}

// TestAppendRollsBackWhenTheDatabaseFailsMidway makes the database reject the
// second message of a batch after the first was inserted in the same
// transaction: nothing stays, and no Seq is consumed.
func TestAppendRollsBackWhenTheDatabaseFailsMidway(t *testing.T) {
	g := NewWithT(t)
	st, db := newStore(t)
	g.Expect(adminExec(t.Context(), db, sqlTestPoisonTrigger)).To(Succeed())
	ctx := store.WithTenant(t.Context(), "t1")
	sess, err := st.CreateSession(ctx, store.Session{Channel: "cli", ChatID: "me", DialogID: "default"})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = st.AppendMessages(ctx, sess.ID,
		store.Message{ID: "m1", Role: llm.RoleUser, Content: "fine"},
		store.Message{ID: "m2", Role: llm.RoleAssistant, Content: "poison"},
		store.Message{ID: "m3", Role: llm.RoleUser, Content: "fine"})
	g.Expect(err).To(MatchError(ContainSubstring("failed to append messages")))
	expectUntouched(ctx, g, st, sess)
}

// TestAppendSurvivesLostConnection kills the server process serving an
// append mid-batch: the caller gets an error, nothing is stored, and the pool
// reconnects for the next call.
func TestAppendSurvivesLostConnection(t *testing.T) {
	g := NewWithT(t)
	st, db := newStore(t)
	g.Expect(adminExec(t.Context(), db, sqlTestPoisonTrigger)).To(Succeed())
	ctx := store.WithTenant(t.Context(), "t1")
	sess, err := st.CreateSession(ctx, store.Session{Channel: "cli", ChatID: "me", DialogID: "default"})
	g.Expect(err).NotTo(HaveOccurred())

	done := make(chan error, 1)
	go func() {
		_, err := st.AppendMessages(ctx, sess.ID,
			store.Message{ID: "m1", Role: llm.RoleUser, Content: "fine"},
			store.Message{ID: "m2", Role: llm.RoleAssistant, Content: "slow"})
		done <- err
	}()
	admin, err := pgx.ConnectConfig(t.Context(), dbConfig(db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = admin.Close(context.Background()) }()
	g.Eventually(func() (int, error) {
		var killed int
		err := admin.QueryRow(t.Context(), sqlTestKillSleeper, appRole).Scan(&killed)
		return killed, err
	}).WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(1))
	g.Eventually(done).WithTimeout(10 * time.Second).Should(Receive(MatchError(ContainSubstring("failed to append messages"))))
	expectUntouched(ctx, g, st, sess)
}

// expectUntouched checks a failed append left the session empty and that the
// next append starts at Seq 1.
func expectUntouched(ctx context.Context, g Gomega, st *Store, sess store.Session) {
	n, err := st.CountMessages(ctx, sess.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(BeZero())
	after, err := st.GetSession(ctx, sess.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(sess))
	out, err := st.AppendMessages(ctx, sess.ID, store.Message{ID: "m1", Role: llm.RoleUser, Content: "fine"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out[0].Seq).To(Equal(int64(1)))
	g.Expect(out[0].Duplicate).To(BeFalse())
}

func BenchmarkSearchMessages(b *testing.B) {
	st, _ := newStore(b)
	storetest.BenchmarkSearchMessages(b, st)
}

func BenchmarkAppendAndLoadLast50(b *testing.B) {
	st, _ := newStore(b)
	storetest.BenchmarkAppendAndLoadLast50(b, st)
}

// TestIdleConnectionsKilledByTheServer terminates every pooled connection
// while it is idle, as a PostgreSQL restart does: the next reads and
// writes go out on fresh connections instead of failing with "terminating
// connection due to administrator command" (a gateway answered 500 to the
// first request after a restart), and each write happens once.
func TestIdleConnectionsKilledByTheServer(t *testing.T) {
	g := NewWithT(t)
	st, db := newStore(t)
	ctx := store.WithTenant(t.Context(), "t1")
	sess, err := st.CreateSession(ctx, store.Session{Channel: "cli", ChatID: "me", DialogID: "default"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.pool.Stat().IdleConns()).To(BeNumerically(">", 0), "a connection waits in the pool")
	for round := range 3 {
		g.Expect(adminExec(t.Context(), db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`)).To(Succeed())
		_, err := st.GetSession(ctx, sess.ID)
		g.Expect(err).NotTo(HaveOccurred(), "a read in round %d", round)
		g.Expect(adminExec(t.Context(), db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`)).To(Succeed())
		_, err = st.AppendMessages(ctx, sess.ID, store.Message{ID: fmt.Sprintf("m%d", round), Role: llm.RoleUser, Content: "after"})
		g.Expect(err).NotTo(HaveOccurred(), "a write in round %d", round)
	}
	msgs, err := st.LoadMessages(ctx, sess.ID, store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(3), "each write once")
}
