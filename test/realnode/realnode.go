// Package realnode drives the real single-node Kubernetes of hack/realnode.sh
// from tests: it brings the node up and down, runs kubectl and helm inside
// the node's network namespace, imports images, and carries TCP between the
// host and the node.
//
// The node has a network namespace of its own with no link to the host's, so
// nothing of it changes the host's interfaces, routes or iptables. Test
// servers that pods must reach (PostgreSQL, Redis, S3, the fake LLM) keep
// running on the host's loopback; Expose opens a listener inside the node's
// namespace, on the node's address, that forwards to them. Forward does the
// reverse for a port inside the node (a kubectl port-forward), so a test's
// HTTP and WebSocket clients dial an ordinary loopback address. Both create
// their sockets from a thread that entered the node's namespace (setns), which
// needs root, as the node itself does.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/picobot/picobot/test/repo"
)

const (
	// NodeIP is the node's address: pods reach what Expose opens on it.
	NodeIP = "10.99.0.1"
	// PublicIP is an address of the node outside every private range
	// (TEST-NET-3): a server exposed on it stands for one on the internet,
	// such as a model endpoint, as far as a NetworkPolicy can tell.
	PublicIP = "203.0.113.1"
)

// Node is a running node of hack/realnode.sh.
type Node struct {
	// Dir is the node's state folder (logs in Dir/logs).
	Dir string
	// Kubeconfig is the cluster admin's kubeconfig. Its server address is
	// valid inside the node's network namespace only: use Command.
	Kubeconfig string
	root       string
	holder     int
}

// Unavailable reports why the node cannot run on this machine, or "".
func Unavailable() string {
	if runtime.GOOS != "linux" {
		return "the real node needs Linux"
	}
	if os.Geteuid() != 0 {
		return "the real node needs root (namespaces, cgroups, containerd)"
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			return "no cgroup hierarchy under /sys/fs/cgroup"
		}
	}
	return ""
}

// Up starts the node (building its components the first time, which takes
// about half an hour on two cores) and returns it; a node already up is
// reused.
func Up() (*Node, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "realnode.sh"), "up")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("failed to bring the real node up: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	b, err := os.ReadFile(filepath.Join(dir, "run", "holder.pid"))
	if err != nil {
		return nil, fmt.Errorf("failed to read the node's holder pid: %w", err)
	}
	holder, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("failed to parse the node's holder pid %q: %w", b, err)
	}
	return &Node{Dir: dir, Kubeconfig: filepath.Join(dir, "pki", "admin.kubeconfig"), root: root, holder: holder}, nil
}

// Down stops the node and removes its state.
func (n *Node) Down() error {
	cmd := exec.Command(filepath.Join(n.root, "hack", "realnode.sh"), "down")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to bring the real node down: %w: %s", err, out)
	}
	return nil
}

// Command runs name inside the node's network namespace (the host's mounts,
// so binaries and files of the host are at hand), with KUBECONFIG set to the
// admin's.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(n.holder), "-n", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig)
	return cmd
}

// Kubectl runs kubectl with args as the cluster admin and returns its
// standard output.
func (n *Node) Kubectl(ctx context.Context, args ...string) (string, error) {
	return n.run(n.Command(ctx, "kubectl", args...))
}

// KubectlIn is Kubectl with stdin.
func (n *Node) KubectlIn(ctx context.Context, stdin string, args ...string) (string, error) {
	cmd := n.Command(ctx, "kubectl", args...)
	cmd.Stdin = strings.NewReader(stdin)
	return n.run(cmd)
}

func (n *Node) run(cmd *exec.Cmd) (string, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("failed to run %q: %w: %s", strings.Join(cmd.Args[4:], " "), err, stderr.String())
	}
	return string(out), nil
}

// Import loads an OCI archive (hack/realnode-images.sh) into the node's
// containerd, where pods with imagePullPolicy Never find it.
func (n *Node) Import(archive string) error {
	cmd := exec.Command(filepath.Join(n.root, "hack", "realnode.sh"), "import", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("failed to import %q into the node: %w: %s", archive, err, out)
	}
	return nil
}

