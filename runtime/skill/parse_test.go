package skill_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/skill"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name, in            string
		wantName, wantDesc  string
		wantBody, wantError string
	}{
		{name: "minimal", in: "---\nname: pdf\ndescription: Make PDFs.\n---\nStep one.\n",
			wantName: "pdf", wantDesc: "Make PDFs.", wantBody: "Step one."},
		{name: "CRLF, BOM and trailing spaces on delimiters", in: "\uFEFF--- \r\nname: pdf\r\ndescription: Make PDFs.\r\n---\t\r\n\r\nStep one.\r\nStep two.\r\n",
			wantName: "pdf", wantDesc: "Make PDFs.", wantBody: "Step one.\nStep two."},
		{name: "folded description is one line", in: "---\nname: a-b-1\ndescription: >\n  Use when\n  asked.\nlicense: MIT\nallowed-tools: [bash]\nmetadata: {x: 1}\n---\nBody",
			wantName: "a-b-1", wantDesc: "Use when asked.", wantBody: "Body"},
		{name: "body may contain ---", in: "---\nname: x\ndescription: d\n---\nA\n---\nB",
			wantName: "x", wantDesc: "d", wantBody: "A\n---\nB"},
		{name: "no frontmatter", in: "# Just markdown\n", wantError: "missing frontmatter: SKILL.md must start with a line \"---\""},
		{name: "empty file", in: "", wantError: "missing frontmatter"},
		{name: "frontmatter not closed", in: "---\nname: x\ndescription: d\nbody", wantError: "frontmatter is not closed"},
		{name: "only an opening line", in: "---", wantError: "frontmatter is not closed"},
		{name: "invalid YAML", in: "---\nname: x\ndescription: Use when: asked\n---\nb", wantError: "frontmatter is not valid YAML"},
		{name: "YAML list", in: "---\n- a\n---\nb", wantError: "frontmatter is not valid YAML"},
		{name: "no name", in: "---\ndescription: d\n---\nb", wantError: "frontmatter has no name"},
		{name: "name is a number", in: "---\nname: 12\ndescription: d\n---\nb", wantError: "frontmatter name must be text"},
		{name: "upper-case name", in: "---\nname: PDF\ndescription: d\n---\nb", wantError: `frontmatter name: "PDF" is not a valid skill name: use 1-63 lowercase letters`},
		{name: "path traversal name", in: "---\nname: ../etc\ndescription: d\n---\nb", wantError: `"../etc" is not a valid skill name`},
		{name: "name with slash", in: "---\nname: a/b\ndescription: d\n---\nb", wantError: `"a/b" is not a valid skill name`},
		{name: "name too long", in: "---\nname: " + strings.Repeat("a", 64) + "\ndescription: d\n---\nb", wantError: "is not a valid skill name"},
		{name: "no description", in: "---\nname: x\n---\nb", wantError: "frontmatter has no description"},
		{name: "blank description", in: "---\nname: x\ndescription: \"  \"\n---\nb", wantError: "frontmatter description is empty"},
		{name: "long description", in: "---\nname: x\ndescription: " + strings.Repeat("é", 1025) + "\n---\nb", wantError: "description is 1025 characters; the limit is 1024"},
		{name: "no body", in: "---\nname: x\ndescription: d\n---\n\n  \n", wantError: "SKILL.md has no instructions after the frontmatter"},
		{name: "not UTF-8", in: "---\nname: x\ndescription: \xff\n---\nb", wantError: "SKILL.md is not UTF-8 text"},
		{name: "oversize", in: "---\nname: x\ndescription: d\n---\n" + strings.Repeat("x", skill.MaxSkillBytes), wantError: "bytes; the limit is 262144 (256 KiB)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s, err := skill.Parse([]byte(tc.in))
			if tc.wantError != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantError)))
				g.Expect(s).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Name).To(Equal(tc.wantName))
			g.Expect(s.Description).To(Equal(tc.wantDesc))
			g.Expect(s.Body).To(Equal(tc.wantBody))
		})
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "web-research": true, "x1": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false, "..": false, "a/b": false, `a\b`: false,
		strings.Repeat("a", 64): false, "ü": false,
	} {
		err := skill.ValidateName(name)
		if ok != (err == nil) {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}
