// Package browser drives headless Chromium over the DevTools protocol with
// go-rod, for the browser and browser_profiles tools. A Driver keeps one
// browser per key: an ephemeral browser per dialog (closed after an hour
// idle) or a persistent one per profile id (shared across dialogs), each
// behind a lock that serialises its operations while different keys run
// concurrently. Browsers are launched locally (embedded mode, or inside a
// browser pod by `picobot browser`) or reached through a remote DevTools
// endpoint guarded by a token (cluster mode). Every request a locally
// launched browser makes goes through an egress proxy enforcing the URL
// policy; pages are hostile by default, so every action has a timeout and
// every output a cap.
package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/picobot/picobot/runtime/netguard"
)

// Key names one browser: a dialog's ephemeral browser or a persistent
// profile's. Exactly one field is set.
type Key struct {
	// Dialog is the session id of the dialog owning an ephemeral browser.
	Dialog string
	// Profile is the id of a persistent browser profile.
	Profile string
}

// DialogKey is the key of a dialog's ephemeral browser.
func DialogKey(sessionID string) Key { return Key{Dialog: sessionID} }

// ProfileKey is the key of a persistent profile's browser.
func ProfileKey(id string) Key { return Key{Profile: id} }

// Persistent reports whether the key names a persistent profile.
func (k Key) Persistent() bool { return k.Profile != "" }

// String implements fmt.Stringer.
func (k Key) String() string {
	if k.Persistent() {
		return "profile " + k.Profile
	}
	return "dialog " + k.Dialog
}

// Options say how a browser for a key is started.
type Options struct {
	// Domains restricts what the browser may load (empty: the public web).
	Domains Domains
	// UserDataDir is a persistent profile's Chrome folder (local launches);
	// empty for an ephemeral browser, which gets a temporary one.
	UserDataDir string
}

// Limits bound what one hostile page can cost.
type Limits struct {
	// Navigation bounds a navigation until the load event (default 15s); a
	// page still loading then is used as it is.
	Navigation time.Duration
	// Action bounds any other step (default 10s).
	Action time.Duration
	// MaxTabs caps open tabs per browser; pop-ups beyond it are closed
	// (default 8).
	MaxTabs int
	// MaxNavigations caps navigations (redirects, reloads) during one action
	// before loading is stopped (default 20).
	MaxNavigations int
	// MaxSnapshotNodes caps accessibility nodes walked by a snapshot
	// (default 20000).
	MaxSnapshotNodes int
	// MaxConsole caps kept console entries per tab (default 200).
	MaxConsole int
}

func (l *Limits) defaults() {
	if l.Navigation <= 0 {
		l.Navigation = 15 * time.Second
	}
	if l.Action <= 0 {
		l.Action = 10 * time.Second
	}
	if l.MaxTabs <= 0 {
		l.MaxTabs = 8
	}
	if l.MaxNavigations <= 0 {
		l.MaxNavigations = 20
	}
	if l.MaxSnapshotNodes <= 0 {
		l.MaxSnapshotNodes = 20000
	}
	if l.MaxConsole <= 0 {
		l.MaxConsole = 200
	}
}

// Config configures a Driver.
type Config struct {
	// Bin is the Chromium executable for local launches (DefaultBin).
	Bin string
	// Endpoint, when set, returns the remote DevTools endpoint serving key
	// instead of launching Chromium locally (cluster mode: a browser pod).
	Endpoint func(ctx context.Context, key Key) (Endpoint, error)
	// Guard enforces the address policy (netguard.New() when nil); tests
	// pass one allowing 127.0.0.0/8 to reach local pages.
	Guard *netguard.Guard
	// Resolver resolves names for the URL check (the system resolver when
	// nil); give tests the same fake DNS as the Guard.
	Resolver netguard.Resolver
	// TempDir holds ephemeral browsers' profile folders (os.TempDir()).
	TempDir string
	// IdleTimeout closes ephemeral browsers unused this long (default 1h).
	IdleTimeout time.Duration
	// MaxBrowsers caps browsers open at once (default 8).
	MaxBrowsers int
	// Limits bound hostile pages.
	Limits Limits
	// Flags are extra Chromium flags.
	Flags []string
	// Clock drives idle expiry (the real clock when nil).
	Clock clock.WithTicker
	Log   *slog.Logger
}

