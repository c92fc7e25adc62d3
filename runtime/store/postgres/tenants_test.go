package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/llm"
	"github.com/picobot/picobot/runtime/store"
	"github.com/picobot/picobot/runtime/store/storetest"
)

// PostgreSQL error codes the attacks expect.
const (
	codeInsufficientPrivilege = "42501"
	codeInvalidPassword       = "28P01"
	codeRLSViolation          = "42501"
)

// tenantFixture is a fresh database with TenantRoles on it. Role names are
// per server, so each fixture has its own prefix and drops its roles.
type tenantFixture struct {
	db    string
	roles *TenantRoles
	mu    sync.Mutex
	// passwords holds the password handed out per tenant and generation.
	passwords map[tenantGen]string
}

type tenantGen struct {
	tenant string
	gen    int64
}

func newTenantFixture(t testing.TB) *tenantFixture {
	t.Helper()
	db := newDatabase(t, true)
	prefix := fmt.Sprintf("pbt_%d_%d_", os.Getpid(), dbCounter.Add(1))
	roles, err := NewTenantRoles(context.Background(), dbURL(db), TenantRolesOptions{Prefix: prefix, ConnLimit: 20})
	if err != nil {
		t.Fatal(err)
	}
	f := &tenantFixture{db: db, roles: roles, passwords: map[tenantGen]string{}}
	t.Cleanup(func() {
		defer roles.Close()
		f.mu.Lock()
		tenants := map[string]bool{}
		for k := range f.passwords {
			tenants[k.tenant] = true
		}
		f.mu.Unlock()
		for tenant := range tenants {
			if err := roles.Drop(context.Background(), tenant); err != nil {
				t.Error(err)
			}
		}
	})
	return f
}

// password is the fixture's PasswordFunc: a fresh random password per
// tenant and generation, remembered.
func (f *tenantFixture) password(tenant string, gen int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := tenantGen{tenant, gen}
	if pw, ok := f.passwords[key]; ok {
		return pw, nil
	}
	pw := "pw-" + store.NewID()
	f.passwords[key] = pw
	return pw, nil
}

