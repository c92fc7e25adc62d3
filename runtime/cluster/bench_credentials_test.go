package cluster

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/agent"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/provider"
	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/runtime/session"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/runtime/store/postgres/pgtest"
	"github.com/picobot/picobot/runtime/turn"
)

// benchSessions is how many chats are live at once.
const benchSessions = 100

// BenchmarkTurns100Sessions measures turns of 100 live chats, each served
// by a runtime of its own (as session pods serve them) over real PostgreSQL
// and Redis, logged in as the platform's shared role and Redis user
// ("shared", what pods connected with before) and as the tenant's own
// PostgreSQL role and Redis ACL user ("tenant", what the operator now
// gives them): the difference is the per-turn cost of the tenant
// credential path (row-level security through picobot_tenant()'s lookup,
// ACL checks). One op is one message to each of the 100 chats; the
// messages of all ops are queued at once, and ms/turn is the time until
// every one is answered divided by the turns. Compare the medians of the
// shared-N and tenant-N rows.
func BenchmarkTurns100Sessions(b *testing.B) {
	if skipReason != "" {
		b.Skip(skipReason)
	}
	ctx := context.Background()
	redis.SetLogger(quietRedis{})
	ownerDSN, appDSN, tenantBase := benchDatabase(b)
	tenant := fmt.Sprintf("bench%d", time.Now().UnixNano())
	roles, err := postgres.NewTenantRoles(ctx, ownerDSN, postgres.TenantRolesOptions{Prefix: fmt.Sprintf("pbb_%d_", os.Getpid())})
	if err != nil {
		b.Fatal(err)
	}
	defer roles.Close()
	role, err := roles.Ensure(ctx, tenant, func(string, int64) (string, error) { return "pw-bench-role", nil })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = roles.Drop(context.Background(), tenant) }()
	tenantDSN, _ := url.Parse(tenantBase)
	tenantDSN.User = url.UserPassword(role.Role, role.Password)

	adminOpts, err := redis.ParseURL(redisURL)
	if err != nil {
		b.Fatal(err)
	}
	admin := redis.NewClient(adminOpts)
	defer func() { _ = admin.Close() }()
	users := redisbus.NewTenantUsers(admin, fmt.Sprintf("pbb-%d-", os.Getpid()))
	if err := users.Ensure(ctx, tenant, "pw-bench-user"); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = users.Drop(context.Background(), tenant) }()
	tenantRedis := *adminOpts
	tenantRedis.Username, tenantRedis.Password = users.UserName(tenant), "pw-bench-user"

	llm := fakellm.New()
	defer llm.Close()
	llm.Respond(func(fakellm.Recorded) fakellm.Turn { return fakellm.Turn{Text: "ok"} })
	// A fresh server's first round is slower whatever logs in (plans,
	// caches), and the machine drifts: a warm-up round first, then the two
	// credential paths in turn, so each pair is measured side by side.
	shared := func(b *testing.B) { runTurns(b, tenant, "shared", appDSN, adminOpts, admin, llm) }
	own := func(b *testing.B) { runTurns(b, tenant, "tenant", tenantDSN.String(), &tenantRedis, admin, llm) }
	b.Run("warmup", shared)
	for i := range 3 {
		b.Run(fmt.Sprintf("shared-%d", i+1), shared)
		b.Run(fmt.Sprintf("tenant-%d", i+1), own)
	}
}

// runTurns serves benchSessions chats of tenant with runtimes connected
// with pg and rdb, and times rounds of one message to each.
func runTurns(b *testing.B, tenant, name, pg string, rdb *redis.Options, admin *redis.Client, llm *fakellm.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := postgres.Open(ctx, pg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	p, err := provider.New(provider.Config{Provider: provider.OpenAI, Model: "m", BaseURL: llm.URL(), APIKey: "k"})
	if err != nil {
		b.Fatal(err)
	}
	gw := redisbus.New(admin, redisbus.Options{})
	finals := make(chan struct{}, b.N*benchSessions+benchSessions)
	var runtimes sync.WaitGroup
	var closers []func()
	defer func() {
		cancel()
		runtimes.Wait()
		for _, c := range closers {
			c()
		}
	}()
	// Chats of their own: the benchmark calls this more than once, and
	// message ids seen before would be deduplicated.
	run := time.Now().UnixNano()
	chats := make([]string, benchSessions)
	for i := range chats {
		chats[i] = fmt.Sprintf("%s-%d-%d", name, run, i)
		pod := "pod-" + chats[i]
		// A pod's own connection, as each session pod has.
		pb := redisbus.New(redis.NewClient(rdb), redisbus.Options{})
		closers = append(closers, func() { _ = pb.Close(); _ = pb.Client().Close() })
		mgr := session.NewManager(session.Config{Store: st, Loop: &agent.Loop{Provider: p}, Agent: "helper", Holder: pod,
			Timeline: session.StoreTimeline{Store: st}, LeaseTTL: DefaultLeaseTTL})
		rt := NewRuntime(RuntimeConfig{Tenant: tenant, Agent: "helper", Pod: pod, Bus: pb, Redis: pb.Client(), Store: st,
			Manager: mgr, IdleTimeout: time.Hour})
		runtimes.Go(func() { _ = rt.Run(ctx) })
		ps, events, err := signals{admin}.subscribe(ctx, eventChannel(tenant, "helper", "web", chats[i]))
		if err != nil {
			b.Fatal(err)
		}
		closers = append(closers, func() { _ = ps.Close() })
		go func() {
			for e := range events {
				if e.Kind == string(turn.EventFinal) {
					finals <- struct{}{}
				}
			}
		}()
	}
	send := func(n int, wakeUp bool) {
		for _, chat := range chats {
			id := fmt.Sprintf("%s-%d", chat, n)
			payload := fmt.Appendf(nil, `{"id":%q,"channel":"web","chat_key":%q,"text":"hello %d"}`, id, chat, n)
			if err := gw.Publish(ctx, chatStream(tenant, "helper", "web", chat), bus.Message{ID: id, Payload: payload}); err != nil {
				b.Fatal(err)
			}
			if wakeUp {
				if err := wake.Publish(ctx, gw, Wake{Tenant: tenant, Agent: "helper", Channel: "web", ChatKey: chat}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	answered := func(turns int) {
		for range turns {
			select {
			case <-finals:
			case <-time.After(2 * time.Minute):
				b.Fatal("not every message was answered")
			}
		}
	}
	send(0, true) // every runtime claims its chat
	answered(benchSessions)
	b.ResetTimer()
	start := time.Now()
	// Every chat gets b.N messages at once, so the runtimes are never idle
	// waiting for the next: the time is what the turns cost, not the
	// latency of one.
	for i := range b.N {
		send(i+1, false)
	}
	answered(b.N * benchSessions)
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N*benchSessions), "ms/turn")
}

// quietRedis drops go-redis's internal log lines (the runtimes' claims ask
// for a minimum idle time it rounds up, and says so on every call).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// benchDatabase makes a migrated database with an application role.
func benchDatabase(b *testing.B) (owner, app, base string) {
	db := pgtest.New(b, "picobot_bench", fmt.Sprintf("pbb_app_%d", os.Getpid()), "bench")
	return db.Owner, db.App, db.Base
}
