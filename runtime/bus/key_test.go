package bus_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/bus"
)

func TestKey(t *testing.T) {
	tests := []struct {
		tenant string
		parts  []string
		want   string
	}{
		{"acme", nil, "{acme}"},
		{"acme", []string{"out"}, "{acme:out}"},
		{"acme", []string{"web:42:7", "in"}, "{acme:web%3A42%3A7}:in"},
		{"acme", []string{"agent-a", "wake"}, "{acme:agent-a}:wake"},
		{"acme", []string{"s", "lease", "owner"}, "{acme:s}:lease:owner"},
		{"acme", []string{"}{evil", "in"}, "{acme:%7D%7Bevil}:in"},
		{"a:b", []string{"c"}, "{a%3Ab:c}"},
		{"acme", []string{"100%", ""}, "{acme:100%25}:"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			NewWithT(t).Expect(bus.Key(tc.tenant, tc.parts...)).To(Equal(tc.want))
		})
	}
}

// TestKeyIsInjective checks that parts cannot be arranged to build another
// tenant's or another session's key.
func TestKeyIsInjective(t *testing.T) {
	g := NewWithT(t)
	inputs := [][]string{
		{"acme", "a:b", "in"},
		{"acme", "a", "b:in"},
		{"acme:a", "b", "in"},
		{"acme", "a", "b", "in"},
		{"acme", "a%3Ab", "in"},
		{"acme", "a}:{b", "in"},
		{"acme", "a", "b"},
		{"acme", "a"},
		{"acme"},
	}
	seen := map[string][]string{}
	for _, in := range inputs {
		k := bus.Key(in[0], in[1:]...)
		g.Expect(seen).NotTo(HaveKey(k), "%v and %v both build %q", seen[k], in, k)
		seen[k] = in
	}
}

// TestKeyHashTag checks that every key of one session shares the Redis Cluster
// hash tag (the text between the first '{' and the next '}').
func TestKeyHashTag(t *testing.T) {
	g := NewWithT(t)
	tag := func(k string) string {
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open+1:], '}')
		return k[open+1 : open+1+end]
	}
	session := "telegram:123:{weird}"
	in, lease := bus.Key("acme", session, "in"), bus.Key("acme", session, "lease")
	g.Expect(in).To(HavePrefix("{acme:"), "keys start with the tenant, for per-tenant ACL patterns")
	g.Expect(tag(in)).To(Equal(tag(lease)))
	g.Expect(tag(in)).NotTo(Equal(tag(bus.Key("acme", "other", "in"))))
	g.Expect(tag(in)).NotTo(Equal(tag(bus.Key("other", session, "in"))))
}

func TestKeyPanicsOnEmptyTenant(t *testing.T) {
	NewWithT(t).Expect(func() { bus.Key("", "s") }).To(Panic())
}
