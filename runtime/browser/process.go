package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-rod/rod/lib/cdp"
)

// DefaultBin is where Debian's chromium package installs the browser binary.
const DefaultBin = "/usr/lib/chromium/chromium"

// InstallFix is the exact command that installs the browser on this kind of
// machine; errors and health reports name it.
const InstallFix = "apt-get install -y chromium (then check with `picobot health`); or pass the path of a Chromium 120+ binary"

// MissingError reports a browser executable that is not there or cannot
// start. The browser tool returns its text as is, so the model tells the user
// what to do instead of pretending it browsed.
type MissingError struct {
	Bin string
	Err error
}

// Error implements error.
func (e *MissingError) Error() string {
	return fmt.Sprintf("the browser is not available: %v; fix: %s", e.Err, InstallFix)
}

// Unwrap returns the cause.
func (e *MissingError) Unwrap() error { return e.Err }

// IsMissing reports whether err says the browser executable is missing or
// does not start.
func IsMissing(err error) bool {
	var me *MissingError
	return errors.As(err, &me)
}

// LaunchSpec says how to start one local Chromium.
type LaunchSpec struct {
	// Bin is the browser executable (DefaultBin when empty).
	Bin string
	// UserDataDir is the Chrome profile folder; it must exist.
	UserDataDir string
	// ProxyURL, when set, sends every request through this HTTP proxy
	// (loopback included), which is how the egress policy is enforced.
	ProxyURL string
	// Flags are extra command-line flags ("--name=value").
	Flags []string
	// Port is the DevTools port (0: any free one).
	Port int
	// StartTimeout bounds how long Chromium may take to print its DevTools
	// address (default 30s).
	StartTimeout time.Duration
	// NoSandbox starts Chromium without its own sandbox even when not root:
	// a browser pod (non-root, no capabilities, seccomp RuntimeDefault)
	// cannot create the sandbox's namespaces, and the pod is the sandbox.
	NoSandbox bool
}

// Args returns the command-line flags for spec: headless, no sandbox as
// root, nothing that phones home, DevTools on loopback only, QUIC off (it
// would bypass the proxy) and WebRTC restricted to proxied connections (so no
// UDP at all).
func (s LaunchSpec) Args() []string {
	args := []string{
		"--headless",
		"--disable-gpu",
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--disable-quic",
		"--disable-dev-shm-usage",
		"--disable-extensions",
		"--disable-default-apps",
		"--disable-breakpad",
		"--disable-domain-reliability",
		"--disable-client-side-phishing-detection",
		"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,InterestFeedContentSuggestions",
		"--metrics-recording-only",
		"--mute-audio",
		"--password-store=basic",
		"--use-mock-keychain",
		"--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
		"--webrtc-ip-handling-policy=disable_non_proxied_udp",
		"--window-size=1280,800",
		"--remote-debugging-address=127.0.0.1",
		fmt.Sprintf("--remote-debugging-port=%d", s.Port),
		"--user-data-dir=" + s.UserDataDir,
	}
	if s.NoSandbox || os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
	}
	if s.ProxyURL != "" {
		// <-loopback> removes Chromium's implicit bypass of localhost, so a
		// page cannot reach the machine's own services around the proxy.
		args = append(args, "--proxy-server="+s.ProxyURL, "--proxy-bypass-list=<-loopback>")
	}
	args = append(args, s.Flags...)
	return append(args, "about:blank")
}

// Process is a running local Chromium.
type Process struct {
	cmd *exec.Cmd
	// WebSocketURL is the browser's DevTools WebSocket address.
	WebSocketURL string
	done         chan struct{}
	mu           sync.Mutex
	stderr       []byte // the last few KiB, for error reports
}

// Launch starts Chromium and waits until it serves DevTools. A missing or
// broken executable is a *MissingError.
func Launch(ctx context.Context, spec LaunchSpec) (*Process, error) {
	if spec.Bin == "" {
		spec.Bin = DefaultBin
	}
	if spec.StartTimeout <= 0 {
		spec.StartTimeout = 30 * time.Second
	}
	if fi, err := os.Stat(spec.Bin); err != nil {
		return nil, &MissingError{Bin: spec.Bin, Err: fmt.Errorf("no browser executable at %s", spec.Bin)}
	} else if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, &MissingError{Bin: spec.Bin, Err: fmt.Errorf("%s is not an executable file", spec.Bin)}
	}
	cmd := exec.Command(spec.Bin, spec.Args()...) //nolint:gosec // the binary is configuration, not model input
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), "HOME="+spec.UserDataDir)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("failed to open browser stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, &MissingError{Bin: spec.Bin, Err: fmt.Errorf("failed to start %s: %w", spec.Bin, err)}
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	found := make(chan string, 1)
	go p.readStderr(pipe, found)
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	timer := time.NewTimer(spec.StartTimeout)
	defer timer.Stop()
	select {
	case u := <-found:
		p.WebSocketURL = u
		return p, nil
	case <-p.done:
		return nil, &MissingError{Bin: spec.Bin, Err: fmt.Errorf("%s exited during start-up: %s", spec.Bin, p.lastOutput())}
	case <-timer.C:
		p.Kill()
		return nil, &MissingError{Bin: spec.Bin, Err: fmt.Errorf("%s did not serve DevTools within %s: %s", spec.Bin, spec.StartTimeout, p.lastOutput())}
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("failed to start the browser: %w", ctx.Err())
	}
}

