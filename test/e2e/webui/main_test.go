// Package webui tests the gateway's web UI in a real headless Chromium,
// driven by go-rod, against the real `picobot serve` binary whose agents talk
// to the scripted fake LLM. The tests click through conversations, dialog
// operations, stopping a turn and the health page, and save screenshots of
// each step (into $PICOBOT_SCREENSHOTS when set, else a temporary folder the
// test log names).
//
// Chromium is /usr/lib/chromium/chromium ($PICOBOT_CHROMIUM overrides it);
// go-rod is never allowed to download a browser. Without Chromium the tests
// skip loudly, and fail when CI=true.
package webui

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"

	"github.com/picobot/picobot/test/controlplane"
)

// defaultChromium is where Debian's chromium package installs the browser.
const defaultChromium = "/usr/lib/chromium/chromium"

var picobotBin string

func TestMain(m *testing.M) {
	if _, err := os.Stat(chromiumPath()); err != nil && os.Getenv("CI") != "true" {
		os.Exit(m.Run()) // every test skips, saying why: no need to build picobot
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to find the repository root:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "picobot-webui-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to create a temporary folder:", err)
		os.Exit(1)
	}
	picobotBin = filepath.Join(dir, "picobot")
	build := exec.Command("go", "build", "-o", picobotBin, "./runtime/cmd/picobot")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "failed to build picobot:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// chromiumPath is the browser the tests drive.
func chromiumPath() string {
	if bin := os.Getenv("PICOBOT_CHROMIUM"); bin != "" {
		return bin
	}
	return defaultChromium
}

// chromiumBin returns the browser to drive, or skips the test (fails it
// under CI=true) when there is none.
func chromiumBin(t testing.TB) string {
	t.Helper()
	bin := chromiumPath()
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("Chromium is not installed at %s (%v): install it with hack/chromium.sh "+
			"(apt-get install -y chromium) or point $PICOBOT_CHROMIUM at one", bin, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING the web UI browser tests: " + msg)
	}
	return bin
}

// launchBrowser starts a headless Chromium with a fresh profile and returns
// a connected go-rod browser; it is killed when the test ends.
func launchBrowser(t testing.TB) *rod.Browser {
	t.Helper()
	bin := chromiumBin(t)
	l := launcher.New().
		Bin(bin). // never let go-rod download a browser
		Leakless(false).
		Headless(true).
		NoSandbox(true).
		UserDataDir(t.TempDir()).
		Set("disable-gpu").
		Set("no-first-run").
		Set("disable-background-networking").
		Set("disable-component-update").
		Set("disable-sync").
		Set("disable-quic").
		Set("window-size", "1280,860")
	u, err := l.Launch()
	if err != nil {
		t.Fatalf("failed to launch Chromium %s: %v", bin, err)
	}
	b := rod.New().ControlURL(u)
	if err := b.Connect(); err != nil {
		l.Kill()
		t.Fatalf("failed to connect to Chromium at %s: %v", u, err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		l.Kill()
	})
	return b
}

// serveProc is a running `picobot serve`.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
	mu   sync.Mutex
	log  strings.Builder
}

var servingRE = regexp.MustCompile(`PicoBot is serving (http://\S+)/`)

// serve starts `picobot serve` on the manifests of dir and waits until it
// listens; it is stopped when the test ends.
func serve(t testing.TB, dir string, env ...string) *serveProc {
	t.Helper()
	return serveAt(t, dir, "127.0.0.1:0", env...)
}

// serveAt is serve on the address addr.
func serveAt(t testing.TB, dir, addr string, env ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(picobotBin, "serve", "--dir", dir, "--addr", addr)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("failed to capture the output of picobot serve: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start picobot serve: %v", err)
	}
	p := &serveProc{cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil {
				urlc <- m[1]
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.url = <-urlc:
	case <-p.done:
		t.Fatalf("picobot serve exited:\n%s", p.output())
	case <-time.After(90 * time.Second):
		p.stop()
		t.Fatalf("picobot serve did not start:\n%s", p.output())
	}
	t.Cleanup(p.stop)
	return p
}

func (p *serveProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
