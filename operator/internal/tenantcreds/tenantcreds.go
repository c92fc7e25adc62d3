// Package tenantcreds provisions each tenant namespace's own PostgreSQL role
// and Redis ACL user and returns the connection Secret data that carries only
// that tenant's credentials. The owner DSN and the Redis admin password stay
// with the operator in the system namespace.
//
// Passwords are derived, not stored: HMAC-SHA256 of a key the operator holds
// over the service, the tenant and the role's generation (kept by
// PostgreSQL in tenant_roles). So SecretData is idempotent and may be called
// on every reconcile (it sets the role and user again at most once per
// Config.Refresh), and Rotate moves both passwords to the next generation.
package tenantcreds

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/bus/redisbus"
	"github.com/picobot/picobot/runtime/cluster/wake"
	"github.com/picobot/picobot/runtime/store/postgres"
)

// minKeyLen is the shortest derivation key accepted (256 bits).
const minKeyLen = 32

// Environment variables of the connection Secret this package fills.
var (
	envPostgres = wake.ConnectionEnv[0]
	envRedis    = wake.ConnectionEnv[1]
)

// Config says where the services are and how tenants reach them.
type Config struct {
	// PostgresOwnerURL is the schema owner's DSN (a postgres:// URL), used to
	// create and rotate tenant roles; it needs CREATEROLE.
	PostgresOwnerURL string
	// PostgresURL is the DSN pods connect with (a postgres:// URL); its user
	// and password are replaced by the tenant role's.
	PostgresURL string
	// RedisAdminURL logs in as Redis's default user, to manage ACL users.
	RedisAdminURL string
	// RedisURL is the URL pods connect with; its user and password are
	// replaced by the tenant user's.
	RedisURL string
	// Key derives the passwords (at least 32 bytes); changing it changes
	// every tenant's passwords at their next SecretData.
	Key []byte
	// Shared entries are copied into every tenant's Secret as they are
	// (S3 endpoint, bucket, region). They must not hold credentials.
	Shared map[string]string
	// RolePrefix and UserPrefix start tenant role and user names (the
	// packages' defaults when empty).
	RolePrefix, UserPrefix string
	// Refresh is how long SecretData trusts what this process provisioned
	// for a tenant before it sets the role and user again (DefaultRefresh
	// when 0). Reconciles come in bursts (every Agent of a namespace, its
	// Secret, its NetworkPolicy); setting a role costs a transaction, a
	// SCRAM verifier and a durable commit, so a burst does it once.
	Refresh time.Duration
}

// DefaultRefresh is Config.Refresh's default: a role or user changed behind
// the operator's back is set right within this time.
const DefaultRefresh = 5 * time.Minute

// provisioned is what this process set for a tenant, and when.
type provisioned struct {
	role postgres.TenantRole
	at   time.Time
}

// Credentials provisions tenants; it is the operator's TenantConnection.
type Credentials struct {
	cfg   Config
	roles *postgres.TenantRoles
	redis *redis.Client
	users *redisbus.TenantUsers

	// tenants are the tenants provisioned by this process: SecretData
	// answers from here within cfg.Refresh, and Redis users lost by a Redis
	// restart are restored from their generations without PostgreSQL
	// (which may be down at the same time).
	mu      sync.Mutex
	tenants map[string]provisioned
}

// New connects to both services as their admin.
func New(ctx context.Context, cfg Config) (*Credentials, error) {
	if len(cfg.Key) < minKeyLen {
		return nil, fmt.Errorf("failed to set up tenant credentials: the derivation key has %d bytes, want at least %d", len(cfg.Key), minKeyLen)
	}
	for name, raw := range map[string]string{"PostgreSQL": cfg.PostgresURL, "Redis": cfg.RedisURL} {
		if _, err := withUser(raw, "x", "x"); err != nil {
			return nil, fmt.Errorf("failed to use the %s URL for tenants: %w", name, err)
		}
	}
	ropts, err := redis.ParseURL(cfg.RedisAdminURL)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the Redis admin URL: %w", err)
	}
	roles, err := postgres.NewTenantRoles(ctx, cfg.PostgresOwnerURL, postgres.TenantRolesOptions{Prefix: cfg.RolePrefix})
	if err != nil {
		return nil, err
	}
	rc := redis.NewClient(ropts)
	return &Credentials{cfg: cfg, roles: roles, redis: rc, users: redisbus.NewTenantUsers(rc, cfg.UserPrefix),
		tenants: map[string]provisioned{}}, nil
}

// Close closes the admin connections.
func (c *Credentials) Close() error {
	c.roles.Close()
	return c.redis.Close()
}

// SecretData makes sure namespace's PostgreSQL role and Redis user exist
// with their current passwords and returns the connection Secret's data:
// the shared entries and URLs holding only this tenant's credentials. What
// this process set less than cfg.Refresh ago is taken as it is.
func (c *Credentials) SecretData(ctx context.Context, namespace string) (map[string][]byte, error) {
	c.mu.Lock()
	p, ok := c.tenants[namespace]
	c.mu.Unlock()
	if ok && time.Since(p.at) < c.refresh() {
		return c.secretData(namespace, p.role)
	}
	role, err := c.roles.Ensure(ctx, namespace, c.password("postgres"))
	if err != nil {
		return nil, err
	}
	return c.apply(ctx, namespace, role)
}

