package blob_test

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/blob"
)

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key     string
		wantErr string // substring; "" means valid
	}{
		{"tenants/acme/report.pdf", ""},
		{"a", ""},
		{"tenants/acme/报告 2026 (final).pdf", ""},
		{"tenants/acme/.hidden/..dots/x...", ""},
		{"tenants/acme/" + strings.Repeat("s", blob.MaxSegmentLength), ""},
		{strings.Repeat("a/", blob.MaxKeyLength/2-1) + "ab", ""}, // exactly MaxKeyLength
		{"", "key is empty"},
		{strings.Repeat("a/", blob.MaxKeyLength/2) + "a", "longer than 1024 bytes"},
		{"tenants/acme/" + strings.Repeat("s", blob.MaxSegmentLength+1), "segment longer than 200 bytes"},
		{"/etc/passwd", "is absolute"},
		{"tenants/acme/", `ends with "/"`},
		{"tenants//acme", "empty segment"},
		{"..", `".." segment`},
		{"tenants/acme/../other", `".." segment`},
		{"tenants/./acme", `"." segment`},
		{`tenants\acme`, "backslash"},
		{"tenants/acme/x\x00", "NUL"},
		{"tenants/acme/x\ny", "control character U+000A"},
		{"tenants/acme/\x1b[31mred", "control character U+001B"},
		{"tenants/acme/\xff", "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			g := NewWithT(t)
			err := blob.ValidateKey(tc.key)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.wantErr))
		})
	}
}

