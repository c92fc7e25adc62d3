package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/storetest"
)

// TestMemorySearchUnderRowLevelSecurity checks the search tables below the
// store: as the application role without a tenant, the postings and counts
// show nothing, and with a tenant only that tenant's rows.
func TestMemorySearchUnderRowLevelSecurity(t *testing.T) {
	g := NewWithT(t)
	st, db := newStore(t)
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		_, err := st.PutMemory(store.WithTenant(t.Context(), tenant), store.Memory{Agent: "helper", Key: "food",
			Content: "用户最喜欢四川火锅", Category: store.MemoryKnowledge})
		g.Expect(err).NotTo(HaveOccurred())
	}
	conn, err := pgx.ConnectConfig(t.Context(), appConfig(db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	count := func(tenant string) int {
		tx, err := conn.Begin(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { g.Expect(tx.Rollback(context.Background())).To(Succeed()) }()
		if tenant != "" {
			_, err = tx.Exec(t.Context(), sqlSetTenant, tenant)
			g.Expect(err).NotTo(HaveOccurred())
		}
		var postings, stats int
		g.Expect(tx.QueryRow(t.Context(), "SELECT count(*) FROM memory_postings WHERE term = '火锅'").Scan(&postings)).To(Succeed())
		g.Expect(tx.QueryRow(t.Context(), "SELECT count(*) FROM memory_term_stats WHERE term = '火锅'").Scan(&stats)).To(Succeed())
		g.Expect(postings).To(Equal(stats), "one posting per memory, one count row per tenant")
		return postings
	}
	g.Expect(count("")).To(BeZero(), "no tenant: nothing, although two rows match")
	g.Expect(count("tenant-a")).To(Equal(1))
	g.Expect(count("tenant-c")).To(BeZero())
}

// benchRecall runs storetest.BenchmarkRecallAt on a fresh database, which
// PostgreSQL analyses after seeding, as autovacuum would.
func benchRecall(b *testing.B, n int) {
	st, db := newStore(b)
	storetest.BenchmarkRecallAt(b, st, n, func() {
		if err := adminExec(b.Context(), db, "VACUUM ANALYZE memories, memory_postings, memory_term_stats"); err != nil {
			b.Fatal(err)
		}
	})
}

func BenchmarkRecall100k(b *testing.B) { benchRecall(b, 100_000) }

// BenchmarkRecall1M needs PICOBOT_BENCH_1M=1.
func BenchmarkRecall1M(b *testing.B) {
	storetest.RequireLargeBenchmarks(b)
	benchRecall(b, 1_000_000)
}

func BenchmarkRecallQuality(b *testing.B) {
	st, _ := newStore(b)
	storetest.BenchmarkRecallQuality(b, st)
}

// TestMemoryTermStatsFollowWrites checks the counts the search plans with:
// inserts, overwrites, deletes and imports move them, per tenant and agent.
func TestMemoryTermStatsFollowWrites(t *testing.T) {
	g := NewWithT(t)
	st, _ := newStore(t)
	ctx := store.WithTenant(t.Context(), "tenant-a")
	docs := func(ctx context.Context, agent, term string) int64 {
		out, err := many(ctx, st, scanTermDocs, sqlTermDocs, agent, []string{term})
		g.Expect(err).NotTo(HaveOccurred())
		if len(out) == 0 {
			return 0
		}
		return out[0].docs
	}
	put := func(ctx context.Context, key, content string) {
		_, err := st.PutMemory(ctx, store.Memory{Agent: "helper", Key: key, Content: content, Category: store.MemoryKnowledge})
		g.Expect(err).NotTo(HaveOccurred())
	}
	put(ctx, "a", "四川火锅")
	put(ctx, "b", "重庆火锅 hotpot")
	put(store.WithTenant(t.Context(), "tenant-b"), "c", "火锅")
	g.Expect(docs(ctx, "helper", "火锅")).To(Equal(int64(2)))
	g.Expect(docs(ctx, "helper", "hotpot")).To(Equal(int64(1)))
	g.Expect(docs(ctx, "other", "火锅")).To(BeZero())
	put(ctx, "b", "hotpot only")
	g.Expect(docs(ctx, "helper", "火锅")).To(Equal(int64(1)), "an overwrite moves the counts")
	g.Expect(st.DeleteMemory(ctx, "helper", "a")).To(Succeed())
	g.Expect(docs(ctx, "helper", "火锅")).To(BeZero())
	_, err := st.ImportMemories(ctx, []store.Memory{
		{Agent: "helper", Key: "b", Content: "火锅", Category: store.MemoryKnowledge},
		{Agent: "helper", Key: "d", Content: "火锅 again", Category: store.MemoryKnowledge},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(docs(ctx, "helper", "火锅")).To(Equal(int64(2)))
	g.Expect(docs(ctx, "helper", "hotpot")).To(BeZero())
	n, err := st.PruneMemories(ctx, "helper", store.MemoryKnowledge, time.Now().Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(int64(2)))
	g.Expect(docs(ctx, "helper", "火锅")).To(BeZero())
	g.Expect(docs(store.WithTenant(t.Context(), "tenant-b"), "helper", "火锅")).To(Equal(int64(1)))
}
