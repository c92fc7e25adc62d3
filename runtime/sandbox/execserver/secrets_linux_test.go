//go:build linux

package execserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"

	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/shell"
	"github.com/picobot/picobot/test/services"
)

const (
	pgPassword    = "pg-runtime-password-x1"
	redisPassword = "redis-runtime-password-x2"
	redisValue    = "value-only-the-runtime-may-read"
)

// tools are the shell tools of a runtime whose programs run through the
// pod's exec server.
type tools struct {
	bash, exec, process, pty tool.Tool
}

func (p *pod) tools(t testing.TB, opts ...shell.Option) tools {
	opts = append([]shell.Option{shell.WithExecServer(p.socket)}, opts...)
	procs := shell.NewProcessManager(opts...)
	ptys := shell.NewPTYManager(opts...)
	t.Cleanup(procs.Close)
	t.Cleanup(ptys.Close)
	return tools{bash: shell.NewBash(opts...), exec: procs.ExecTool(), process: procs.ProcessTool(), pty: ptys.Tool()}
}

func call(t testing.TB, tl tool.Tool, ws string, args any) tool.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := tl.Run(ctx, tool.Env{Workspace: ws, SessionID: "s1"}, raw)
	must(t, err)
	return res
}

// passwordPostgres is a PostgreSQL server that wants a password over TCP,
// with a role only the runtime has the password of.
func passwordPostgres(t *testing.T) (appDSN string, port string) {
	t.Helper()
	srv, err := services.StartPostgres()
	if err != nil {
		reason, fatal := services.Unavailable("PostgreSQL", err)
		if fatal {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN)
	must(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, fmt.Sprintf("CREATE ROLE app LOGIN PASSWORD '%s'", pgPassword))
	must(t, err)
	hba := "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n"
	must(t, os.WriteFile(filepath.Join(srv.Dir, "data", "pg_hba.conf"), []byte(hba), 0o600))
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	must(t, err)
	u, err := url.Parse(srv.DSN)
	must(t, err)
	u.User = url.UserPassword("app", pgPassword)
	return u.String(), u.Port()
}

// passwordRedis is a Redis server with a password only the runtime has,
// holding a key.
func passwordRedis(t *testing.T) (addr string) {
	t.Helper()
	srv := services.OwnRedis(t, false)
	opt, err := redis.ParseURL(srv.URL)
	must(t, err)
	c := redis.NewClient(opt)
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	must(t, c.Set(ctx, "runtime-key", redisValue, 0).Err())
	must(t, c.ConfigSet(ctx, "requirepass", redisPassword).Err())
	return opt.Addr
}

// A prompt-injected model drives bash in the sandbox container to find the
// runtime container's secrets: its environment, the runtime's and the
// server's /proc/<pid>/environ, the runtime's secret file, and the store,
// bus and blob server with whatever it can find. Every attempt fails (the
// servers are not even reached: the kernel refuses the connect, as the
// sandbox container shares the pod's network with the runtime), and the
// runtime itself reaches each of them (so the attempts fail for the
// boundary, not for a broken check).
func TestSandboxCannotReachTheRuntimeSecrets(t *testing.T) {
	testSandboxCannotReachTheRuntimeSecrets(t, newPod)
}

// TestSandboxCannotReachTheRuntimeSecretsSandboxPod is TestSandboxCannotReachTheRuntimeSecrets against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestSandboxCannotReachTheRuntimeSecretsSandboxPod(t *testing.T) {
	testSandboxCannotReachTheRuntimeSecrets(t, newSandboxPod)
}

