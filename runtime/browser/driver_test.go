package browser

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/netguard"
)

// acquire gets key's browser and releases it at the end of the test.
func acquire(t *testing.T, d *Driver, key Key, opts Options) *Browser {
	t.Helper()
	b, release, err := d.Acquire(context.Background(), key, opts)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	t.Cleanup(release)
	return b
}

// dialogBrowser starts the test site and a dialog's browser on a driver of
// its own, both closed when the test ends.
func dialogBrowser(t *testing.T, opts Options) (*site, *Browser) {
	t.Helper()
	requireChromium(t)
	s := newSite(t)
	d := NewDriver(testConfig(t))
	t.Cleanup(d.Close)
	return s, acquire(t, d, DialogKey("web:c1:d1"), opts)
}

func TestOpenSnapshotActScreenshot(t *testing.T) {
	g := NewWithT(t)
	s, b := dialogBrowser(t, Options{})
	ctx := context.Background()

	info, err := b.Open(ctx, s.url("127.0.0.1", "/"), false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Title).To(Equal("Home"))

	snap, err := b.Snapshot(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(snap).To(ContainSubstring(`heading "Welcome" [level=1]`))
	g.Expect(snap).To(ContainSubstring(`link "Next page" [ref=@e1]`))
	g.Expect(snap).To(ContainSubstring(`textbox "Name" [ref=@e2]`))
	g.Expect(snap).To(ContainSubstring(`button "Greet" [ref=@e3]`))
	g.Expect(snap).To(ContainSubstring(`checkbox "I agree" [ref=@e4]`))

	g.Expect(b.Fill(ctx, "@e2", "Ada")).To(Succeed())
	g.Expect(b.Click(ctx, "e3")).To(Succeed())
	text, err := b.Text(ctx, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(ContainSubstring("Hello, Ada"))
	g.Expect(b.Fill(ctx, "@e2", "Grace")).To(Succeed()) // replaces, not appends
	g.Expect(b.Click(ctx, "@e3")).To(Succeed())
	g.Expect(b.Text(ctx, "")).To(ContainSubstring("Hello, Grace"))

	g.Expect(b.Click(ctx, "@e4")).To(Succeed())
	snap, _ = b.Snapshot(ctx)
	g.Expect(snap).To(ContainSubstring(`checkbox "I agree" [ref=@e4, checked=true]`))

	for _, full := range []bool{false, true} {
		png, err := b.Screenshot(ctx, full, true)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(png[:8]).To(Equal([]byte("\x89PNG\r\n\x1a\n")))
	}
	// The annotations are gone after the screenshot.
	g.Expect(b.Snapshot(ctx)).NotTo(ContainSubstring("@e1\n- text: @e"))

	g.Expect(b.Click(ctx, "@e1")).To(Succeed()) // a link: waits for the navigation
	info, _ = b.Info(ctx)
	g.Expect(info.Title).To(Equal("Second"))
	g.Expect(b.Click(ctx, "@e1")).To(MatchError(ContainSubstring("take a new snapshot")))
	info, err = b.Navigate(ctx, "back")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Title).To(Equal("Home"))
	g.Expect(b.Click(ctx, "@e99")).To(MatchError(ContainSubstring("take a snapshot first")))
}

// A click on a link to a page that answers late waits for that page, and
// the screenshot after it shows the new document; a link that loads nothing
// (a 204 answer) leaves the page as it was.
func TestClickWaitsForALateNavigation(t *testing.T) {
	g := NewWithT(t)
	s, b := dialogBrowser(t, Options{})
	ctx := context.Background()
	for i := range 4 {
		_, err := b.Open(ctx, s.url("127.0.0.1", "/to-slow"), false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(b.Snapshot(ctx)).To(ContainSubstring(`link "Late page" [ref=@e1]`))
		ref := "@e1"
		want := "Late"
		if i%2 == 1 {
			ref, want = "@e2", "Before"
		}
		g.Expect(b.Click(ctx, ref)).To(Succeed())
		info, err := b.Info(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.Title).To(Equal(want), "round %d", i)
		png, err := b.Screenshot(ctx, false, false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(png[:8]).To(Equal([]byte("\x89PNG\r\n\x1a\n")))
	}
}

func TestURLPolicy(t *testing.T) {
	p := Policy{Guard: netguard.New(netguard.WithResolver(fakeDNS)), Resolver: fakeDNS}
	for _, tc := range []struct{ url, want string }{
		{"file:///etc/passwd", `scheme "file" is not allowed`},
		{"javascript:alert(1)", `scheme "javascript" is not allowed`},
		{"chrome://settings", `scheme "chrome" is not allowed`},
		{"http://user:pw@example.test/", "credentials"},
		{"http://localhost:8080/", "loopback host name"},
		{"http://127.0.0.1/", "loopback"},
		{"http://[::1]/", "loopback"},
		{"http://2130706433/", "loopback"},
		{"http://10.0.0.1/", "private"},
		{"http://169.254.169.254/latest/meta-data", "metadata"},
		{"http://printer.local/", "mDNS"},
		{"http://intranet.test/", "intranet.test resolved to 10.1.2.3"},
	} {
		_, err := p.CheckURL(context.Background(), tc.url)
		if err == nil || !netguard.IsRefused(err) {
			t.Errorf("CheckURL(%q) = %v, want a refusal", tc.url, err)
			continue
		}
		if !containsFold(err.Error(), tc.want) {
			t.Errorf("CheckURL(%q) = %q, want it to mention %q", tc.url, err, tc.want)
		}
	}
	p = Policy{Guard: testGuard(), Resolver: fakeDNS, Domains: Domains{"allowed.test", "*.cdn.test"}}
	for url, ok := range map[string]bool{
		"http://allowed.test/": true, "http://www.allowed.test/": true, "http://a.cdn.test/": true,
		"http://cdn.test/": false, "http://other.test/": false, "http://notallowed.test/": false,
	} {
		_, err := p.CheckURL(context.Background(), url)
		if ok != (err == nil) {
			t.Errorf("CheckURL(%q) with domains = %v, want allowed=%t", url, err, ok)
		}
	}
}

func containsFold(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && (stringsContainsFold(s, sub)))
}

func stringsContainsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if equalFoldASCII(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

func equalFoldASCII(a, b string) bool {
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func TestEgressBlocksPrivateSubresources(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	s := newSite(t)
	// A guard that does not allow loopback: the browser cannot reach the
	// machine itself, whatever the page asks.
	cfg := testConfig(t)
	d := NewDriver(cfg)
	t.Cleanup(d.Close)
	ctx := context.Background()
	b := acquire(t, d, DialogKey("d"), Options{})
	_, err := b.Open(ctx, s.url("page.test", "/private-img"), false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Notes()).To(ContainElement(ContainSubstring("blocked request: intranet.test:" + s.port + ": intranet.test resolved to 10.1.2.3")))

	strict := NewDriver(Config{Guard: netguard.New(netguard.WithResolver(fakeDNS)), Resolver: fakeDNS, TempDir: t.TempDir(), Limits: cfg.Limits})
	t.Cleanup(strict.Close)
	sb := acquire(t, strict, DialogKey("d"), Options{})
	_, err = sb.Open(ctx, s.url("127.0.0.1", "/"), false)
	g.Expect(err).To(MatchError(ContainSubstring("127.0.0.1 is a loopback address")))
	_, err = sb.Open(ctx, s.url("page.test", "/"), false)
	g.Expect(err).To(MatchError(ContainSubstring("page.test resolved to 127.0.0.1")))
}

func TestAllowedDomainsRestrictEverything(t *testing.T) {
	g := NewWithT(t)
	s, b := dialogBrowser(t, Options{Domains: Domains{"allowed.test"}})
	ctx := context.Background()

	_, err := b.Open(ctx, s.url("other.test", "/"), false)
	g.Expect(err).To(MatchError(ContainSubstring("other.test is not in the allowed domains")))

	_, err = b.Open(ctx, s.url("allowed.test", "/restricted"), false)
	g.Expect(err).NotTo(HaveOccurred())
	results := func() map[string]string {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		t0, _ := b.tab()
		res, err := t0.page.Context(actx).Eval(`() => JSON.stringify(window.results)`)
		g.Expect(err).NotTo(HaveOccurred())
		var m map[string]string
		g.Expect(json.Unmarshal([]byte(res.Value.Str()), &m)).To(Succeed())
		return m
	}
	g.Eventually(results).WithTimeout(10 * time.Second).Should(SatisfyAll(
		HaveKeyWithValue("ws", "error"), HaveKeyWithValue("es", "error"),
		HaveKeyWithValue("fetch", "blocked"), HaveKeyWithValue("same", "ok")))
	g.Expect(results()).To(HaveKeyWithValue("rtc", "undefined"))
	g.Expect(s.hits("other.test")).To(BeZero(), "no request may reach a host outside the allowed domains")
	g.Expect(s.hits("allowed.test")).To(BeNumerically(">=", 2))
}

func TestHostilePages(t *testing.T) {
	requireChromium(t)
	s := newSite(t)
	cfg := testConfig(t)
	cfg.Limits.Navigation = 8 * time.Second // pages that never finish are cut after this
	d := NewDriver(cfg)
	t.Cleanup(d.Close)
	ctx := context.Background()
	b := acquire(t, d, DialogKey("d"), Options{})

	t.Run("HTTP redirect loop", func(t *testing.T) {
		_, err := b.Open(ctx, s.url("127.0.0.1", "/redirect-loop"), false)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("ERR_TOO_MANY_REDIRECTS")))
	})
	t.Run("script redirect loop", func(t *testing.T) {
		g := NewWithT(t)
		_, err := b.Open(ctx, s.url("127.0.0.1", "/js-loop"), false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(b.Notes).WithTimeout(15 * time.Second).Should(ContainElement(ContainSubstring("redirect or reload loop")))
		_, err = b.Snapshot(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	})
	t.Run("server never answers", func(t *testing.T) {
		_, err := b.Open(ctx, s.url("127.0.0.1", "/hang"), false)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("did not answer within")))
	})
	t.Run("load never finishes", func(t *testing.T) {
		g := NewWithT(t)
		_, err := b.Open(ctx, s.url("127.0.0.1", "/slow"), false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(b.Notes()).To(ContainElement(ContainSubstring("still loading")))
		g.Expect(b.Snapshot(ctx)).To(ContainSubstring("Partial content"))
	})
	t.Run("huge DOM", func(t *testing.T) {
		g := NewWithT(t)
		_, err := b.Open(ctx, s.url("127.0.0.1", "/huge"), false)
		g.Expect(err).NotTo(HaveOccurred())
		snap, err := b.Snapshot(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(snap).To(ContainSubstring("snapshot cut after"))
		g.Expect(len(snap)).To(BeNumerically("<", 2_000_000))
	})
	t.Run("pop-up storm", func(t *testing.T) {
		g := NewWithT(t)
		_, err := b.Open(ctx, s.url("127.0.0.1", "/popups"), false)
		g.Expect(err).NotTo(HaveOccurred())
		_, _ = b.Snapshot(ctx)
		// Chromium lets one pop-up through per click; clicking on opens
		// more than the cap of 5 tabs.
		for range 7 {
			g.Expect(b.Click(ctx, "@e1")).To(Succeed())
		}
		g.Eventually(func() int { tabs, _ := b.Tabs(ctx); return len(tabs) }).WithTimeout(10 * time.Second).Should(Equal(5))
		g.Consistently(func() int { tabs, _ := b.Tabs(ctx); return len(tabs) }).WithTimeout(time.Second).Should(BeNumerically("<=", 5))
		g.Eventually(b.Notes).Should(ContainElement(ContainSubstring("pop-up window(s) were closed")))
	})
}

func TestLocksSerialisePerKey(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	d := NewDriver(testConfig(t))
	t.Cleanup(d.Close)
	ctx := context.Background()
	_, releaseA, err := d.Acquire(ctx, ProfileKey("bp-aaaaaaaaaa"), Options{UserDataDir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())

	// Same key: waits (here until its context ends).
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = d.Acquire(short, ProfileKey("bp-aaaaaaaaaa"), Options{})
	cancel()
	g.Expect(err).To(MatchError(context.DeadlineExceeded))
	g.Expect(err).To(MatchError(ContainSubstring("busy with another operation")))

	// Another key runs concurrently.
	_, releaseB, err := d.Acquire(ctx, DialogKey("other"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	releaseB()

	got := make(chan error, 1)
	go func() {
		_, release, err := d.Acquire(ctx, ProfileKey("bp-aaaaaaaaaa"), Options{})
		if err == nil {
			release()
		}
		got <- err
	}()
	g.Consistently(got).WithTimeout(200 * time.Millisecond).ShouldNot(Receive())
	releaseA()
	g.Eventually(got).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
	st := d.Stats()
	g.Expect(st.Launches).To(Equal(2))
	g.Expect(st.Reuses).To(Equal(1))
	g.Expect(st.Open).To(Equal(2))
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

func TestEphemeralBrowsersCloseWhenIdle(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := testConfig(t)
	cfg.Clock = clk
	d := NewDriver(cfg)
	t.Cleanup(d.Close)
	ctx := context.Background()
	eph, release, err := d.Acquire(ctx, DialogKey("d1"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	release()
	per, release, err := d.Acquire(ctx, ProfileKey("bp-pppppppppp"), Options{UserDataDir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	release()

	clk.Step(59 * time.Minute)
	g.Expect(d.ReapIdle()).To(Equal(0))
	g.Expect(d.Active(DialogKey("d1"))).To(BeTrue())

	// Used again at 59 min: the hour starts over.
	_, release, err = d.Acquire(ctx, DialogKey("d1"), Options{})
	g.Expect(err).NotTo(HaveOccurred())
	release()
	clk.Step(59 * time.Minute)
	g.Expect(d.ReapIdle()).To(Equal(0))

	// The reaper goroutine closes it once an hour has passed.
	clk.Step(2 * time.Minute)
	g.Eventually(func() bool { return d.Active(DialogKey("d1")) }).WithTimeout(10 * time.Second).Should(BeFalse())
	g.Eventually(func() bool { return alive(eph.PID()) }).WithTimeout(10 * time.Second).Should(BeFalse())
	g.Expect(d.Active(ProfileKey("bp-pppppppppp"))).To(BeTrue(), "persistent browsers do not expire")
	g.Expect(alive(per.PID())).To(BeTrue())
	g.Expect(d.Stats().Open).To(Equal(1))
}

func TestPersistentProfileKeepsCookies(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	s := newSite(t)
	d := NewDriver(testConfig(t))
	t.Cleanup(d.Close)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "chrome")
	key := ProfileKey("bp-cccccccccc")
	b, release, err := d.Acquire(ctx, key, Options{UserDataDir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = b.Open(ctx, s.url("127.0.0.1", "/cookie"), false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Text(ctx, "")).To(ContainSubstring("cookie set"))
	release()
	g.Expect(d.CloseKey(ctx, key)).To(Succeed())
	g.Expect(d.Active(key)).To(BeFalse())

	b, release, err = d.Acquire(ctx, key, Options{UserDataDir: dir})
	g.Expect(err).NotTo(HaveOccurred())
	defer release()
	_, err = b.Open(ctx, s.url("127.0.0.1", "/cookie"), false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Text(ctx, "")).To(ContainSubstring("cookie=s3cret"))
}

func TestMissingBrowser(t *testing.T) {
	g := NewWithT(t)
	cfg := testConfig(t)
	cfg.Bin = filepath.Join(t.TempDir(), "no-chromium")
	d := NewDriver(cfg)
	t.Cleanup(d.Close)
	_, _, err := d.Acquire(context.Background(), DialogKey("d"), Options{})
	g.Expect(IsMissing(err)).To(BeTrue())
	g.Expect(err).To(MatchError(ContainSubstring("apt-get install -y chromium")))
	g.Expect(d.Stats().Open).To(Equal(0))

	notExec := filepath.Join(t.TempDir(), "chromium")
	g.Expect(os.WriteFile(notExec, []byte("x"), 0o600)).To(Succeed())
	g.Expect(CheckExecutable(notExec)).To(MatchError(ContainSubstring("is not an executable file")))
	_, err = CheckLaunch(context.Background(), notExec)
	g.Expect(IsMissing(err)).To(BeTrue())
}

func TestCheckLaunch(t *testing.T) {
	requireChromium(t)
	v, err := CheckLaunch(context.Background(), DefaultBin)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	NewWithT(t).Expect(v).To(MatchRegexp(`Chrome/\d+\.`))
}

func TestRemoteBrowserThroughDevToolsProxy(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	s := newSite(t)
	ctx := context.Background()
	const token = "0123456789abcdef-token"
	pod, err := StartPod(ctx, PodConfig{UserDataDir: t.TempDir(), Token: token, Guard: testGuard()})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(pod.Close)
	srv := httptest.NewServer(pod.Handler())
	t.Cleanup(srv.Close)

	for name, tok := range map[string]string{"missing": "", "wrong": "0123456789abcdef-WRONG"} {
		_, err := DialDevTools(ctx, Endpoint{URL: srv.URL, Token: tok})
		g.Expect(err).To(MatchError(ContainSubstring("401 Unauthorized")), name)
	}
	// The WebSocket itself is refused without the token too.
	ok, err := DialDevTools(ctx, Endpoint{URL: srv.URL, Token: token})
	g.Expect(err).NotTo(HaveOccurred())
	_ = ok.Close()
	resp, err := srv.Client().Get(srv.URL + "/json/version")
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(401))

	cfg := testConfig(t)
	cfg.Endpoint = func(context.Context, Key) (Endpoint, error) { return Endpoint{URL: srv.URL, Token: token}, nil }
	d := NewDriver(cfg)
	t.Cleanup(d.Close)
	b := acquire(t, d, DialogKey("remote"), Options{})
	g.Expect(b.PID()).To(Equal(0))
	info, err := b.Open(ctx, s.url("127.0.0.1", "/"), false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Title).To(Equal("Home"))
	g.Expect(b.Snapshot(ctx)).To(ContainSubstring(`button "Greet"`))

	bad := testConfig(t)
	bad.Endpoint = func(context.Context, Key) (Endpoint, error) {
		return Endpoint{URL: srv.URL, Token: "nope-nope-nope-nope"}, nil
	}
	d2 := NewDriver(bad)
	t.Cleanup(d2.Close)
	_, _, err = d2.Acquire(ctx, DialogKey("x"), Options{})
	g.Expect(err).To(MatchError(ContainSubstring("401")))
	g.Expect(errors.Is(err, ErrClosed)).To(BeFalse())
}
