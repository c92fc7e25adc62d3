// Package helm tests how PicoBot is packaged, with the real tools: the Helm
// chart (helm lint and helm template over a matrix of values, schema
// rejections, golden snapshots, server-side dry run and a real install,
// upgrade and uninstall against a real kube-apiserver), the kustomize install
// in config/default, the YAML in the install docs, and the Dockerfiles (their
// build stages run outside Docker).
//
// Golden files and the chart README's values reference are rewritten with
//
//	go test ./test/helm/ -run 'TestRender|TestValuesReference' -update
package helm

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/picobot/picobot/test/controlplane"
)

var update = flag.Bool("update", false, "rewrite the golden files and the values reference in charts/picobot/README.md")

const (
	// releaseName and releaseNamespace are what every render uses.
	releaseName      = "picobot"
	releaseNamespace = "picobot-system"
)

var (
	root       string // the repository
	chartDir   string
	helmBin    string
	kubectlBin string
	// env is the control plane; nil (and skipReason set) when it could not start.
	env        *controlplane.Environment
	skipReason string
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
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard))) // envtest's client logs nothing worth reading here
	var err error
	if root, err = controlplane.RepoRoot(); err != nil {
		return 1, err
	}
	chartDir = filepath.Join(root, "charts", "picobot")
	if helmBin, err = installedTool("helm"); err != nil {
		return 1, err
	}
	if kubectlBin, err = findKubectl(); err != nil {
		return 1, err
	}
	env, err = controlplane.Start()
	if err != nil {
		reason, fatal := controlplane.Unavailable(err)
		if fatal {
			return 1, errors.New(reason)
		}
		env, skipReason = nil, reason
		return m.Run(), nil
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "failed to stop control plane:", err)
		}
	}()
	// What a cluster has before the chart goes in: the release namespace and
	// the Prometheus Operator's CRDs the chart's monitoring objects need.
	if _, stderr, err := kubectl("", "create", "namespace", releaseNamespace); err != nil {
		return 1, fmt.Errorf("failed to create namespace %s: %w: %s", releaseNamespace, err, stderr)
	}
	crd := filepath.Join(root, "test", "helm", "testdata", "crds")
	if _, stderr, err := kubectl("", "apply", "--server-side", "-f", crd); err != nil {
		return 1, fmt.Errorf("failed to install the CRDs of %s: %w: %s", crd, err, stderr)
	}
	if err := waitEstablished(monitoringCRDs); err != nil {
		return 1, fmt.Errorf("Prometheus Operator CRDs not established: %w", err)
	}
	return m.Run(), nil
}

// waitEstablished waits up to a minute for CRDs to be served. kubectl wait
// fails at once, rather than waiting, on a CRD the API server has not given
// any condition yet (".status.conditions accessor error: <nil>"), which a
// CRD applied a moment before can be: it is asked again until then.
func waitEstablished(crds []string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, stderr, err := kubectl("", append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, crds...)...)
		if err == nil {
			return nil
		}
		if !strings.Contains(stderr, "accessor error") || time.Now().After(deadline) {
			return fmt.Errorf("%w: %s", err, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// installedTool returns the path of a pinned tool, installing it into the
// cache the first time (hack/tool.sh).
func installedTool(name string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "tool.sh"), name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("failed to install %s with hack/tool.sh: %w: %s", name, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
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

// needAPIServer skips a test when the control plane could not start (outside CI).
func needAPIServer(tb testing.TB) {
	tb.Helper()
	if env == nil {
		tb.Skip(skipReason)
	}
}

// execute runs a command in the repository with stdin and returns its output.
func execute(stdin, name string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err = cmd.Run(); err != nil {
		// The message, not the process state, is what a failure should show.
		err = fmt.Errorf("%s %s: %s: %s", filepath.Base(name), strings.Join(args, " "), err.Error(), strings.TrimSpace(e.String()))
	}
	return o.String(), e.String(), err
}

// kubectl runs kubectl against the test control plane.
func kubectl(stdin string, args ...string) (stdout, stderr string, err error) {
	if env != nil {
		args = append([]string{"--kubeconfig=" + env.KubeconfigPath}, args...)
	}
	return execute(stdin, kubectlBin, args...)
}

// helm runs helm; against the test control plane when it runs.
func helm(args ...string) (stdout, stderr string, err error) {
	if env != nil {
		args = append([]string{"--kubeconfig=" + env.KubeconfigPath}, args...)
	}
	return execute("", helmBin, args...)
}