// Rotate moves namespace's credentials to the next generation and returns
// the new Secret data. Pods started with the old Secret keep the
// connections they have but cannot open new ones: restart them.
func (c *Credentials) Rotate(ctx context.Context, namespace string) (map[string][]byte, error) {
	role, err := c.roles.Rotate(ctx, namespace, c.password("postgres"))
	if err != nil {
		return nil, err
	}
	return c.apply(ctx, namespace, role)
}

// Drop removes namespace's role and user (the namespace is gone).
func (c *Credentials) Drop(ctx context.Context, namespace string) error {
	forget := func() {
		c.mu.Lock()
		delete(c.tenants, namespace)
		c.mu.Unlock()
	}
	forget()
	err := errors.Join(c.roles.Drop(ctx, namespace), c.users.Drop(ctx, namespace))
	forget() // a SecretData that ran meanwhile may have recorded it again
	return err
}

func (c *Credentials) apply(ctx context.Context, namespace string, role postgres.TenantRole) (map[string][]byte, error) {
	redisPassword, err := c.password("redis")(namespace, role.Generation)
	if err != nil {
		return nil, err
	}
	if err := c.users.Ensure(ctx, namespace, redisPassword); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.tenants[namespace] = provisioned{role: role, at: time.Now()}
	c.mu.Unlock()
	return c.secretData(namespace, role)
}

// refresh is cfg.Refresh or its default.
func (c *Credentials) refresh() time.Duration {
	if c.cfg.Refresh > 0 {
		return c.cfg.Refresh
	}
	return DefaultRefresh
}

// secretData is the Secret's data for namespace's role and its Redis user.
func (c *Credentials) secretData(namespace string, role postgres.TenantRole) (map[string][]byte, error) {
	redisPassword, err := c.password("redis")(namespace, role.Generation)
	if err != nil {
		return nil, err
	}
	pg, err := withUser(c.cfg.PostgresURL, role.Role, role.Password)
	if err != nil {
		return nil, err
	}
	rd, err := withUser(c.cfg.RedisURL, c.users.UserName(namespace), redisPassword)
	if err != nil {
		return nil, err
	}
	data := make(map[string][]byte, len(c.cfg.Shared)+2)
	for k, v := range c.cfg.Shared {
		data[k] = []byte(v)
	}
	data[envPostgres], data[envRedis] = []byte(pg), []byte(rd)
	return data, nil
}

// WatchRedisRestarts restores the tenant users this process provisioned and
// calls onRestart whenever the Redis server's run id changes, checking every
// interval until ctx ends. Redis keeps ACL users in
// memory (and in an ACL file only where one is configured and saved), so a
// restarted server may have lost every tenant user: the caller provisions
// every namespace again. The first check only records the id; failed checks
// (Redis down) are retried at the next tick.
func (c *Credentials) WatchRedisRestarts(ctx context.Context, interval time.Duration, onRestart func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		if id := c.redisRunID(ctx); id != "" {
			if last != "" && id != last {
				c.restoreUsers(ctx)
				onRestart()
			}
			last = id
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// restoreUsers sets the Redis users of the tenants this process
// provisioned again, with their last generation's password. It needs no
// PostgreSQL; what fails here the caller's reprovisioning retries.
func (c *Credentials) restoreUsers(ctx context.Context) {
	c.mu.Lock()
	tenants := maps.Clone(c.tenants)
	// The reprovisioning that follows sets everything again, including
	// what fails here (Redis may still be loading its data).
	for t, p := range c.tenants {
		c.tenants[t] = provisioned{role: p.role}
	}
	c.mu.Unlock()
	for tenant, p := range tenants {
		pw, err := c.password("redis")(tenant, p.role.Generation)
		if err == nil {
			_ = c.users.Ensure(ctx, tenant, pw)
		}
	}
}

// redisRunID is the server's run id ("" when it cannot be read).
func (c *Credentials) redisRunID(ctx context.Context) string {
	info, err := c.redis.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id
		}
	}
	return ""
}

// password derives a service's password for a tenant and generation.
func (c *Credentials) password(service string) postgres.PasswordFunc {
	return func(tenant string, generation int64) (string, error) {
		m := hmac.New(sha256.New, c.cfg.Key)
		m.Write([]byte(service + "\x00" + tenant + "\x00" + strconv.FormatInt(generation, 10)))
		return base64.RawURLEncoding.EncodeToString(m.Sum(nil)), nil
	}
}

// withUser returns raw (a URL) with its user and password replaced.
func withUser(raw, user, password string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("failed to parse %q as a URL with a host", redact(raw))
	}
	u.User = url.UserPassword(user, password)
	return u.String(), nil
}

// redact drops credentials from a URL for an error message.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
