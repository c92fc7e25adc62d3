// Package remote gives a session runtime in cluster mode its browsers from
// browser pods. A Provider asks the operator for a browser with a Lease
// (package wire), waits until the operator publishes the pod's address and
// per-pod token in the agent's endpoints Secret and the pod answers, and
// hands the endpoint to the browser driver (browser.Config.Endpoint). While
// the driver keeps a browser open the Provider renews its Lease; once the
// driver closes it, a dialog's ephemeral browser is released at once and a
// profile's browser idles out after the profile's idle timeout.
//
// The package also packs and unpacks Chrome profiles for the S3 storage of
// BrowserProfiles (SaveProfile, RestoreProfile), which `picobot browser`
// runs around Chromium.
package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
	"github.com/picobot/picobot/runtime/browser"
	"github.com/picobot/picobot/runtime/browser/remote/wire"
)

// ProviderConfig configures a Provider.
type ProviderConfig struct {
	// Client reaches the API server with the session pod's identity: it
	// reads BrowserProfiles and the agent's endpoints Secret and manages
	// browser Leases in Namespace.
	Client client.Client
	// Namespace is the tenant; Agent the agent whose session this is.
	Namespace, Agent string
	// AgentUID, when set, makes the Agent own ephemeral browsers' Leases,
	// so deleting the Agent ends its browsers.
	AgentUID types.UID
	// Holder is written to Leases as their holder (the pod name).
	Holder string
	// Heartbeat is how often open browsers' Leases are renewed (1m).
	Heartbeat time.Duration
	// EphemeralIdle is how long the operator keeps a dialog's browser
	// without renewal (1h; the operator may cap it).
	EphemeralIdle time.Duration
	// ReadyTimeout bounds the wait for a browser pod to serve (3m: a cold
	// start may pull the image).
	ReadyTimeout time.Duration
	// Poll is the interval of that wait (500ms).
	Poll time.Duration
	// HTTPClient checks that a browser pod answers (a 5s-timeout client).
	HTTPClient *http.Client
	// Clock stamps Leases and drives the heartbeat (the real clock).
	Clock clock.WithTicker
	Log   *slog.Logger
}

// Provider gets one agent's browsers from browser pods. Its Endpoint method
// is the driver's browser.Config.Endpoint; Run renews the Leases of the
// browsers the driver keeps open.
type Provider struct {
	cfg ProviderConfig

	mu sync.Mutex
	// held are the keys handed to the driver, with when they last were
	// (the zero time while their endpoint is still being waited for).
	held map[browser.Key]time.Time
}

// NewProvider checks cfg and returns a Provider.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("a browser provider needs a Kubernetes client")
	case cfg.Namespace == "" || cfg.Agent == "":
		return nil, errors.New("a browser provider needs the namespace and the agent")
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = time.Minute
	}
	if cfg.EphemeralIdle <= 0 {
		cfg.EphemeralIdle = time.Hour
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 3 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Holder == "" {
		cfg.Holder = cfg.Agent
	}
	return &Provider{cfg: cfg, held: map[browser.Key]time.Time{}}, nil
}

// name is the browser name of key.
func (p *Provider) name(key browser.Key) string {
	if key.Persistent() {
		return wire.ProfileName(key.Profile)
	}
	return wire.DialogName(p.cfg.Agent, key.Dialog)
}

// Endpoint asks for key's browser and returns its endpoint once the pod
// serves: it creates or renews the browser's Lease, then waits for the
// address and token in the endpoints Secret and for the pod to accept the
// token. An error the operator publishes (image missing, storage not
// configured, agent not allowed) ends the wait with that error.
func (p *Provider) Endpoint(ctx context.Context, key browser.Key) (browser.Endpoint, error) {
	name := p.name(key)
	// While it asks and waits the key is held as pending (the zero time):
	// the heartbeat renews its Lease, so a slow cold start does not idle
	// out, and does not release it for the driver not having it open yet.
	// The heartbeat's grace for a driver still connecting starts when the
	// endpoint is handed out.
	p.mu.Lock()
	p.held[key] = time.Time{}
	p.mu.Unlock()
	asked, err := p.request(ctx, key, name)
	var ep browser.Endpoint
	if err == nil {
		ep, err = p.wait(ctx, key, name, asked)
	}
	p.mu.Lock()
	if err != nil {
		delete(p.held, key)
	} else {
		p.held[key] = p.cfg.Clock.Now()
	}
	p.mu.Unlock()
	if err != nil {
		return browser.Endpoint{}, err
	}
	return ep, nil
}

