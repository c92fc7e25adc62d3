// Package e2e runs PicoBot as its users do: the real operator binary as a
// process against a real API server, driven with the real kubectl.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/test/controlplane"
)

var (
	env         *controlplane.Environment
	k8s         client.Client
	root        string
	kubectlBin  string
	operatorBin string
	operator    *operatorProcess
	// metricsToken is allowed to read the operators' metrics.
	metricsToken string
	skipReason   string
	workDir      string
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if root, err = controlplane.RepoRoot(); err != nil {
		return 1, err
	}
	env, err = controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			return 1, errors.New(reason)
		}
		skipReason = reason
		return m.Run(), nil
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if err := picobotv1alpha1.AddToScheme(scheme); err != nil {
		return 1, err
	}
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return 1, err
	}
	if kubectlBin, err = findKubectl(); err != nil {
		return 1, err
	}
	dir, err := os.MkdirTemp("", "picobot-e2e-")
	if err != nil {
		return 1, err
	}
	workDir = dir
	defer func() { _ = os.RemoveAll(dir) }()
	operatorBin = filepath.Join(dir, "operator")
	build := exec.Command("go", "build", "-o", operatorBin, "./operator/cmd")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("failed to build the operator: %w", err)
	}
	if metricsToken, err = metricsReaderToken(); err != nil {
		return 1, err
	}
	if operator, err = startOperator(dir); err != nil {
		return 1, err
	}
	code := m.Run()
	operator.stop()
	return code, nil
}

// findKubectl prefers the machine's kubectl, else the one hack/controlplane.sh
// built beside the control plane.
func findKubectl() (string, error) {
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p, nil
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no kubectl on PATH or in %s: %w", assets, err)
	}
	return p, nil
}

func needAPIServer(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
}

// operatorProcess is the operator binary running against the test API server.
type operatorProcess struct {
	cmd         *exec.Cmd
	metricsAddr string
	probeAddr   string
	logPath     string
	done        chan struct{}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// startOperator starts the operator binary on fresh loopback ports. The ports
// are picked before the process binds them, so another test package running
// in parallel can take one first: that start is retried with new ports.
func startOperator(dir string, extraArgs ...string) (*operatorProcess, error) {
	return startOperatorEnv(dir, nil, extraArgs...)
}

// startOperatorEnv starts the operator with extraEnv added to the test's own.
func startOperatorEnv(dir string, extraEnv []string, extraArgs ...string) (*operatorProcess, error) {
	var err error
	for range 5 {
		var p *operatorProcess
		p, err = startOperatorOnce(dir, extraEnv, extraArgs...)
		if err == nil {
			return p, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
	return nil, err
}

func startOperatorOnce(dir string, extraEnv []string, extraArgs ...string) (*operatorProcess, error) {
	metrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	probe, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("operator-%d.log", time.Now().UnixNano()))
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--metrics-bind-address=" + metrics, "--health-probe-bind-address=" + probe,
		"--kubeconfig=" + env.KubeconfigPath, "--zap-log-level=info"}, extraArgs...)
	cmd := exec.Command(operatorBin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("failed to start operator: %w", err)
	}
	p := &operatorProcess{cmd: cmd, metricsAddr: metrics, probeAddr: probe, logPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(p.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		// Ready means both of this process's servers answer: the probe, and
		// the metrics with controller-runtime's own series (not some other
		// process that took the port).
		if resp, err := http.Get("http://" + probe + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if body, err := p.metrics(context.Background()); err == nil && strings.Contains(string(body), "controller_runtime_") {
					return p, nil
				}
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("operator exited during start-up; log %s:\n%s", logPath, tail(logPath))
		case <-time.After(100 * time.Millisecond):
		}
	}
	p.stop()
	return nil, fmt.Errorf("operator not ready after 60s; log:\n%s", tail(logPath))
}

func (p *operatorProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// rssKB returns the operator's current and peak resident set size in KiB.
func (p *operatorProcess) rssKB() (cur, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			cur, _ = strconv.ParseInt(fields[1], 10, 64)
		case "VmHWM:":
			peak, _ = strconv.ParseInt(fields[1], 10, 64)
		}
	}
	return cur, peak, sc.Err()
}

// metric sums the samples of a Prometheus counter on url whose labels contain
// every one of match.
func metric(ctx context.Context, get func(context.Context) ([]byte, error), name string, match ...string) (float64, error) {
	body, err := get(ctx)
	if err != nil {
		return 0, err
	}
	var sum float64
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(line, m) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("failed to parse metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

func (p *operatorProcess) metrics(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := metricsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %s: %s", resp.Status, strings.TrimSpace(b.String()))
	}
	return []byte(b.String()), err
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// kubectl runs the real kubectl against the test API server.
func kubectl(args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(kubectlBin, append([]string{"--kubeconfig", env.KubeconfigPath}, args...)...)
	cmd.Dir = root
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}
