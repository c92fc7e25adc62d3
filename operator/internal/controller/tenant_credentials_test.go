package controller

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/picobot/picobot/operator/internal/podspec"
	"github.com/picobot/picobot/operator/internal/tenantcreds"
	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/runtime/store/postgres/pgtest"
	"github.com/picobot/picobot/test/services"
)

// migratedDatabase makes a fresh, migrated database on the test PostgreSQL
// and returns its owner's DSN and the DSN without a user that tenant roles
// log in to.
func migratedDatabase(t *testing.T) (owner, tenant string) {
	t.Helper()
	db := pgtest.New(t, "picobot_creds", "", "")
	return db.Owner, db.Base
}

// tenantsWithAgents runs the operator's reconcilers with per-tenant
// credentials (role and user names starting with prefix) on a fresh
// database and the Redis at redisURL, and gives each of n new namespaces an
// Agent; it returns the schema owner's DSN (whose password must reach no
// namespace) and the namespaces. The shared S3 bucket setting must not
// reach any namespace either.
func tenantsWithAgents(t *testing.T, redisURL, prefix string, n int) (ownerDSN string, namespaces []string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ownerDSN, tenantDSN := migratedDatabase(t)
	creds, err := tenantcreds.New(ctx, tenantcreds.Config{PostgresOwnerURL: ownerDSN, PostgresURL: tenantDSN, RedisAdminURL: redisURL,
		RedisURL: redisURL, Key: []byte("k8s-test-derivation-key-0123456789abcdef"), Shared: map[string]string{"PICOBOT_S3_BUCKET": "picobot"},
		RolePrefix: fmt.Sprintf("%s_%d_", prefix, os.Getpid()), UserPrefix: fmt.Sprintf("%s-%d-", prefix, os.Getpid())})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = creds.Close() })
	namespaces = make([]string, n)
	for i := range namespaces {
		ns := newRuntimeNamespace(t)
		namespaces[i] = ns
		t.Cleanup(func() { _ = creds.Drop(context.Background(), ns) })
	}
	startRuntimeManagerIn(t, namespaces, func(rc *RuntimeConfig) { rc.Tenants = creds; rc.BlobURL = "http://blobs.example:8090" })
	for _, ns := range namespaces {
		g.Expect(k8s.Create(ctx, secret(ns, "openai", "apiKey"))).To(Succeed())
		g.Expect(k8s.Create(ctx, openAIAgent(ns, "helper", "openai"))).To(Succeed())
	}
	return ownerDSN, namespaces
}

