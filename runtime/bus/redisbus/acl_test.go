package redisbus_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus"
	"github.com/picobot/picobot/runtime/bus/bustest"
	"github.com/picobot/picobot/runtime/bus/redisbus"
)

// aclFixture provisions tenant users on the package's server with a prefix
// of its own, deleting them when the test ends.
type aclFixture struct {
	admin *redis.Client
	users *redisbus.TenantUsers
	opts  *redis.Options
}

func newACLFixture(t *testing.T) *aclFixture {
	t.Helper()
	opts, err := redis.ParseURL(needRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	prefix := fmt.Sprintf("pbt-%d-%s-", os.Getpid(), bus.NewID()[:6])
	return &aclFixture{admin: admin, users: redisbus.NewTenantUsers(admin, prefix), opts: opts}
}

// user provisions tenant's user and returns a client logged in as it.
func (f *aclFixture) user(t *testing.T, tenant, password string) *redis.Client {
	t.Helper()
	if err := f.users.Ensure(t.Context(), tenant, password); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.users.Drop(context.Background(), tenant); err != nil {
			t.Error(err)
		}
	})
	c := redis.NewClient(f.asUser(tenant, password))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (f *aclFixture) asUser(tenant, password string) *redis.Options {
	o := *f.opts
	o.Username, o.Password = f.users.UserName(tenant), password
	return &o
}