// request creates key's Lease or renews it, returning the renewal time.
func (p *Provider) request(ctx context.Context, key browser.Key, name string) (time.Time, error) {
	now := metav1.NewMicroTime(p.cfg.Clock.Now().Truncate(time.Microsecond))
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: map[string]string{
			wire.LabelName: wire.NameValue, wire.LabelComponent: wire.ComponentBrowser, wire.LabelAgent: p.cfg.Agent, wire.LabelBrowser: name}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &p.cfg.Holder, AcquireTime: &now, RenewTime: &now},
	}
	if key.Persistent() {
		bp := &picobotv1alpha1.BrowserProfile{}
		if err := p.cfg.Client.Get(ctx, client.ObjectKey{Namespace: p.cfg.Namespace, Name: key.Profile}, bp); err != nil {
			if apierrors.IsNotFound(err) {
				return time.Time{}, fmt.Errorf("%w: %s", browser.ErrProfileNotFound, key.Profile)
			}
			return time.Time{}, fmt.Errorf("failed to read BrowserProfile %s: %w", key.Profile, err)
		}
		l.Annotations = map[string]string{wire.AnnotationProfile: key.Profile}
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: picobotv1alpha1.GroupVersion.String(), Kind: "BrowserProfile", Name: bp.Name, UID: bp.UID}}
	} else {
		l.Annotations = map[string]string{wire.AnnotationDialog: key.Dialog}
		secs := int32(p.cfg.EphemeralIdle / time.Second)
		l.Spec.LeaseDurationSeconds = &secs
		if p.cfg.AgentUID != "" {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: picobotv1alpha1.GroupVersion.String(), Kind: "Agent", Name: p.cfg.Agent, UID: p.cfg.AgentUID}}
		}
	}
	err := p.cfg.Client.Create(ctx, l)
	if apierrors.IsAlreadyExists(err) {
		err = p.renew(ctx, name, now)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("failed to ask for the browser of %s: %w", key, err)
	}
	return now.Time, nil
}

// renew moves a Lease's renewTime to now and marks this agent as the one
// asking (the operator tells it, and only it, when it may not use the
// browser).
func (p *Provider) renew(ctx context.Context, name string, now metav1.MicroTime) error {
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{wire.LabelAgent: p.cfg.Agent}},
		"spec":     map[string]any{"renewTime": now, "holderIdentity": p.cfg.Holder},
	})
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace}}
	return p.cfg.Client.Patch(ctx, l, client.RawPatch(types.MergePatchType, patch))
}

