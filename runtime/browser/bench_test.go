package browser

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkOpenSnapshotClickScreenshot measures one round of the typical
// flow on a warm browser: open a local page, snapshot, click, screenshot.
// It reports the p50 and p99 of a round (target p99 < 300 ms), the p50 of
// each step, the cold launch time and the browser's resident memory.
func BenchmarkOpenSnapshotClickScreenshot(b *testing.B) {
	requireChromium(b)
	s := newSite(b)
	cfg := testConfig(b)
	d := NewDriver(cfg)
	defer d.Close()
	ctx := context.Background()
	t0 := time.Now()
	br, release, err := d.Acquire(ctx, DialogKey("bench"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	launch := time.Since(t0)
	steps := []string{"open", "snapshot", "click", "screenshot"}
	var stepTimes [4][]time.Duration
	round := func() error {
		t0 := time.Now()
		mark := func(i int) {
			now := time.Now()
			stepTimes[i] = append(stepTimes[i], now.Sub(t0))
			t0 = now
		}
		if _, err := br.Open(ctx, s.url("127.0.0.1", "/next"), false); err != nil {
			return err
		}
		mark(0)
		if _, err := br.Snapshot(ctx); err != nil {
			return err
		}
		mark(1)
		if err := br.Click(ctx, "@e1"); err != nil { // the link home
			return err
		}
		mark(2)
		if _, err := br.Screenshot(ctx, false, false); err != nil {
			return err
		}
		mark(3)
		return nil
	}
	for range 3 { // warm up
		if err := round(); err != nil {
			b.Fatal(err)
		}
	}
	stepTimes = [4][]time.Duration{}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if err := round(); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	pct := func(times []time.Duration, p float64) float64 {
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		i := int(p * float64(len(times)-1))
		return float64(times[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(times, 0.50), "p50-ms")
	b.ReportMetric(pct(times, 0.99), "p99-ms")
	for i, name := range steps { // where a round's time goes
		b.ReportMetric(pct(stepTimes[i], 0.50), name+"-p50-ms")
	}
	b.ReportMetric(float64(launch.Milliseconds()), "cold-launch-ms")
	b.ReportMetric(float64(groupRSS(br.PID()))/(1<<20), "rss-MB")
}

// BenchmarkProfileReuse opens a persistent profile from many dialogs in
// turn; the browser is closed after every 20 uses (as an idle close
// would), so the reuse rate is what a busy profile sees.
func BenchmarkProfileReuse(b *testing.B) {
	requireChromium(b)
	s := newSite(b)
	d := NewDriver(testConfig(b))
	defer d.Close()
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "chrome")
	key := ProfileKey("bp-benchbench")
	i := 0
	for b.Loop() {
		br, release, err := d.Acquire(ctx, key, Options{UserDataDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := br.Open(ctx, s.url("127.0.0.1", "/cookie"), false); err != nil {
			b.Fatal(err)
		}
		release()
		if i++; i%20 == 0 {
			if err := d.CloseKey(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	}
	st := d.Stats()
	b.ReportMetric(100*float64(st.Reuses)/float64(st.Reuses+st.Launches), "reuse-%")
}

// groupRSS sums the proportional resident memory (PSS, so pages shared
// between Chromium's processes count once) of the browser's process group:
// the browser, its renderers, GPU and network processes, in bytes.
func groupRSS(pgid int) int64 {
	if pgid <= 0 {
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	var total int64
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "smaps_rollup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}
