package tenantcreds

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/postgres"
	"github.com/picobot/picobot/test/services"
)

var (
	pgAdmin, redisURL, skipReason string
)

func TestMain(m *testing.M) {
	code := func() int {
		dsn, stopPG, err := services.Postgres()
		if err == nil {
			defer stopPG()
			var stopRedis func()
			redisURL, stopRedis, err = services.Redis()
			if err == nil {
				defer stopRedis()
			}
		}
		if err != nil {
			reason, fatal := services.Unavailable("PostgreSQL and Redis", err)
			if fatal {
				fmt.Fprintln(os.Stderr, reason)
				return 1
			}
			skipReason = reason
		}
		pgAdmin = dsn
		return m.Run()
	}()
	os.Exit(code)
}

// newConfig makes a migrated database and returns a Config on it.
func newConfig(t *testing.T) Config {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, pgAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	name := fmt.Sprintf("picobot_tenantcreds_%d_%s", os.Getpid(), bus.NewID()[:6])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(pgAdmin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	if err := postgres.Migrate(ctx, u.String(), ""); err != nil {
		t.Fatal(err)
	}
	tenantURL := *u
	tenantURL.User = nil
	return Config{PostgresOwnerURL: u.String(), PostgresURL: tenantURL.String(), RedisAdminURL: redisURL, RedisURL: redisURL,
		Key: []byte("0123456789abcdef0123456789abcdef"), Shared: map[string]string{"PICOBOT_S3_BUCKET": "picobot"},
		RolePrefix: fmt.Sprintf("pbtc_%d_%s_", os.Getpid(), bus.NewID()[:4]), UserPrefix: fmt.Sprintf("pbtc-%s-", bus.NewID()[:6])}
}

// TestSecretDataCarriesOnlyTheTenantsCredentials provisions two tenants and
// uses A's Secret data as A's pods would: it reaches A's rows and keys, is
// refused B's by both servers, and holds no admin credential.
func TestSecretDataCarriesOnlyTheTenantsCredentials(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	cfg := newConfig(t)
	c, err := New(ctx, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		g.Expect(c.Drop(context.Background(), "team-a")).To(Succeed())
		g.Expect(c.Drop(context.Background(), "team-b")).To(Succeed())
		g.Expect(c.Close()).To(Succeed())
	})
	a, err := c.SecretData(ctx, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := c.SecretData(ctx, "team-b")
	g.Expect(err).NotTo(HaveOccurred())
	again, err := c.SecretData(ctx, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(a), "SecretData is idempotent")
	g.Expect(a).To(HaveKeyWithValue("PICOBOT_S3_BUCKET", []byte("picobot")))
	g.Expect(a).To(HaveLen(3))

	admin, _ := url.Parse(pgAdmin)
	adminPW, _ := admin.User.Password()
	ropts, err := redis.ParseURL(redisURL)
	g.Expect(err).NotTo(HaveOccurred())
	for _, v := range a {
		g.Expect(string(v)).NotTo(ContainSubstring(adminPW), "no PostgreSQL owner password")
		g.Expect(string(v)).NotTo(ContainSubstring(ropts.Password), "no Redis admin password")
	}

	// PostgreSQL: A's store writes A's rows; B's are out of reach even when
	// A names B.
	stA, err := postgres.Open(ctx, string(a["PICOBOT_POSTGRES_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = stA.Close() }()
	stB, err := postgres.Open(ctx, string(b["PICOBOT_POSTGRES_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = stB.Close() }()
	_, err = stB.CreateSession(store.WithTenant(ctx, "team-b"), store.Session{Channel: "web", ChatID: "c", DialogID: "d"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = stA.CreateSession(store.WithTenant(ctx, "team-a"), store.Session{Channel: "web", ChatID: "c", DialogID: "d"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = stA.GetSession(store.WithTenant(ctx, "team-b"), "web:c:d")
	g.Expect(err).To(MatchError(store.ErrNotFound))

	// Redis: A's user works on A's keys and is refused B's.
	ra, err := redis.ParseURL(string(a["PICOBOT_REDIS_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	rca := redis.NewClient(ra)
	defer func() { _ = rca.Close() }()
	g.Expect(rca.Set(ctx, bus.Key("team-a", "x"), "1", time.Minute).Err()).To(Succeed())
	g.Expect(rca.Get(ctx, bus.Key("team-b", "x")).Err()).To(MatchError(HavePrefix("NOPERM")))

	// Rotation: new passwords in the data, the old ones refused.
	rotated, err := c.Rotate(ctx, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rotated["PICOBOT_POSTGRES_URL"]).NotTo(Equal(a["PICOBOT_POSTGRES_URL"]))
	g.Expect(rotated["PICOBOT_REDIS_URL"]).NotTo(Equal(a["PICOBOT_REDIS_URL"]))
	_, err = pgx.Connect(ctx, string(a["PICOBOT_POSTGRES_URL"]))
	g.Expect(err).To(MatchError(ContainSubstring("password authentication failed")))
	old := redis.NewClient(ra)
	defer func() { _ = old.Close() }()
	g.Expect(old.Ping(ctx).Err()).To(MatchError(HavePrefix("WRONGPASS")))
	conn, err := pgx.Connect(ctx, string(rotated["PICOBOT_POSTGRES_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	_ = conn.Close(ctx)
}

func TestNewRefusesBadConfig(t *testing.T) {
	g := NewWithT(t)
	cfg := newConfig(t)
	short := cfg
	short.Key = []byte("short")
	_, err := New(t.Context(), short)
	g.Expect(err).To(MatchError(ContainSubstring("the derivation key has 5 bytes, want at least 32")))
	noHost := cfg
	noHost.RedisURL = "not a url"
	_, err = New(t.Context(), noHost)
	g.Expect(err).To(MatchError(ContainSubstring("failed to use the Redis URL for tenants")))
}

// TestWatchRedisRestarts kills and restarts a Redis server (which keeps ACL
// users in memory only, so the tenant's user is gone): the watcher sets the
// user again with the same password and reports the restart, and
// SecretData gives the same data.
func TestWatchRedisRestarts(t *testing.T) {
	g := NewWithT(t)
	cfg := newConfig(t)
	srv := services.OwnRedis(t, false)
	cfg.RedisAdminURL, cfg.RedisURL = srv.URL, srv.URL
	c, err := New(t.Context(), cfg)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		_ = c.Drop(context.Background(), "team-r")
		_ = c.Close()
	})
	data, err := c.SecretData(t.Context(), "team-r")
	g.Expect(err).NotTo(HaveOccurred())
	opts, err := redis.ParseURL(string(data["PICOBOT_REDIS_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	pod := redis.NewClient(opts)
	t.Cleanup(func() { _ = pod.Close() })
	g.Expect(pod.Ping(t.Context()).Err()).To(Succeed())

	ctx, cancel := context.WithCancel(t.Context())
	restarts := make(chan struct{}, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchRedisRestarts(ctx, 20*time.Millisecond, func() { restarts <- struct{}{} })
	}()
	t.Cleanup(func() { cancel(); <-done })
	g.Consistently(restarts).WithTimeout(200*time.Millisecond).ShouldNot(Receive(), "no restart yet: the first check records the run id")
	g.Expect(srv.Kill()).To(Succeed())
	g.Expect(srv.Restart()).To(Succeed())
	g.Eventually(restarts).WithTimeout(10 * time.Second).Should(Receive())
	// Restored before onRestart, without PostgreSQL: the pod logs in.
	g.Expect(pod.Ping(t.Context()).Err()).To(Succeed())
	again, err := c.SecretData(t.Context(), "team-r")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(data), "the same credentials, provisioned again")
}

// TestSecretDataTrustsARecentProvisioning shows a burst of reconciles
// setting a tenant's role once: within Refresh, SecretData leaves the role
// as it is (its SCRAM verifier, salted anew by each ALTER ROLE, stays the
// same); past Refresh, and after a Drop, it sets the role again.
func TestSecretDataTrustsARecentProvisioning(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	cfg := newConfig(t)
	cfg.Refresh = time.Hour
	c, err := New(ctx, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = c.Drop(context.Background(), "team-a"); _ = c.Close() })
	admin, err := pgx.Connect(ctx, pgAdmin)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	verifier := func(data map[string][]byte) string {
		u, err := url.Parse(string(data["PICOBOT_POSTGRES_URL"]))
		g.Expect(err).NotTo(HaveOccurred())
		var v string
		g.Expect(admin.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", u.User.Username()).Scan(&v)).To(Succeed())
		return v
	}

	first, err := c.SecretData(ctx, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	v1 := verifier(first)
	for range 3 {
		again, err := c.SecretData(ctx, "team-a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again).To(Equal(first))
	}
	g.Expect(verifier(first)).To(Equal(v1), "within Refresh the role is not set again")

	cfg.Refresh = time.Nanosecond
	eager, err := New(ctx, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = eager.Close() })
	again, err := eager.SecretData(ctx, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(first), "the same generation's passwords")
	v2 := verifier(again)
	g.Expect(v2).NotTo(Equal(v1), "past Refresh the role is set again")

	g.Expect(c.Drop(ctx, "team-a")).To(Succeed())
	back, err := c.SecretData(ctx, "team-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(verifier(back)).NotTo(Equal(v2), "after a Drop the role is created again")
	ropts, err := redis.ParseURL(string(back["PICOBOT_REDIS_URL"]))
	g.Expect(err).NotTo(HaveOccurred())
	r := redis.NewClient(ropts)
	t.Cleanup(func() { _ = r.Close() })
	g.Expect(r.Ping(ctx).Err()).To(Succeed(), "and so is the Redis user")
}
