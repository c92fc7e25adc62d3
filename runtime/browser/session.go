package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/proto"
)

// Browser is one running browser with its tabs. Its methods are meant to be
// called by one caller at a time (the Driver's lock ensures it); event
// handlers run concurrently and share state under mu.
type Browser struct {
	rod       *rod.Browser
	ws        *cdp.WebSocket
	proc      *Process
	egress    *EgressProxy
	removeDir string
	limits    Limits
	policy    Policy
	ctx       context.Context
	cancel    context.CancelFunc

	mu           sync.Mutex
	tabs         []*Tab
	active       *Tab
	tabSeq       int
	dialog       DialogPolicy
	notes        []string
	popupsClosed int
	closed       bool
}

// DialogPolicy says how JavaScript dialogs (alert, confirm, prompt,
// beforeunload) are answered. A dialog blocks the page, so every dialog is
// answered at once and reported.
type DialogPolicy struct {
	// Accept accepts confirm/prompt/beforeunload dialogs (alerts are always
	// accepted); false dismisses them.
	Accept bool
	// PromptText is typed into prompt dialogs that are accepted.
	PromptText string
}

// Tab is one open page.
type Tab struct {
	// ID is a short name ("t1") the model uses to pick the tab.
	ID     string
	page   *rod.Page
	cancel context.CancelFunc

	mu      sync.Mutex
	refs    map[string]proto.DOMBackendNodeID
	console []string
	loading bool
	changed chan struct{} // closed and replaced when loading changes
	navs    []time.Time   // recent main-frame navigations
	frozen  bool
}

func newTab(p *rod.Page) *Tab {
	return &Tab{page: p, refs: map[string]proto.DOMBackendNodeID{}, changed: make(chan struct{})}
}

// navWindow is the window in which more than Limits.MaxNavigations
// navigations make a storm (a redirect or reload loop).
const navWindow = 10 * time.Second

// setLoading records a main-frame load starting or stopping; it reports how
// many navigations happened within navWindow when that is a storm.
func (t *Tab) setLoading(v bool, maxNavs int) (storm int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v {
		now := time.Now()
		keep := t.navs[:0]
		for _, at := range t.navs {
			if now.Sub(at) < navWindow {
				keep = append(keep, at)
			}
		}
		t.navs = append(keep, now)
		if len(t.navs) > maxNavs && !t.frozen {
			t.frozen = true
			storm = len(t.navs)
		}
	}
	if t.loading != v {
		t.loading = v
		close(t.changed)
		t.changed = make(chan struct{})
	}
	return storm
}

func launchLocal(ctx context.Context, cfg Config, opts Options, dir string) (*Browser, error) {
	egress, err := StartEgressProxy(cfg.Guard, opts.Domains, cfg.Log)
	if err != nil {
		return nil, err
	}
	proc, err := Launch(ctx, LaunchSpec{Bin: cfg.Bin, UserDataDir: dir, ProxyURL: egress.URL(), Flags: cfg.Flags})
	if err != nil {
		egress.Close()
		return nil, err
	}
	ws := &cdp.WebSocket{}
	if err := ws.Connect(ctx, proc.WebSocketURL, nil); err != nil {
		proc.Kill()
		egress.Close()
		return nil, fmt.Errorf("failed to connect to the browser's DevTools at %s: %w", proc.WebSocketURL, err)
	}
	b, err := newBrowser(ws, cfg, opts)
	if err != nil {
		_ = ws.Close()
		proc.Kill()
		egress.Close()
		return nil, err
	}
	b.proc, b.egress = proc, egress
	return b, nil
}

func connectRemote(ctx context.Context, ep Endpoint, cfg Config, opts Options) (*Browser, error) {
	ws, err := DialDevTools(ctx, ep)
	if err != nil {
		return nil, err
	}
	b, err := newBrowser(ws, cfg, opts)
	if err != nil {
		_ = ws.Close()
		return nil, err
	}
	return b, nil
}

func newBrowser(ws *cdp.WebSocket, cfg Config, opts Options) (*Browser, error) {
	ctx, cancel := context.WithCancel(context.Background())
	rb := rod.New().Context(ctx).Client(cdp.New().Start(ws)).NoDefaultDevice()
	if err := rb.Connect(); err != nil {
		cancel()
		return nil, fmt.Errorf("failed to attach to the browser: %w", err)
	}
	b := &Browser{rod: rb, ws: ws, limits: cfg.Limits, ctx: ctx, cancel: cancel,
		policy: Policy{Guard: cfg.Guard, Resolver: cfg.Resolver, Domains: opts.Domains}}
	// Pop-ups: adopt them as tabs up to the cap, close the rest (a pop-up
	// storm must not exhaust the machine).
	go rb.EachEvent(func(e *proto.TargetTargetCreated) {
		if e.TargetInfo.Type != proto.TargetTargetInfoTypePage || e.TargetInfo.OpenerID == "" {
			return
		}
		go b.adoptPopup(e.TargetInfo.TargetID)
	})()
	return b, nil
}