func TestValidateKeyTruncatesHugeKeysInErrors(t *testing.T) {
	err := blob.ValidateKey(strings.Repeat("报", 2000))
	NewWithT(t).Expect(len(err.Error())).To(BeNumerically("<", 200))
}

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		prefix string
		valid  bool
	}{
		{"", true},
		{"tenants/", true},
		{"tenants/acme/rep", true},
		{"tenants/acme/.", true},  // matches ".hidden"
		{"tenants/acme/..", true}, // matches "..dots"; never resolves anywhere
		{"t", true},
		{"/tenants/", false},
		{"tenants//", false},
		{"tenants/../", false},
		{"tenants/./x", false},
		{`tenants\`, false},
		{"tenants/\x00", false},
		{strings.Repeat("a", blob.MaxKeyLength+1), false},
	}
	for _, tc := range tests {
		t.Run(tc.prefix, func(t *testing.T) {
			err := blob.ValidatePrefix(tc.prefix)
			if tc.valid {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
			} else {
				NewWithT(t).Expect(errors.Is(err, blob.ErrInvalidKey)).To(BeTrue(), "%v", err)
			}
		})
	}
}

func TestTenantKey(t *testing.T) {
	tests := []struct {
		name    string
		tenant  string
		parts   []string
		want    string
		wantErr string
	}{
		{"one part", "acme", []string{"notes.txt"}, "tenants/acme/notes.txt", ""},
		{"several parts", "acme", []string{"sessions", "web:42:1", "out.png"}, "tenants/acme/sessions/web:42:1/out.png", ""},
		{"part with a relative path", "acme", []string{"files", "docs/a.txt"}, "tenants/acme/files/docs/a.txt", ""},
		{"namespace-like tenant", "team-42", []string{"x"}, "tenants/team-42/x", ""},
		{"no parts", "acme", nil, "", "no parts"},
		{"empty part", "acme", []string{"a", ""}, "", "part 1 is empty"},
		{"absolute part", "acme", []string{"/etc/passwd"}, "", "starts or ends with"},
		{"trailing slash part", "acme", []string{"dir/"}, "", "starts or ends with"},
		{"climbing part", "acme", []string{"../other/x"}, "", `".." segment`},
		{"climbing inside a part", "acme", []string{"x/../../other/y"}, "", `".." segment`},
		{"dot-dot part", "acme", []string{"..", "other"}, "", `".." segment`},
		{"backslash climb", "acme", []string{`..\b`}, "", "backslash"},
		{"NUL", "acme", []string{"x\x00"}, "", "NUL"},
		{"empty tenant", "", []string{"x"}, "", "tenant is empty"},
		{"upper-case tenant", "Acme", []string{"x"}, "", "namespace name"},
		{"tenant with slash", "acme/other", []string{"x"}, "", "namespace name"},
		{"dot-dot tenant", "..", []string{"x"}, "", "namespace name"},
		{"tenant with leading dash", "-acme", []string{"x"}, "", "namespace name"},
		{"tenant with trailing dash", "acme-", []string{"x"}, "", "namespace name"},
		{"tenant too long", strings.Repeat("a", 64), []string{"x"}, "", "longer than 63"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			key, err := blob.TenantKey(tc.tenant, tc.parts...)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(key).To(Equal(tc.want))
				tenant, ok := blob.TenantOf(key)
				g.Expect(ok).To(BeTrue())
				g.Expect(tenant).To(Equal(tc.tenant))
				return
			}
			g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.wantErr))
			g.Expect(key).To(BeEmpty())
		})
	}
}

func TestTenantPrefix(t *testing.T) {
	g := NewWithT(t)
	p, err := blob.TenantPrefix("a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal("tenants/a/"))
	other, err := blob.TenantKey("ab", "x")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.HasPrefix(other, p)).To(BeFalse(), "tenant a's prefix must not cover tenant ab")
	_, err = blob.TenantPrefix("../b")
	g.Expect(errors.Is(err, blob.ErrInvalidKey)).To(BeTrue())
}

func TestTenantOf(t *testing.T) {
	tests := []struct {
		key    string
		tenant string
		ok     bool
	}{
		{"tenants/acme/x", "acme", true},
		{"tenants/acme/a/b/c", "acme", true},
		{"tenants/acme", "", false},
		{"tenants/Acme/x", "", false},
		{"tenants/acme/../b/x", "", false},
		{"other/acme/x", "", false},
		{"tenantsx/acme/x", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			tenant, ok := blob.TenantOf(tc.key)
			NewWithT(t).Expect(ok).To(Equal(tc.ok))
			NewWithT(t).Expect(tenant).To(Equal(tc.tenant))
		})
	}
}

func TestPutOptionsNormalize(t *testing.T) {
	tests := []struct {
		name    string
		in      blob.PutOptions
		want    blob.PutOptions
		wantErr string
	}{
		{"defaults", blob.PutOptions{}, blob.PutOptions{ContentType: blob.DefaultContentType}, ""},
		{"empty metadata is nil", blob.PutOptions{Metadata: map[string]string{}}, blob.PutOptions{ContentType: blob.DefaultContentType}, ""},
		{
			"keys lower-cased",
			blob.PutOptions{ContentType: "text/plain; charset=utf-8", Metadata: map[string]string{"Session-ID": "web:1", "x": ""}},
			blob.PutOptions{ContentType: "text/plain; charset=utf-8", Metadata: map[string]string{"session-id": "web:1", "x": ""}},
			"",
		},
		{"header injection", blob.PutOptions{ContentType: "text/html\r\nSet-Cookie: x=1"}, blob.PutOptions{}, "printable ASCII"},
		{"not a media type", blob.PutOptions{ContentType: "text/plain; charset"}, blob.PutOptions{}, "content type"},
		{"content type too long", blob.PutOptions{ContentType: "text/" + strings.Repeat("x", 300)}, blob.PutOptions{}, "at most 256 bytes"},
		{"bad key", blob.PutOptions{Metadata: map[string]string{"a b": "v"}}, blob.PutOptions{}, "letters, digits and '-'"},
		{"underscore key", blob.PutOptions{Metadata: map[string]string{"a_b": "v"}}, blob.PutOptions{}, "letters, digits and '-'"},
		{"duplicate key", blob.PutOptions{Metadata: map[string]string{"A": "1", "a": "2"}}, blob.PutOptions{}, `"a" is given twice`},
		{"non-ASCII value", blob.PutOptions{Metadata: map[string]string{"k": "日本"}}, blob.PutOptions{}, "printable ASCII"},
		{"padded value", blob.PutOptions{Metadata: map[string]string{"k": "v "}}, blob.PutOptions{}, "leading or trailing spaces"},
		{"too large", blob.PutOptions{Metadata: map[string]string{"a": strings.Repeat("v", 1024), "b": strings.Repeat("v", 1024)}}, blob.PutOptions{}, "more than 2048"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := tc.in.Normalize()
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.want))
				return
			}
			g.Expect(errors.Is(err, blob.ErrInvalidOptions)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.wantErr))
		})
	}
}

func TestNormalizeDoesNotAliasCallerMap(t *testing.T) {
	g := NewWithT(t)
	in := map[string]string{"k": "v"}
	out, err := blob.PutOptions{Metadata: in}.Normalize()
	g.Expect(err).NotTo(HaveOccurred())
	out.Metadata["k"] = "changed"
	g.Expect(in["k"]).To(Equal("v"))
}