// TestTenantUserIsolation attacks with tenant A's real Redis credentials:
// every command reaching tenant B's keys, streams or channels, listing names
// or changing the server is refused with NOPERM (or finds nothing of B's),
// and A works on its own keys, streams and channels. B's name starts with
// A's, so a pattern that forgot its delimiter would let A through.
func TestTenantUserIsolation(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	f := newACLFixture(t)
	ta := "acl" + strings.ToLower(bus.NewID()[:6])
	tb := ta + "b"
	a := f.user(t, ta, "password-a")
	f.user(t, tb, "password-b")

	// B's data, written by the admin as the gateway and B's pods would.
	bChat := bus.Key(tb, "agent", "chat", "web", "42")
	bWake := bus.Key(tb, "agent", "wake")
	bPods := bus.Key(tb, "agent", "pods")
	bOwner := bus.Key(tb, "agent", "owner", "web", "42")
	bEvents := bus.Key(tb, "agent", "events", "web", "42")
	g.Expect(f.admin.XAdd(ctx, &redis.XAddArgs{Stream: bChat, Values: map[string]any{"p": "secret of b"}}).Err()).To(Succeed())
	g.Expect(f.admin.XGroupCreateMkStream(ctx, bWake, "pods", "0").Err()).To(Succeed())
	g.Expect(f.admin.XAdd(ctx, &redis.XAddArgs{Stream: bWake, Values: map[string]any{"p": "wake b"}}).Err()).To(Succeed())
	g.Expect(f.admin.HSet(ctx, bPods, "pod-1", "warm").Err()).To(Succeed())
	g.Expect(f.admin.Set(ctx, bOwner, "pod-1", time.Hour).Err()).To(Succeed())
	own := bus.Key(ta, "agent", "owner", "web", "1")
	g.Expect(a.Set(ctx, own, "mine", time.Hour).Err()).To(Succeed())
	g.Expect(a.RPush(ctx, bus.Key(ta, "agent", "list"), "x").Err()).To(MatchError(ContainSubstring("NOPERM")),
		"list commands are not granted")

	// Refusals start NOPERM, or inside a script name the keys it cannot
	// access.
	const scriptRefusal = "ERR The user executing the script can't access"
	attacks := []struct {
		name string
		cmd  []any
		want string
	}{
		{"GET B's key", []any{"GET", bOwner}, ""},
		{"SET B's key", []any{"SET", bOwner, "pod-evil"}, ""},
		{"DEL B's key", []any{"DEL", bOwner}, ""},
		{"XRANGE B's chat", []any{"XRANGE", bChat, "-", "+"}, ""},
		{"XADD to B's chat", []any{"XADD", bChat, "*", "p", "forged"}, ""},
		{"XREADGROUP B's wakes", []any{"XREADGROUP", "GROUP", "pods", "evil", "COUNT", "1", "STREAMS", bWake, ">"}, ""},
		{"XINFO B's stream", []any{"XINFO", "STREAM", bChat}, ""},
		{"XLEN B's stream", []any{"XLEN", bChat}, ""},
		{"HGETALL B's pods", []any{"HGETALL", bPods}, ""},
		{"RENAME own key onto B's", []any{"RENAME", own, bOwner}, ""},
		{"COPY B's key to own", []any{"COPY", bOwner, bus.Key(ta, "stolen")}, ""},
		{"OBJECT on B's key", []any{"OBJECT", "ENCODING", bOwner}, ""},
		{"DUMP B's key", []any{"DUMP", bOwner}, ""},
		{"PUBLISH on B's events", []any{"PUBLISH", bEvents, "forged"}, ""},
		{"EVAL reading B's key", []any{"EVAL", "return redis.call('GET', KEYS[1])", "1", bOwner}, ""},
		{"EVAL reading an undeclared key of B", []any{"EVAL", "return redis.call('GET', ARGV[1])", "1", own, bOwner}, scriptRefusal},
		{"KEYS", []any{"KEYS", "*"}, ""},
		{"SCAN", []any{"SCAN", "0"}, ""},
		{"RANDOMKEY", []any{"RANDOMKEY"}, ""},
		{"DBSIZE", []any{"DBSIZE"}, ""},
		{"PUBSUB CHANNELS", []any{"PUBSUB", "CHANNELS"}, ""},
		{"SELECT another database", []any{"SELECT", "1"}, ""},
		{"SORT with GET patterns", []any{"SORT", own, "BY", "nosort", "GET", "*"}, ""},
		{"ACL LIST", []any{"ACL", "LIST"}, ""},
		{"ACL SETUSER", []any{"ACL", "SETUSER", f.users.UserName(ta), "allkeys", "allchannels", "+@all"}, ""},
		{"ACL GETUSER B", []any{"ACL", "GETUSER", f.users.UserName(tb)}, ""},
		{"CONFIG GET", []any{"CONFIG", "GET", "requirepass"}, ""},
		{"CONFIG SET", []any{"CONFIG", "SET", "requirepass", ""}, ""},
		{"FLUSHALL", []any{"FLUSHALL"}, ""},
		{"FLUSHDB", []any{"FLUSHDB"}, ""},
		{"CLIENT LIST", []any{"CLIENT", "LIST"}, ""},
		{"CLIENT KILL", []any{"CLIENT", "KILL", "USER", "default"}, ""},
		{"CLIENT TRACKING", []any{"CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "{" + tb}, ""},
		{"SCRIPT FLUSH", []any{"SCRIPT", "FLUSH"}, ""},
		{"FUNCTION LOAD", []any{"FUNCTION", "LOAD", "#!lua name=evil\nredis.register_function('f', function() return 1 end)"}, ""},
		{"INFO", []any{"INFO"}, ""},
		{"MONITOR", []any{"MONITOR"}, ""},
		{"SHUTDOWN", []any{"SHUTDOWN", "NOSAVE"}, ""},
		{"MIGRATE", []any{"MIGRATE", "127.0.0.1", "1", bOwner, "0", "100"}, ""},
	}
	for _, at := range attacks {
		err := a.Do(ctx, at.cmd...).Err()
		g.Expect(err).To(HaveOccurred(), at.name)
		if at.want == "" {
			at.want = "NOPERM"
		}
		g.Expect(err.Error()).To(HavePrefix(at.want), at.name)
	}

	// Subscribing to B's channels, by name or by pattern, is refused.
	for _, sub := range []func() *redis.PubSub{
		func() *redis.PubSub { return a.Subscribe(ctx, bEvents) },
		func() *redis.PubSub { return a.PSubscribe(ctx, "{"+tb+":*") },
		func() *redis.PubSub { return a.PSubscribe(ctx, "{"+ta+"*") },
		func() *redis.PubSub { return a.PSubscribe(ctx, "*") },
	} {
		ps := sub()
		_, err := ps.Receive(ctx)
		g.Expect(err).To(MatchError(HavePrefix("NOPERM")))
		_ = ps.Close()
	}

	// A's password does not open B's user, nor the admin.
	for _, o := range []*redis.Options{f.asUser(tb, "password-a"), {Addr: f.opts.Addr, Password: "password-a"}, {Addr: f.opts.Addr}} {
		c := redis.NewClient(o)
		err := c.Ping(ctx).Err()
		_ = c.Close()
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(Or(HavePrefix("WRONGPASS"), HavePrefix("NOAUTH")))
	}

	// B's data is intact.
	g.Expect(f.admin.Get(ctx, bOwner).Val()).To(Equal("pod-1"))
	g.Expect(f.admin.XLen(ctx, bChat).Val()).To(Equal(int64(1)))
	g.Expect(f.admin.HGetAll(ctx, bPods).Val()).To(Equal(map[string]string{"pod-1": "warm"}))
	pending, err := f.admin.XPending(ctx, bWake, "pods").Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending.Count).To(BeZero(), "A claimed none of B's wakes")

	expectTenantWorks(t, a, ta, own)
}

// expectTenantWorks shows a tenant user doing what its pods do on its own
// keys: streams with a group, hashes, keys with a TTL, scripts, Pub/Sub.
func expectTenantWorks(t *testing.T, c *redis.Client, tenant, own string) {
	g := NewWithT(t)
	ctx := t.Context()
	wakeStream := bus.Key(tenant, "agent", "wake")
	g.Expect(c.XGroupCreateMkStream(ctx, wakeStream, "pods", "0").Err()).To(Succeed())
	g.Expect(c.XAdd(ctx, &redis.XAddArgs{Stream: wakeStream, Values: map[string]any{"p": "wake"}}).Err()).To(Succeed())
	got, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "pods", Consumer: "pod-1", Streams: []string{wakeStream, ">"}, Count: 1}).Result()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got[0].Messages).To(HaveLen(1))
	g.Expect(c.XAck(ctx, wakeStream, "pods", got[0].Messages[0].ID).Err()).To(Succeed())
	g.Expect(c.HSet(ctx, bus.Key(tenant, "agent", "pods"), "pod-1", "busy").Err()).To(Succeed())
	g.Expect(c.Eval(ctx, `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`,
		[]string{own}, "mine").Int()).To(Equal(1))
	g.Expect(c.Set(ctx, bus.Key(tenant), "top", time.Minute).Err()).To(Succeed(), "the tenant's bare {tenant} key")

	ch := bus.Key(tenant, "agent", "events", "web", "1")
	ps := c.Subscribe(ctx, ch)
	defer func() { _ = ps.Close() }()
	_, err = ps.Receive(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Publish(ctx, ch, "hello").Err()).To(Succeed())
	select {
	case m := <-ps.Channel():
		g.Expect(m.Payload).To(Equal("hello"))
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the tenant's own channel")
	}
}

