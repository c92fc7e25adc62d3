//go:build linux

package execserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
	"github.com/picobot/picobot/runtime/tool/builtin"
)

// The runtime side of these tests is this test process; it holds
// plantedSecret in its initial environment block (see TestMain), where
// /proc/<pid>/environ shows it, and a secret file of its own user. The
// sandbox side is the exec server, this binary re-executed as another user
// (serverMain), with serverSecret in its own environment.
const (
	plantedSecret = "sk-planted-in-the-runtime-environ"
	serverSecret  = "server-own-environment-secret"
	fileSecret    = "runtime-file-secret-value"
	// sandboxUID is the sandbox container's user; sharedGID the pod's
	// fsGroup, which both sides have.
	sandboxUID = 65533
	sharedGID  = 65532
)

func TestMain(m *testing.M) {
	sandboxtest.MaybeServeMCPProbe()
	switch {
	case os.Getenv("PICOBOT_TEST_EXEC_SERVER") == "remote":
		remoteServerMain()
	case os.Getenv("PICOBOT_TEST_EXEC_SERVER") != "":
		serverMain()
	case os.Getenv("PICOBOT_TEST_DIAL") != "":
		dialMain()
	case os.Getenv("PICOBOT_TEST_PLANTED") == "":
		// Re-exec with the secret in the initial environment: os.Setenv
		// would not put it where /proc/<pid>/environ reads.
		env := append(os.Environ(), "PICOBOT_TEST_PLANTED=1", "PICOBOT_SECRET_LLM_OPENAI="+plantedSecret)
		if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
			fmt.Fprintf(os.Stderr, "failed to re-exec the test binary: %v\n", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// serverMain is the sandbox container: `picobot sandbox-server` does the
// same.
func serverMain() {
	syscall.Umask(0o007)
	srv, err := execserver.New(execserver.Config{Socket: os.Getenv(execserver.SocketEnv), Workspace: os.Getenv("PICOBOT_SANDBOX_WORKSPACE"),
		Tools: builtin.FileTools})
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		err = srv.Serve(ctx)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// dialMain tries to start a program through the server as the sandbox's
// own user, as a program of the sandbox could.
func dialMain() {
	c := execserver.NewClient(os.Getenv("PICOBOT_TEST_DIAL"))
	p, err := c.Start(execserver.Request{Workspace: os.Getenv("PICOBOT_TEST_WS"), Env: []string{"PATH=/usr/bin:/bin"},
		Argv: []string{"echo", "started-by-the-sandbox"}}, nil, os.Stdout, os.Stdout)
	if err == nil {
		_, _, err = p.Wait()
	}
	fmt.Println("dial result:", err)
	os.Exit(0)
}

// pod is a session pod's layout on this machine: a workspace folder and a
// socket folder of the shared group, the exec server running as the
// sandbox's user, and the runtime's secret file.
type pod struct {
	root, wsRoot, ws, socket, secretFile string
	// bin is the test binary as the sandbox's user may run it.
	bin       string
	server    *exec.Cmd
	serverLog *bytes.Buffer
	client    *execserver.Client
	// remote is set for a sandbox pod (newSandboxPod): the client of its
	// server over TCP and TLS, which socket (a relay) also reaches.
	remote *execserver.Client
	// addr, cred: the sandbox pod's server address and its pair's
	// credentials.
	addr string
	cred paircred.Credentials
}

func newPod(t testing.TB) *pod {
	t.Helper()
	return startPod(t, false, nil)
}

// newSandboxPod is a pod whose exec server runs as a sandbox pod's: over
// TCP and TLS on a loopback port, with the runtime's tools reaching it
// through the runtime's relay (execserver.Relay) at p.socket.
func newSandboxPod(t testing.TB) *pod {
	t.Helper()
	return startPod(t, true, nil)
}

// startPod starts a pod; a sandbox pod (remote) with the pair's
// credentials cred (nil: new ones).
func startPod(t testing.TB, remote bool, cred *paircred.Credentials) *pod {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the exec server tests run the server as another user, which needs root (as the kubelet has)")
	}
	root, err := os.MkdirTemp("/var/tmp", "picobot-execserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	must(t, os.Chmod(root, 0o711))
	p := &pod{root: root, wsRoot: filepath.Join(root, "workspaces"), socket: filepath.Join(root, "run", "exec.sock"),
		secretFile: filepath.Join(root, "runtime-secret.txt"), serverLog: &bytes.Buffer{}}
	p.ws = filepath.Join(p.wsRoot, "s1")
	for _, d := range []string{p.wsRoot, filepath.Dir(p.socket)} {
		must(t, os.MkdirAll(d, 0o700))
		must(t, os.Chown(d, 0, sharedGID))
		must(t, os.Chmod(d, 0o770|os.ModeSetgid))
	}
	// The shell tools open a workspace to the group before its first
	// program (TestToolsOpenTheirWorkspace); here it is open already.
	must(t, os.Mkdir(p.ws, 0o770|os.ModeSetgid))
	must(t, os.Chmod(p.ws, 0o770|os.ModeSetgid))
	must(t, os.WriteFile(p.secretFile, []byte(fileSecret), 0o600))
	bin := filepath.Join(root, "server")
	copyFile(t, "/proc/self/exe", bin)
	p.bin = bin
	p.server = exec.Command(bin)
	p.server.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "PICOBOT_TEST_EXEC_SERVER=1", "PICOBOT_TEST_PLANTED=1",
		execserver.SocketEnv + "=" + p.socket, "PICOBOT_SANDBOX_WORKSPACE=" + p.wsRoot, "SERVER_SECRET=" + serverSecret}
	if remote {
		if cred == nil {
			c, err := paircred.Generate("test-pair", time.Now())
			must(t, err)
			cred = &c
		}
		p.cred = *cred
		p.server.Env = append(p.server.Env, "PICOBOT_TEST_EXEC_SERVER=remote", "PICOBOT_TEST_ADDR_FILE="+filepath.Join(filepath.Dir(p.socket), "addr"),
			paircred.EnvCert+"="+string(cred.CertPEM), paircred.EnvKey+"="+string(cred.KeyPEM), paircred.EnvToken+"="+cred.Token)
	}
	p.server.Stdout, p.server.Stderr = p.serverLog, p.serverLog
	p.server.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sandboxUID, Gid: sandboxUID, Groups: []uint32{sharedGID}}}
	must(t, p.server.Start())
	t.Cleanup(func() {
		_ = p.server.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.server.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.server.Process.Kill()
			<-done
		}
	})
	ready := p.socket
	if remote {
		ready = filepath.Join(filepath.Dir(p.socket), "addr")
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if i == 1000 {
			t.Fatalf("the exec server did not listen within 10 s; its log:\n%s", p.serverLog)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if remote {
		b, err := os.ReadFile(ready)
		must(t, err)
		p.addr = string(b)
		p.remote = p.remoteClient(t, p.cred.CertPEM, p.cred.Token)
		ctx, cancel := context.WithCancel(context.Background())
		relay := &execserver.Relay{Socket: p.socket, Client: p.remote}
		l, err := relay.Listen()
		must(t, err)
		done := make(chan error, 1)
		go func() { done <- relay.Serve(ctx, l) }()
		t.Cleanup(func() {
			cancel()
			must(t, <-done)
		})
	}
	p.client = execserver.NewClient(p.socket)
	return p
}

// remoteClient is a client of the sandbox pod's server that pins certPEM
// and shows token.
func (p *pod) remoteClient(t testing.TB, certPEM []byte, token string) *execserver.Client {
	t.Helper()
	c, err := execserver.NewRemoteClient(execserver.RemoteConfig{CertPEM: certPEM, Token: token, Wait: 3 * time.Second,
		Address: func(context.Context, string) (string, error) { return p.addr, nil }})
	must(t, err)
	return c
}

// remoteServerMain is a sandbox pod: `picobot sandbox-server --listen`
// does the same.
func remoteServerMain() {
	syscall.Umask(0o007)
	err := func() error {
		srv, err := execserver.New(execserver.Config{Workspace: os.Getenv("PICOBOT_SANDBOX_WORKSPACE"), Tools: builtin.FileTools, CreateWorkspaces: true})
		if err != nil {
			return err
		}
		cert, err := tls.X509KeyPair([]byte(os.Getenv(paircred.EnvCert)), []byte(os.Getenv(paircred.EnvKey)))
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		file := os.Getenv("PICOBOT_TEST_ADDR_FILE")
		if err := os.WriteFile(file+".new", []byte(l.Addr().String()), 0o600); err != nil {
			return err
		}
		if err := os.Rename(file+".new", file); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		return srv.ServeTLS(ctx, l, os.Getenv(paircred.EnvToken), &tls.Config{Certificates: []tls.Certificate{cert}})
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	must(t, err)
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
}

// env is a program's environment as the shell tools build it.
func (p *pod) env(extra ...string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + p.ws, "TMPDIR=" + filepath.Join(p.ws, ".tmp")}, extra...)
}

// run runs argv through the server and returns its output and status.
func (p *pod) run(t testing.TB, stdin string, argv ...string) (string, syscall.WaitStatus) {
	t.Helper()
	return p.runWith(t, p.ws, stdin, argv...)
}

// runIn runs argv in workspace ws.
func (p *pod) runIn(t testing.TB, ws string, argv ...string) (string, syscall.WaitStatus) {
	t.Helper()
	return p.runWith(t, ws, "", argv...)
}

func (p *pod) runWith(t testing.TB, ws, stdin string, argv ...string) (string, syscall.WaitStatus) {
	t.Helper()
	r, w, err := os.Pipe()
	must(t, err)
	var in *os.File
	if stdin != "" {
		var inW *os.File
		in, inW, err = os.Pipe()
		must(t, err)
		go func() { _, _ = inW.WriteString(stdin); _ = inW.Close() }()
	}
	proc, err := p.client.Start(execserver.Request{Workspace: ws, Env: p.env(), Argv: argv}, in, w, w)
	_ = w.Close()
	if in != nil {
		_ = in.Close()
	}
	if err != nil {
		_ = r.Close()
		t.Fatalf("failed to start %v: %v\nserver log:\n%s", argv, err, p.serverLog)
	}
	out, _ := io.ReadAll(r)
	_ = r.Close()
	status, ok, err := proc.Wait()
	proc.Close()
	if !ok {
		t.Fatalf("no status for %v: %v", argv, err)
	}
	return string(out), status
}