// wait polls the endpoints Secret until the browser serves, the operator
// publishes an error about this request, or ReadyTimeout passes.
func (p *Provider) wait(ctx context.Context, key browser.Key, name string, asked time.Time) (browser.Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	last := "the operator has not published its address yet"
	checked := false
	for {
		s := &corev1.Secret{}
		err := p.cfg.Client.Get(ctx, client.ObjectKey{Namespace: p.cfg.Namespace, Name: wire.EndpointsSecret(p.cfg.Agent)}, s)
		switch {
		case err == nil:
			if v := s.Data[wire.ErrorKey(name)]; len(v) > 0 {
				if at, msg := wire.ParseError(string(v)); !at.Before(asked) {
					return browser.Endpoint{}, fmt.Errorf("the browser of %s cannot run: %s", key, msg)
				}
			}
			ep := browser.Endpoint{URL: string(s.Data[wire.URLKey(name)]), Token: string(s.Data[wire.TokenKey(name)])}
			if ep.URL != "" && ep.Token != "" {
				err := p.check(ctx, ep)
				if err == nil {
					return ep, nil
				}
				// A check cut short by the wait running out says less than
				// the answer the pod gave before it: keep that one.
				if ctx.Err() == nil || !checked {
					last = err.Error()
				}
				checked = true
			}
		case !apierrors.IsNotFound(err) && ctx.Err() == nil && !checked:
			// Once the pod has answered, its answer says more than a failed
			// read of the Secret (client-go's rate limiter, for one, fails a
			// read it predicts would outlast the wait, before the wait ends).
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			if parent := context.Cause(ctx); errors.Is(parent, context.Canceled) {
				return browser.Endpoint{}, fmt.Errorf("stopped waiting for the browser of %s: %w", key, parent)
			}
			return browser.Endpoint{}, fmt.Errorf("the browser pod of %s did not serve within %s (%s)", key, p.cfg.ReadyTimeout, last)
		case <-time.After(p.cfg.Poll):
		}
	}
}

// check asks the browser pod for its version with the token: only the pod
// the token belongs to answers 200.
func (p *Provider) check(ctx context.Context, ep browser.Endpoint) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(ep.URL, "/")+"/json/version", nil)
	if err != nil {
		return fmt.Errorf("invalid browser address %q: %w", ep.URL, err)
	}
	req.Header.Set("Authorization", "Bearer "+ep.Token)
	resp, err := p.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("browser pod at %s does not answer: %w", ep.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("browser pod at %s answered %s", ep.URL, resp.Status)
	}
	return nil
}

// Run renews, every Heartbeat until ctx ends, the Leases of the browsers
// active reports open (the driver's Active), and releases those it no
// longer does. It returns when ctx ends.
func (p *Provider) Run(ctx context.Context, active func(browser.Key) bool) {
	t := p.cfg.Clock.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			p.Beat(ctx, active)
		}
	}
}

// Beat is one heartbeat: renew what is open, release what was closed. A key
// still being waited for, or handed out less than a heartbeat ago, counts as
// open (the driver may still be connecting).
func (p *Provider) Beat(ctx context.Context, active func(browser.Key) bool) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	keys := make(map[browser.Key]time.Time, len(p.held))
	for k, at := range p.held {
		keys[k] = at
	}
	p.mu.Unlock()
	for key, at := range keys {
		if !at.IsZero() && !active(key) && now.Sub(at) >= p.cfg.Heartbeat {
			if err := p.Release(ctx, key); err != nil {
				p.cfg.Log.Warn("Failed to release a browser", "browser", key.String(), "err", err)
			}
			continue
		}
		err := p.renew(ctx, p.name(key), metav1.NewMicroTime(now.Truncate(time.Microsecond)))
		if apierrors.IsNotFound(err) {
			_, err = p.request(ctx, key, p.name(key))
		}
		if err != nil {
			p.cfg.Log.Warn("Failed to renew a browser Lease", "browser", key.String(), "err", err)
		}
	}
}

// Release stops renewing key's Lease. A dialog's ephemeral browser is ended
// at once (its Lease is deleted); a profile's browser idles out, so another
// dialog may still use it.
func (p *Provider) Release(ctx context.Context, key browser.Key) error {
	p.mu.Lock()
	delete(p.held, key)
	p.mu.Unlock()
	if key.Persistent() {
		return nil
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: p.name(key), Namespace: p.cfg.Namespace}}
	if err := p.cfg.Client.Delete(ctx, l); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("failed to release the browser of %s: %w", key, err)
	}
	return nil
}

// Close releases every browser the Provider handed out (the session is
// ending).
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	keys := make([]browser.Key, 0, len(p.held))
	for k := range p.held {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	var errs []error
	for _, k := range keys {
		errs = append(errs, p.Release(ctx, k))
	}
	return errors.Join(errs...)
}
