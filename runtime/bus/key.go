package bus

import "strings"

// Key builds a tenant-scoped Redis key (or stream name) from parts:
//
//	Key("acme")                          -> {acme}
//	Key("acme", "web:42:7", "in")        -> {acme:web%3A42%3A7}:in
//	Key("acme", "out")                   -> {acme:out}
//	Key("acme", "agent-a", "wake")       -> {acme:agent-a}:wake
//
// The key starts with the tenant, so a Redis ACL key pattern like `~{acme:*`
// confines a tenant's credentials to its own keys. The tenant and the first part
// (the scope: a session id, an agent name) form the Redis Cluster hash tag, so
// every key of one session lands in one slot and multi-key commands on it work
// in a cluster; the remaining parts name the key inside that scope.
//
// Parts are escaped, not rejected, because session ids contain colons by
// design: '%', ':', '{' and '}' become %25, %3A, %7B and %7D. That keeps the
// mapping injective (two different part lists never build the same key) and
// keeps a part from closing the hash tag early or posing as another tenant.
//
// An empty tenant would put keys outside every tenant's space; it is a
// programming error (tenants are namespace names, validated before they get
// here), so Key panics on it.
func Key(tenant string, parts ...string) string {
	if tenant == "" {
		panic("bus.Key: empty tenant")
	}
	var b strings.Builder
	b.Grow(len(tenant) + 8 + 16*len(parts))
	b.WriteByte('{')
	escapeKeyPart(&b, tenant)
	for i, p := range parts {
		if i == 1 {
			b.WriteByte('}')
		}
		b.WriteByte(':')
		escapeKeyPart(&b, p)
	}
	if len(parts) <= 1 {
		b.WriteByte('}')
	}
	return b.String()
}

func escapeKeyPart(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
}
