//go:build linux

package sandbox

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/test/services"
)

// port is the TCP port of a URL or DSN.
func port(t *testing.T, raw string) uint16 {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("failed to parse %q: %v", raw, err)
	}
	p, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		t.Fatalf("no port in %q: %v", raw, err)
	}
	return uint16(p)
}

// target is a server of the runtime's that a program must not reach.
type target struct {
	name string
	port uint16
}

// runtimeServices starts real PostgreSQL, Redis and S3 servers on loopback,
// as `picobot serve` or a session pod reaches them, and an HTTP server
// standing in for the gateway's API.
func runtimeServices(t *testing.T) []target {
	t.Helper()
	skip := func(what string, err error) {
		reason, fatal := services.Unavailable(what, err)
		if fatal {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	pg, err := services.StartPostgres()
	if err != nil {
		skip("PostgreSQL", err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	rd, err := services.StartRedis(false)
	if err != nil {
		skip("Redis", err)
	}
	t.Cleanup(func() { _ = rd.Stop() })
	s3, stopS3, err := services.S3()
	if err != nil {
		skip("S3", err)
	}
	t.Cleanup(stopS3)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "gateway") }))
	t.Cleanup(gw.Close)
	return []target{{"postgres", port(t, pg.DSN)}, {"redis", port(t, rd.URL)}, {"s3", port(t, s3)}, {"gateway", port(t, gw.URL)}}
}

func needNetworkLayer(t *testing.T) {
	t.Helper()
	if r := Probe(); !r.Network {
		t.Skipf("LOUD SKIP: this kernel gives no network layer: %s", r)
	}
}

// Python programs a hostile tool would run, in the sandbox and, to prove
// the hole they go for is real, in this test's own process tree.
const (
	// mptcpConnect opens a Multipath TCP socket, which falls back to plain
	// TCP against Redis, sends PING and prints the answer.
	mptcpConnect = `import socket, sys
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    s.settimeout(5)
    s.connect(("127.0.0.1", %d))
    s.sendall(b"PING\r\n")
    print("mptcp:", s.recv(64))
except OSError as e:
    print("mptcp refused:", e)
`
	// ioUringSetup asks for an io_uring, whose socket and connect
	// operations no seccomp filter sees.
	ioUringSetup = `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(425, 4, ctypes.create_string_buffer(120))
print("io_uring fd=%d errno=%d" % (fd, ctypes.get_errno()))
`
)

// A prompt-injected program goes after the runtime's store, bus, blob
// server and gateway over TCP, as bash and Python would: the kernel
// refuses each connect (EACCES from Landlock), and the tricks around
// Landlock's TCP rules (Multipath TCP, io_uring) are refused by the socket
// filter. This test process reaches every one of them (the refusals are the
// sandbox's).
func TestProgramsCannotConnectToTheRuntimesServices(t *testing.T) {
	needNetworkLayer(t)
	targets := runtimeServices(t)
	g := NewWithT(t)
	var script strings.Builder
	for _, tg := range targets {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", tg.port), 5*time.Second)
		g.Expect(err).NotTo(HaveOccurred(), "the test process reaches %s", tg.name)
		_ = c.Close()
		fmt.Fprintf(&script, "(exec 3<>/dev/tcp/127.0.0.1/%d) && echo '%s: connected' || echo '%s: refused'\n", tg.port, tg.name, tg.name)
		fmt.Fprintf(&script, "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", %d), 5); print(\"%s: python connected\")' 2>&1 | tail -1\n",
			tg.port, tg.name)
	}
	redis := targets[1].port
	fmt.Fprintf(&script, "python3 -c '%s'\n", fmt.Sprintf(mptcpConnect, redis))
	fmt.Fprintf(&script, "python3 -c '%s'\n", ioUringSetup)
	for _, ns := range []bool{true, false} {
		t.Run(fmt.Sprintf("namespaces=%v", ns), func(t *testing.T) {
			if ns && !Probe().Namespaces {
				t.Skipf("LOUD SKIP: this kernel refuses user namespaces: %s", Probe())
			}
			g := NewWithT(t)
			b := newBox(t)
			out, ws := run(t, Spec{Workspace: b.ws}, ns, script.String())
			t.Logf("the attacks printed:\n%s", out)
			g.Expect(ws.ExitStatus()).To(BeZero(), out)
			g.Expect(out).NotTo(ContainSubstring("connected"))
			for _, tg := range targets {
				g.Expect(out).To(ContainSubstring(fmt.Sprintf("/dev/tcp/127.0.0.1/%d: Permission denied", tg.port)))
				g.Expect(out).To(ContainSubstring(tg.name + ": refused"))
			}
			g.Expect(strings.Count(out, "PermissionError: [Errno 13] Permission denied")).To(Equal(len(targets)), out)
			g.Expect(out).To(ContainSubstring("mptcp refused: [Errno 93] Protocol not supported"))
			g.Expect(out).NotTo(ContainSubstring("mptcp: b'"))
			g.Expect(out).To(ContainSubstring("io_uring fd=-1 errno=38"))
		})
	}

	// Without the sandbox, on a kernel that has them, both tricks work:
	// they are holes the filter closes, not attacks that fail anyway.
	if enabled, _ := os.ReadFile("/proc/sys/net/mptcp/enabled"); strings.TrimSpace(string(enabled)) == "1" {
		out, _ := exec.Command("python3", "-c", fmt.Sprintf(mptcpConnect, redis)).CombinedOutput()
		// Redis answered (NOAUTH: it wants the runtime's password).
		g.Expect(string(out)).To(ContainSubstring("mptcp: b'"))
	}
	if disabled, _ := os.ReadFile("/proc/sys/kernel/io_uring_disabled"); strings.TrimSpace(string(disabled)) == "0" {
		out, _ := exec.Command("python3", "-c", ioUringSetup).CombinedOutput()
		g.Expect(string(out)).To(MatchRegexp(`io_uring fd=\d+ `))
	}
}