// TestTenantUserRotation: during a rotation both passwords work; Ensure
// with only the new one shuts the old one out.
func TestTenantUserRotation(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	f := newACLFixture(t)
	tenant := "rot" + strings.ToLower(bus.NewID()[:6])
	f.user(t, tenant, "old")
	ping := func(pw string) error {
		c := redis.NewClient(f.asUser(tenant, pw))
		defer func() { _ = c.Close() }()
		return c.Ping(ctx).Err()
	}
	g.Expect(f.users.Ensure(ctx, tenant, "new", "old")).To(Succeed())
	g.Expect(ping("old")).To(Succeed())
	g.Expect(ping("new")).To(Succeed())
	g.Expect(f.users.Ensure(ctx, tenant, "new")).To(Succeed())
	g.Expect(ping("old")).To(MatchError(HavePrefix("WRONGPASS")))
	g.Expect(ping("new")).To(Succeed())

	for _, bad := range []string{"", "a*", "a:b", "{a}", "a b", "a?"} {
		g.Expect(f.users.Ensure(ctx, bad, "pw")).To(MatchError(ContainSubstring("tenant")), bad)
	}
	g.Expect(f.users.Ensure(ctx, tenant)).To(MatchError(ContainSubstring("no password")))
}

// TestConformanceTenantUser runs the bus conformance suite logged in as the
// user of tenant "bustest", whose keys the suite's streams are.
func TestConformanceTenantUser(t *testing.T) {
	f := newACLFixture(t)
	f.user(t, "bustest", "password-bustest")
	o := f.asUser("bustest", "password-bustest")
	url := fmt.Sprintf("redis://%s:%s@%s", o.Username, o.Password, o.Addr)
	bustest.Run(t, func(t *testing.T) bus.Bus {
		b, err := redisbus.Open(url, redisbus.Options{MaxLen: bustest.MaxLen})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