// connectionSecret waits for the connection Secret the operator writes
// into ns and returns its data.
func connectionSecret(t *testing.T, ns string) map[string][]byte {
	t.Helper()
	s := &corev1.Secret{}
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: podspec.ConnectionSecret}, s)).To(Succeed())
		g.Expect(s.Data).To(HaveKey("PICOBOT_POSTGRES_URL"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	return s.Data
}

// TestTenantCredentialsFromTheOperatorsSecret runs the operator's
// reconcilers on a real API server with per-tenant credentials, takes
// tenant A's credentials from the connection Secret the operator wrote into
// A's namespace, and attacks tenant B's data with them directly on
// PostgreSQL and Redis: every attempt is refused by the server (or sees
// nothing), while A works on its own data. When A's last Agent and pod are
// gone, A's credentials stop working and its Secret goes; B's keep working.
func TestTenantCredentialsFromTheOperatorsSecret(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	redisURL := services.RedisFor(t)
	ownerDSN, nss := tenantsWithAgents(t, redisURL, "pbop", 2)
	nsA, nsB := nss[0], nss[1]
	a, b := connectionSecret(t, nsA), connectionSecret(t, nsB)
	g.Expect(a).To(HaveLen(3), "the tenant's PostgreSQL and Redis URLs and the blob grant service's; no S3 setting")
	g.Expect(a).To(HaveKeyWithValue("PICOBOT_BLOB_URL", []byte("http://blobs.example:8090")))
	g.Expect(a).To(HaveKey("PICOBOT_POSTGRES_URL"))
	g.Expect(a).To(HaveKey("PICOBOT_REDIS_URL"))
	ownerURL, _ := url.Parse(ownerDSN)
	ownerPW, _ := ownerURL.User.Password()
	for k, v := range a {
		g.Expect(string(v)).NotTo(ContainSubstring(ownerPW), k)
	}
	for _, k := range []string{"PICOBOT_POSTGRES_URL", "PICOBOT_REDIS_URL"} {
		g.Expect(a[k]).NotTo(Equal(b[k]), "%s is A's own", k)
	}

	// B's data, written with B's credentials as B's pods do, and a wake of
	// B's on the operator's shared stream.
	stB, err := postgres.Open(ctx, string(b["PICOBOT_POSTGRES_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = stB.Close() })
	sessB, err := stB.CreateSession(store.WithTenant(ctx, nsB), store.Session{Channel: "web", ChatID: "secret-chat", DialogID: "d1"})
	g.Expect(err).NotTo(HaveOccurred())
	busB, err := redisbus.Open(string(b["PICOBOT_REDIS_URL"]), redisbus.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = busB.Close() })
	chatB := wake.ChatStream(nsB, "helper", "web", "secret-chat")
	g.Expect(busB.Publish(ctx, chatB, bus.Message{ID: "m1", Payload: []byte("B's secret")})).To(Succeed())
	g.Expect(wake.QueueOutbound(ctx, busB, wake.OutboundRequest{ID: "o1", Tenant: nsB, Message: wake.OutboundMessage{Target: "web:x", Text: "B's reply"}})).To(Succeed())
	g.Expect(busB.Client().Set(ctx, wake.OwnerKey(nsB, "helper", "web", "secret-chat"), "pod-b", time.Minute).Err()).To(Succeed())
	admin := redis.NewClient(must1(redis.ParseURL(redisURL)))
	t.Cleanup(func() { _ = admin.Close() })
	adminBus := redisbus.New(admin, redisbus.Options{})
	g.Expect(wake.Publish(ctx, adminBus, wake.Wake{Tenant: nsB, Agent: "helper", Channel: "web", ChatKey: "secret-chat"})).To(Succeed())

	attackPostgres(t, string(a["PICOBOT_POSTGRES_URL"]), nsA, nsB, sessB.ID, pgUser(t, b["PICOBOT_POSTGRES_URL"]))
	attackRedis(t, string(a["PICOBOT_REDIS_URL"]), nsA, nsB, chatB)

	// A's last Agent goes, and its pods with it (the garbage collector's
	// work, which envtest does not run): A's credentials are revoked and
	// its Secret deleted. B's still work.
	g.Expect(k8s.Delete(ctx, openAIAgent(nsA, "helper", "openai"))).To(Succeed())
	g.Eventually(func() error {
		return k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(nsA))
	}).WithTimeout(eventually).Should(Succeed())
	g.Eventually(func() bool {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: nsA, Name: podspec.ConnectionSecret}, &corev1.Secret{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "A's connection Secret is deleted")
	g.Eventually(func() error {
		c, err := pgx.Connect(ctx, string(a["PICOBOT_POSTGRES_URL"]))
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	}).WithTimeout(eventually).Should(MatchError(ContainSubstring("password authentication failed")))
	ra := redis.NewClient(must1(redis.ParseURL(string(a["PICOBOT_REDIS_URL"]))))
	defer func() { _ = ra.Close() }()
	g.Expect(ra.Ping(ctx).Err()).To(MatchError(HavePrefix("WRONGPASS")))
	g.Expect(busB.Client().Ping(ctx).Err()).To(Succeed())
	_, err = stB.GetSession(store.WithTenant(ctx, nsB), sessB.ID)
	g.Expect(err).NotTo(HaveOccurred())
}

// TestTenantUsersComeBackAfterARedisRestart kills a Redis server (which
// keeps ACL users in memory) under the operator's reconcilers: the tenant's
// Redis user is provisioned again, so the credentials in its Secret log in
// once more. The wiring is the operator's own (the connection wrapped for
// blob grants): a wrapper that hid the restart watcher once left every
// tenant locked out after a restart.
func TestTenantUsersComeBackAfterARedisRestart(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	srv := services.OwnRedis(t, false)
	_, nss := tenantsWithAgents(t, srv.URL, "pbrs", 1)
	ns := nss[0]
	tenant := redis.NewClient(must1(redis.ParseURL(string(connectionSecret(t, ns)["PICOBOT_REDIS_URL"]))))
	t.Cleanup(func() { _ = tenant.Close() })
	g.Expect(tenant.Ping(ctx).Err()).To(Succeed())

	g.Expect(srv.Kill()).To(Succeed())
	g.Expect(srv.Restart()).To(Succeed())
	g.Eventually(func() error { return tenant.Ping(ctx).Err() }).WithTimeout(eventually).WithPolling(poll).Should(Succeed(),
		"the tenant's Redis user is provisioned again after the restart")
}

// TestRotatingTenantCredentials annotates a namespace's connection Secret
// as a tenant or the platform would after a leak: the operator moves the
// namespace to new passwords, the old ones are refused by PostgreSQL and
// Redis, the new ones in the Secret work, the session pods started with the
// old Secret are replaced, and the other tenant keeps its credentials.
func TestRotatingTenantCredentials(t *testing.T) {
	needAPIServer(t)
	g := NewWithT(t)
	ctx := context.Background()
	_, nss := tenantsWithAgents(t, services.RedisFor(t), "pbrot", 2)
	nsA, nsB := nss[0], nss[1]
	oldA, b := connectionSecret(t, nsA), connectionSecret(t, nsB)
	stale := sessionPod(nsA, "stale")
	g.Expect(k8s.Create(ctx, stale)).To(Succeed())

	s := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsA, Name: podspec.ConnectionSecret}, s)).To(Succeed())
	s.Annotations = map[string]string{podspec.AnnotationRotateCredentials: "leak-1"}
	g.Expect(k8s.Update(ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsA, Name: podspec.ConnectionSecret}, s)).To(Succeed())
		g.Expect(s.Annotations).To(HaveKeyWithValue(podspec.AnnotationCredentialsRotated, "leak-1"))
	}).WithTimeout(eventually).WithPolling(poll).Should(Succeed())
	newA := s.Data
	for _, k := range []string{"PICOBOT_POSTGRES_URL", "PICOBOT_REDIS_URL"} {
		g.Expect(newA[k]).NotTo(Equal(oldA[k]), "%s has a new password", k)
	}

	_, err := pgx.Connect(ctx, string(oldA["PICOBOT_POSTGRES_URL"]))
	g.Expect(err).To(MatchError(ContainSubstring("password authentication failed")), "the old PostgreSQL password is refused")
	oldRedis := redis.NewClient(must1(redis.ParseURL(string(oldA["PICOBOT_REDIS_URL"]))))
	t.Cleanup(func() { _ = oldRedis.Close() })
	g.Expect(oldRedis.Ping(ctx).Err()).To(MatchError(HavePrefix("WRONGPASS")), "the old Redis password is refused")
	for _, data := range []map[string][]byte{newA, b} {
		c, err := pgx.Connect(ctx, string(data["PICOBOT_POSTGRES_URL"]))
		g.Expect(err).NotTo(HaveOccurred())
		_ = c.Close(ctx)
		r := redis.NewClient(must1(redis.ParseURL(string(data["PICOBOT_REDIS_URL"]))))
		g.Expect(r.Ping(ctx).Err()).To(Succeed())
		_ = r.Close()
	}
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(stale), &corev1.Pod{}))
	}).WithTimeout(eventually).WithPolling(poll).Should(BeTrue(), "the pod started with the old Secret is replaced")

	// The same request again changes nothing; a pod started since stays.
	fresh := sessionPod(nsA, "fresh")
	time.Sleep(time.Second) // a creation second after the rotation's
	g.Expect(k8s.Create(ctx, fresh)).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsA, Name: podspec.ConnectionSecret}, s)).To(Succeed())
	s.Labels["touched"] = "yes"
	g.Expect(k8s.Update(ctx, s)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(fresh), &corev1.Pod{})).To(Succeed())
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: nsA, Name: podspec.ConnectionSecret}, s)).To(Succeed())
		g.Expect(s.Data).To(Equal(newA))
	}).WithTimeout(2 * time.Second).WithPolling(poll).Should(Succeed())
}

