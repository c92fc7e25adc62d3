package helm

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// pendingContract lists what the chart renders per the binaries' contract
// but the binaries do not have yet (they are being built in parallel). The
// test logs them instead of failing; delete an entry once it exists.
var pendingContract = map[string]bool{}

// buildStage runs a Dockerfile's build stage outside Docker: the build
// context (the repository less what the Dockerfile's .dockerignore excludes)
// is copied to a temporary folder standing for WORKDIR, every COPY source is
// checked to exist in it, and every RUN runs there with sh, with TARGETOS and
// TARGETARCH set to this machine's and /out/ mapped to a temporary folder,
// which it returns.
func buildStage(t *testing.T, dockerfilePath string, df *dockerfile, name string) string {
	t.Helper()
	g := NewWithT(t)
	st := df.stage(name)
	g.Expect(st).NotTo(BeNil(), "no stage %q", name)
	ignore, err := readIgnore(dockerfilePath + ".dockerignore")
	g.Expect(err).NotTo(HaveOccurred())
	ctx, out := t.TempDir(), t.TempDir()
	g.Expect(copyContext(root, ctx, ignore)).To(Succeed())
	env := append(os.Environ(), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	workdir := ""
	for _, in := range st.instructions {
		switch in.cmd {
		case "WORKDIR":
			workdir = in.args
		case "ARG":
			for _, a := range strings.Fields(in.args) {
				g.Expect(a).To(BeElementOf("TARGETOS", "TARGETARCH"), "line %d: an ARG this test does not set", in.line)
			}
		case "COPY":
			g.Expect(in.flag("from")).To(BeEmpty(), "line %d: the build stage copies from the context only", in.line)
			srcs := strings.Fields(in.args)
			for _, src := range srcs[:len(srcs)-1] {
				_, err := os.Stat(filepath.Join(ctx, src))
				g.Expect(err).NotTo(HaveOccurred(), "line %d: COPY %s: not in the build context (.dockerignore?)", in.line, src)
			}
		case "RUN":
			for _, f := range in.flags {
				g.Expect(f).To(HavePrefix("--mount=type=cache,"), "line %d: only cache mounts are supported", in.line)
			}
			cmdline := strings.ReplaceAll(in.args, "/out/", out+"/")
			cmd := exec.Command("sh", "-ec", cmdline)
			cmd.Dir, cmd.Env = ctx, env
			output, err := cmd.CombinedOutput()
			g.Expect(err).NotTo(HaveOccurred(), "line %d: RUN %s\n%s", in.line, in.args, output)
		case "ENV":
			env = append(env, strings.Fields(in.args)...)
		default:
			t.Fatalf("line %d: %s in the build stage is not supported by this test", in.line, in.cmd)
		}
	}
	g.Expect(workdir).To(Equal("/src"))
	return out
}

// expectStaticExecutable checks a binary is for this machine and needs no
// dynamic loader (so it runs on distroless/static).
func expectStaticExecutable(g Gomega, path string) {
	f, err := elf.Open(path)
	g.Expect(err).NotTo(HaveOccurred(), "%s is not an ELF executable", path)
	defer func() { _ = f.Close() }()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	g.Expect(f.Machine).To(Equal(want))
	for _, p := range f.Progs {
		g.Expect(p.Type).NotTo(Equal(elf.PT_INTERP), "%s is dynamically linked (cgo?)", path)
	}
}

// finalCopies returns the final stage's COPY --from=<stage> sources mapped
// to their destinations.
func finalCopies(g Gomega, df *dockerfile, from string) map[string]string {
	copies := map[string]string{}
	for _, in := range df.final().instructions {
		if in.cmd == "COPY" {
			g.Expect(in.flag("from")).To(Equal(from), "line %d", in.line)
			f := strings.Fields(in.args)
			g.Expect(f).To(HaveLen(2), "line %d", in.line)
			copies[f[0]] = f[1]
		}
	}
	return copies
}

func loadDockerfile(t *testing.T, name string) (string, *dockerfile) {
	t.Helper()
	p := filepath.Join(root, "images", name, "Dockerfile")
	data, err := os.ReadFile(p)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	df, err := parseDockerfile(string(data))
	NewWithT(t).Expect(err).NotTo(HaveOccurred(), p)
	// The builder's Go is the one go.mod asks for.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	NewWithT(t).Expect(goLine).NotTo(BeNil())
	NewWithT(t).Expect(df.globalArgs).To(HaveKeyWithValue("GO_VERSION", string(goLine[1])))
	return p, df
}

// lastUser returns the final stage's USER.
func lastUser(df *dockerfile) string {
	user := ""
	for _, in := range df.final().instructions {
		if in.cmd == "USER" {
			user = in.args
		}
	}
	return user
}

// TestPicobotImage builds the picobot image's binaries exactly as its
// Dockerfile does and checks the final stage: distroless, non-root, static
// binaries where the chart expects them, and flags the chart passes known
// to the binaries.
func TestPicobotImage(t *testing.T) {
	g := NewWithT(t)
	path, df := loadDockerfile(t, "picobot")
	g.Expect(df.final().base).To(Equal("gcr.io/distroless/static-debian12:nonroot"))
	g.Expect(lastUser(df)).To(Equal("65532:65532"))

	out := buildStage(t, path, df, "build")
	copies := finalCopies(g, df, "build")
	g.Expect(copies).To(Equal(map[string]string{"/out/picobot": "/picobot", "/out/operator": "/operator"}),
		"the chart runs /picobot and /operator")
	for src := range copies {
		expectStaticExecutable(g, filepath.Join(out, strings.TrimPrefix(src, "/out/")))
	}
	var entry []string
	for _, in := range df.final().instructions {
		if in.cmd == "ENTRYPOINT" {
			var err error
			entry, err = in.execForm()
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	g.Expect(entry).To(Equal([]string{"/picobot"}))

	// The operator knows every flag the chart passes it.
	help, _ := exec.Command(filepath.Join(out, "operator"), "-h").CombinedOutput()
	g.Expect(string(help)).To(ContainSubstring("-leader-elect"))
	op := find(objects(t, mustRender(t, "default")), "Deployment", "picobot-operator")
	for _, arg := range podContainers(t, op)[1].args {
		flag, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		checkContract(t, g, "operator --"+flag, strings.Contains(string(help), "  -"+flag+" ") || strings.Contains(string(help), "  -"+flag+"\n"))
	}
	// picobot lists every command the chart and the operator run.
	usage, _ := exec.Command(filepath.Join(out, "picobot"), "help").CombinedOutput()
	g.Expect(string(usage)).To(ContainSubstring("Usage: picobot"))
	for _, cmd := range []string{"gateway", "migrate"} {
		checkContract(t, g, "picobot "+cmd, commandListed(string(usage), cmd))
	}
}

// TestPicobotBrowserImage builds the browser image's binary as its Dockerfile
// does and checks the final stage: Debian slim of this machine's release
// with packages that exist there (apt-cache policy), non-root, tini running
// `picobot browser`.
func TestPicobotBrowserImage(t *testing.T) {
	g := NewWithT(t)
	path, df := loadDockerfile(t, "picobot-browser")
	final := df.final()
	g.Expect(final.base).To(MatchRegexp(`^debian:[a-z]+-slim$`))
	g.Expect(lastUser(df)).To(Equal("65532:65532"))

	var packages []string
	for _, in := range final.instructions {
		if in.cmd != "RUN" || !strings.Contains(in.args, "apt-get install") {
			continue
		}
		_, rest, _ := strings.Cut(in.args, "apt-get install")
		rest, _, _ = strings.Cut(rest, "&&")
		for _, f := range strings.Fields(rest) {
			if !strings.HasPrefix(f, "-") {
				packages = append(packages, f)
			}
		}
	}
	g.Expect(packages).To(ContainElements("chromium", "tini", "ca-certificates"))
	codename := hostCodename(t)
	if base := "debian:" + codename + "-slim"; final.base != base {
		t.Errorf("the image is %s but this machine is Debian %s: apt-cache cannot vouch for its packages", final.base, codename)
	} else {
		out, err := exec.Command("apt-cache", append([]string{"policy"}, packages...)...).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), string(out))
		candidates := regexp.MustCompile(`(?m)^(\S+):\n\s+Installed: .*\n\s+Candidate: (.*)$`).FindAllStringSubmatch(string(out), -1)
		found := map[string]string{}
		for _, c := range candidates {
			found[c[1]] = c[2]
		}
		for _, p := range packages {
			g.Expect(found).To(HaveKey(p), "apt-cache knows no package %s (run apt-get update?)", p)
			g.Expect(found[p]).NotTo(Equal("(none)"), "package %s has no installable version", p)
		}
	}

	out := buildStage(t, path, df, "build")
	g.Expect(finalCopies(g, df, "build")).To(Equal(map[string]string{"/out/picobot": "/picobot"}))
	expectStaticExecutable(g, filepath.Join(out, "picobot"))
	var entry []string
	for _, in := range final.instructions {
		if in.cmd == "ENTRYPOINT" {
			var err error
			entry, err = in.execForm()
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	g.Expect(entry).To(Equal([]string{"/usr/bin/tini", "--", "/picobot", "browser"}))
	usage, _ := exec.Command(filepath.Join(out, "picobot"), "help").CombinedOutput()
	checkContract(t, g, "picobot browser", commandListed(string(usage), "browser"))
}

// checkContract asserts that part of the binaries' contract exists, or logs
// it while it is still pending.
func checkContract(t *testing.T, g Gomega, what string, ok bool) {
	t.Helper()
	switch {
	case ok && pendingContract[what]:
		t.Logf("%s now exists: remove it from pendingContract", what)
	case !ok && pendingContract[what]:
		t.Logf("PENDING: %s is in the chart's contract but not in the binary yet", what)
	default:
		g.Expect(ok).To(BeTrue(), "%s: the chart uses it, the binary lacks it", what)
	}
}

// commandListed says whether a usage text lists a command ("  name  …").
func commandListed(usage, cmd string) bool {
	return regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(cmd) + `\s`).MatchString(usage)
}

func hostCodename(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/etc/os-release")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VERSION_CODENAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	t.Fatal("no VERSION_CODENAME in /etc/os-release")
	return ""
}
