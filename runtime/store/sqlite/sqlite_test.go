package sqlite

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/internal/migration"
	"github.com/picobot/picobot/runtime/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func openTemp(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	st, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("failed to open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("failed to close store: %v", err)
		}
	})
	return st, path
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		st, _ := openTemp(t)
		return st
	})
}

func TestOpenConfiguresDatabase(t *testing.T) {
	g := NewWithT(t)
	st, _ := openTemp(t)
	pragmas := []struct {
		name string
		db   *sql.DB
		want string
	}{
		{"journal_mode", st.writer, "wal"},
		{"foreign_keys", st.writer, "1"},
		{"busy_timeout", st.writer, "5000"},
		{"foreign_keys", st.reader, "1"},
		{"query_only", st.reader, "1"},
		{"busy_timeout", st.reader, "5000"},
	}
	for _, p := range pragmas {
		var got string
		g.Expect(p.db.QueryRowContext(t.Context(), "PRAGMA "+p.name).Scan(&got)).To(Succeed())
		g.Expect(got).To(Equal(p.want), p.name)
	}
	g.Expect(st.writer.Stats().MaxOpenConnections).To(Equal(1), "a single writer")
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	g := NewWithT(t)
	// An awkward workspace path: spaces and URI delimiters must survive.
	dir := filepath.Join(t.TempDir(), "my work?space #1 100%")
	g.Expect(os.Mkdir(dir, 0o755)).To(Succeed())
	path := filepath.Join(dir, FileName)
	ctx := store.WithTenant(t.Context(), "t1")

	st, err := Open(t.Context(), path)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = st.CreateSession(ctx, store.Session{Channel: "cli", ChatID: "me", DialogID: "default"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Close()).To(Succeed())

	st, err = Open(t.Context(), path) // migrations already applied: a no-op
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Close()).To(Succeed()) }()
	_, err = st.GetSession(ctx, "cli:me:default")
	g.Expect(err).NotTo(HaveOccurred())
	var versions int
	g.Expect(st.reader.QueryRowContext(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions)).To(Succeed())
	all, err := migration.Load(migrationFiles, "migrations")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(versions).To(Equal(len(all)), "every migration recorded once")
	g.Expect(path).To(BeAnExistingFile())
}

// TestAppendRollsBackWhenTheDatabaseFailsMidway makes the database itself
// reject the second message of a batch (after the first was inserted in the
// same transaction), which input validation cannot catch: nothing stays.
func TestAppendRollsBackWhenTheDatabaseFailsMidway(t *testing.T) {
	g := NewWithT(t)
	st, _ := openTemp(t)
	ctx := store.WithTenant(t.Context(), "t1")
	_, err := st.writer.ExecContext(t.Context(), `CREATE TRIGGER poison BEFORE INSERT ON messages
WHEN NEW.content = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned message'); END`)
	g.Expect(err).NotTo(HaveOccurred())
	sess, err := st.CreateSession(ctx, store.Session{Channel: "cli", ChatID: "me", DialogID: "default"})
	g.Expect(err).NotTo(HaveOccurred())

	_, err = st.AppendMessages(ctx, sess.ID,
		store.Message{ID: "m1", Role: llm.RoleUser, Content: "fine"},
		store.Message{ID: "m2", Role: llm.RoleAssistant, Content: "poison"},
		store.Message{ID: "m3", Role: llm.RoleUser, Content: "fine"})
	g.Expect(err).To(MatchError(ContainSubstring("failed to append messages")))

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

// TestLeaseExpiryFollowsTheStoreClock: embedded mode judges expiry by the
// injected clock, the only clock of its single process.
func TestLeaseExpiryFollowsTheStoreClock(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := Open(t.Context(), filepath.Join(t.TempDir(), FileName), WithClock(clk))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(st.Close()).To(Succeed()) }()
	ctx := store.WithTenant(t.Context(), "t1")

	ok, err := st.AcquireLease(ctx, "cli:me:default", "a", time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	clk.SetTime(clk.Now().Add(59 * time.Second))
	ok, err = st.AcquireLease(ctx, "cli:me:default", "b", time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse(), "one second left")
	clk.SetTime(clk.Now().Add(time.Second))
	ok, err = st.AcquireLease(ctx, "cli:me:default", "b", time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue(), "expired exactly at the ttl")
}

func BenchmarkSearchMessages(b *testing.B) {
	st, _ := openTemp(b)
	storetest.BenchmarkSearchMessages(b, st)
}

func BenchmarkAppendAndLoadLast50(b *testing.B) {
	st, _ := openTemp(b)
	storetest.BenchmarkAppendAndLoadLast50(b, st)
}

func BenchmarkAuditAppend(b *testing.B) {
	st, _ := openTemp(b)
	storetest.BenchmarkAuditAppend(b, st)
}