// Stats count browser starts and reuses, for the profile reuse rate.
type Stats struct {
	// Launches is how many browsers were started (or connected).
	Launches int
	// Reuses is how many acquisitions found their browser running.
	Reuses int
	// Open is how many browsers are open now.
	Open int
}

// Driver owns the browsers of one process.
type Driver struct {
	cfg Config

	mu      sync.Mutex
	entries map[Key]*entry
	closed  bool
	stats   Stats

	stop chan struct{}
	wg   sync.WaitGroup
}

// entry is one key's browser and its lock. The lock is a one-slot channel so
// waiting for it honours the caller's context.
type entry struct {
	lock     chan struct{}
	browser  *Browser
	lastUsed time.Time
	waiters  int
}

// NewDriver returns a driver; call Close to end its browsers. It starts a
// goroutine that closes idle ephemeral browsers.
func NewDriver(cfg Config) *Driver {
	if cfg.Bin == "" {
		cfg.Bin = DefaultBin
	}
	if cfg.Guard == nil {
		cfg.Guard = netguard.New()
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = time.Hour
	}
	if cfg.MaxBrowsers <= 0 {
		cfg.MaxBrowsers = 8
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	cfg.Limits.defaults()
	d := &Driver{cfg: cfg, entries: map[Key]*entry{}, stop: make(chan struct{})}
	d.wg.Add(1)
	go d.reapLoop()
	return d
}

// Config returns the driver's effective configuration.
func (d *Driver) Config() Config { return d.cfg }

// Policy returns the URL policy for a browser restricted to domains.
func (d *Driver) Policy(domains Domains) Policy {
	return Policy{Guard: d.cfg.Guard, Resolver: d.cfg.Resolver, Domains: domains}
}

// ErrClosed is returned once the driver is closed.
var ErrClosed = errors.New("the browser driver is shut down")

// Acquire returns the browser of key, starting it when needed, locked for
// the caller until release is called. Callers of the same key wait their
// turn (or until ctx ends); different keys proceed concurrently.
func (d *Driver) Acquire(ctx context.Context, key Key, opts Options) (b *Browser, release func(), err error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, nil, ErrClosed
	}
	e := d.entries[key]
	if e == nil {
		e = &entry{lock: make(chan struct{}, 1)}
		d.entries[key] = e
	}
	e.waiters++
	d.mu.Unlock()

	if err := d.wait(ctx, e); err != nil {
		return nil, nil, fmt.Errorf("gave up waiting for the browser of %s, busy with another operation: %w", key, err)
	}
	unlock := func() {
		d.mu.Lock()
		e.lastUsed = d.cfg.Clock.Now()
		e.waiters--
		if e.browser == nil && e.waiters == 0 && d.entries[key] == e {
			delete(d.entries, key)
		}
		d.mu.Unlock()
		<-e.lock
	}
	if e.browser != nil && !e.browser.Alive() {
		d.closeEntry(key, e)
	}
	if e.browser == nil {
		if err := d.reserve(); err != nil {
			unlock()
			return nil, nil, err
		}
		b, err := d.start(ctx, key, opts)
		d.mu.Lock()
		if err != nil {
			d.stats.Open--
		} else {
			d.stats.Launches++
			e.browser = b
		}
		d.mu.Unlock()
		if err != nil {
			unlock()
			return nil, nil, err
		}
	} else {
		d.mu.Lock()
		d.stats.Reuses++
		d.mu.Unlock()
	}
	return e.browser, unlock, nil
}

// wait takes e's lock for a caller already counted in e.waiters, or uncounts
// it when ctx ends first.
func (d *Driver) wait(ctx context.Context, e *entry) error {
	select {
	case e.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		d.mu.Lock()
		e.waiters--
		d.mu.Unlock()
		return ctx.Err()
	}
}

// reserve counts a browser about to start against MaxBrowsers.
func (d *Driver) reserve() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stats.Open >= d.cfg.MaxBrowsers {
		return fmt.Errorf("too many browsers open (%d); close one with the browser action close first", d.stats.Open)
	}
	d.stats.Open++
	return nil
}