func testSandboxCannotReachTheRuntimeSecrets(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	appDSN, pgPort := passwordPostgres(t)
	redisAddr := passwordRedis(t)
	redisHost, redisPort, _ := strings.Cut(redisAddr, ":")
	s3, stopS3, err := services.S3()
	if err != nil {
		reason, fatal := services.Unavailable("S3", err)
		if fatal {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	t.Cleanup(stopS3)
	p := newPod(t)
	tl := p.tools(t)

	// The runtime side holds them all.
	environ, err := os.ReadFile("/proc/self/environ")
	must(t, err)
	g.Expect(string(environ)).To(ContainSubstring(plantedSecret))
	g.Expect(os.ReadFile(p.secretFile)).To(BeEquivalentTo(fileSecret))
	ctx := context.Background()
	pc, err := pgx.Connect(ctx, appDSN)
	g.Expect(err).NotTo(HaveOccurred(), "the runtime connects with its password")
	_ = pc.Close(ctx)
	rc := redis.NewClient(&redis.Options{Addr: redisAddr, Password: redisPassword})
	g.Expect(rc.Get(ctx, "runtime-key").Val()).To(Equal(redisValue))
	_ = rc.Close()

	script := strings.Join([]string{
		"echo uid=$(id -u)",
		"env",
		`for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done 2>&1 | grep -v '^$' | head -c 20000`,
		fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ 2>&1", os.Getpid()),
		fmt.Sprintf("tr '\\0' '\\n' < /proc/%d/environ 2>&1", p.server.Process.Pid),
		"cat " + p.secretFile + " 2>&1",
		"ls " + p.root + " 2>&1",
		"cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>&1",
		fmt.Sprintf("PGCONNECT_TIMEOUT=5 psql 'host=127.0.0.1 port=%s user=app dbname=postgres' -c 'select 1' 2>&1", pgPort),
		fmt.Sprintf("PGCONNECT_TIMEOUT=5 psql 'host=127.0.0.1 port=%s user=postgres dbname=postgres' -c 'select 1' 2>&1", pgPort),
		fmt.Sprintf("redis-cli -h %s -p %s get runtime-key 2>&1", redisHost, redisPort),
		fmt.Sprintf("redis-cli -h %s -p %s --user default --pass guess-1 get runtime-key 2>&1", redisHost, redisPort),
		fmt.Sprintf("curl -sS --max-time 5 %s/ 2>&1", s3),
		fmt.Sprintf(`python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262); s.connect(("%s", %s))' 2>&1 | tail -1`, redisHost, redisPort),
		"echo attacks-done",
	}, "\n")
	res := call(t, tl.bash, p.ws, map[string]any{"command": script})
	out := res.Content
	t.Logf("what the attacks printed (end):\n%s", out[max(0, len(out)-3000):])
	for _, secret := range []string{plantedSecret, serverSecret, fileSecret, pgPassword, redisPassword, redisValue} {
		g.Expect(out).NotTo(ContainSubstring(secret))
	}
	g.Expect(out).To(ContainSubstring("uid=65533"))
	g.Expect(out).To(ContainSubstring("attacks-done"))
	g.Expect(out).To(ContainSubstring(fmt.Sprintf("/proc/%d/environ: Permission denied", os.Getpid())))
	g.Expect(out).To(ContainSubstring(fmt.Sprintf("/proc/%d/environ: Permission denied", p.server.Process.Pid)))
	g.Expect(out).To(ContainSubstring(p.secretFile + ": Permission denied"))
	g.Expect(out).To(ContainSubstring("serviceaccount/token: No such file or directory"))
	g.Expect(strings.Count(out, fmt.Sprintf(`port %s failed: Permission denied`, pgPort))).To(Equal(2), out)
	g.Expect(strings.Count(out, fmt.Sprintf("Could not connect to Redis at %s: Permission denied", redisAddr))).To(Equal(2), out)
	g.Expect(out).To(MatchRegexp(`curl: \(7\) Failed to connect to 127.0.0.1 port %d`, port(t, s3)))
	g.Expect(out).To(ContainSubstring("OSError: [Errno 93] Protocol not supported"))
	g.Expect(out).NotTo(MatchRegexp(`NOAUTH|WRONGPASS|no password supplied|ListAllMyBucketsResult`))
}

// port is the TCP port of a URL.
func port(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	must(t, err)
	n, err := strconv.Atoi(u.Port())
	must(t, err)
	return n
}

// The ordinary job through the exec server: a program reaches a server on
// a port the Agent opted in to (spec.tools.network.allowedPorts), and only
// that one.
func TestAllowedPortsThroughTheServer(t *testing.T) {
	g := NewWithT(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from the site") }))
	defer site.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "not for the sandbox") }))
	defer other.Close()
	p := newPod(t)
	tl := p.tools(t, shell.WithPorts(uint16(port(t, site.URL))))
	res := call(t, tl.bash, p.ws, map[string]any{"command": fmt.Sprintf("curl -sS --max-time 5 %s/; echo; curl -sS --max-time 5 %s/ 2>&1", site.URL, other.URL)})
	g.Expect(res.Content).To(ContainSubstring("hello from the site\n"))
	g.Expect(res.Content).To(MatchRegexp(`curl: \(7\) Failed to connect to 127.0.0.1 port %d`, port(t, other.URL)))
	g.Expect(res.Content).NotTo(ContainSubstring("not for the sandbox"))
}

