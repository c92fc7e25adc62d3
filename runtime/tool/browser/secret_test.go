package browser

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
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
		To(Equal(`{"secrets":[{"name":"mail-password","type":"password"},{"name":"mail-user","type":"username"}]}`))
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