func (p *Process) readStderr(r io.Reader, found chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if !sent {
			if i := strings.Index(line, "DevTools listening on "); i >= 0 {
				found <- strings.TrimSpace(line[i+len("DevTools listening on "):])
				sent = true
				continue
			}
		}
		p.mu.Lock()
		p.stderr = append(p.stderr, line...)
		p.stderr = append(p.stderr, '\n')
		if len(p.stderr) > 4096 {
			p.stderr = p.stderr[len(p.stderr)-4096:]
		}
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

func (p *Process) lastOutput() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := strings.TrimSpace(string(p.stderr))
	if s == "" {
		return "no output"
	}
	return s
}

// PID is the browser's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the browser has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill ends the browser and its helper processes and waits for it.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Stop closes the browser cleanly, killing it if it has not exited within
// grace. A clean close is DevTools' Browser.close: on a signal Chromium
// exits without writing the cookie store (measured: a persistent cookie set
// before SIGTERM was not in the profile afterwards; after Browser.close it
// was), which a persistent profile must keep.
func (p *Process) Stop(grace time.Duration) {
	deadline := time.Now().Add(grace)
	if !p.closeViaDevTools(grace) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(time.Until(deadline)):
		p.Kill()
		return
	}
	// Helpers may still be writing as the browser exits: give them the
	// rest of the grace period, then end any that are left.
	for syscall.Kill(-p.cmd.Process.Pid, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// closeViaDevTools sends Browser.close over the local DevTools endpoint and
// reports whether Chromium accepted it.
func (p *Process) closeViaDevTools(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), min(timeout, 5*time.Second))
	defer cancel()
	ws := &cdp.WebSocket{}
	if err := ws.Connect(ctx, p.WebSocketURL, nil); err != nil {
		return false
	}
	defer func() { _ = ws.Close() }()
	_, err := cdp.New().Start(ws).Call(ctx, "", "Browser.close", nil)
	if err != nil {
		// The connection drops as the browser exits, which may race the
		// answer: it counts as accepted if the browser is going.
		select {
		case <-p.done:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}
	return true
}

// Endpoint is a remote browser's DevTools address behind the authenticating
// proxy of `picobot browser`.
type Endpoint struct {
	// URL is the proxy's base address (http://host:port).
	URL string
	// Token is the per-pod token the proxy requires.
	Token string
}

// DialDevTools connects to a remote browser through its proxy: it asks
// /json/version for the browser's WebSocket path and connects to it at the
// proxy's host, sending the token on both requests.
func DialDevTools(ctx context.Context, ep Endpoint) (*cdp.WebSocket, error) {
	base, err := url.Parse(ep.URL)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("invalid browser endpoint %q", ep.URL)
	}
	header := http.Header{}
	if ep.Token != "" {
		header.Set("Authorization", "Bearer "+ep.Token)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(ep.URL, "/")+"/json/version", nil)
	if err != nil {
		return nil, fmt.Errorf("failed to build request to %s: %w", ep.URL, err)
	}
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("failed to reach the browser at %s: %w", ep.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("browser at %s answered %s: %s", ep.URL, resp.Status, strings.TrimSpace(string(body)))
	}
	var v struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.WebSocketDebuggerURL == "" {
		return nil, fmt.Errorf("browser at %s sent no webSocketDebuggerUrl", ep.URL)
	}
	wsu, err := url.Parse(v.WebSocketDebuggerURL)
	if err != nil {
		return nil, fmt.Errorf("browser at %s sent an invalid webSocketDebuggerUrl: %w", ep.URL, err)
	}
	wsu.Host = base.Host
	wsu.Scheme = "ws"
	if base.Scheme == "https" {
		wsu.Scheme = "wss"
	}
	ws := &cdp.WebSocket{}
	if err := ws.Connect(ctx, wsu.String(), header); err != nil {
		return nil, fmt.Errorf("failed to connect to the browser at %s: %w", ep.URL, err)
	}
	return ws, nil
}