func (b *Browser) adoptPopup(id proto.TargetTargetID) {
	b.mu.Lock()
	over := len(b.tabs) >= b.limits.MaxTabs || b.closed
	if over {
		b.popupsClosed++
	}
	b.mu.Unlock()
	if over {
		_, _ = proto.TargetCloseTarget{TargetID: id}.Call(b.rod)
		return
	}
	p, err := b.rod.PageFromTarget(id)
	if err != nil {
		return
	}
	if _, err := b.addTab(p); err != nil {
		_ = p.Close()
	}
}

// Alive reports whether the browser still answers.
func (b *Browser) Alive() bool {
	if b.proc != nil {
		select {
		case <-b.proc.Done():
			return false
		default:
		}
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	_, err := proto.BrowserGetVersion{}.Call(b.rod.Context(ctx))
	return err == nil
}

// PID is the local browser's process id (0 for a remote one).
func (b *Browser) PID() int {
	if b.proc == nil {
		return 0
	}
	return b.proc.PID()
}

// Close ends the browser: a local one is stopped (and its temporary profile
// removed), a remote one has its tabs closed and the connection dropped
// (closing the browser itself would end the pod's Chromium).
func (b *Browser) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	tabs := b.tabs
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b.proc == nil {
		for _, t := range tabs {
			_ = t.page.Context(ctx).Close()
		}
	}
	b.cancel()
	_ = b.ws.Close()
	if b.proc != nil {
		// Process.Stop closes it gracefully (DevTools Browser.close), which
		// writes cookies and local storage to the profile.
		b.proc.Stop(5 * time.Second)
	}
	if b.egress != nil {
		b.egress.Close()
	}
	if b.removeDir != "" {
		_ = os.RemoveAll(b.removeDir)
	}
}

// addTab starts tracking p: console, dialogs, navigations, and, with an
// allowlist, request interception and WebRTC removal.
func (b *Browser) addTab(p *rod.Page) (*Tab, error) {
	t := newTab(p)
	b.mu.Lock()
	if len(b.tabs) >= b.limits.MaxTabs {
		b.mu.Unlock()
		return nil, fmt.Errorf("too many tabs open (%d); close one with action close and tab", len(b.tabs))
	}
	b.tabSeq++
	t.ID = fmt.Sprintf("t%d", b.tabSeq)
	b.tabs = append(b.tabs, t)
	if b.active == nil {
		b.active = t
	}
	b.mu.Unlock()

	tctx, tcancel := context.WithCancel(b.ctx)
	t.cancel = tcancel
	lp := p.Context(tctx)
	main := p.FrameID
	go lp.EachEvent(
		func(e *proto.RuntimeConsoleAPICalled) { t.addConsole(b.limits.MaxConsole, consoleLine(e)) },
		func(e *proto.RuntimeExceptionThrown) {
			t.addConsole(b.limits.MaxConsole, "[uncaught] "+exceptionText(e.ExceptionDetails))
		},
		func(e *proto.PageJavascriptDialogOpening) { go b.answerDialog(t, e) },
		func(e *proto.PageFrameStartedLoading) {
			if e.FrameID == main {
				if n := t.setLoading(true, b.limits.MaxNavigations); n > 0 {
					go b.freeze(t, n)
				}
			}
		},
		func(e *proto.PageFrameStoppedLoading) {
			if e.FrameID == main {
				t.setLoading(false, b.limits.MaxNavigations)
			}
		},
	)()
	ctx, cancel := context.WithTimeout(b.ctx, b.limits.Action)
	defer cancel()
	if len(b.policy.Domains) > 0 {
		go lp.EachEvent(func(e *proto.FetchRequestPaused) { go b.filterRequest(p, e) })()
		if err := (proto.FetchEnable{Patterns: []*proto.FetchRequestPattern{{URLPattern: "*"}}}).Call(p.Context(ctx)); err != nil {
			return t, fmt.Errorf("failed to enable request filtering: %w", err)
		}
		if _, err := (proto.PageAddScriptToEvaluateOnNewDocument{Source: noWebRTC}).Call(p.Context(ctx)); err != nil {
			return t, fmt.Errorf("failed to disable WebRTC: %w", err)
		}
	}
	return t, nil
}

// noWebRTC removes the WebRTC constructors from every document of a page
// restricted to an allowlist: peer connections could reach any address.
const noWebRTC = `for (const n of ['RTCPeerConnection','webkitRTCPeerConnection','RTCDataChannel','RTCIceTransport','RTCSctpTransport']) {
  try { Object.defineProperty(window, n, {value: undefined, writable: false, configurable: false}); } catch (e) {}
}
try { if (navigator.mediaDevices) Object.defineProperty(navigator, 'mediaDevices', {value: undefined}); } catch (e) {}`