func (f *tenantFixture) ensure(t testing.TB, tenant string) TenantRole {
	t.Helper()
	r, err := f.roles.Ensure(context.Background(), tenant, f.password)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// config is the connection of a tenant role, over TCP with its password.
func (f *tenantFixture) config(r TenantRole) *pgx.ConnConfig {
	cfg := dbConfig(f.db)
	cfg.User, cfg.Password = r.Role, r.Password
	return cfg
}

func (f *tenantFixture) openStore(t testing.TB, r TenantRole) *Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig = f.config(r)
	st, err := OpenConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// seed writes a session with n messages and a memory as tenant through st.
func seed(t testing.TB, st *Store, tenant string, n int) string {
	t.Helper()
	g := NewWithT(t)
	ctx := store.WithTenant(context.Background(), tenant)
	sess, err := st.CreateSession(ctx, store.Session{Channel: "web", ChatID: "c1", DialogID: "d1"})
	g.Expect(err).NotTo(HaveOccurred())
	for i := range n {
		_, err := st.AppendMessages(ctx, sess.ID, store.Message{ID: fmt.Sprint(i), Role: llm.RoleUser, Content: "secret of " + tenant})
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = st.PutMemory(ctx, store.Memory{Agent: "helper", Key: "k", Content: "memory of " + tenant, Category: store.MemoryKnowledge})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.AppendAudit(ctx, store.AuditRecord{Actor: "key:" + tenant, Agent: "helper", SessionID: sess.ID, Tool: "exec",
		ArgsDigest: "sha256:" + strings.Repeat("0", 64), Outcome: store.AuditOK})).To(Succeed())
	_, err = st.RegisterNode(ctx, store.Node{ID: "node-of-" + tenant, Name: tenant})
	g.Expect(err).NotTo(HaveOccurred())
	return sess.ID
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestTenantRoleIsolation attacks with tenant A's real credentials, as
// provisioned, on a raw connection: every way to reach tenant B's rows is
// refused by the server or finds nothing, and A works on its own rows.
func TestTenantRoleIsolation(t *testing.T) {
	g := NewWithT(t)
	f := newTenantFixture(t)
	a, b := f.ensure(t, "tenant-a"), f.ensure(t, "tenant-b")
	g.Expect(a.Role).NotTo(Equal(b.Role))
	seed(t, f.openStore(t, a), "tenant-a", 3)
	seed(t, f.openStore(t, b), "tenant-b", 2)

	conn, err := pgx.ConnectConfig(t.Context(), f.config(a))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	query := func(sql string, args ...any) (string, error) {
		var out string
		err := conn.QueryRow(t.Context(), sql, args...).Scan(&out)
		return out, err
	}
	seen := func() string {
		out, err := query(`SELECT coalesce(string_agg(DISTINCT tenant, ',' ORDER BY tenant), '') || '/' ||
			(SELECT count(*) FROM messages WHERE tenant = 'tenant-b') || '/' ||
			(SELECT count(*) FROM memories WHERE content LIKE '%tenant-b%') FROM sessions`)
		g.Expect(err).NotTo(HaveOccurred())
		return out
	}

	// A sees its own rows and nothing of B's, asking for them by name.
	g.Expect(seen()).To(Equal("tenant-a/0/0"))
	g.Expect(query(`SELECT count(*)::text FROM messages`)).To(Equal("3"))
	g.Expect(query(`SELECT string_agg(actor, ',') FROM tool_audit`)).To(Equal("key:tenant-a"), "A's audit log only")
	g.Expect(query(`SELECT count(*)::text FROM tool_audit WHERE tenant = 'tenant-b'`)).To(Equal("0"))
	g.Expect(query(`SELECT string_agg(id, ',') FROM nodes`)).To(Equal("node-of-tenant-a"), "A's paired nodes only")
	g.Expect(query(`SELECT picobot_tenant()`)).To(Equal("tenant-a"))

	// The setting the store sends is ignored for a tenant role, at session
	// and at transaction level.
	_, err = conn.Exec(t.Context(), `SELECT set_config('picobot.tenant', 'tenant-b', false)`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(seen()).To(Equal("tenant-a/0/0"), "set_config to B changes nothing")
	g.Expect(query(`SELECT picobot_tenant()`)).To(Equal("tenant-a"))

	attacks := []struct {
		name, sql, code, message string
	}{
		{"SET ROLE to B", "SET ROLE " + pgx.Identifier{b.Role}.Sanitize(), codeInsufficientPrivilege, "permission denied to set role"},
		{"SET ROLE to the platform role", "SET ROLE " + appRole, codeInsufficientPrivilege, "permission denied to set role"},
		{"SET ROLE to the superuser", "SET ROLE postgres", codeInsufficientPrivilege, "permission denied to set role"},
		{"SET SESSION AUTHORIZATION B", "SET SESSION AUTHORIZATION " + pgx.Identifier{b.Role}.Sanitize(),
			codeInsufficientPrivilege, "permission denied to set session authorization"},
		{"read the mapping", "SELECT count(*) FROM tenant_roles", codeInsufficientPrivilege, "permission denied for table tenant_roles"},
		{"rewrite the mapping", "UPDATE tenant_roles SET tenant_name = 'tenant-b'", codeInsufficientPrivilege,
			"permission denied for table tenant_roles"},
		{"create a function", "CREATE FUNCTION public.leak() RETURNS text LANGUAGE sql AS 'SELECT 1::text'",
			codeInsufficientPrivilege, "permission denied for schema public"},
		{"replace the policies' function", "CREATE OR REPLACE FUNCTION public.picobot_tenant() RETURNS text LANGUAGE sql AS $$SELECT 'tenant-b'$$",
			codeInsufficientPrivilege, "permission denied for schema public"},
		{"ALTER ROLE B's password", "ALTER ROLE " + pgx.Identifier{b.Role}.Sanitize() + " PASSWORD 'mine'",
			codeInsufficientPrivilege, "permission denied"},
		{"ALTER ROLE self BYPASSRLS", "ALTER ROLE " + pgx.Identifier{a.Role}.Sanitize() + " BYPASSRLS",
			codeInsufficientPrivilege, "must be superuser to change bypassrls attribute"},
		{"ALTER ROLE self SUPERUSER", "ALTER ROLE " + pgx.Identifier{a.Role}.Sanitize() + " SUPERUSER",
			codeInsufficientPrivilege, "must be superuser"},
		{"GRANT B to self", "GRANT " + pgx.Identifier{b.Role}.Sanitize() + " TO " + pgx.Identifier{a.Role}.Sanitize(),
			codeInsufficientPrivilege, "must have admin option"},
		{"create a role", "CREATE ROLE mine LOGIN", codeInsufficientPrivilege, "permission denied to create role"},
		{"disable RLS", "ALTER TABLE messages DISABLE ROW LEVEL SECURITY", codeInsufficientPrivilege, "must be owner"},
		{"drop the policy", "DROP POLICY tenant_isolation ON messages", codeInsufficientPrivilege, "must be owner"},
		{"write as B", `INSERT INTO sessions (tenant, id, channel, chat_id, dialog_id, created_at, updated_at, last_message_at)
			VALUES ('tenant-b', 'web:c9:d1', 'web', 'c9', 'd1', now(), now(), now())`, codeRLSViolation, "row-level security"},
		{"move own row to B", `UPDATE sessions SET tenant = 'tenant-b'`, codeRLSViolation, "row-level security"},
		{"read the migrations", "SELECT count(*) FROM schema_migrations", codeInsufficientPrivilege, "permission denied"},
		{"replace the policies' binding", "CREATE OR REPLACE FUNCTION public.picobot_role_binding() RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'tenant-b'$$",
			codeInsufficientPrivilege, "permission denied for schema public"},
	}
	for _, at := range attacks {
		_, err := conn.Exec(t.Context(), at.sql)
		g.Expect(err).To(HaveOccurred(), at.name)
		g.Expect(pgCode(err)).To(Equal(at.code), "%s: %v", at.name, err)
		g.Expect(err.Error()).To(ContainSubstring(at.message), at.name)
	}

	// Writes aimed at B's rows touch nothing.
	for _, sql := range []string{
		`UPDATE messages SET content = 'defaced' WHERE tenant = 'tenant-b'`,
		`DELETE FROM memories WHERE tenant = 'tenant-b'`,
		`DELETE FROM sessions WHERE tenant = 'tenant-b'`,
		`DELETE FROM tool_audit WHERE tenant = 'tenant-b'`,
		`UPDATE nodes SET state = 'approved' WHERE tenant = 'tenant-b'`,
	} {
		tag, err := conn.Exec(t.Context(), sql)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tag.RowsAffected()).To(BeZero(), sql)
	}

	// The policies fold A's binding into its plans when they are made: a
	// statement planned after A set B's tenant still sees A's rows, and a
	// plan compares with A's tenant as a constant (no lookup per statement).
	g.Expect(query(`SELECT coalesce(string_agg(DISTINCT tenant, ','), '') FROM messages WHERE seq > 0`)).To(Equal("tenant-a"))
	plan, err := conn.Query(t.Context(), `EXPLAIN SELECT * FROM messages`)
	g.Expect(err).NotTo(HaveOccurred())
	lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Join(lines, "\n")).To(And(ContainSubstring(`(tenant = 'tenant-a'::text)`), Not(ContainSubstring("InitPlan")),
		Not(ContainSubstring("picobot_role_binding"))))

	// A temporary table cannot pose as the mapping: picobot_tenant() names
	// its schema and searches pg_temp last.
	_, err = conn.Exec(t.Context(), `CREATE TEMP TABLE tenant_roles (role_name text, tenant_name text, generation bigint)`)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = conn.Exec(t.Context(), `INSERT INTO pg_temp.tenant_roles VALUES (session_user, NULL, 1), (current_user, 'tenant-b', 1)`)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(seen()).To(Equal("tenant-a/0/0"), "a temp table named tenant_roles changes nothing")

	// B's rows are all there, untouched, as the superuser sees them.
	admin, err := pgx.ConnectConfig(t.Context(), dbConfig(f.db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = admin.Close(context.Background()) }()
	var intact int
	g.Expect(admin.QueryRow(t.Context(), `SELECT count(*) FROM messages WHERE tenant = 'tenant-b' AND content = 'secret of tenant-b'`).
		Scan(&intact)).To(Succeed())
	g.Expect(intact).To(Equal(2))

	// A keeps working on its own data.
	st := f.openStore(t, a)
	ctx := store.WithTenant(t.Context(), "tenant-a")
	_, err = st.AppendMessages(ctx, "web:c1:d1", store.Message{ID: "own", Role: llm.RoleUser, Content: "more"})
	g.Expect(err).NotTo(HaveOccurred())
	msgs, err := st.LoadMessages(ctx, "web:c1:d1", store.LoadOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msgs).To(HaveLen(4))
	// Through the store, A naming B as its tenant reaches nothing.
	_, err = st.GetSession(store.WithTenant(t.Context(), "tenant-b"), "web:c1:d1")
	g.Expect(err).To(MatchError(store.ErrNotFound))
}

// TestTenantRoleShape checks what Ensure makes: a login that inherits
// nothing, escapes nothing, belongs to no role and has no members, and that
// Ensure repairs a role someone widened.
func TestTenantRoleShape(t *testing.T) {
	g := NewWithT(t)
	f := newTenantFixture(t)
	a, b := f.ensure(t, "tenant-a"), f.ensure(t, "tenant-b")
	admin, err := pgx.ConnectConfig(t.Context(), dbConfig(f.db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = admin.Close(context.Background()) }()

	type shape struct {
		Login, Inherit, Super, BypassRLS, CreateRole, CreateDB, Replication bool
		ConnLimit, Memberships                                              int
	}
	shapeOf := func(role string) shape {
		var s shape
		g.Expect(admin.QueryRow(t.Context(), `SELECT rolcanlogin, rolinherit, rolsuper, rolbypassrls, rolcreaterole,
			rolcreatedb, rolreplication, rolconnlimit,
			(SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid OR m.roleid = r.oid)
			FROM pg_roles r WHERE rolname = $1`, role).Scan(&s.Login, &s.Inherit, &s.Super, &s.BypassRLS, &s.CreateRole,
			&s.CreateDB, &s.Replication, &s.ConnLimit, &s.Memberships)).To(Succeed())
		return s
	}
	want := shape{Login: true, ConnLimit: 20}
	g.Expect(shapeOf(a.Role)).To(Equal(want))

	// Someone grants B's role to A and lets A create databases: Ensure
	// takes both back, and SET ROLE fails again.
	for _, sql := range []string{
		"GRANT " + pgx.Identifier{b.Role}.Sanitize() + " TO " + pgx.Identifier{a.Role}.Sanitize(),
		"ALTER ROLE " + pgx.Identifier{a.Role}.Sanitize() + " CREATEDB INHERIT",
	} {
		_, err := admin.Exec(t.Context(), sql)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(shapeOf(a.Role)).NotTo(Equal(want))
	again := f.ensure(t, "tenant-a")
	g.Expect(again).To(Equal(a), "same role, generation and password")
	g.Expect(shapeOf(a.Role)).To(Equal(want))
	conn, err := pgx.ConnectConfig(t.Context(), f.config(a))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(t.Context(), "SET ROLE "+pgx.Identifier{b.Role}.Sanitize())
	g.Expect(pgCode(err)).To(Equal(codeInsufficientPrivilege))

	// A superuser role is never handed to a tenant.
	_, err = admin.Exec(t.Context(), "ALTER ROLE "+pgx.Identifier{b.Role}.Sanitize()+" SUPERUSER")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.roles.Ensure(t.Context(), "tenant-b", f.password)
	g.Expect(err).To(MatchError(ContainSubstring("refusing to hand it to a tenant")))
	_, err = admin.Exec(t.Context(), "ALTER ROLE "+pgx.Identifier{b.Role}.Sanitize()+" NOSUPERUSER")
	g.Expect(err).NotTo(HaveOccurred())

	// The platform role's name cannot become a tenant's.
	prefixless, err := NewTenantRoles(t.Context(), dbURL(f.db), TenantRolesOptions{Prefix: "picobot_"})
	g.Expect(err).NotTo(HaveOccurred())
	defer prefixless.Close()
	_, err = prefixless.Ensure(t.Context(), "app", f.password)
	g.Expect(err).To(MatchError(ContainSubstring(`role "picobot_app" is a platform role`)))
	_, err = f.roles.Ensure(t.Context(), "", f.password)
	g.Expect(err).To(MatchError(ContainSubstring("empty tenant")))
}

// TestTenantRoleRotation rotates A's password: the old one is refused at
// login, the new one works, B is untouched.
func TestTenantRoleRotation(t *testing.T) {
	g := NewWithT(t)
	f := newTenantFixture(t)
	a, b := f.ensure(t, "tenant-a"), f.ensure(t, "tenant-b")
	rotated, err := f.roles.Rotate(t.Context(), "tenant-a", f.password)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rotated.Generation).To(Equal(a.Generation + 1))
	g.Expect(rotated.Password).NotTo(Equal(a.Password))
	g.Expect(f.ensure(t, "tenant-a")).To(Equal(rotated), "Ensure keeps the rotated generation")

	_, err = pgx.ConnectConfig(t.Context(), f.config(a))
	g.Expect(pgCode(err)).To(Equal(codeInvalidPassword), "the old password is refused: %v", err)
	for _, r := range []TenantRole{rotated, b} {
		conn, err := pgx.ConnectConfig(t.Context(), f.config(r))
		g.Expect(err).NotTo(HaveOccurred())
		_ = conn.Close(t.Context())
	}
	// A password is never B's with A's role name.
	wrong := rotated
	wrong.Password = b.Password
	_, err = pgx.ConnectConfig(t.Context(), f.config(wrong))
	g.Expect(pgCode(err)).To(Equal(codeInvalidPassword))
}

// TestUnmappedRoleSeesNothing: a login role with the application's grants
// but no row in tenant_roles sees and writes nothing, whatever it sets.
func TestUnmappedRoleSeesNothing(t *testing.T) {
	g := NewWithT(t)
	f := newTenantFixture(t)
	seed(t, f.openStore(t, f.ensure(t, "tenant-a")), "tenant-a", 1)
	role := fmt.Sprintf("pbt_stray_%d_%d", os.Getpid(), dbCounter.Add(1))
	g.Expect(adminExec(t.Context(), f.db, "CREATE ROLE "+role+" LOGIN PASSWORD 'stray'")).To(Succeed())
	t.Cleanup(func() {
		_ = adminExec(context.Background(), f.db, "DROP OWNED BY "+role)
		_ = adminExec(context.Background(), f.db, "DROP ROLE "+role)
	})
	admin, err := pgx.ConnectConfig(t.Context(), dbConfig(f.db))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = admin.Close(context.Background()) }()
	g.Expect(grantApp(t.Context(), admin, role)).To(Succeed())

	cfg := dbConfig(f.db)
	cfg.User, cfg.Password = role, "stray"
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(t.Context(), `SELECT set_config('picobot.tenant', 'tenant-a', false)`)
	g.Expect(err).NotTo(HaveOccurred())
	var n int
	g.Expect(conn.QueryRow(t.Context(), "SELECT count(*) FROM messages").Scan(&n)).To(Succeed())
	g.Expect(n).To(BeZero())
}

// routedStore is a Store whose every tenant runs on its own tenant role,
// provisioned on first use.
func routedStore(t *testing.T, f *tenantFixture) *Store {
	var mu sync.Mutex
	pools := map[string]*pgxpool.Pool{}
	t.Cleanup(func() {
		for _, p := range pools {
			p.Close()
		}
	})
	return &Store{route: func(tenant string) (*pgxpool.Pool, error) {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := pools[tenant]; ok {
			return p, nil
		}
		r, err := f.roles.Ensure(context.Background(), tenant, f.password)
		if err != nil {
			return nil, err
		}
		cfg, err := pgxpool.ParseConfig("")
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig = f.config(r)
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return nil, err
		}
		pools[tenant] = p
		return p, nil
	}}
}

// TestConformanceTenantRoles runs the store conformance suite with every
// tenant on its own tenant role.
func TestConformanceTenantRoles(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return routedStore(t, newTenantFixture(t))
	})
}

