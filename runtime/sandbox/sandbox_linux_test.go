//go:build linux

package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

// plantedSecret is in this test process's initial environment block (see
// TestMain), which is what /proc/<pid>/environ shows: the attacks below go
// after it.
const plantedSecret = "sk-planted-in-the-runtime-environ"

func TestMain(m *testing.M) {
	switch {
	case os.Getenv("PICOBOT_TEST_HOLDER") != "":
		holder()
	case os.Getenv("PICOBOT_TEST_SEAL") != "", os.Getenv(sealFDEnv) != "":
		sealed()
	case os.Getenv("PICOBOT_TEST_PLANTED") == "":
		// Re-exec with the secret in the initial environment: os.Setenv
		// would not put it where /proc/<pid>/environ reads.
		env := append(os.Environ(), "PICOBOT_TEST_PLANTED=1", "PICOBOT_SECRET_LLM_OPENAI="+plantedSecret)
		if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
			fmt.Fprintf(os.Stderr, "failed to re-exec the test binary: %v\n", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// box is a workspace outside /tmp (so the sandbox's own /tmp is in play),
// a sibling session's workspace and a state folder holding a secret.
type box struct {
	root, ws, other, state string
}

func newBox(t *testing.T) box {
	b := sandboxtest.NewBox(t, "picobot-sandbox-test-")
	return box{root: b.Root, ws: b.WS, other: b.Other, state: b.State}
}

// run runs a bash script in the sandbox and returns its combined output and
// how it ended.
func run(t *testing.T, spec Spec, ns bool, script string) (string, syscall.WaitStatus) {
	t.Helper()
	if spec.Env == nil {
		// The system PATH: a PATH folder under the home folder (pyenv's
		// shims) is allowed alone, not the rest of what it runs.
		spec.Env = Env([]string{"PATH=" + defaultPath}, spec.Workspace, nil)
	}
	cmd, err := command(spec, ns, "bash", "-c", script)
	if err != nil {
		t.Fatalf("failed to build command: %v", err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	ws, ok := cmd.Exit()
	if !ok {
		t.Fatalf("command did not run: %v\n%s", err, out.String())
	}
	return out.String(), ws
}

func TestProbeSeesWhatTheKernelGives(t *testing.T) {
	g := NewWithT(t)
	r := Probe()
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil {
		abi = 0
	}
	g.Expect(r.LandlockABI).To(Equal(abi), r.String())
	// The network layer is there exactly where Landlock has TCP rules.
	g.Expect(r.Network).To(Equal(abi >= netABI), r.String())
	if !r.Network {
		g.Expect(r.Errors).To(HaveKey("network"))
	}
	// This machine (and CI, which runs on it) gives user namespaces; a
	// kernel that refuses them must say why.
	if !r.Namespaces {
		g.Expect(r.Errors).To(HaveKey("namespaces"))
	}
	g.Expect(r.String()).To(ContainSubstring("allowlisted environment"))
}

// attack is one thing a prompt-injected model would try; it must fail, and
// its output must not show what it went after.
type attack struct {
	name, script string
	leak         string
}

func attacks(b box) []attack {
	pid := strconv.Itoa(os.Getpid())
	home, _ := os.UserHomeDir()
	return []attack{
		{"runtime environ", "cat /proc/" + pid + "/environ", plantedSecret},
		{"parent environ", "tr '\\0' '\\n' < /proc/$PPID/environ", plantedSecret},
		{"every environ", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep PICOBOT_SECRET; exit 1", plantedSecret},
		{"runtime memory", "head -c 100 /proc/" + pid + "/mem", ""},
		{"runtime cwd", "ls /proc/" + pid + "/cwd/", ""},
		{"init root", "cat /proc/1/root" + b.state + "/secret.yaml", "agent-secret"},
		{"other session", "cat " + b.other + "/secret.txt", "other-session-data"},
		{"state folder", "cat " + b.state + "/secret.yaml", "agent-secret"},
		{"list parent", "ls " + b.root + "/workspaces", "s2"},
		{"symlink out", "ln -sf " + b.other + "/secret.txt leak && cat leak", "other-session-data"},
		{"home", "ls -a " + home, ".."},
		{"write etc", "echo x > /etc/picobot-probe-x", ""},
		{"write other", "echo x > " + b.other + "/dropped", ""},
		{"write through symlink", "ln -sfn /etc etc-link && echo x > etc-link/picobot-probe-y", ""},
		{"signal runtime", "kill -0 " + pid, ""},
		{"unmount proc", "umount -l /proc && cat /proc/" + pid + "/environ", plantedSecret},
		{"mount", "mkdir -p m && mount -t tmpfs none m", ""},
	}
}

func TestHostileProgramsAreRefused(t *testing.T) {
	for _, ns := range []bool{true, false} {
		t.Run(fmt.Sprintf("namespaces=%v", ns), func(t *testing.T) {
			if ns && !Probe().Namespaces {
				t.Skipf("LOUD SKIP: this kernel refuses user namespaces: %s", Probe())
			}
			b := newBox(t)
			for _, a := range attacks(b) {
				t.Run(a.name, func(t *testing.T) {
					g := NewWithT(t)
					out, ws := run(t, Spec{Workspace: b.ws}, ns, a.script)
					g.Expect(ws.ExitStatus()).NotTo(BeZero(), "the attack succeeded:\n%s", out)
					if a.leak != "" {
						g.Expect(out).NotTo(ContainSubstring(a.leak))
					}
				})
			}
			g := NewWithT(t)
			for _, p := range []string{"/etc/picobot-probe-x", "/etc/picobot-probe-y", filepath.Join(b.other, "dropped")} {
				g.Expect(p).NotTo(BeAnExistingFile())
			}
		})
	}
}

// The attacks fail because of the sandbox, not because they are wrong: run
// without it, the same reads succeed.
func TestAttacksWorkWithoutTheSandbox(t *testing.T) {
	g := NewWithT(t)
	b := newBox(t)
	for _, a := range attacks(b) {
		// (/proc/1/root is closed to this test process already when it runs
		// in a container.)
		if a.leak == "" || a.name == "unmount proc" || a.name == "list parent" || a.name == "home" || a.name == "init root" {
			continue
		}
		cmd := exec.Command("bash", "-c", a.script)
		cmd.Dir = b.ws
		out, _ := cmd.CombinedOutput()
		g.Expect(string(out)).To(ContainSubstring(a.leak), a.name)
	}
}

func TestOrdinaryWorkStillRuns(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from the site") }))
	defer site.Close()
	for _, ns := range []bool{true, false} {
		t.Run(fmt.Sprintf("namespaces=%v", ns), func(t *testing.T) {
			if ns && !Probe().Namespaces {
				t.Skipf("LOUD SKIP: this kernel refuses user namespaces: %s", Probe())
			}
			g := NewWithT(t)
			b := newBox(t)
			script := `set -e
mkdir -p src && printf 'print(sum(range(10)))\n' > src/job.py && python3 src/job.py
printf '#!/bin/sh\necho script ran\n' > run.sh && chmod +x run.sh && ./run.sh
mv src/job.py src/renamed.py && ls src
echo tmp-data > "$TMPDIR/t" && cat "$TMPDIR/t"
python3 -c "import urllib.request; print(urllib.request.urlopen('` + site.URL + `').read().decode())"
sleep 0.1 & wait
echo HOME=$HOME`
			// The site's port is opted in, as an Agent would
			// (spec.tools.network.allowedPorts).
			out, ws := run(t, Spec{Workspace: b.ws, AllowedPorts: []uint16{port(t, site.URL)}}, ns, script)
			g.Expect(ws.ExitStatus()).To(BeZero(), out)
			for _, want := range []string{"45\n", "script ran\n", "renamed.py\n", "tmp-data\n", "hello from the site\n", "HOME=" + b.ws + "\n"} {
				g.Expect(out).To(ContainSubstring(want))
			}
			g.Expect(filepath.Join(b.ws, "src", "renamed.py")).To(BeAnExistingFile())
		})
	}
}

func TestNamespacesGiveAPrivateProcAndTmp(t *testing.T) {
	if !Probe().Namespaces {
		t.Skipf("LOUD SKIP: this kernel refuses user namespaces: %s", Probe())
	}
	g := NewWithT(t)
	b := newBox(t)
	marker := filepath.Join("/tmp", fmt.Sprintf("picobot-host-tmp-%d", os.Getpid()))
	g.Expect(os.WriteFile(marker, []byte("host"), 0o600)).To(Succeed())
	defer func() { _ = os.Remove(marker) }()
	out, ws := run(t, Spec{Workspace: b.ws}, true, `echo pid=$$; ls /proc | grep -c '^[0-9]'; ls /tmp; echo in-tmp > /tmp/x`)
	g.Expect(ws.ExitStatus()).To(BeZero(), out)
	// The launcher is the namespace's init (its threads take the next
	// ids); it, bash, ls and grep are all the /proc there is.
	g.Expect(out).To(HavePrefix("pid="))
	g.Expect(out).NotTo(HavePrefix("pid=1\n"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	n, err := strconv.Atoi(lines[1])
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(n).To(BeNumerically("<=", 5), out)
	g.Expect(out).NotTo(ContainSubstring(filepath.Base(marker)))
	g.Expect(os.ReadFile(filepath.Join(TmpDir(b.ws), "x"))).To(Equal([]byte("in-tmp\n")))
}

func TestExitStatusIsTheProgramsOwn(t *testing.T) {
	for _, ns := range []bool{true, false} {
		t.Run(fmt.Sprintf("namespaces=%v", ns), func(t *testing.T) {
			g := NewWithT(t)
			b := newBox(t)
			_, ws := run(t, Spec{Workspace: b.ws}, ns, "exit 7")
			g.Expect(ws.Exited()).To(BeTrue())
			g.Expect(ws.ExitStatus()).To(Equal(7))
			_, ws = run(t, Spec{Workspace: b.ws}, ns, "kill -TERM $$")
			g.Expect(ws.Signaled()).To(BeTrue())
			g.Expect(ws.Signal()).To(Equal(syscall.SIGTERM))
		})
	}
}

// holder is the test binary run as a stand-in runtime: it starts a
// sandboxed program that leaves an escaped descendant behind (setsid, its
// own session), says ready, and waits to be killed.
func holder() {
	ws := os.Getenv("PICOBOT_TEST_HOLDER")
	cmd, err := Command(Spec{Workspace: ws, Env: append(Env(os.Environ(), ws, nil), sandboxtest.MarkEnv+"="+ws)},
		"bash", "-c", "setsid sleep 300 & sleep 300")
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

func TestProgramsDieWithTheRuntime(t *testing.T) {
	b := newBox(t)
	// The launcher (the namespace's init), bash and both sleeps, the setsid
	// one in a session of its own.
	sandboxtest.ProgramsDieWithTheirHolder(t, b.ws, 4)
}

// sealed is the test binary as a server that seals its environment: it
// prints what os.Getenv sees and what its initial block holds.
func sealed() {
	if err := SealEnvironment(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	block, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Printf("getenv=%s\nfd=%q\nblock=%s\n", os.Getenv("PICOBOT_SECRET_LLM_OPENAI"), os.Getenv(sealFDEnv),
		bytes.ReplaceAll(block, []byte{0}, []byte{' '}))
	os.Exit(0)
}

func TestSealEnvironmentKeepsSecretsOutOfTheBlock(t *testing.T) {
	g := NewWithT(t)
	cmd := exec.Command("/proc/self/exe", "-test.run", "^$")
	cmd.Env = append(os.Environ(), "PICOBOT_TEST_SEAL=1")
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("getenv=" + plantedSecret + "\n"))
	g.Expect(string(out)).To(ContainSubstring("fd=\"\"\n"))
	block := string(out)[strings.Index(string(out), "block="):]
	g.Expect(block).NotTo(ContainSubstring(plantedSecret))
	g.Expect(block).To(ContainSubstring("PATH="))
	// Without sealing, the block holds it (the check can fail).
	own, err := os.ReadFile("/proc/self/environ")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(own)).To(ContainSubstring(plantedSecret))
}