// filterRequest lets a paused request continue only when its host is on the
// allowlist (and its scheme is http(s), data or blob).
func (b *Browser) filterRequest(p *rod.Page, e *proto.FetchRequestPaused) {
	ctx, cancel := context.WithTimeout(b.ctx, b.limits.Action)
	defer cancel()
	pc := p.Context(ctx)
	u := e.Request.URL
	scheme, rest, _ := strings.Cut(u, ":")
	allowed := false
	switch strings.ToLower(scheme) {
	case "data", "blob", "about":
		allowed = true
	case "http", "https", "ws", "wss":
		host := strings.TrimPrefix(rest, "//")
		if i := strings.IndexAny(host, "/?#"); i >= 0 {
			host = host[:i]
		}
		if i := strings.LastIndex(host, "@"); i >= 0 {
			host = host[i+1:]
		}
		if h, _, ok := strings.Cut(host, "]"); ok && strings.HasPrefix(h, "[") {
			host = h[1:]
		} else if i := strings.LastIndex(host, ":"); i >= 0 {
			host = host[:i]
		}
		allowed = b.policy.Domains.Allows(host)
	}
	if allowed {
		_ = proto.FetchContinueRequest{RequestID: e.RequestID}.Call(pc)
		return
	}
	if b.egress != nil {
		b.egress.noteBlocked(truncateRunes(u, 200) + ": not in the allowed domains")
	}
	_ = proto.FetchFailRequest{RequestID: e.RequestID, ErrorReason: proto.NetworkErrorReasonBlockedByClient}.Call(pc)
}

func (b *Browser) answerDialog(t *Tab, e *proto.PageJavascriptDialogOpening) {
	b.mu.Lock()
	pol := b.dialog
	accept := pol.Accept || e.Type == proto.PageDialogTypeAlert
	note := fmt.Sprintf("%s dialog %q was %s", e.Type, truncateRunes(e.Message, 300), map[bool]string{true: "accepted", false: "dismissed"}[accept])
	b.mu.Unlock()
	b.note(note)
	ctx, cancel := context.WithTimeout(b.ctx, b.limits.Action)
	defer cancel()
	req := proto.PageHandleJavaScriptDialog{Accept: accept}
	if accept && e.Type == proto.PageDialogTypePrompt {
		req.PromptText = pol.PromptText
	}
	_ = req.Call(t.page.Context(ctx))
}

func (t *Tab) addConsole(maxEntries int, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.console) >= maxEntries {
		t.console = t.console[1:]
	}
	t.console = append(t.console, truncateRunes(line, 1000))
}

func consoleLine(e *proto.RuntimeConsoleAPICalled) string {
	parts := make([]string, 0, len(e.Args))
	for _, a := range e.Args {
		switch {
		case a.UnserializableValue != "":
			parts = append(parts, string(a.UnserializableValue))
		case a.Value.Nil() && a.Description != "":
			parts = append(parts, a.Description)
		case a.Type == proto.RuntimeRemoteObjectTypeString:
			parts = append(parts, a.Value.Str())
		default:
			parts = append(parts, a.Value.JSON("", ""))
		}
	}
	return "[" + string(e.Type) + "] " + strings.Join(parts, " ")
}

func exceptionText(d *proto.RuntimeExceptionDetails) string {
	if d == nil {
		return ""
	}
	if d.Exception != nil && d.Exception.Description != "" {
		return d.Exception.Description
	}
	return d.Text
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}

// errNoPage is returned by actions that need an open page.
var errNoPage = errors.New("no page is open; use action open with a url first")

// tab returns the active tab.
func (b *Browser) tab() (*Tab, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active == nil {
		return nil, errNoPage
	}
	return b.active, nil
}

// Notes returns and forgets what happened beside the actions: dialogs
// answered, pop-ups closed, requests blocked.
func (b *Browser) Notes() []string {
	b.mu.Lock()
	out := b.notes
	b.notes = nil
	if b.popupsClosed > 0 {
		out = append(out, fmt.Sprintf("%d pop-up window(s) were closed (at most %d tabs)", b.popupsClosed, b.limits.MaxTabs))
		b.popupsClosed = 0
	}
	b.mu.Unlock()
	if b.egress != nil {
		for _, s := range b.egress.Blocked() {
			out = append(out, "blocked request: "+s)
		}
	}
	return out
}

// note records something the next action's result should mention.
func (b *Browser) note(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.notes) < 20 {
		b.notes = append(b.notes, s)
	}
}

// SetDialogPolicy sets how later dialogs are answered.
func (b *Browser) SetDialogPolicy(p DialogPolicy) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dialog = p
}
