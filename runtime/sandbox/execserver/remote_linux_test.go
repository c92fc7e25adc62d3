//go:build linux

package execserver_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/sandbox/execserver"
	"github.com/picobot/picobot/runtime/sandbox/paircred"
	"github.com/picobot/picobot/runtime/tool"
)

// A sandbox pod's server starts nothing for a connection that is not its
// runtime's: a wrong token, no TLS, or a client that pins another pair's
// certificate (it would show its token to the wrong server); and a runtime
// that pins its pair's certificate refuses a server presenting another.
func TestSandboxPodRefusesStrangers(t *testing.T) {
	g := NewWithT(t)
	p := newSandboxPod(t)
	mark := filepath.Join(p.ws, "started")
	touch := execserver.Request{Workspace: p.ws, Env: p.env(), Argv: []string{"touch", mark}}
	other, err := paircred.Generate("other-pair", time.Now())
	g.Expect(err).NotTo(HaveOccurred())

	// The pair's certificate, another token.
	_, err = p.remoteClient(t, p.cred.CertPEM, other.Token).Start(touch, nil, os.Stdout, os.Stdout)
	g.Expect(err).To(MatchError(ContainSubstring("wrong token")))

	// Another pair's certificate and token: the handshake fails on the
	// runtime's side, before its token leaves.
	_, err = p.remoteClient(t, other.CertPEM, other.Token).Start(touch, nil, os.Stdout, os.Stdout)
	g.Expect(err).To(MatchError(ContainSubstring("a certificate other than its pair's")))
	g.Expect(err).To(MatchError(execserver.ErrUnavailable))

	// The right token in the clear: the server wants a TLS handshake.
	c, err := net.Dial("tcp", p.addr)
	g.Expect(err).NotTo(HaveOccurred())
	hello, _ := json.Marshal(map[string]any{"token": p.cred.Token, "request": touch})
	frame := append([]byte{'h', 0, 0, 0, 0}, hello...)
	binary.BigEndian.PutUint32(frame[1:], uint32(len(hello)))
	_, _ = c.Write(frame)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	answer, _ := io.ReadAll(c)
	_ = c.Close()
	g.Expect(string(answer)).NotTo(ContainSubstring("started"))

	// A TLS client that trusts any certificate but has no token.
	tc, err := tls.Dial("tcp", p.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the stranger under test
	g.Expect(err).NotTo(HaveOccurred())
	hello, _ = json.Marshal(map[string]any{"request": touch})
	frame = append([]byte{'h', 0, 0, 0, 0}, hello...)
	binary.BigEndian.PutUint32(frame[1:], uint32(len(hello)))
	_, _ = tc.Write(frame)
	_ = tc.SetReadDeadline(time.Now().Add(20 * time.Second))
	answer, _ = io.ReadAll(tc)
	_ = tc.Close()
	g.Expect(string(answer)).To(ContainSubstring("wrong token"))

	// A file tool call with a wrong token is refused too.
	_, err = p.remoteClient(t, p.cred.CertPEM, other.Token).CallTool(context.Background(), execserver.Request{Workspace: p.ws,
		Tool: &execserver.ToolCall{Name: "file_write", Args: json.RawMessage(`{"path":"started","content":"x"}`)}})
	g.Expect(err).To(MatchError(ContainSubstring("wrong token")))

	g.Expect(mark).NotTo(BeAnExistingFile())
	out, status := p.run(t, "", "echo", "the runtime still runs programs")
	g.Expect(status.ExitStatus()).To(Equal(0))
	g.Expect(out).To(Equal("the runtime still runs programs\n"))
}

// A sandbox pod replaced under a new address (the operator's replacement
// of a killed one, with the pair's credentials): the runtime's next call
// looks the address up again and goes there.
func TestSandboxPodReplaced(t *testing.T) {
	g := NewWithT(t)
	first := newSandboxPod(t)
	var mu sync.Mutex
	addr, lookups := first.addr, 0
	c, err := execserver.NewRemoteClient(execserver.RemoteConfig{CertPEM: first.cred.CertPEM, Token: first.cred.Token, Wait: 30 * time.Second,
		Address: func(context.Context, string) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			lookups++
			return addr, nil
		}})
	g.Expect(err).NotTo(HaveOccurred())
	call := func(ws string) (tool.Result, error) {
		return c.CallTool(context.Background(), execserver.Request{Workspace: ws,
			Tool: &execserver.ToolCall{Name: "file_write", Args: json.RawMessage(`{"path":"note.txt","content":"hi"}`)}})
	}
	res, err := call(first.ws)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), res.Content)

	g.Expect(first.server.Process.Kill()).To(Succeed())
	_, _ = first.server.Process.Wait()
	replacement := startPod(t, true, &first.cred)
	mu.Lock()
	addr = replacement.addr
	mu.Unlock()
	res, err = call(replacement.ws)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(filepath.Join(replacement.ws, "note.txt")).To(BeAnExistingFile())
	mu.Lock()
	g.Expect(lookups).To(BeNumerically(">", 1))
	mu.Unlock()
}

// BenchmarkEchoHiSandboxPod is the added latency of `bash -c "echo hi"` run
// in a sandbox pod (the runtime's relay, TCP and TLS to the pod's server,
// pipes there) against the sandbox container's server over its Unix socket,
// run alternately so both see the same load. Reports p50/p99 of each and of
// the difference. Target: under 5 ms added.
func BenchmarkEchoHiSandboxPod(b *testing.B) {
	local, remote := newPod(b), newSandboxPod(b)
	run := func(p *pod) error {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer func() { _ = r.Close() }()
		proc, err := p.client.Start(execserver.Request{Workspace: p.ws, Env: p.env(), Argv: []string{"bash", "-c", "echo hi"}}, nil, w, w)
		_ = w.Close()
		if err != nil {
			return err
		}
		if out, _ := io.ReadAll(r); string(out) != "hi\n" {
			b.Fatalf("output %q", out)
		}
		_, _, err = proc.Wait()
		proc.Close()
		return err
	}
	var socket, tcp, added []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := run(local); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := run(remote); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		socket, tcp, added = append(socket, t1.Sub(t0)), append(tcp, t2.Sub(t1)), append(added, t2.Sub(t1)-t1.Sub(t0))
	}
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"socket", socket}, {"tls", tcp}, {"added", added}} {
		slices.Sort(m.lat)
		b.ReportMetric(float64(m.lat[len(m.lat)/2].Microseconds())/1000, m.name+"-p50-ms")
		b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Microseconds())/1000, m.name+"-p99-ms")
	}
}
