package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/picobot/picobot/operator/internal/controller"
	"github.com/picobot/picobot/operator/internal/tenantcreds"
	"github.com/picobot/picobot/runtime/cluster/wake"
)

// Environment of the tenant credentials: the admin logins and the key stay
// in the operator's Deployment (the system namespace); tenant namespaces
// get only their own role's and user's passwords.
const (
	envPostgresOwnerURL = "PICOBOT_POSTGRES_OWNER_URL"
	envRedisAdminURL    = "PICOBOT_REDIS_ADMIN_URL"
	envCredentialsKey   = "PICOBOT_TENANT_CREDENTIALS_KEY"
)

// tenantOptions choose what goes into each tenant namespace's connection
// Secret: credentials of the tenant's own (a PostgreSQL role and a Redis
// ACL user, tenantcreds), or, with --shared-connection, the operator's own
// settings for every namespace (development only).
type tenantOptions struct {
	postgresOwnerURL string
	redisAdminURL    string
	rolePrefix       string
	userPrefix       string
	shared           bool
}

func (t *tenantOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.postgresOwnerURL, "postgres-owner-url", os.Getenv(envPostgresOwnerURL),
		"DSN of the schema owner (needs CREATEROLE), which creates each tenant's PostgreSQL role (default $"+envPostgresOwnerURL+"). The derivation key of the tenants' passwords is read from $"+envCredentialsKey+" (at least 32 bytes).")
	fs.StringVar(&t.redisAdminURL, "redis-admin-url", os.Getenv(envRedisAdminURL),
		"Redis URL of a user allowed ACL SETUSER/DELUSER, which creates each tenant's Redis user (default $"+envRedisAdminURL+", else --redis-url).")
	fs.StringVar(&t.rolePrefix, "tenant-role-prefix", "", "Start of tenant role names (default picobot_t_); distinct installs sharing a PostgreSQL server need distinct prefixes.")
	fs.StringVar(&t.userPrefix, "tenant-user-prefix", "", "Start of tenant Redis user names (default picobot-t-); distinct installs sharing a Redis server need distinct prefixes.")
	fs.BoolVar(&t.shared, "shared-connection", false,
		"NOT FOR PRODUCTION: copy the operator's own PostgreSQL, Redis and S3 settings into every tenant namespace, so any tenant's pods can reach every tenant's data.")
}

// connection returns the TenantConnection of session pods and its closer;
// conn holds the operator's connection settings (wake.ConnectionEnv).
func (t *tenantOptions) connection(ctx context.Context, conn map[string]string, redisURL string) (controller.TenantConnection, func(), error) {
	key := os.Getenv(envCredentialsKey)
	if t.shared {
		if t.postgresOwnerURL != "" || key != "" {
			return nil, nil, fmt.Errorf("--shared-connection and per-tenant credentials ($%s, $%s) exclude each other", envPostgresOwnerURL, envCredentialsKey)
		}
		return controller.SharedConnection(conn), func() {}, nil
	}
	if t.postgresOwnerURL == "" || key == "" {
		return nil, nil, fmt.Errorf("session pods need per-tenant credentials: set --postgres-owner-url (or $%s) and $%s, or --shared-connection (development only)",
			envPostgresOwnerURL, envCredentialsKey)
	}
	pg, rd := conn[wake.ConnectionEnv[0]], conn[wake.ConnectionEnv[1]]
	if pg == "" {
		return nil, nil, errors.New("per-tenant credentials need $PICOBOT_POSTGRES_URL (where session pods connect; its user is replaced by the tenant's role)")
	}
	admin := t.redisAdminURL
	if admin == "" {
		admin = redisURL
	}
	if rd == "" {
		rd = redisURL
	}
	// Shared entries (the S3 settings) pass through; the PostgreSQL and
	// Redis URLs are the tenant's own.
	shared := make(map[string]string, len(conn))
	for k, v := range conn {
		shared[k] = v
	}
	delete(shared, wake.ConnectionEnv[0])
	delete(shared, wake.ConnectionEnv[1])
	c, err := tenantcreds.New(ctx, tenantcreds.Config{PostgresOwnerURL: t.postgresOwnerURL, PostgresURL: pg, RedisAdminURL: admin, RedisURL: rd,
		Key: []byte(key), Shared: shared, RolePrefix: t.rolePrefix, UserPrefix: t.userPrefix})
	if err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}
