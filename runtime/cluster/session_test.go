package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
)

// blackHole accepts connections and never answers: an API server that hangs.
func blackHole(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	ch := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(func() { close(ch) })
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String(), ch
}

// TestSessionPodStopsWhileTheAPIServerHangs: a session pod terminated while
// its first API request (which discovers the Agent's API group, a request
// controller-runtime makes without a context) gets no answer still stops,
// as a terminated warm pod does.
func TestSessionPodStopsWhileTheAPIServerHangs(t *testing.T) {
	g := NewWithT(t)
	addr, accepted := blackHole(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: hung, cluster: {server: "http://%s"}}]
users: [{name: pod, user: {token: t}}]
contexts: [{name: hung, context: {cluster: hung, user: pod}}]
current-context: hung
`, addr), 0o600)).To(Succeed())
	t.Setenv("KUBECONFIG", kubeconfig)
	env := map[string]string{EnvTenant: "team", EnvAgent: "helper", EnvPod: "helper-warm-1", EnvStateDir: t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- RunSession(ctx, SessionOptions{Env: func(k string) string { return env[k] }}) }()
	g.Eventually(accepted).WithTimeout(DiscoveryTimeout).Should(BeClosed(), "the pod asked the API server")
	g.Consistently(done).WithTimeout(DiscoveryTimeout/10).ShouldNot(Receive(), "no answer yet")
	cancel() // SIGTERM
	var err error
	g.Eventually(done).WithTimeout(3*DiscoveryTimeout).Should(Receive(&err), "it stops (a hang guard, not a latency check)")
	g.Expect(err).To(MatchError(context.Canceled))
}
