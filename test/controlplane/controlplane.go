// Package controlplane starts a real kube-apiserver + etcd for tests (envtest),
// building the binaries from Go modules with hack/controlplane.sh when they are
// not cached. Tests need a real API server: CEL rules, defaulting, status
// subresources and printer columns exist only there.
package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/test/repo"
)

// RepoRoot walks up from the working directory to the folder holding go.mod.
func RepoRoot() (string, error) { return repo.Root() }

// AssetsDir returns a folder with kube-apiserver and etcd: KUBEBUILDER_ASSETS
// when it holds them, else the cache filled by hack/controlplane.sh (which
// builds them the first time).
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		if hasAssets(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("KUBEBUILDER_ASSETS=%q lacks kube-apiserver or etcd", dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "controlplane.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("failed to build control plane binaries: %w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("failed to build control plane binaries: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if !hasAssets(dir) {
		return "", fmt.Errorf("hack/controlplane.sh printed %q, which lacks kube-apiserver or etcd", dir)
	}
	return dir, nil
}

func hasAssets(dir string) bool {
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// Environment is a running control plane with the PicoBot CRDs installed.
type Environment struct {
	*envtest.Environment
	Config *rest.Config
	// KubeconfigPath is a kubeconfig file for kubectl, helm and subprocesses.
	KubeconfigPath string
	dir            string
}

// Start starts etcd and kube-apiserver and installs the CRDs from
// config/crd/bases.
func Start() (*Environment, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves the servers running when a later step (installing
		// the CRDs) fails: stop them, or every failed start leaks a pair.
		_ = env.Stop()
		return nil, fmt.Errorf("failed to start control plane from %s: %w", assets, err)
	}
	dir, err := os.MkdirTemp("", "picobot-kube-")
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("failed to create kubeconfig folder: %w", err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, env.KubeConfig, 0o600); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	// Tests create many objects at once; client-side throttling would measure
	// the limiter, not the system.
	cfg.QPS, cfg.Burst = 1000, 2000
	return &Environment{Environment: env, Config: cfg, KubeconfigPath: kc, dir: dir}, nil
}

// Stop stops the control plane and removes the kubeconfig.
func (e *Environment) Stop() error {
	err := e.Environment.Stop()
	return errors.Join(err, os.RemoveAll(e.dir))
}

// Unavailable handles a control plane that could not start: under CI it is a
// failure (tests there must run); elsewhere the caller skips, and this says so
// loudly on stderr.
func Unavailable(err error) (reason string, fatal bool) {
	reason = fmt.Sprintf("real kube-apiserver + etcd could not be started: %v", err)
	if os.Getenv("CI") != "" {
		return reason, true
	}
	fmt.Fprintf(os.Stderr, "\n!!! SKIPPING control-plane tests: %s\n!!! Run hack/controlplane.sh to build the binaries.\n\n", reason)
	return reason, false
}

// LeakIgnores are, for goleak.Find in a TestMain, the goroutines a
// Kubernetes client leaves running after the tests (klog's flush daemon,
// pooled HTTP connections), followed by a package's own extra ones.
func LeakIgnores(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"),
	}, extra...)
}

// Connect starts the control plane and a client for it that knows the core
// and PicoBot types. When the control plane cannot start outside CI, skip
// says why (env and kube are nil, the caller's tests skip); err is set when
// the run must fail instead.
func Connect() (env *Environment, kube client.Client, skip string, err error) {
	env, err = Start()
	if err != nil {
		reason, fatal := Unavailable(err)
		if fatal {
			return nil, nil, "", errors.New(reason)
		}
		return nil, nil, reason, nil
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), picobotv1alpha1.AddToScheme(scheme)); err != nil {
		return nil, nil, "", errors.Join(err, env.Stop())
	}
	if kube, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, nil, "", errors.Join(fmt.Errorf("failed to connect to the control plane: %w", err), env.Stop())
	}
	return env, kube, "", nil
}