// The ordinary jobs: a program serves on a port of its choosing and
// reaches it when the Agent opted the port in; a server on a default port
// (80, the web) is reached without an opt-in; a port not opted in stays
// closed.
func TestAllowedPortsAreReachable(t *testing.T) {
	needNetworkLayer(t)
	g := NewWithT(t)
	dev, err := services.FreePort()
	g.Expect(err).NotTo(HaveOccurred())
	closed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "closed") }))
	defer closed.Close()
	web := ""
	if l, err := net.Listen("tcp", "127.0.0.1:80"); err == nil {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "web page") }),
			ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer func() { _ = srv.Close() }()
		web = "curl -sS --max-time 5 http://127.0.0.1:80/; echo"
	} else {
		t.Logf("port 80 is taken or closed to this user (%v): the default-port check is left out", err)
	}
	script := fmt.Sprintf(`mkdir -p site && echo dev-page > site/index.html
python3 -m http.server %d --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
for i in $(seq 100); do curl -s --max-time 5 http://127.0.0.1:%d/ && break; sleep 0.1; done
kill %%1
%s
curl -sS --max-time 5 %s/ 2>&1 || echo "not opted in: refused"
`, dev, dev, web, closed.URL)
	b := newBox(t)
	out, ws := run(t, Spec{Workspace: b.ws, AllowedPorts: []uint16{uint16(dev)}}, Probe().Namespaces, script)
	t.Logf("the jobs printed:\n%s", out)
	g.Expect(ws.ExitStatus()).To(BeZero(), out)
	g.Expect(out).To(ContainSubstring("dev-page\n"))
	if web != "" {
		g.Expect(out).To(ContainSubstring("web page\n"))
	}
	g.Expect(out).To(ContainSubstring("not opted in: refused"))
	g.Expect(out).NotTo(ContainSubstring("closed"))
}

// A kernel whose Landlock has no network rules (ABI 1-3, Linux before
// 6.7): health says the layer is missing, why, and how to get it; the other
// layers are reported as they are.
func TestHealthSaysWhenTheNetworkLayerIsMissing(t *testing.T) {
	g := NewWithT(t)
	r := Report{Namespaces: true, PrivateProc: true, LandlockABI: 3, Errors: map[string]string{"network": netMissing(3)}}
	g.Expect(r.Missing()).To(Equal([]string{"network (the kernel's Landlock ABI 3 has no network rules (ABI 4, Linux 6.7+))"}))
	g.Expect(r.String()).To(HaveSuffix("; missing: network (the kernel's Landlock ABI 3 has no network rules (ABI 4, Linux 6.7+))"))
	ok := map[string]bool{}
	for _, c := range r.Checks() {
		ok[c.Name] = c.OK
		if c.Name == "network" {
			g.Expect(c.Message).To(Equal(netMissing(3)))
			g.Expect(c.Fix).To(ContainSubstring("kernel 6.7+"))
		}
	}
	g.Expect(ok).To(Equal(map[string]bool{"environment": true, "namespaces": true, "private /proc": true, "Landlock": true, "network": false}))
	g.Expect(netMissing(0)).To(Equal("the kernel has no Landlock"))
	g.Expect(netMissing(netABI)).To(BeEmpty())
}
