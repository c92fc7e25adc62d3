//go:build linux

package cluster

import (
	"os"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// rssFileKB reads this process's resident file-backed memory.
func rssFileKB(g Gomega) int64 {
	b, err := os.ReadFile("/proc/self/status")
	g.Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			g.Expect(err).NotTo(HaveOccurred())
			return kb
		}
	}
	g.Expect("RssFile").To(BeEmpty(), "no RssFile in /proc/self/status")
	return 0
}

// The test binary's own code pages leave its resident set, and the process
// goes on running (the code it runs next is faulted back in).
func TestReleaseCodePages(t *testing.T) {
	g := NewWithT(t)
	before := rssFileKB(g)
	released, err := releaseCodePages()
	g.Expect(err).NotTo(HaveOccurred())
	after := rssFileKB(g)
	t.Logf("RssFile %d kB → %d kB (%d kB released)", before, after, released>>10)
	g.Expect(released).To(BeNumerically(">", 1<<20), "the test binary has more than 1 MB of its code resident")
	g.Expect(after).To(BeNumerically("<", before-released>>10/2))
	g.Expect(strings.Repeat("x", 3)).To(Equal("xxx"), "code runs after the release")
}

// Only the executable's mappings that are read-only and hold no private
// (copied-on-write) page are released.
func TestReadOnlyMappings(t *testing.T) {
	g := NewWithT(t)
	smaps := `00400000-004ae000 r-xp 00000000 fe:00 42                            /app/picobot
Size:                696 kB
Rss:                 696 kB
Anonymous:             0 kB
004ae000-00593000 r--p 000ae000 fe:00 42                            /app/picobot
Rss:                 908 kB
Anonymous:             0 kB
00593000-0059e000 rw-p 00193000 fe:00 42                            /app/picobot
Rss:                  44 kB
Anonymous:            16 kB
005a0000-005b0000 r--p 00200000 fe:00 42                            /app/picobot
Rss:                  64 kB
Anonymous:             4 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:00 77                    /lib/other.so
Rss:                 100 kB
Anonymous:             0 kB
7f0000200000-7f0000300000 rw-p 00000000 00:00 0
Rss:                 300 kB
Anonymous:           300 kB
VmFlags: rd wr mr mw me ac
`
	got, err := readOnlyMappings(strings.NewReader(smaps), 42)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]mapping{{start: 0x400000, end: 0x4ae000, rss: 696 << 10}, {start: 0x4ae000, end: 0x593000, rss: 908 << 10}}))

	none, err := readOnlyMappings(strings.NewReader(smaps), 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none).To(BeEmpty(), "an unknown executable releases nothing")
}
