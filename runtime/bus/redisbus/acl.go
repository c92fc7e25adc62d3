package redisbus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Tenant users confine a tenant's pods to the tenant's own keys, streams and
// Pub/Sub channels with Redis 7 ACLs, so isolation holds whatever commands
// the pods send. Every key and channel of a tenant starts with "{<tenant>:"
// or is "{<tenant>}" (bus.Key), and no tenant name contains ':', '{' or '}'
// (they are namespace names), so the patterns below match exactly the
// tenant's own names. The default user stays the admin, for the operator and
// the gateway.

// DefaultTenantUserPrefix starts every tenant user's name.
const DefaultTenantUserPrefix = "picobot-t-"

// tenantCommands are the commands a tenant user may run: data commands that
// name their keys (checked against the key patterns), Pub/Sub on its
// channels, scripts (whose keys Redis checks at each redis.call), and the
// connection handling go-redis and the bus need (CLIENT ID and UNBLOCK end
// a blocked read on close). Left out even where a category would grant
// them: whatever lists or reaches keys or channels by name outside the
// patterns (SCAN, RANDOMKEY, DBSIZE, PUBSUB CHANNELS, SORT ... GET, CLIENT
// TRACKING), whatever switches databases, and what changes the server for
// everyone (SCRIPT FLUSH and KILL, FUNCTION, the @dangerous category: KEYS,
// FLUSHALL, CONFIG, ACL, MONITOR, CLIENT KILL and LIST, DEBUG, SHUTDOWN...).
var tenantCommands = []string{
	"-@all",
	"+@stream", "+@hash", "+@string", "+@keyspace", "+@transaction", "+@pubsub",
	"+eval", "+evalsha", "+eval_ro", "+evalsha_ro", "+script|load", "+script|exists",
	"+ping", "+echo", "+hello", "+auth", "+reset", "+quit",
	"-@dangerous",
	"-scan", "-randomkey", "-dbsize", "-select", "-move", "-swapdb", "-pubsub", "-sort", "-sort_ro", "-wait",
	// After -@dangerous, which holds CLIENT UNBLOCK. A tenant can end
	// another client's blocked read with it (that client reads again: a
	// nuisance, no data); it learns no client ids, as CLIENT LIST is refused.
	"+client|id", "+client|setname", "+client|getname", "+client|unblock", "+client|info",
}

// TenantACLRules are the ACL SETUSER rules of tenant's user, without its
// passwords: its keys and channels, and tenantCommands.
func TenantACLRules(tenant string) []string {
	rules := []string{"~{" + tenant + ":*", "~{" + tenant + "}*", "resetchannels", "&{" + tenant + ":*", "&{" + tenant + "}*"}
	return append(rules, tenantCommands...)
}

// TenantUsers creates, updates and deletes tenant users through an admin
// client (the default user), whose password never leaves the system
// namespace; the operator calls it.
type TenantUsers struct {
	admin  *redis.Client
	prefix string
}

// NewTenantUsers returns TenantUsers on admin; prefix starts the user names
// (DefaultTenantUserPrefix when empty).
func NewTenantUsers(admin *redis.Client, prefix string) *TenantUsers {
	if prefix == "" {
		prefix = DefaultTenantUserPrefix
	}
	return &TenantUsers{admin: admin, prefix: prefix}
}

// UserName is tenant's user.
func (u *TenantUsers) UserName(tenant string) string { return u.prefix + tenant }

// Ensure makes tenant's user exist with exactly TenantACLRules and the
// given passwords (more than one during a rotation, so pods holding the
// previous password keep connecting until they restart), replacing whatever
// the user had. It is idempotent. Redis stores only the SHA-256 of each
// password, which is what goes over the wire.
func (u *TenantUsers) Ensure(ctx context.Context, tenant string, passwords ...string) error {
	if err := validTenant(tenant); err != nil {
		return err
	}
	if len(passwords) == 0 {
		return fmt.Errorf("failed to set Redis user of tenant %q: no password", tenant)
	}
	args := []any{"ACL", "SETUSER", u.UserName(tenant), "reset", "on", "sanitize-payload"}
	for _, pw := range passwords {
		if pw == "" {
			return fmt.Errorf("failed to set Redis user of tenant %q: empty password", tenant)
		}
		sum := sha256.Sum256([]byte(pw))
		args = append(args, "#"+hex.EncodeToString(sum[:]))
	}
	for _, r := range TenantACLRules(tenant) {
		args = append(args, r)
	}
	if err := u.admin.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("failed to set Redis user of tenant %q: %w", tenant, err)
	}
	return nil
}

// Drop deletes tenant's user; Redis disconnects its clients. A missing user
// is not an error.
func (u *TenantUsers) Drop(ctx context.Context, tenant string) error {
	if err := u.admin.Do(ctx, "ACL", "DELUSER", u.UserName(tenant)).Err(); err != nil {
		return fmt.Errorf("failed to delete Redis user of tenant %q: %w", tenant, err)
	}
	return nil
}

// validTenant refuses names that would widen the patterns: glob characters,
// the characters bus.Key escapes, and spaces (which ACL rules cannot hold).
func validTenant(tenant string) error {
	if tenant == "" {
		return errors.New("failed to set Redis user: empty tenant")
	}
	if i := strings.IndexAny(tenant, "*?[]\\{}:% \t\r\n"); i >= 0 {
		return fmt.Errorf("failed to set Redis user of tenant %q: %q is not allowed in a tenant name", tenant, tenant[i])
	}
	return nil
}