// BenchmarkAppendAndLoadLast50TenantRole is BenchmarkAppendAndLoadLast50
// (which runs as the platform role) as a tenant role.
func BenchmarkAppendAndLoadLast50TenantRole(b *testing.B) {
	f := newTenantFixture(b)
	st := f.openStore(b, f.ensure(b, "tenant-a"))
	storetest.BenchmarkAppendAndLoadLast50(b, st)
}

// BenchmarkAppendAndLoadLast50SettingPolicy is BenchmarkAppendAndLoadLast50
// with the policies as they were before tenant roles (comparing with
// current_setting('picobot.tenant') directly), to measure what
// picobot_tenant() costs.
func BenchmarkAppendAndLoadLast50SettingPolicy(b *testing.B) {
	storetest.BenchmarkAppendAndLoadLast50(b, settingPolicyStore(b))
}

// settingPolicyStore opens a store as the platform role on a database whose
// policies are as they were before tenant roles.
func settingPolicyStore(b *testing.B) *Store {
	st, db := newStore(b)
	for _, table := range appTables {
		err := adminExec(context.Background(), db, "ALTER POLICY tenant_isolation ON "+pgx.Identifier{table}.Sanitize()+
			" USING (tenant = current_setting('picobot.tenant', true)) WITH CHECK (tenant = current_setting('picobot.tenant', true))")
		if err != nil {
			b.Fatal(err)
		}
	}
	return st
}

