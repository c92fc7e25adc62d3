//go:build linux

package execserver_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/sandboxtest"
)

func TestProgramsRunAsTheSandboxUser(t *testing.T) { testProgramsRunAsTheSandboxUser(t, newPod) }

// TestProgramsRunAsTheSandboxUserSandboxPod is TestProgramsRunAsTheSandboxUser against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestProgramsRunAsTheSandboxUserSandboxPod(t *testing.T) {
	testProgramsRunAsTheSandboxUser(t, newSandboxPod)
}

func testProgramsRunAsTheSandboxUser(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)

	out, ws := p.run(t, "", "bash", "-c", "id -u; id -G; echo to-stderr >&2; exit 3")
	g.Expect(strings.Fields(out)[0]).To(Equal("65533"))
	g.Expect(out).To(ContainSubstring("65532"), "the pod's shared group")
	g.Expect(out).To(ContainSubstring("to-stderr"))
	g.Expect(ws.Exited()).To(BeTrue())
	g.Expect(ws.ExitStatus()).To(Equal(3))

	out, ws = p.run(t, "hello through stdin\n", "cat")
	g.Expect(out).To(Equal("hello through stdin\n"))
	g.Expect(ws.ExitStatus()).To(Equal(0))

	// The program's own signal is its status.
	_, ws = p.run(t, "", "bash", "-c", "kill -TERM $$")
	g.Expect(ws.Signaled()).To(BeTrue())
	g.Expect(ws.Signal()).To(Equal(syscall.SIGTERM))

	// Files it makes are the shared group's, read-write (umask 007).
	out, _ = p.run(t, "", "bash", "-c", "echo x > made.txt; stat -c '%u %g %a' made.txt")
	g.Expect(out).To(Equal("65533 65532 660\n"))

	// Bad requests say what is wrong.
	_, err := p.client.Start(execserver.Request{Workspace: p.ws, Env: p.env(), Argv: []string{"no-such-program-x"}}, nil, os.Stdout, os.Stdout)
	g.Expect(err).To(MatchError(ContainSubstring(`failed to find "no-such-program-x" on PATH`)))
	_, err = p.client.Start(execserver.Request{Workspace: "/etc", Env: p.env(), Argv: []string{"true"}}, nil, os.Stdout, os.Stdout)
	g.Expect(err).To(MatchError(ContainSubstring(`workspace "/etc" is not inside the sandbox's workspace folder`)))
	_, err = p.client.Start(execserver.Request{Workspace: p.wsRoot + "/../../etc", Env: p.env(), Argv: []string{"true"}}, nil, os.Stdout, os.Stdout)
	g.Expect(err).To(MatchError(ContainSubstring("is not inside")))
	_, err = p.client.Start(execserver.Request{Workspace: p.ws, Env: p.env(), Argv: []string{"bash", "-c", strings.Repeat("x", 200<<10)}}, nil, os.Stdout, os.Stdout)
	g.Expect(err).To(MatchError(ContainSubstring("write a long script to a file in the workspace")))
}

// marked starts a program through the server with a marker in its
// environment, so the test finds it (and what it started) in /proc.
func (p *pod) marked(t *testing.T, mark string, script string) *execserver.Process {
	t.Helper()
	r, w, err := os.Pipe()
	must(t, err)
	proc, err := p.client.Start(execserver.Request{Workspace: p.ws, Env: p.env(sandboxtest.MarkEnv + "=" + mark),
		Argv: []string{"bash", "-c", script}}, nil, w, w)
	_ = w.Close()
	must(t, err)
	line, _ := bufio.NewReader(r).ReadString('\n')
	_ = r.Close()
	if line != "ready\n" {
		t.Fatalf("program did not start: %q", line)
	}
	return proc
}

func TestSignalsKillAndTeardown(t *testing.T) { testSignalsKillAndTeardown(t, newPod) }

// TestSignalsKillAndTeardownSandboxPod is TestSignalsKillAndTeardown against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestSignalsKillAndTeardownSandboxPod(t *testing.T) { testSignalsKillAndTeardown(t, newSandboxPod) }