// sessionPod is a session pod of ns as the operator labels them.
func sessionPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{podspec.LabelName: "picobot", podspec.LabelComponent: podspec.ComponentSession}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runtime", Image: "registry.example/picobot:test"}}}}
}

// pgUser is the user of a PostgreSQL URL.
func pgUser(t *testing.T, raw []byte) string {
	t.Helper()
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

// attackPostgres logs in with tenant A's DSN and goes after B's rows with
// any SQL: set_config, SET ROLE, the mapping, writes as B.
func attackPostgres(t *testing.T, dsnA, nsA, nsB, sessB, roleB string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	stA, err := postgres.Open(ctx, dsnA)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = stA.Close() }()
	mine, err := stA.CreateSession(store.WithTenant(ctx, nsA), store.Session{Channel: "web", ChatID: "own", DialogID: "d1"})
	g.Expect(err).NotTo(HaveOccurred(), "A works on its own data")
	_, err = stA.GetSession(store.WithTenant(ctx, nsA), mine.ID)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = stA.GetSession(store.WithTenant(ctx, nsB), sessB)
	g.Expect(err).To(MatchError(store.ErrNotFound), "the store asked for B's session as B")

	conn, err := pgx.Connect(ctx, dsnA)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	count := func(sql string) int {
		var n int
		g.Expect(conn.QueryRow(ctx, sql).Scan(&n)).To(Succeed(), sql)
		return n
	}
	_, err = conn.Exec(ctx, `SELECT set_config('picobot.tenant', $1, false)`, nsB)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(count(`SELECT count(*) FROM sessions WHERE tenant <> '`+nsA+`'`)).To(BeZero(), "set_config to B shows none of B's rows")
	g.Expect(count(`SELECT count(*) FROM sessions`)).To(Equal(1), "only A's own session")
	for name, sql := range map[string]string{
		"SET ROLE to B":                  "SET ROLE " + pgx.Identifier{roleB}.Sanitize(),
		"SET SESSION AUTHORIZATION B":    "SET SESSION AUTHORIZATION " + pgx.Identifier{roleB}.Sanitize(),
		"SET ROLE to the superuser":      "SET ROLE postgres",
		"read the tenant mapping":        "SELECT count(*) FROM tenant_roles",
		"rewrite the tenant mapping":     "UPDATE tenant_roles SET tenant_name = '" + nsB + "'",
		"disable row-level security":     "ALTER TABLE sessions DISABLE ROW LEVEL SECURITY",
		"create a role":                  "CREATE ROLE mine LOGIN",
		"grant itself B's role":          "GRANT " + pgx.Identifier{roleB}.Sanitize() + " TO CURRENT_USER",
		"replace the policies' function": "CREATE OR REPLACE FUNCTION public.picobot_tenant() RETURNS text LANGUAGE sql AS $$SELECT '" + nsB + "'$$",
		"write a row as B": `INSERT INTO sessions (tenant, id, channel, chat_id, dialog_id, created_at, updated_at, last_message_at)
			VALUES ('` + nsB + `', 'web:x:y', 'web', 'x', 'y', now(), now(), now())`,
		"move its own row to B": `UPDATE sessions SET tenant = '` + nsB + `'`,
	} {
		_, err := conn.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		g.Expect(errors.As(err, &pgErr)).To(BeTrue(), "%s: %v", name, err)
		g.Expect(pgErr.Code).To(Equal("42501"), "%s: %v", name, err) // insufficient_privilege, row-level security violations included
	}
	for _, sql := range []string{
		`UPDATE sessions SET title = 'defaced' WHERE tenant = '` + nsB + `'`,
		`DELETE FROM sessions WHERE tenant = '` + nsB + `'`,
	} {
		tag, err := conn.Exec(ctx, sql)
		g.Expect(err).NotTo(HaveOccurred(), sql)
		g.Expect(tag.RowsAffected()).To(BeZero(), sql)
	}
}