// BenchmarkTenantRoleOverhead compares the tenant-role path with the
// setting-keyed policies it replaced on a busy machine: it alternates one
// iteration of BenchmarkAppendAndLoadLast50 on each (two databases, one
// server), so both see the same load, and reports each one's median
// iteration and the tenant role's overhead in percent (target: under 5).
func BenchmarkTenantRoleOverhead(b *testing.B) {
	setting := storetest.AppendAndLoadLast50(b, settingPolicyStore(b))
	f := newTenantFixture(b)
	tenant := storetest.AppendAndLoadLast50(b, f.openStore(b, f.ensure(b, "tenant-a")))
	var ds, dt []time.Duration
	timed := func(turn func() error, into *[]time.Duration) {
		begin := time.Now()
		if err := turn(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(begin))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // neither always goes first
			timed(setting, &ds)
			timed(tenant, &dt)
		} else {
			timed(tenant, &dt)
			timed(setting, &ds)
		}
	}
	b.StopTimer()
	slices.Sort(ds)
	slices.Sort(dt)
	ms, mt := ds[len(ds)/2], dt[len(dt)/2]
	b.ReportMetric(float64(ms.Microseconds()), "setting-p50-us")
	b.ReportMetric(float64(mt.Microseconds()), "tenant-p50-us")
	b.ReportMetric(100*(float64(mt)-float64(ms))/float64(ms), "overhead-%")
}

// BenchmarkAuditAppendTenantRole is storetest.BenchmarkAuditAppend as a
// tenant role (the session pods' credentials).
func BenchmarkAuditAppendTenantRole(b *testing.B) {
	f := newTenantFixture(b)
	storetest.BenchmarkAuditAppend(b, f.openStore(b, f.ensure(b, "bench")))
}