func testSignalsKillAndTeardown(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)
	mark := func(s string) string { return t.Name() + "-" + s }

	// A signal from the runtime reaches the program.
	proc := p.marked(t, mark("term"), "echo ready; sleep 300")
	g.Expect(proc.Signal(syscall.SIGTERM)).To(Succeed())
	ws, ok, err := proc.Wait()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(ws.Signal()).To(Equal(syscall.SIGTERM))
	proc.Close()

	// Background jobs end with their command (its process group is killed).
	proc = p.marked(t, mark("bg"), "sleep 300 & sleep 301 & echo ready")
	_, _, _ = proc.Wait()
	proc.Close()
	g.Eventually(func() []int { return sandboxtest.Marked(mark("bg")) }, 10*time.Second, 20*time.Millisecond).Should(BeEmpty())

	// Closing the connection (the runtime gave up, or died) kills the
	// program and its group.
	proc = p.marked(t, mark("close"), "sleep 300 & echo ready; sleep 302; true")
	g.Eventually(func() []int { return sandboxtest.Marked(mark("close")) }, 10*time.Second, 20*time.Millisecond).Should(HaveLen(3))
	proc.Close()
	g.Eventually(func() []int { return sandboxtest.Marked(mark("close")) }, 10*time.Second, 20*time.Millisecond).Should(BeEmpty())

	// When the server dies, its programs die (PR_SET_PDEATHSIG), so a
	// killed sandbox container leaves nothing behind.
	proc = p.marked(t, mark("server"), "echo ready; sleep 303")
	// bash may still be exec'ing sleep when "ready" arrives, and a process
	// in execve has no readable environment for that instant.
	g.Eventually(func() []int { return sandboxtest.Marked(mark("server")) }, 10*time.Second, 20*time.Millisecond).ShouldNot(BeEmpty())
	g.Expect(p.server.Process.Kill()).To(Succeed())
	g.Eventually(func() []int { return sandboxtest.Marked(mark("server")) }, 10*time.Second, 20*time.Millisecond).Should(BeEmpty())
	_, ok, err = proc.Wait()
	g.Expect(ok).To(BeFalse())
	g.Expect(err).To(MatchError(ContainSubstring("lost the exec server")))
}

func TestTerminal(t *testing.T) { testTerminal(t, newPod) }

// TestTerminalSandboxPod is TestTerminal against a sandbox pod: the
// server over TCP and TLS, the runtime's tools through its relay.
func TestTerminalSandboxPod(t *testing.T) { testTerminal(t, newSandboxPod) }

func testTerminal(t *testing.T, newPod func(testing.TB) *pod) {
	g := NewWithT(t)
	p := newPod(t)
	proc, master, err := p.client.StartTTY(execserver.Request{Workspace: p.ws, Env: p.env("TERM=dumb"), Argv: []string{"bash", "--norc", "-i"}}, 100, 30)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = master.Close() }()
	_, err = master.WriteString("stty size; tty; echo $((6*7))\r")
	g.Expect(err).NotTo(HaveOccurred())
	var seen strings.Builder
	buf := make([]byte, 4096)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(seen.String(), "42") && time.Now().Before(deadline) {
		_ = master.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := master.Read(buf)
		seen.Write(buf[:n])
	}
	g.Expect(seen.String()).To(ContainSubstring("30 100"))
	g.Expect(seen.String()).To(ContainSubstring("/dev/pts/"))
	g.Expect(seen.String()).To(ContainSubstring("42"))
	g.Expect(proc.Signal(syscall.SIGKILL)).To(Succeed())
	ws, ok, _ := proc.Wait()
	g.Expect(ok).To(BeTrue())
	g.Expect(ws.Signal()).To(Equal(syscall.SIGKILL))
	proc.Close()
}

// The sandbox's own user (its programs) may not start programs through
// the server: they would escape their sandbox's Landlock domain.
func TestSandboxUserCannotUseTheServer(t *testing.T) {
	g := NewWithT(t)
	p := newPod(t)
	bin := filepath.Join(p.root, "server")
	cmd := exec.Command(bin)
	cmd.Env = []string{"PICOBOT_TEST_PLANTED=1", "PICOBOT_TEST_DIAL=" + p.socket, "PICOBOT_TEST_WS=" + p.ws}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sandboxUID, Gid: sandboxUID, Groups: []uint32{sharedGID}}}
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(string(out)).To(ContainSubstring("user 65533 runs the sandbox's programs and may not start programs through the exec server"))
	g.Expect(string(out)).NotTo(ContainSubstring("started-by-the-sandbox"))
}
