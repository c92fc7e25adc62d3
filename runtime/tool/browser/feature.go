package browser

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	driver "github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/feature"
	"github.com/picobot/picobot/runtime/health"
	"github.com/picobot/picobot/runtime/tool"
)

// FeatureConfig configures the browser feature of a process.
type FeatureConfig struct {
	// Driver configures the process's browser driver (Chromium path,
	// remote endpoints in cluster mode, limits).
	Driver driver.Config
	// Profiles, when set, returns the profile store of an agent; by
	// default embedded mode keeps profiles under <StateDir>/browser-profiles
	// and cluster mode (Host.Kube set) as BrowserProfile resources.
	Profiles func(a *feature.Agent) driver.ProfileStore
	// MaxChars caps page text (50,000 when 0).
	MaxChars int
	// HealthTTL is how long a headless launch check is reused (5 minutes).
	HealthTTL time.Duration
	// Files, when set, reads the files the browser uploads where the
	// programs' files are (a sandbox pod's workspace); see Options.Files.
	Files tool.WorkspaceFiles
}

// Feature offers the browser and browser_profiles tools to every agent
// whose spec.browser does not disable them, and bot_secret to those of them
// with saved credentials (spec.tools.secrets). One Feature (and one Driver)
// serves all agents of a process; call Close when the process stops.
type Feature struct {
	cfg    FeatureConfig
	driver *driver.Driver

	mu        sync.Mutex
	checked   time.Time
	lastCheck []health.Check
}

// NewFeature starts the browser driver (browsers themselves start on first
// use) and returns the feature.
func NewFeature(cfg FeatureConfig) *Feature {
	if cfg.HealthTTL <= 0 {
		cfg.HealthTTL = 5 * time.Minute
	}
	if cfg.Driver.Clock == nil {
		cfg.Driver.Clock = clock.RealClock{}
	}
	return &Feature{cfg: cfg, driver: driver.NewDriver(cfg.Driver)}
}

// Driver is the feature's browser driver.
func (f *Feature) Driver() *driver.Driver { return f.driver }

// Close closes every browser.
func (f *Feature) Close() { f.driver.Close() }

// Name implements feature.Feature.
func (f *Feature) Name() string { return "browser" }

// Build implements feature.Feature.
func (f *Feature) Build(_ context.Context, a *feature.Agent) (feature.Parts, error) {
	spec := a.Spec.Spec.Browser
	if spec != nil && spec.Enabled != nil && !*spec.Enabled {
		return feature.Parts{}, nil
	}
	o := Options{Driver: f.driver, Agent: a.Spec.Name, MaxChars: f.cfg.MaxChars, Profiles: f.profiles(a), Files: f.cfg.Files}
	if spec != nil {
		o.Domains = spec.AllowedDomains
		if spec.ProfileRef != nil && len(spec.AllowedDomains) == 0 {
			o.DefaultProfile = spec.ProfileRef.Name
		}
	}
	tools := []tool.Tool{NewTool(o), NewProfilesTool(o)}
	// bot_secret only for an agent with saved credentials to type.
	if t := a.Spec.Spec.Tools; t != nil && len(t.Secrets) > 0 {
		tools = append(tools, NewSecretTool(SecretOptions{Options: o, Secrets: t.Secrets, Lookup: a.Host.Secrets}))
	}
	return feature.Parts{Tools: tools, Health: f.Health}, nil
}

func (f *Feature) profiles(a *feature.Agent) driver.ProfileStore {
	if f.cfg.Profiles != nil {
		return f.cfg.Profiles(a)
	}
	local := filepath.Join(a.Host.StateDir, "browser-profiles")
	if a.Host.Kube != nil {
		ks := &driver.KubeProfiles{Client: a.Host.Kube, Namespace: a.Host.Tenant}
		if f.cfg.Driver.Endpoint == nil {
			ks.LocalRoot = local
		}
		return ks
	}
	return &driver.DirProfiles{Root: local}
}

// Health reports the browser's requirements: the executable and a real
// headless launch (reused for HealthTTL), or the remote endpoint in use.
func (f *Feature) Health(ctx context.Context) []health.Check {
	if f.cfg.Driver.Endpoint != nil {
		return []health.Check{{Name: "browser", OK: true, Message: "browsers run in browser pods (remote DevTools)"}}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.driver.Config().Clock.Now()
	if f.lastCheck != nil && now.Sub(f.checked) < f.cfg.HealthTTL {
		return f.lastCheck
	}
	f.lastCheck = Checks(ctx, f.driver.Config().Bin)
	f.checked = now
	return f.lastCheck
}

// Checks checks the executable at bin and launches it headless once.
func Checks(ctx context.Context, bin string) []health.Check {
	exe := health.Check{Name: "browser executable", OK: true, Message: bin}
	if err := driver.CheckExecutable(bin); err != nil {
		exe = health.Check{Name: "browser executable", Message: err.Error(), Fix: driver.InstallFix}
		return []health.Check{exe, {Name: "browser headless launch", Message: "skipped: no executable", Fix: driver.InstallFix}}
	}
	launch := health.Check{Name: "browser headless launch", OK: true}
	version, err := driver.CheckLaunch(ctx, bin)
	if err != nil {
		launch.OK = false
		launch.Message = err.Error()
		launch.Fix = "reinstall the browser and its libraries: apt-get install -y --reinstall chromium; or disable it with spec.browser.enabled: false"
	} else {
		launch.Message = version + " started headless"
	}
	return []health.Check{exe, launch}
}