// attackRedis logs in with tenant A's Redis URL and reads, writes and
// subscribes to B's keys, B's outbound stream and the shared streams.
func attackRedis(t *testing.T, urlA, nsA, nsB, chatB string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	ra := redis.NewClient(must1(redis.ParseURL(urlA)))
	defer func() { _ = ra.Close() }()
	refused := func(name string, err error) {
		g.Expect(err).To(MatchError(HavePrefix("NOPERM")), name)
	}
	refused("XRANGE B's chat", ra.XRange(ctx, chatB, "-", "+").Err())
	refused("XADD B's chat", ra.XAdd(ctx, &redis.XAddArgs{Stream: chatB, Values: []any{"p", "x"}}).Err())
	refused("XRANGE B's outbound", ra.XRange(ctx, wake.OutboundStream(nsB), "-", "+").Err())
	refused("XADD B's outbound", ra.XAdd(ctx, &redis.XAddArgs{Stream: wake.OutboundStream(nsB), Values: []any{"p", "x"}}).Err())
	refused("XREADGROUP B's wakes", ra.XReadGroup(ctx, &redis.XReadGroupArgs{Group: wake.GroupPods, Consumer: "a",
		Streams: []string{wake.Stream(nsB, "helper"), ">"}, Count: 1, Block: -1}).Err())
	refused("GET B's owner hint", ra.Get(ctx, wake.OwnerKey(nsB, "helper", "web", "secret-chat")).Err())
	refused("SET B's owner hint", ra.Set(ctx, wake.OwnerKey(nsB, "helper", "web", "secret-chat"), "pod-a", 0).Err())
	refused("HGETALL B's pods", ra.HGetAll(ctx, wake.PodsKey(nsB, "helper")).Err())
	for _, shared := range []string{wake.Notices, "picobot/outbound"} {
		refused("XRANGE "+shared, ra.XRange(ctx, shared, "-", "+").Err())
		refused("XADD "+shared, ra.XAdd(ctx, &redis.XAddArgs{Stream: shared, Values: []any{"p", "x"}}).Err())
		refused("XREADGROUP "+shared, ra.XReadGroup(ctx, &redis.XReadGroupArgs{Group: wake.GroupOperator, Consumer: "a",
			Streams: []string{shared, ">"}, Count: 1, Block: -1}).Err())
	}
	refused("KEYS", ra.Keys(ctx, "*").Err())
	refused("SCAN", ra.Scan(ctx, 0, "", 10).Err())
	ps := ra.Subscribe(ctx, wake.EventChannel(nsB, "helper", "web", "secret-chat"))
	_, err := ps.Receive(ctx)
	_ = ps.Close()
	refused("SUBSCRIBE B's events", err)
	ps = ra.PSubscribe(ctx, "*")
	_, err = ps.Receive(ctx)
	_ = ps.Close()
	refused("PSUBSCRIBE *", err)

	// A's own streams work: its pods queue outbound messages and read
	// their agent's wakes.
	busA := redisbus.New(ra, redisbus.Options{})
	g.Expect(wake.QueueOutbound(ctx, busA, wake.OutboundRequest{ID: "oa", Tenant: nsA, Message: wake.OutboundMessage{Target: "web:y", Text: "A's"}})).To(Succeed())
	n, err := busA.Len(ctx, wake.OutboundStream(nsA))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(int64(1)))
	_, err = busA.Fetch(ctx, wake.Stream(nsA, "helper"), wake.GroupPods, "pod-a", bus.FetchOptions{Count: 1})
	g.Expect(err).NotTo(HaveOccurred())
}

// must1 returns v, panicking on err (for set-up that cannot fail in a
// working test environment).
func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
