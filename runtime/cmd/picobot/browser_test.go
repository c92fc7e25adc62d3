package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/browser"
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
}
