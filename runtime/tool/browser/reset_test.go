package browser

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	driver "github.com/picobot/picobot/runtime/browser"
)

// loginSite sets a lasting cookie on /login and tells on /whoami which one
// the browser sent.
func loginSite(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/login" {
			http.SetCookie(w, &http.Cookie{Name: "sid", Value: "logged-in", Path: "/", MaxAge: 3600})
			_, _ = fmt.Fprint(w, `<!doctype html><title>Login</title><p>welcome</p>`)
			return
		}
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		_, _ = fmt.Fprintf(w, `<!doctype html><title>Who</title><p id="who">session: %s</p>`, who)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// reset-profile clears a persistent profile's logins (the cookie the real
// Chromium kept is not sent after it) and keeps the profile; a Chromium
// process left holding the profile's folder is stopped.
func TestResetProfile(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	srv := loginSite(t)
	profiles := &driver.DirProfiles{Root: t.TempDir()}
	h := newHarness(t, Options{Profiles: profiles})
	id := regexpFind(`bp-[a-z0-9]{10}`, h.ok("browser_profiles", map[string]any{"action": "create", "label": "Shop"}).Content)
	g.Expect(id).NotTo(BeEmpty())

	who := func() string {
		h.ok("browser", map[string]any{"action": "open", "url": srv.URL + "/whoami", "persistent_id": id})
		return h.ok("browser", map[string]any{"action": "get_text", "persistent_id": id}).Content
	}
	h.ok("browser", map[string]any{"action": "open", "url": srv.URL + "/login", "persistent_id": id})
	g.Expect(who()).To(ContainSubstring("session: logged-in"))
	// The login outlives its browser: closing is not resetting.
	h.ok("browser", map[string]any{"action": "close", "persistent_id": id})
	g.Expect(who()).To(ContainSubstring("session: logged-in"))

	r := h.ok("browser_profiles", map[string]any{"action": "reset", "id": id})
	g.Expect(r.Content).To(ContainSubstring("Reset browser profile " + id))
	g.Expect(h.drv.Active(driver.ProfileKey(id))).To(BeFalse(), "its browser was closed")
	g.Expect(who()).To(ContainSubstring("session: nobody"))
	g.Expect(h.ok("browser_profiles", map[string]any{"action": "list"}).Content).To(ContainSubstring(id+"\t\"Shop\""), "id and label stay")
	h.ok("browser", map[string]any{"action": "close", "persistent_id": id})

	// An orphan: a Chromium this driver did not start (a crashed
	// runtime's) holds the profile's folder.
	dir := profiles.UserDataDir("assistant", id)
	orphan := exec.Command(driver.DefaultBin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+dir, "about:blank")
	g.Expect(orphan.Start()).To(Succeed())
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	g.Eventually(func() error { _, err := os.Readlink(filepath.Join(dir, "SingletonLock")); return err }, 20*time.Second, 50*time.Millisecond).
		Should(Succeed())

	r = h.ok("browser_profiles", map[string]any{"action": "reset", "id": id})
	g.Expect(r.Content).To(ContainSubstring("orphaned browser process (pid " + strconv.Itoa(orphan.Process.Pid) + ")"))
	g.Eventually(exited, 10*time.Second).Should(Receive())
	entries, err := os.ReadDir(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(BeEmpty())

	// Unknown ids and missing ids are tool errors.
	g.Expect(h.call("browser_profiles", map[string]any{"action": "reset"}).Content).To(ContainSubstring("reset needs the exact id"))
	g.Expect(h.call("browser_profiles", map[string]any{"action": "reset", "id": "bp-0000000000"}).Content).To(ContainSubstring("no such browser profile"))
}
