//go:build linux

package warm

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/picobot/picobot/runtime/sandbox"
	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

// plantedSecret is in this test process's initial environment block (see
// TestMain), which is what /proc/<pid>/environ shows: the attacks go after
// it. This process is the runtime.
const plantedSecret = "sk-planted-in-the-runtime-environ"

const systemPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func TestMain(m *testing.M) {
	switch {
	case os.Getenv("PICOBOT_TEST_HOLDER") != "":
		holder(os.Getenv("PICOBOT_TEST_HOLDER"))
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

func needNamespaces(t *testing.T) {
	t.Helper()
	if !sandbox.Probe().Namespaces {
		t.Skipf("LOUD SKIP: this kernel refuses user namespaces, so there are no warm sandboxes: %s", sandbox.Probe())
	}
}

// box is a root folder outside /tmp (so the sandbox's own /tmp is in play)
// with two sessions' workspaces and a state folder holding a secret.
type testBox struct {
	root, ws, other, state string
}

func newBox(t *testing.T) testBox {
	b := sandboxtest.NewBox(t, "picobot-warm-test-")
	return testBox{root: b.Root, ws: b.WS, other: b.Other, state: b.State}
}

func spec(ws string, extraEnv ...string) sandbox.Spec {
	return sandbox.Spec{Workspace: ws, Env: sandbox.Env([]string{systemPath}, ws, nil, extraEnv...)}
}

func request(s sandbox.Spec, argv ...string) execserver.Request {
	return execserver.Request{Workspace: s.Workspace, ReadOnly: s.ReadOnly, ReadWrite: s.ReadWrite,
		AllowedPorts: s.AllowedPorts, Env: s.Env, Argv: argv}
}

// start starts a bash script in the pool's warm sandbox of s, its output
// into the returned pipe; release once it ended.
func start(t *testing.T, p *Pool, s sandbox.Spec, script string) (*execserver.Process, *os.File, func()) {
	t.Helper()
	c, release, err := p.Acquire(s)
	if err != nil || c == nil {
		t.Fatalf("no warm sandbox (client %v): %v", c, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := c.Start(request(s, "bash", "-c", script), nil, w, w)
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		release()
		t.Fatalf("failed to start: %v", err)
	}
	return proc, r, release
}

// run runs a bash script in the pool's warm sandbox of s and returns its
// combined output and how it ended.
func run(t *testing.T, p *Pool, s sandbox.Spec, script string) (string, syscall.WaitStatus) {
	t.Helper()
	proc, r, release := start(t, p, s, script)
	defer release()
	out, _ := io.ReadAll(r)
	_ = r.Close()
	ws, ok, err := proc.Wait()
	proc.Close()
	if !ok {
		t.Fatalf("no status: %v\n%s", err, out)
	}
	return string(out), ws
}

func TestOrdinaryWorkRunsInTheWarmSandbox(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello from the site") }))
	defer site.Close()
	b := newBox(t)
	p := New(Config{})
	defer p.Close()
	script := `set -e
mkdir -p src && printf 'print(sum(range(10)))\n' > src/job.py && python3 src/job.py
printf '#!/bin/sh\necho script ran\n' > run.sh && chmod +x run.sh && ./run.sh
mv src/job.py src/renamed.py && ls src
echo tmp-data > /tmp/t && cat "$TMPDIR/t"
python3 -c "import urllib.request; print(urllib.request.urlopen('` + site.URL + `').read().decode())"
sleep 0.1 & wait
echo HOME=$HOME`
	s := spec(b.ws)
	s.AllowedPorts = []uint16{uint16(site.Listener.Addr().(*net.TCPAddr).Port)}
	out, ws := run(t, p, s, script)
	g.Expect(ws.ExitStatus()).To(BeZero(), out)
	for _, want := range []string{"45\n", "script ran\n", "renamed.py\n", "tmp-data\n", "hello from the site\n", "HOME=" + b.ws + "\n"} {
		g.Expect(out).To(ContainSubstring(want))
	}
	// The same server runs the next program; exit statuses are the
	// programs' own.
	pids := p.Pids()
	g.Expect(pids).To(HaveLen(1))
	_, ws = run(t, p, s, "exit 7")
	g.Expect(ws.ExitStatus()).To(Equal(7))
	_, ws = run(t, p, s, "kill -TERM $$")
	g.Expect(ws.Signal()).To(Equal(syscall.SIGTERM))
	g.Expect(p.Pids()).To(Equal(pids))
	// The server is its namespace's init and the program's parent, with a
	// /proc of its own.
	out, _ = run(t, p, s, `echo ppid=$PPID; tr '\0' ' ' < /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'`)
	g.Expect(out).To(HavePrefix("ppid=1\n" + serverName + " " + b.ws + " \n"))
	n, err := strconv.Atoi(strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(n).To(BeNumerically("<=", 5), out)
}

func TestHostileProgramsAreRefusedInTheWarmSandbox(t *testing.T) {
	needNamespaces(t)
	b := newBox(t)
	p := New(Config{})
	defer p.Close()
	pid := strconv.Itoa(os.Getpid())
	home, _ := os.UserHomeDir()
	attacks := []struct{ name, script, leak string }{
		{"runtime environ", "cat /proc/" + pid + "/environ", plantedSecret},
		{"every environ", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep PICOBOT_SECRET; exit 1", plantedSecret},
		{"server environ", "cat /proc/1/environ", ""},
		{"server memory", "head -c 100 /proc/1/mem", ""},
		{"server descriptors", "ls -l /proc/1/fd/", "socket"},
		{"server control socket", "echo x > /proc/1/fd/0", ""},
		{"kill the server", "kill -KILL 1; sleep 0.2; kill -0 1 && exit 1", ""},
		{"terminate the server", "kill -TERM 1", ""},
		{"signal runtime", "kill -0 " + pid, ""},
		{"other session", "cat " + b.other + "/secret.txt", "other-session-data"},
		{"state folder", "cat " + b.state + "/secret.yaml", "agent-secret"},
		{"list parent", "ls " + b.root + "/workspaces", "s2"},
		{"symlink out", "ln -sf " + b.other + "/secret.txt leak && cat leak", "other-session-data"},
		{"home", "ls -a " + home, ".."},
		{"write etc", "echo x > /etc/picobot-warm-probe", ""},
		{"write other", "echo x > " + b.other + "/dropped", ""},
		{"unmount proc", "umount -l /proc && cat /proc/" + pid + "/environ", plantedSecret},
		{"mount", "mkdir -p m && mount -t tmpfs none m", ""},
		{"run the runtime binary", "/proc/1/exe --help", ""},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			g := NewWithT(t)
			out, ws := run(t, p, spec(b.ws), a.script)
			g.Expect(ws.ExitStatus()).NotTo(BeZero(), "the attack succeeded:\n%s", out)
			if a.leak != "" {
				g.Expect(out).NotTo(ContainSubstring(a.leak))
			}
		})
	}
	g := NewWithT(t)
	for _, f := range []string{"/etc/picobot-warm-probe", filepath.Join(b.other, "dropped")} {
		g.Expect(f).NotTo(BeAnExistingFile())
	}
	// Every attack ran in the one warm sandbox, which is still there.
	g.Expect(p.Pids()).To(HaveLen(1))
}

func TestSessionsWarmSandboxesAreApart(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	b := newBox(t)
	p := New(Config{})
	defer p.Close()
	mark := "picobot-warm-apart-" + strconv.Itoa(os.Getpid())
	// Session 1 keeps a program running and leaves files in its /tmp and
	// workspace.
	proc, r, release := start(t, p, spec(b.ws, sandboxtest.MarkEnv+"="+mark),
		"echo s1-tmp > /tmp/s1-tmp-file; echo s1-ws > s1-ws-file; echo ready; exec sleep 300")
	defer func() {
		_ = proc.Signal(syscall.SIGKILL)
		_, _, _ = proc.Wait()
		proc.Close()
		_ = r.Close()
		release()
	}()
	line, _ := bufio.NewReader(r).ReadString('\n')
	g.Expect(line).To(Equal("ready\n"))
	// Session 2 sees none of it.
	out, ws := run(t, p, spec(b.other), `ls -a /tmp; cat `+b.ws+`/s1-ws-file; cat `+b.ws+`/.tmp/s1-tmp-file; `+
		`cat /proc/[0-9]*/cmdline | tr '\0' ' '; echo; ls /proc | grep -c '^[0-9]'`)
	g.Expect(ws.Exited()).To(BeTrue(), out)
	g.Expect(strings.Count(out, "Permission denied")).To(Equal(2), out)
	g.Expect(out).NotTo(ContainSubstring("s1-tmp\n"))
	g.Expect(out).NotTo(ContainSubstring("s1-ws\n"))
	g.Expect(out).NotTo(ContainSubstring("s1-tmp-file\n"))
	g.Expect(out).NotTo(ContainSubstring("sleep 300"))
	g.Expect(p.Pids()).To(HaveLen(2))
	// While session 1 itself sees its own.
	out, _ = run(t, p, spec(b.ws), "cat /tmp/s1-tmp-file s1-ws-file; cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
	g.Expect(out).To(ContainSubstring("s1-tmp\ns1-ws\n"))
	g.Expect(out).To(ContainSubstring("sleep 300"))
}

// escaped starts, in the warm sandbox of ws, a program that leaves an
// orphan behind in a session of its own (a double fork and setsid, so
// neither its process group nor its parentage leads to it) and keeps
// running; both carry mark.
func escaped(t *testing.T, p *Pool, ws, mark string) (*execserver.Process, func()) {
	t.Helper()
	proc, r, release := start(t, p, spec(ws, sandboxtest.MarkEnv+"="+mark), "(setsid sleep 300 &); echo ready; sleep 300; true")
	line, _ := bufio.NewReader(r).ReadString('\n')
	_ = r.Close()
	if line != "ready\n" {
		t.Fatalf("the program did not start: %q", line)
	}
	return proc, release
}

func TestKillingTheServerEndsItsProgramsAndTheNextCallStartsAnother(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	b := newBox(t)
	p := New(Config{})
	defer p.Close()
	mark := "picobot-warm-kill-" + strconv.Itoa(os.Getpid())
	proc, release := escaped(t, p, b.ws, mark)
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(HaveLen(3))
	pids := p.Pids()
	g.Expect(pids).To(HaveLen(1))

	g.Expect(syscall.Kill(pids[0], syscall.SIGKILL)).To(Succeed())
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(BeEmpty())
	// The program's caller learns it is gone.
	_, ok, err := proc.Wait()
	g.Expect(ok).To(BeFalse())
	g.Expect(err).To(MatchError(ContainSubstring("lost the exec server")))
	proc.Close()
	release()

	// The next call gets a new warm sandbox.
	out, ws := run(t, p, spec(b.ws), "echo back")
	g.Expect(ws.ExitStatus()).To(BeZero(), out)
	g.Expect(out).To(Equal("back\n"))
	g.Expect(p.Pids()).To(HaveLen(1))
	g.Expect(p.Pids()).NotTo(Equal(pids))
}

func TestADeadServerIsDiscardedUnderTheCall(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	b := newBox(t)
	p := New(Config{})
	defer p.Close()
	_, _ = run(t, p, spec(b.ws), "true")
	c, release, err := p.Acquire(spec(b.ws))
	g.Expect(err).NotTo(HaveOccurred())
	// The server dies between Acquire and the start.
	pids := p.Pids()
	g.Expect(syscall.Kill(pids[0], syscall.SIGKILL)).To(Succeed())
	g.Eventually(func() error { return syscall.Kill(pids[0], 0) }).WithTimeout(10 * time.Second).Should(MatchError(syscall.ESRCH))
	_, err = c.Start(request(spec(b.ws), "true"), nil, os.Stderr, os.Stderr)
	g.Expect(err).To(MatchError(execserver.ErrUnavailable))
	release()
	p.Discard(c)
	out, ws := run(t, p, spec(b.ws), "echo again")
	g.Expect(ws.ExitStatus()).To(BeZero(), out)
}

// holder is the test binary as a stand-in runtime: it starts, in a warm
// sandbox of ws, a program that leaves an escaped descendant behind, says
// ready, and waits to be killed.
func holder(ws string) {
	p := New(Config{})
	c, _, err := p.Acquire(spec(ws, sandboxtest.MarkEnv+"="+ws))
	if err == nil && c == nil {
		err = fmt.Errorf("no warm sandbox")
	}
	if err == nil {
		_, err = c.Start(request(spec(ws, sandboxtest.MarkEnv+"="+ws), "bash", "-c", "setsid sleep 300 & sleep 300; true"), nil, os.Stderr, os.Stderr)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

func TestProgramsDieWithTheRuntime(t *testing.T) {
	needNamespaces(t)
	b := newBox(t)
	// bash and both sleeps, the setsid one in a session of its own.
	sandboxtest.ProgramsDieWithTheirHolder(t, b.ws, 3)
}

func TestIdleSandboxesAreReaped(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	b := newBox(t)
	clk := clocktesting.NewFakeClock(time.Now())
	p := New(Config{Idle: time.Minute, Clock: clk})
	defer p.Close()
	mark := "picobot-warm-idle-" + strconv.Itoa(os.Getpid())
	// A program still running keeps its sandbox.
	proc, release := escaped(t, p, b.ws, mark)
	_, _ = run(t, p, spec(b.ws), "true")
	clk.Step(2 * time.Minute)
	g.Expect(p.Len()).To(Equal(1))
	g.Expect(sandboxtest.Marked(mark)).To(HaveLen(3))
	// Once it ended, the sandbox goes after the idle time, and nothing of
	// it survives (the escaped descendant included).
	g.Expect(proc.Signal(syscall.SIGKILL)).To(Succeed())
	_, _, _ = proc.Wait()
	proc.Close()
	release()
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(HaveLen(1))
	pids := p.Pids()
	clk.Step(30 * time.Second)
	g.Expect(p.Len()).To(Equal(1))
	clk.Step(31 * time.Second)
	g.Eventually(p.Len).Should(BeZero())
	g.Eventually(func() error { return syscall.Kill(pids[0], 0) }).WithTimeout(10 * time.Second).Should(MatchError(syscall.ESRCH))
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(BeEmpty())
}

func TestThePoolIsBounded(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	root := newBox(t).root
	clk := clocktesting.NewFakeClock(time.Now())
	p := New(Config{Max: 2, Clock: clk})
	defer p.Close()
	ws := make([]string, 4)
	for i := range ws {
		ws[i] = filepath.Join(root, "workspaces", "b"+strconv.Itoa(i))
		g.Expect(os.MkdirAll(ws[i], 0o700)).To(Succeed())
	}
	_, _ = run(t, p, spec(ws[0]), "true")
	clk.Step(time.Second)
	_, _ = run(t, p, spec(ws[1]), "true")
	clk.Step(time.Second)
	first := p.Pids()
	// A third workspace closes the least recently used idle one (ws[0]).
	_, _ = run(t, p, spec(ws[2]), "true")
	g.Expect(p.Len()).To(Equal(2))
	g.Expect(p.Pids()).To(ContainElement(first[1]))
	g.Expect(p.Pids()).NotTo(ContainElement(first[0]))
	// With both busy, a fourth runs through the launcher (no client).
	m1, m2 := "picobot-warm-b1-"+strconv.Itoa(os.Getpid()), "picobot-warm-b2-"+strconv.Itoa(os.Getpid())
	p1, r1 := escaped(t, p, ws[1], m1)
	p2, r2 := escaped(t, p, ws[2], m2)
	c, release, err := p.Acquire(spec(ws[3]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c).To(BeNil())
	g.Expect(release).To(BeNil())
	g.Expect(p.Len()).To(Equal(2))
	for _, pr := range []*execserver.Process{p1, p2} {
		_ = pr.Signal(syscall.SIGKILL)
		_, _, _ = pr.Wait()
		pr.Close()
	}
	r1()
	r2()
	// Closing the pool ends what its sandboxes still run.
	g.Eventually(func() []int { return sandboxtest.Marked(m1) }).WithTimeout(10 * time.Second).Should(HaveLen(1))
	p.Close()
	g.Expect(p.Len()).To(BeZero())
	g.Eventually(func() []int { return append(sandboxtest.Marked(m1), sandboxtest.Marked(m2)...) }).WithTimeout(10 * time.Second).Should(BeEmpty())
	c, _, err = p.Acquire(spec(ws[0]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c).To(BeNil())
}

func TestWithoutNamespacesProgramsStartTheUsualWay(t *testing.T) {
	g := NewWithT(t)
	b := newBox(t)
	p := New(Config{Max: -1})
	defer p.Close()
	c, _, err := p.Acquire(spec(b.ws))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c).To(BeNil())
	g.Expect(p.Check().OK).To(BeTrue())
	g.Expect(p.Check().Message).To(HavePrefix("off: "))
	if sandbox.Probe().Namespaces {
		g.Expect(New(Config{}).Check()).To(HaveField("OK", true))
	} else {
		g.Expect(New(Config{}).Check()).To(HaveField("OK", false))
	}
	// A kernel that refuses namespaces (landlock-only): programs start
	// the usual way, and health says why and how to fix it.
	ll := New(Config{})
	ll.on = false
	c, _, err = ll.Acquire(spec(b.ws))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c).To(BeNil())
	g.Expect(ll.Check()).To(And(HaveField("OK", false), HaveField("Message", HavePrefix("off: without namespaces")),
		HaveField("Fix", ContainSubstring("user namespaces"))))
	g.Expect(ll.Len()).To(BeZero())
}

func TestConcurrentFirstProgramsShareOneSandbox(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	b := newBox(t)
	p := New(Config{})
	defer p.Close()
	const n = 8
	outs := make(chan string, n)
	for i := range n {
		go func() {
			// (run's t.Fatalf belongs to the test's goroutine.)
			c, release, err := p.Acquire(spec(b.ws))
			if err != nil || c == nil {
				outs <- fmt.Sprintf("no warm sandbox: %v", err)
				return
			}
			defer release()
			r, w, _ := os.Pipe()
			proc, err := c.Start(request(spec(b.ws), "echo", strconv.Itoa(i)), nil, w, w)
			_ = w.Close()
			if err != nil {
				_ = r.Close()
				outs <- err.Error()
				return
			}
			out, _ := io.ReadAll(r)
			_ = r.Close()
			_, _, _ = proc.Wait()
			proc.Close()
			outs <- string(out)
		}()
	}
	got := map[string]bool{}
	for range n {
		var out string
		g.Eventually(outs).WithTimeout(30 * time.Second).Should(Receive(&out))
		got[out] = true
	}
	g.Expect(got).To(HaveLen(n))
	for i := range n {
		g.Expect(got).To(HaveKey(strconv.Itoa(i) + "\n"))
	}
	g.Expect(p.Pids()).To(HaveLen(1))
}

// TestClosingAWorkspaceEndsItsSandboxes: a workspace going away (a
// stateless turn's scratch folder) takes its idle sandbox at once, and a
// busy one when its last program ends, without waiting for Idle; other
// workspaces' sandboxes stay.
func TestClosingAWorkspaceEndsItsSandboxes(t *testing.T) {
	needNamespaces(t)
	g := NewWithT(t)
	b := newBox(t)
	p := New(Config{Idle: time.Hour})
	defer p.Close()
	_, _ = run(t, p, spec(b.ws), "true")
	mark := "picobot-warm-close-" + strconv.Itoa(os.Getpid())
	proc, release := escaped(t, p, b.other, mark)
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(HaveLen(3))
	g.Expect(p.Len()).To(Equal(2))

	p.CloseWorkspace(b.ws)
	g.Expect(p.Len()).To(Equal(1), "the idle sandbox of the closed workspace went at once")
	p.CloseWorkspace(b.other)
	g.Expect(p.Len()).To(Equal(1), "a busy sandbox stays while its program runs")
	g.Expect(sandboxtest.Marked(mark)).To(HaveLen(3))
	pids := p.Pids()

	g.Expect(proc.Signal(syscall.SIGKILL)).To(Succeed())
	_, _, _ = proc.Wait()
	proc.Close()
	release()
	g.Expect(p.Len()).To(BeZero(), "its last program ended: the sandbox went with it")
	g.Eventually(func() error { return syscall.Kill(pids[0], 0) }).WithTimeout(10 * time.Second).Should(MatchError(syscall.ESRCH))
	g.Eventually(func() []int { return sandboxtest.Marked(mark) }).WithTimeout(10 * time.Second).Should(BeEmpty())
}
