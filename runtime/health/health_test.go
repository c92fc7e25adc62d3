package health_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/gateway"
	"github.com/picobot/picobot/runtime/health"
)

func static(cs ...health.Check) func(context.Context) []health.Check {
	return func(context.Context) []health.Check { return cs }
}

func TestReport(t *testing.T) {
	g := NewWithT(t)
	svc := health.NewService(
		health.Source{Kind: health.Optional, Name: "programs", Run: static(health.Check{Name: "fd", Message: "missing", Fix: "apt-get install -y fd-find"})},
		health.Source{Kind: health.Feature, Name: "browser", Run: static(health.Check{Name: "browser executable", OK: true, Message: "/usr/lib/chromium/chromium"})},
		health.Source{Kind: health.Core, Name: "runtime", Run: static(health.Check{Name: "state folder", OK: true, Message: "ok"})},
	)
	r := svc.Report(context.Background())
	g.Expect(r.OK).To(BeTrue(), "a missing optional feature does not fail the report")
	g.Expect(r.Groups).To(HaveLen(3))
	g.Expect([]health.Kind{r.Groups[0].Kind, r.Groups[1].Kind, r.Groups[2].Kind}).To(Equal([]health.Kind{health.Core, health.Feature, health.Optional}))
	g.Expect(r.Failures()).To(BeEmpty())
	text := r.Text()
	g.Expect(text).To(ContainSubstring("[warn] programs: fd — missing\n         fix: apt-get install -y fd-find"))
	g.Expect(text).To(MatchRegexp(`(?s)^Required\n.*runtime: state folder.*\nRequired by enabled features\n.*browser executable.*\nOptional\n.*programs: fd`),
		"each item is under its kind")
	g.Expect(text).To(ContainSubstring("All required checks passed."))

	svc.Add(health.Source{Kind: health.Feature, Name: "browser launch", Run: static(health.Check{Name: "headless launch", Message: "exited", Fix: "apt-get install -y --reinstall chromium"})})
	r = svc.Report(context.Background())
	g.Expect(r.OK).To(BeFalse())
	g.Expect(r.Failures()).To(HaveLen(1))
	g.Expect(r.Text()).To(ContainSubstring("[FAIL] browser launch: headless launch — exited\n         fix: apt-get install -y --reinstall chromium"))
	g.Expect(r.Text()).To(ContainSubstring("1 required check(s) failed."))

	var back health.Report
	g.Expect(json.Unmarshal(r.JSON(), &back)).To(Succeed())
	g.Expect(back).To(Equal(r))

	// The flat list is what the gateway's /health reports.
	gw := r.Checks()
	g.Expect(gw).To(ContainElement(gateway.Check{Name: "browser launch: headless launch", Message: "exited", Fix: "apt-get install -y --reinstall chromium",
		Kind: health.Feature}))
	g.Expect(gw).To(ContainElement(gateway.Check{Name: "runtime: state folder", OK: true, Message: "ok", Kind: health.Core}))
	g.Expect(gw).To(ContainElement(HaveField("Message", "optional: missing")))
}

func TestSourcesThatHangOrPanic(t *testing.T) {
	g := NewWithT(t)
	svc := health.NewService(
		health.Source{Kind: health.Core, Name: "stuck", Run: func(ctx context.Context) []health.Check { <-ctx.Done(); time.Sleep(10 * time.Millisecond); return nil }},
		health.Source{Kind: health.Core, Name: "broken", Run: func(context.Context) []health.Check { panic("oops") }},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r := svc.Report(ctx)
	g.Expect(r.OK).To(BeFalse())
	g.Expect(r.Failures()).To(ConsistOf(
		HaveField("Message", ContainSubstring("did not finish")),
		HaveField("Message", ContainSubstring("failed unexpectedly: oops")),
	))
}

func TestStandardChecks(t *testing.T) {
	g := NewWithT(t)
	g.Expect(health.Executable("shell", "install bash", "no-such-program-x", "sh")).To(HaveField("OK", true))
	c := health.Executable("thing", "apt-get install -y thing", "no-such-program-x")
	g.Expect(c.OK).To(BeFalse())
	g.Expect(c.Fix).To(Equal("apt-get install -y thing"))

	fs := health.FileSearch()
	if !fs.OK {
		g.Expect(fs.Fix).To(Equal("apt-get install -y fd-find"))
	}

	dir := t.TempDir()
	g.Expect(health.WritableDir("state", dir)).To(HaveField("OK", true))
	c = health.WritableDir("state", filepath.Join(dir, "new", "state"))
	g.Expect(c.OK).To(BeTrue())
	g.Expect(c.Message).To(ContainSubstring("can be created"))
	g.Expect(filepath.Join(dir, "new")).NotTo(BeADirectory(), "checking creates nothing")
	entries, _ := os.ReadDir(dir)
	g.Expect(entries).To(BeEmpty(), "the probe file is removed")
	file := filepath.Join(dir, "f")
	g.Expect(os.WriteFile(file, nil, 0o600)).To(Succeed())
	c = health.WritableDir("state", file)
	g.Expect(c.OK).To(BeFalse())
	g.Expect(c.Fix).To(ContainSubstring("--state"))
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		g.Expect(os.Mkdir(ro, 0o500)).To(Succeed())
		g.Expect(health.WritableDir("state", ro).OK).To(BeFalse())
	}
}