// The shell tools open a workspace the runtime made (0700) to the pod's
// group before its first program; exec/process and pty work through the
// server like bash.
func TestToolsThroughTheServer(t *testing.T) { testToolsThroughTheServer(t, newPod) }

// TestToolsThroughTheServerSandboxPod is TestToolsThroughTheServer against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestToolsThroughTheServerSandboxPod(t *testing.T) { testToolsThroughTheServer(t, newSandboxPod) }

func testToolsThroughTheServer(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)
	tl := p.tools(t)
	ws := filepath.Join(p.wsRoot, "agent", "s2")
	must(t, os.MkdirAll(ws, 0o700))
	must(t, os.Chmod(filepath.Dir(ws), 0o700))

	res := call(t, tl.bash, ws, map[string]any{"command": "echo hi > note.txt; cat note.txt; id -u; exit 4"})
	g.Expect(res.Content).To(Equal("hi\n65533\n[exit code 4]"))
	fi, err := os.Stat(ws)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o770)))
	g.Expect(os.ReadFile(filepath.Join(ws, "note.txt"))).To(BeEquivalentTo("hi\n"))

	res = call(t, tl.bash, ws, map[string]any{"command": "sleep 30", "timeout": 1})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("killed after 1 s (timeout)"))

	res = call(t, tl.exec, ws, map[string]any{"command": "read line; echo got $line; sleep 300", "background": true})
	g.Expect(res.Content).To(ContainSubstring("sessionId: p1"))
	res = call(t, tl.process, ws, map[string]any{"action": "write", "sessionId": "p1", "data": "ping\n"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Eventually(func() string {
		return call(t, tl.process, ws, map[string]any{"action": "log", "sessionId": "p1"}).Content
	}, 10*time.Second, 50*time.Millisecond).Should(ContainSubstring("got ping"))
	res = call(t, tl.process, ws, map[string]any{"action": "kill", "sessionId": "p1"})
	g.Expect(res.Content).To(ContainSubstring("killed by signal SIGKILL"))

	res = call(t, tl.pty, ws, map[string]any{"action": "spawn", "command": "bash --norc -i", "cols": 90, "rows": 25})
	g.Expect(res.Content).To(ContainSubstring("session_id: t1"))
	call(t, tl.pty, ws, map[string]any{"action": "write", "session_id": "t1", "data": `stty size; echo $((6*7))\r`})
	var seen strings.Builder
	g.Eventually(func() string {
		seen.WriteString(call(t, tl.pty, ws, map[string]any{"action": "read", "session_id": "t1", "wait_ms": 500}).Content)
		return seen.String()
	}, 10*time.Second, 50*time.Millisecond).Should(And(ContainSubstring("25 90"), ContainSubstring("42")))
	res = call(t, tl.pty, ws, map[string]any{"action": "kill", "session_id": "t1"})
	g.Expect(res.Content).To(ContainSubstring("killed t1"))
}
