// Package nodeproc runs a real `picobot node` process against a gateway for
// end-to-end tests (the embedded and web UI suites) and reads what it shows:
// its prompts on stdout, its log on stderr, its id in its state folder and
// how it exited.
package nodeproc

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/gomega"
)

// Proc is a running `picobot node`.
type Proc struct {
	// Dir is the node's state folder (--state): its id and allowlist.
	Dir string
	// Stdin is the node's terminal: answers to its approval prompts.
	Stdin io.WriteCloser

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  strings.Builder // stdout: the approval prompts
	log  strings.Builder // stderr
	err  error           // how it exited; set before done is closed
}

// Start runs `bin node` against the gateway at base with key, its state in
// dir and the name name; env is added to the test's environment. The
// process is stopped (SIGTERM, then killed) when the test ends.
func Start(tb testing.TB, bin, base, key, dir, name string, env ...string) *Proc {
	tb.Helper()
	n := &Proc{Dir: dir, done: make(chan struct{})}
	n.cmd = exec.Command(bin, "node", "--url", base, "--api-key", key, "--state", dir, "--name", name)
	n.cmd.Env = append(os.Environ(), env...)
	n.cmd.Stdout = lockedWriter{&n.mu, &n.out}
	n.cmd.Stderr = lockedWriter{&n.mu, &n.log}
	var err error
	if n.Stdin, err = n.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.done)
	}()
	tb.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.done
		}
	})
	return n
}

// Done is closed when the process has exited.
func (n *Proc) Done() <-chan struct{} { return n.done }

// Err is how the process exited; it waits for the exit.
func (n *Proc) Err() error {
	<-n.done
	return n.err
}

// Stdout is what the node printed so far: its approval prompts.
func (n *Proc) Stdout() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.String()
}

// Stderr is the node's log so far (state changes as state=<state>).
func (n *Proc) Stderr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

// ID is the node's id, from its state folder (written before it connects).
func (n *Proc) ID(g gomega.Gomega) string {
	var id string
	g.Eventually(func() error {
		b, err := os.ReadFile(filepath.Join(n.Dir, "node-id"))
		id = strings.TrimSpace(string(b))
		return err
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	return id
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