// Ctr runs ctr with args on the node's containerd and returns its output.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.root, "hack", "realnode.sh"), append([]string{"ctr"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("failed to run ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// inNetns runs fn on a thread that has entered the node's network
// namespace, so the sockets fn creates belong to it. A thread that cannot
// return to the host's namespace is never reused: its goroutine ends while
// locked to it, which ends the thread.
func (n *Node) inNetns(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- fmt.Errorf("failed to open the host's network namespace: %w", err)
			return
		}
		defer func() { _ = host.Close() }()
		node, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", n.holder))
		if err != nil {
			done <- fmt.Errorf("failed to open the node's network namespace: %w", err)
			runtime.UnlockOSThread()
			return
		}
		defer func() { _ = node.Close() }()
		if err := unix.Setns(int(node.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("failed to enter the node's network namespace: %w", err)
			runtime.UnlockOSThread()
			return
		}
		ferr := fn()
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("failed to return to the host's network namespace: %w", err))
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// Listen listens on addr inside the node's network namespace.
func (n *Node) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := n.inNetns(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %q in the node: %w", addr, err)
	}
	return l, nil
}

// Dial connects to addr inside the node's network namespace.
func (n *Node) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inNetns(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("failed to dial %q in the node: %w", addr, err)
	}
	return c, nil
}

// Bridge is a TCP forwarder between the host and the node.
type Bridge struct {
	// Addr is where it listens.
	Addr string
	l    net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// Close stops listening and cuts every forwarded connection.
func (b *Bridge) Close() {
	_ = b.l.Close()
	b.mu.Lock()
	for c := range b.open {
		_ = c.Close()
	}
	b.open = nil
	b.mu.Unlock()
	b.wg.Wait()
}

// Expose makes hostAddr (a server on the host, e.g. 127.0.0.1:5432)
// reachable from the node's pods at the returned Bridge's Addr, on NodeIP.
func (n *Node) Expose(hostAddr string) (*Bridge, error) {
	return n.ExposeAt(net.JoinHostPort(NodeIP, "0"), hostAddr)
}

// ExposeAt is Expose on a chosen address of the node (NodeIP or PublicIP,
// port 0 for any), for servers a NetworkPolicy admits by address and port.
func (n *Node) ExposeAt(nodeAddr, hostAddr string) (*Bridge, error) {
	l, err := n.Listen(nodeAddr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return serve(l, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", hostAddr) }), nil
}

// Forward makes nodeAddr (inside the node, e.g. a kubectl port-forward on
// its 127.0.0.1) reachable from the host at the returned Bridge's Addr on
// 127.0.0.1.
func (n *Node) Forward(nodeAddr string) (*Bridge, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to listen for the node's %q: %w", nodeAddr, err)
	}
	return serve(l, func(ctx context.Context) (net.Conn, error) { return n.Dial(ctx, nodeAddr) }), nil
}

func serve(l net.Listener, dial func(context.Context) (net.Conn, error)) *Bridge {
	b := &Bridge{Addr: l.Addr().String(), l: l, open: map[net.Conn]struct{}{}}
	b.wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			b.wg.Go(func() { b.pipe(in, dial) })
		}
	})
	return b
}

func (b *Bridge) pipe(in net.Conn, dial func(context.Context) (net.Conn, error)) {
	out, err := dial(context.Background())
	if err != nil {
		_ = in.Close()
		return
	}
	if !b.track(in, out) {
		return
	}
	var wg sync.WaitGroup
	for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
		wg.Go(func() {
			_, _ = io.Copy(p[0], p[1])
			// Half-close so the other side sees the end of the stream.
			if tc, ok := p[0].(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		})
	}
	wg.Wait()
	_ = in.Close()
	_ = out.Close()
	b.mu.Lock()
	if b.open != nil {
		delete(b.open, in)
		delete(b.open, out)
	}
	b.mu.Unlock()
}

// track registers a connection pair, or closes it when the bridge is
// closing.
func (b *Bridge) track(in, out net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		_ = in.Close()
		_ = out.Close()
		return false
	}
	b.open[in] = struct{}{}
	b.open[out] = struct{}{}
	return true
}
