package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/browsertest"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
	"github.com/picobot/picobot/runtime/netguard"
)

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

func TestBrowserCommand(t *testing.T) {
	if err := browser.CheckExecutable(browser.DefaultBin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	g := NewWithT(t)
	const token = "test-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	g.Expect(os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)).To(Succeed())
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- runBrowser(ctx, []string{"--listen", addr, "--user-data-dir", t.TempDir(), "--token-file", tokenFile},
			func(string) string { return "" }, &logs)
	}()
	defer func() {
		cancel()
		g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	}()
	g.Eventually(func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}).WithTimeout(60 * time.Second).Should(Succeed())

	for _, tok := range []string{"", "wrong-token-0123456789"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/json/version", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		g.Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
	}

	// The session side's driver connects through the proxy with the token.
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, "<title>Local</title><h1>Local</h1>")
	}))
	defer site.Close()
	d := browser.NewDriver(browser.Config{
		Guard: netguard.New(netguard.AllowPrefixes(netip.MustParsePrefix("127.0.0.0/8"))),
		Endpoint: func(context.Context, browser.Key) (browser.Endpoint, error) {
			return browser.Endpoint{URL: "http://" + addr, Token: token}, nil
		},
	})
	defer d.Close()
	b, release, err := d.Acquire(context.Background(), browser.DialogKey("d"), browser.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	defer release()
	// The pod's own egress policy (no test allowance) refuses the loopback
	// page: the pod cannot reach the machine it runs on.
	_, err = b.Open(context.Background(), site.URL, false)
	g.Expect(err).NotTo(HaveOccurred())
	text, err := b.Text(context.Background(), "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(ContainSubstring("PicoBot blocked this request"))
	g.Expect(text).To(ContainSubstring("loopback"))

	bad := browser.NewDriver(browser.Config{Endpoint: func(context.Context, browser.Key) (browser.Endpoint, error) {
		return browser.Endpoint{URL: "http://" + addr, Token: "wrong-token-0123456789"}, nil
	}})
	defer bad.Close()
	_, _, err = bad.Acquire(context.Background(), browser.DialogKey("d"), browser.Options{})
	g.Expect(err).To(MatchError(ContainSubstring("401")))
}

func TestBrowserCommandNeedsTokenAndFolder(t *testing.T) {
	g := NewWithT(t)
	var out bytes.Buffer
	noEnv := func(string) string { return "" }
	g.Expect(runBrowser(context.Background(), []string{"--user-data-dir", t.TempDir()}, noEnv, &out)).To(MatchError(ContainSubstring("a token is required")))
	withToken := func(string) string { return "0123456789abcdef0" }
	g.Expect(runBrowser(context.Background(), nil, withToken, &out)).To(MatchError(ContainSubstring("--user-data-dir is required")))
	short := func(string) string { return "short" }
	g.Expect(runBrowser(context.Background(), []string{"--user-data-dir", t.TempDir(), "--chromium", "/nonexistent"}, short, &out)).To(HaveOccurred())

	envOf := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tok := "0123456789abcdef0"
	g.Expect(runBrowser(context.Background(), []string{"--user-data-dir", t.TempDir()},
		envOf(map[string]string{wire.EnvToken: tok, wire.EnvNoSandbox: "maybe"}), &out)).
		To(MatchError(ContainSubstring(`PICOBOT_BROWSER_NO_SANDBOX must be true or false, not "maybe"`)))
	// A profile that cannot be restored is an error before Chromium starts,
	// not an empty profile that would then be saved over the real one.
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer storage.Close()
	dir := filepath.Join(t.TempDir(), "chrome")
	g.Expect(runBrowser(context.Background(), []string{"--user-data-dir", dir, "--chromium", "/nonexistent"},
		envOf(map[string]string{wire.EnvToken: tok, wire.EnvRestoreURL: storage.URL + "/p.tar.gz", wire.EnvSaveURL: storage.URL + "/p.tar.gz"}), &out)).
		To(MatchError(ContainSubstring("failed to restore the browser profile: failed to download the browser profile: storage answered 500")))
	g.Expect(dir).NotTo(BeADirectory())
}

// TestBrowserCommandKeepsProfile: with storage URLs (presigned S3 URLs in a
// browser pod) the profile is saved after Chromium exits and restored
// before the next one starts: a persistent cookie survives.
func TestBrowserCommandKeepsProfile(t *testing.T) {
	if err := browser.CheckExecutable(browser.DefaultBin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	g := NewWithT(t)
	var mu sync.Mutex
	var archive []byte
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			archive, _ = io.ReadAll(r.Body)
		case http.MethodGet:
			if archive == nil {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(archive)
		}
	}))
	defer storage.Close()
	const token = "test-token-0123456789"
	env := func(k string) string {
		return map[string]string{wire.EnvToken: token, wire.EnvRestoreURL: storage.URL + "/p", wire.EnvSaveURL: storage.URL + "/p", wire.EnvNoSandbox: "true"}[k]
	}
	// run starts a browser pod's process on a fresh folder, runs fn on its
	// DevTools and stops it as the kubelet would; a failure of fn shows the
	// process's log (Chromium exiting early closes DevTools: EOF).
	run := func(fn func(*rod.Browser) error) {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var logs bytes.Buffer
		go func() {
			done <- runBrowser(ctx, []string{"--listen", addr, "--user-data-dir", filepath.Join(t.TempDir(), "chrome")}, env, &logs)
		}()
		var ws *cdp.WebSocket
		g.Eventually(func() (err error) {
			ws, err = browser.DialDevTools(ctx, browser.Endpoint{URL: "http://" + addr, Token: token})
			return err
		}).WithTimeout(60 * time.Second).Should(Succeed())
		rb := rod.New().Context(ctx).Client(cdp.New().Start(ws))
		g.Expect(rb.Connect()).To(Succeed())
		g.Expect(fn(rb)).To(Succeed(), "logs: %s", &logs)
		_ = ws.Close()
		cancel()
		g.Eventually(done).WithTimeout(60*time.Second).Should(Receive(BeNil()), "logs: %s", &logs)
	}
	run(func(rb *rod.Browser) error { return browsertest.SetCookie(rb, "shop.example", "session", "kept") })
	mu.Lock()
	g.Expect(archive).NotTo(BeEmpty())
	mu.Unlock()
	run(func(rb *rod.Browser) error {
		cookies, err := browsertest.Cookies(rb)
		if err == nil {
			g.Expect(cookies).To(ContainElement("shop.example session=kept"))
		}
		return err
	})
}
