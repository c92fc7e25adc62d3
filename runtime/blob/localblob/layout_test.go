package localblob

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestDecodeName(t *testing.T) {
	tests := []struct {
		name    string
		wantSeg string
		want    kind
	}{
		{"docs", "docs", kindDir},
		{"report.pdf~blob", "report.pdf", kindContent},
		{"report.pdf~meta.json", "report.pdf", kindSidecar},
		{"x~~blob", "x~blob", kindDir}, // a folder whose segment ends in "~blob"
		{"x~~~blob", "x~", kindContent},
		{"~~", "~", kindDir},
		{"a~~b~~~~c~meta.json", "a~b~~c", kindSidecar},
		{"x~blob.orig", "", kindUnknown},
		{"x~", "", kindUnknown},
		{"~tmp", "", kindUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			seg, k := decodeName(tc.name)
			g.Expect(k).To(Equal(tc.want))
			g.Expect(seg).To(Equal(tc.wantSeg))
		})
	}
}

// TestNamesNeverCollide checks the property the layout rests on: for any
// segments, the folder, content and sidecar names decode back to what they are.
func TestNamesNeverCollide(t *testing.T) {
	g := NewWithT(t)
	for _, seg := range []string{"a", "~", "~~", "a~", "~blob", "x~blob", "x~~blob", "x~meta.json", "~~~meta.json~", "报告"} {
		for want, name := range map[kind]string{
			kindDir:     escapeSegment(seg),
			kindContent: escapeSegment(seg) + markerContent,
			kindSidecar: escapeSegment(seg) + markerSidecar,
		} {
			got, k := decodeName(name)
			g.Expect(k).To(Equal(want), "name %q of segment %q", name, seg)
			g.Expect(got).To(Equal(seg), "name %q", name)
		}
	}
}
