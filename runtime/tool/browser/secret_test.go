package browser

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/tool"
)

// bot_secret's list shows names and types only; a bad call is a tool error
// that says what to do, and none of them holds the value. Its schema stays
// short.
func TestSecretToolErrors(t *testing.T) {
	g := NewWithT(t)
	const value = "s3cr3t-value-Zq"
	h := newHarness(t, Options{})
	sel := func(key string) corev1.SecretKeySelector {
		return corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: key}
	}
	st := NewSecretTool(SecretOptions{Options: Options{Driver: h.drv, Agent: "assistant"},
		Secrets: []picobotv1alpha1.ToolSecret{{Name: "mail-password", SecretKeyRef: sel("pw")},
			{Name: "mail-user", Type: picobotv1alpha1.ToolSecretUsername, SecretKeyRef: sel("user")}},
		Lookup: func(name string) *corev1.Secret {
			if name != "creds" {
				return nil
			}
			return &corev1.Secret{Data: map[string][]byte{"pw": []byte(value)}}
		}})
	reg, err := tool.NewRegistry(st)
	g.Expect(err).NotTo(HaveOccurred())
	h.reg = reg
	for _, d := range reg.Definitions() {
		n := len(d.Name) + len(d.Description) + len(d.Parameters)
		t.Logf("%s: %d bytes", d.Name, n)
		g.Expect(n).To(BeNumerically("<", 900))
	}

	g.Expect(h.ok("bot_secret", map[string]any{"action": "list"}).Content).
		To(Equal(`{"secrets":[{"name":"mail-password","type":"password","domains":null},{"name":"mail-user","type":"username","domains":null}]}`))
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"action": "type", "ref": "@e1"}, "type needs name (one of: mail-password, mail-user) and ref"},
		{map[string]any{"action": "type", "name": "bank", "ref": "@e1"}, `no saved secret "bank"; this agent has: mail-password, mail-user`},
		{map[string]any{"action": "type", "name": "mail-user", "ref": "@e1"}, `Secret "creds" has no key "user"`},
		{map[string]any{"action": "type", "name": "mail-password", "ref": "@e1"}, "no browser is open in this dialog"},
		{map[string]any{"action": "reveal", "name": "mail-password"}, "reveal does not equal any of: [list type]"},
	} {
		r := h.call("bot_secret", tc.args)
		g.Expect(r.IsError).To(BeTrue(), r.Content)
		g.Expect(r.Content).To(ContainSubstring(tc.want))
		g.Expect(r.Content).NotTo(ContainSubstring(value))
	}
}

// A saved credential is typed only on its sites, checked with the
// browser's own idea of the page's address: a look-alike page (another
// host answering the same HTML, or one whose name starts with the site's)
// gets an error and nothing; the site's subdomain gets the value. (A field
// in a frame has no snapshot ref to name; TypeSecret refuses one anyway.)
// Real headless Chromium.
func TestSecretOnlyOnItsSites(t *testing.T) {
	requireChromium(t)
	g := NewWithT(t)
	const value = "only-for-the-shop-7Qx"
	typed := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.URL.Path == "/typed" {
			typed <- r.Host + " " + r.URL.Query().Get("v")
			return
		}
		_, _ = fmt.Fprint(w, `<!doctype html><title>Login</title><label>Password <input type="password" id="pw"
oninput="fetch('/typed?v='+encodeURIComponent(this.value))"></label>`)
	}))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	o := Options{Driver: driver.NewDriver(testDriverConfig(t)), Agent: "assistant"}
	t.Cleanup(o.Driver.Close)
	reg, err := tool.NewRegistry(NewTool(o), NewSecretTool(SecretOptions{Options: o,
		Secrets: []picobotv1alpha1.ToolSecret{{Name: "shop", Domains: []string{"shop.test"},
			SecretKeyRef: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "pw"}}},
		Lookup: func(string) *corev1.Secret { return &corev1.Secret{Data: map[string][]byte{"pw": []byte(value)}} }}))
	g.Expect(err).NotTo(HaveOccurred())
	h := &harness{t: t, reg: reg, drv: o.Driver, env: tool.Env{Workspace: t.TempDir(), SessionID: "web:chat:d1", Agent: "assistant"}}

	typeOn := func(page string) tool.Result {
		h.ok("browser", map[string]any{"action": "open", "url": page})
		snap := h.ok("browser", map[string]any{"action": "snapshot"}).Content
		ref := regexp.MustCompile(`textbox "Password" \[ref=(@e\d+)`).FindStringSubmatch(snap)
		g.Expect(ref).NotTo(BeNil(), snap)
		return h.call("bot_secret", map[string]any{"action": "type", "name": "shop", "ref": ref[1]})
	}
	r := typeOn("http://evil.test:" + port + "/login")
	g.Expect(r.IsError).To(BeTrue(), r.Content)
	g.Expect(r.Content).To(ContainSubstring("this credential belongs to shop.test, and the page is on evil.test: it is not typed here"))
	r = typeOn("http://shop.test.evil.test:" + port + "/login")
	g.Expect(r.Content).To(ContainSubstring("the page is on shop.test.evil.test: it is not typed here"))
	g.Consistently(typed, 300*time.Millisecond).ShouldNot(Receive(), "no page got the value")

	r = typeOn("http://login.shop.test:" + port + "/login")
	g.Expect(r.IsError).To(BeFalse(), r.Content)
	g.Expect(r.Content).NotTo(ContainSubstring(value))
	g.Eventually(typed, 10*time.Second).Should(Receive(Equal("login.shop.test:" + port + " " + value)))
}
