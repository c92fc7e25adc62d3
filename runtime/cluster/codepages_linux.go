//go:build linux

package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// releaseCodePages takes the pages of this process's own executable that
// are mapped read-only (code, read-only data) out of its resident set, and
// turns off fault-around for those mappings (MADV_RANDOM).
//
// Why: a session pod runs one binary for every component (gateway,
// operator tools, web UI) and the Go runtime's start-up touches code all
// over it; on every page fault the kernel also maps the up to 16 pages
// around it that are in the page cache. Before this, about 57 MB of a
// session pod's 68 MB RSS was the executable's file pages, most of which it
// never ran again. The pages stay in the page cache (shared by every pod of
// the node that runs the same image); a page the session does run is
// faulted back in, alone, at the cost of a minor fault. Only mappings with
// no private (copy-on-write) page are touched: dropping those would lose
// data, and a static non-PIE Go binary has none in its read-only segments.
func releaseCodePages() (int64, error) {
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("failed to find the executable: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("failed to read the memory map: %w", err)
	}
	defer func() { _ = f.Close() }()
	maps, err := readOnlyMappings(f, inodeOf(exe))
	if err != nil {
		return 0, err
	}
	var released int64
	for _, m := range maps {
		for _, advice := range []int{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, uintptr(advice)); errno != 0 {
				return released, fmt.Errorf("madvise %#x-%#x: %w", m.start, m.end, errno)
			}
		}
		released += m.rss
	}
	return released, nil
}

func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

type mapping struct {
	start, end uintptr
	rss        int64 // bytes resident
}

// readOnlyMappings parses smaps: the mappings of the file with inode ino
// that are not writable and hold no anonymous (copied-on-write) page.
func readOnlyMappings(r io.Reader, ino uint64) ([]mapping, error) {
	var out []mapping
	var cur *mapping
	anon := int64(0)
	flush := func() {
		if cur != nil && anon == 0 {
			out = append(out, *cur)
		}
		cur, anon = nil, 0
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header line
			flush()
			if len(f) < 6 || ino == 0 {
				continue
			}
			in, err := strconv.ParseUint(f[4], 10, 64)
			if err != nil || in != ino || strings.Contains(f[1], "w") {
				continue
			}
			lo, hi, ok := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if !ok || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("unexpected smaps line %q", sc.Text())
			}
			cur = &mapping{start: uintptr(start), end: uintptr(end)}
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			cur.rss = kb << 10
		case "Anonymous:":
			anon = kb
		}
	}
	flush()
	return out, sc.Err()
}