func (d *Driver) start(ctx context.Context, key Key, opts Options) (*Browser, error) {
	if d.cfg.Endpoint != nil {
		ep, err := d.cfg.Endpoint(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("failed to find the browser for %s: %w", key, err)
		}
		return connectRemote(ctx, ep, d.cfg, opts)
	}
	dir, temp := opts.UserDataDir, false
	if dir == "" {
		var err error
		if err = os.MkdirAll(d.cfg.TempDir, 0o700); err == nil {
			dir, err = os.MkdirTemp(d.cfg.TempDir, "picobot-browser-")
		}
		if err != nil {
			return nil, fmt.Errorf("failed to create a browser profile folder: %w", err)
		}
		temp = true
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create browser profile folder %s: %w", dir, err)
	}
	b, err := launchLocal(ctx, d.cfg, opts, dir)
	if err != nil {
		if temp {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	if temp {
		b.removeDir = dir
	}
	return b, nil
}

// Active reports whether key has an open browser.
func (d *Driver) Active(key Key) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entries[key]
	return e != nil && e.browser != nil
}

// Stats returns launch and reuse counts.
func (d *Driver) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// CloseKey waits for the operation running on key's browser (or until ctx
// ends), then closes the browser. It is a no-op when none is open.
func (d *Driver) CloseKey(ctx context.Context, key Key) error {
	d.mu.Lock()
	e := d.entries[key]
	if e == nil {
		d.mu.Unlock()
		return nil
	}
	e.waiters++
	d.mu.Unlock()
	if err := d.wait(ctx, e); err != nil {
		return fmt.Errorf("gave up waiting for the browser of %s to finish its operation: %w", key, err)
	}
	d.closeEntry(key, e)
	d.mu.Lock()
	e.waiters--
	if e.waiters == 0 && d.entries[key] == e {
		delete(d.entries, key)
	}
	d.mu.Unlock()
	<-e.lock
	return nil
}

// closeEntry closes e's browser; the caller holds e.lock.
func (d *Driver) closeEntry(key Key, e *entry) {
	d.mu.Lock()
	b := e.browser
	e.browser = nil
	if b != nil {
		d.stats.Open--
	}
	d.mu.Unlock()
	if b == nil {
		return
	}
	b.Close()
	d.cfg.Log.Debug("Browser closed", "key", key.String())
}

// ReapIdle closes ephemeral browsers unused for IdleTimeout and not busy,
// returning how many it closed. Persistent browsers stay open.
func (d *Driver) ReapIdle() int {
	now := d.cfg.Clock.Now()
	d.mu.Lock()
	var idle []Key
	for k, e := range d.entries {
		if !k.Persistent() && e.browser != nil && e.waiters == 0 && now.Sub(e.lastUsed) >= d.cfg.IdleTimeout {
			idle = append(idle, k)
		}
	}
	d.mu.Unlock()
	n := 0
	for _, k := range idle {
		d.mu.Lock()
		e := d.entries[k]
		d.mu.Unlock()
		if e == nil {
			continue
		}
		select {
		case e.lock <- struct{}{}:
		default:
			continue // busy again
		}
		d.mu.Lock()
		still := e.waiters == 0 && now.Sub(e.lastUsed) >= d.cfg.IdleTimeout && e.browser != nil
		d.mu.Unlock()
		if still {
			d.closeEntry(k, e)
			n++
			d.mu.Lock()
			if d.entries[k] == e && e.waiters == 0 {
				delete(d.entries, k)
			}
			d.mu.Unlock()
		}
		<-e.lock
	}
	return n
}

func (d *Driver) reapLoop() {
	defer d.wg.Done()
	every := d.cfg.IdleTimeout / 12
	if every < time.Second {
		every = time.Second
	}
	t := d.cfg.Clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C():
			if n := d.ReapIdle(); n > 0 {
				d.cfg.Log.Info("Closed idle browsers", "count", n)
			}
		}
	}
}

// Close closes every browser (waiting up to 10s for running operations,
// then closing their browsers anyway) and stops the reaper.
func (d *Driver) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	keys := make([]Key, 0, len(d.entries))
	for k := range d.entries {
		keys = append(keys, k)
	}
	d.mu.Unlock()
	close(d.stop)
	d.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, k := range keys {
		if err := d.CloseKey(ctx, k); err != nil {
			// Still busy: end the browser under the running operation,
			// which then fails; a process must not outlive the driver.
			d.mu.Lock()
			var b *Browser
			if e := d.entries[k]; e != nil {
				b = e.browser
			}
			d.mu.Unlock()
			if b != nil {
				b.Close()
			}
		}
	}
}
