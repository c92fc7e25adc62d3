package browser

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/input"
	"github.com/go-rod/rod/lib/proto"
	"github.com/ysmood/gson"
)

// focus focuses the element.
func (e *element) focus() error {
	_, err := e.call(`function () { this.focus({preventScroll: false}) }`)
	return err
}

// PageInfo is where the active tab is.
type PageInfo struct {
	Tab, URL, Title string
}

// TabInfo describes one tab.
type TabInfo struct {
	ID, URL, Title string
	Active         bool
}

// File is a file to upload into a file input.
type File struct {
	Name, MediaType string
	Data            []byte
}

// MaxScreenshotHeight caps a full-page screenshot (CSS pixels).
const MaxScreenshotHeight = 10000

// MaxUploadBytes caps the files of one upload.
const MaxUploadBytes = 20 << 20

func (b *Browser) actionCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.limits.Action)
}

// timeoutError turns a deadline into a message that says which step of which
// page hung.
func (b *Browser) wrap(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return fmt.Errorf("failed to %s: the page did not respond in time", what)
	}
	return fmt.Errorf("failed to %s: %w", what, err)
}

// Open loads rawURL in the active tab (a new one when newTab or none is
// open) after checking it against the URL policy. A page that does not
// finish loading within the navigation limit is stopped and used as it is.
func (b *Browser) Open(ctx context.Context, rawURL string, newTab bool) (PageInfo, error) {
	u, err := b.policy.CheckURL(ctx, rawURL)
	if err != nil {
		return PageInfo{}, err
	}
	t, _ := b.tab()
	if t == nil || newTab {
		if t, err = b.NewTab(ctx); err != nil {
			return PageInfo{}, err
		}
	}
	target := u.String()
	if err := b.load(ctx, t, func(p *rod.Page) error { return p.Navigate(target) }); err != nil {
		return PageInfo{}, err
	}
	return b.Info(ctx)
}

// NewTab opens a blank tab and makes it active.
func (b *Browser) NewTab(ctx context.Context) (*Tab, error) {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	// The page keeps the context it is created with for its whole life, so
	// it is the browser's, not this call's.
	p, err := b.rod.Page(proto.TargetCreateTarget{URL: "about:blank"})
	if err != nil {
		return nil, b.wrap(actx, "open a tab", err)
	}
	t, err := b.addTab(p)
	if err != nil {
		_ = p.Context(actx).Close()
		return nil, err
	}
	b.mu.Lock()
	b.active = t
	b.mu.Unlock()
	return t, nil
}

// Navigate goes back, forward or reloads the active tab.
func (b *Browser) Navigate(ctx context.Context, to string) (PageInfo, error) {
	t, err := b.tab()
	if err != nil {
		return PageInfo{}, err
	}
	var step func(p *rod.Page) error
	switch to {
	case "back":
		step = func(p *rod.Page) error { return historyStep(p, -1) }
	case "forward":
		step = func(p *rod.Page) error { return historyStep(p, 1) }
	case "reload":
		step = func(p *rod.Page) error { return proto.PageReload{}.Call(p) }
	default:
		return PageInfo{}, fmt.Errorf("unknown navigation %q; use back, forward or reload", to)
	}
	if err := b.load(ctx, t, step); err != nil {
		return PageInfo{}, err
	}
	return b.Info(ctx)
}

// historyStep goes delta entries back or forward in the tab's history.
func historyStep(p *rod.Page, delta int) error {
	h, err := proto.PageGetNavigationHistory{}.Call(p)
	if err != nil {
		return err
	}
	i := h.CurrentIndex + delta
	if i < 0 || i >= len(h.Entries) {
		return errors.New("there is no page to go to in that direction")
	}
	return proto.PageNavigateToHistoryEntry{EntryID: h.Entries[i].ID}.Call(p)
}

// waitLoad waits for the document's load event.
func waitLoad(p *rod.Page) error {
	_, err := evalPage(p, `() => document.readyState === 'complete' || new Promise(r => addEventListener('load', () => r(true), {once: true}))`)
	return err
}

// load runs a navigation step and waits for the page within the limits:
// too many navigations in a row (a redirect or reload loop) stop the page
// and disable its scripts; a page still loading at the deadline is stopped.
func (b *Browser) load(ctx context.Context, t *Tab, step func(p *rod.Page) error) error {
	nctx, cancel := context.WithTimeout(ctx, b.limits.Navigation)
	defer cancel()
	t.mu.Lock()
	t.navs, t.frozen = nil, false
	t.refs = map[string]proto.DOMBackendNodeID{}
	t.mu.Unlock()
	_ = proto.EmulationSetScriptExecutionDisabled{Value: false}.Call(t.page.Context(nctx))
	p := t.page.Context(nctx)
	if err := step(p); err != nil {
		b.stopLoading(t)
		var ne *rod.NavigationError
		if errors.As(err, &ne) {
			return fmt.Errorf("the page failed to load: %s", ne.Reason)
		}
		if nctx.Err() != nil {
			return fmt.Errorf("the page did not answer within %s; loading was stopped", b.limits.Navigation)
		}
		return fmt.Errorf("failed to navigate: %w", err)
	}
	for tries := 0; ; tries++ {
		err := waitLoad(p)
		if b.frozen(t) {
			return nil
		}
		if err == nil {
			return nil
		}
		if nctx.Err() != nil {
			b.stopLoading(t)
			b.note(fmt.Sprintf("the page was still loading after %s; loading was stopped and what had arrived is used", b.limits.Navigation))
			return nil
		}
		if tries >= b.limits.MaxNavigations {
			b.freeze(t, tries)
			return nil
		}
		if b.frozen(t) {
			return nil
		}
		// The document was replaced while waiting (a redirect): wait for
		// the next one.
	}
}

// frozen reports whether the tab was stopped for navigating too often.
func (b *Browser) frozen(t *Tab) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.frozen
}

// freeze stops a tab caught in a redirect or reload loop: loading stops and
// its scripts are disabled until the next open or navigate.
func (b *Browser) freeze(t *Tab, n int) {
	ctx, cancel := context.WithTimeout(b.ctx, b.limits.Action)
	defer cancel()
	p := t.page.Context(ctx)
	_ = proto.EmulationSetScriptExecutionDisabled{Value: true}.Call(p)
	_ = proto.PageStopLoading{}.Call(p)
	t.mu.Lock()
	t.frozen = true
	t.mu.Unlock()
	b.note(fmt.Sprintf("the page navigated %d times in a row (a redirect or reload loop); loading was stopped and its scripts disabled", n))
}

func (b *Browser) stopLoading(t *Tab) {
	ctx, cancel := context.WithTimeout(b.ctx, b.limits.Action)
	defer cancel()
	_ = proto.PageStopLoading{}.Call(t.page.Context(ctx))
}

// navStartGrace is how long an input waits for a navigation it may have
// started to be announced.
const navStartGrace = 200 * time.Millisecond

// settle waits briefly for a navigation an input started (a link click, a
// form submit) to finish.
func (b *Browser) settle(ctx context.Context, t *Tab) {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	// One round trip: navigations the input started are usually announced
	// by then. Not always: the renderer starts a navigation and answers
	// DevTools on separate channels, and the event is handled on another
	// goroutine; so a tab not loading yet gets a short grace for one to
	// start (a loaded machine showed the old page after a link click).
	_, _ = proto.RuntimeEvaluate{Expression: "0"}.Call(t.page.Context(actx))
	nctx, ncancel := context.WithTimeout(ctx, b.limits.Navigation)
	defer ncancel()
	grace := time.NewTimer(navStartGrace)
	defer grace.Stop()
	started := false
	for {
		if b.frozen(t) {
			return
		}
		t.mu.Lock()
		loading, ch := t.loading, t.changed
		t.mu.Unlock()
		if !loading && started {
			return
		}
		if !loading {
			select {
			case <-ch:
				started = true
			case <-grace.C:
				return
			case <-nctx.Done():
				return
			}
			continue
		}
		started = true
		select {
		case <-ch:
		case <-nctx.Done():
			b.stopLoading(t)
			return
		}
	}
}

// Info returns the active tab's address and title.
func (b *Browser) Info(ctx context.Context) (PageInfo, error) {
	t, err := b.tab()
	if err != nil {
		return PageInfo{}, err
	}
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	info, err := proto.TargetGetTargetInfo{TargetID: t.page.TargetID}.Call(b.rod.Context(actx))
	if err != nil {
		return PageInfo{}, b.wrap(actx, "read the page address", err)
	}
	return PageInfo{Tab: t.ID, URL: info.TargetInfo.URL, Title: info.TargetInfo.Title}, nil
}

// normRef accepts "@e3", "e3" and "3".
func normRef(ref string) string {
	ref = strings.TrimPrefix(strings.TrimSpace(ref), "@")
	if ref != "" && ref[0] >= '0' && ref[0] <= '9' {
		ref = "e" + ref
	}
	return "@" + ref
}

// element is a resolved snapshot reference: the page (bounded by the
// caller's context) and the element's remote object.
type element struct {
	tab *Tab
	p   *rod.Page
	id  proto.RuntimeRemoteObjectID
	ref string
}

// element resolves a snapshot reference in the active tab. Every call made
// with it is bounded by ctx.
func (b *Browser) element(ctx context.Context, ref string) (*element, error) {
	t, err := b.tab()
	if err != nil {
		return nil, err
	}
	ref = normRef(ref)
	t.mu.Lock()
	id, ok := t.refs[ref]
	n := len(t.refs)
	t.mu.Unlock()
	if !ok {
		if n == 0 {
			return nil, fmt.Errorf("unknown ref %s: take a snapshot first", ref)
		}
		return nil, fmt.Errorf("unknown ref %s: use a ref from the latest snapshot", ref)
	}
	p := t.page.Context(ctx)
	res, err := proto.DOMResolveNode{BackendNodeID: id}.Call(p)
	if err != nil || res.Object == nil || res.Object.ObjectID == "" {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("failed to find %s: the page did not respond in time", ref)
		}
		return nil, fmt.Errorf("ref %s is gone (the page changed): take a new snapshot", ref)
	}
	return &element{tab: t, p: p, id: res.Object.ObjectID, ref: ref}, nil
}

// call runs the JavaScript function fn with this bound to the element and
// returns its value.
func (e *element) call(fn string, args ...any) (gson.JSON, error) {
	return callOn(e.p, e.id, fn, args...)
}

func callOn(p *rod.Page, id proto.RuntimeRemoteObjectID, fn string, args ...any) (gson.JSON, error) {
	req := proto.RuntimeCallFunctionOn{FunctionDeclaration: fn, ObjectID: id, ReturnByValue: true, AwaitPromise: true}
	for _, a := range args {
		req.Arguments = append(req.Arguments, &proto.RuntimeCallArgument{Value: gson.New(a)})
	}
	res, err := req.Call(p)
	if err != nil {
		return gson.JSON{}, err
	}
	if res.ExceptionDetails != nil {
		return gson.JSON{}, fmt.Errorf("script failed: %s", exceptionText(res.ExceptionDetails))
	}
	return res.Result.Value, nil
}

// evalPage evaluates the JavaScript function fn in the page with args (as
// JSON) and returns its value.
func evalPage(p *rod.Page, fn string, args ...any) (gson.JSON, error) {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		data, err := json.Marshal(a)
		if err != nil {
			return gson.JSON{}, fmt.Errorf("failed to encode a script argument: %w", err)
		}
		parts = append(parts, string(data))
	}
	res, err := proto.RuntimeEvaluate{Expression: "(" + fn + ")(" + strings.Join(parts, ",") + ")", ReturnByValue: true, AwaitPromise: true}.Call(p)
	if err != nil {
		return gson.JSON{}, err
	}
	if res.ExceptionDetails != nil {
		return gson.JSON{}, fmt.Errorf("script failed: %s", exceptionText(res.ExceptionDetails))
	}
	return res.Result.Value, nil
}

// point scrolls the element into view and returns the middle of its first
// box; an element hidden or covered by another is an error saying so.
func (e *element) point() (proto.Point, error) {
	if err := (proto.DOMScrollIntoViewIfNeeded{ObjectID: e.id}).Call(e.p); err != nil {
		return proto.Point{}, fmt.Errorf("failed to scroll %s into view: %w", e.ref, err)
	}
	quads, err := proto.DOMGetContentQuads{ObjectID: e.id}.Call(e.p)
	if err != nil || len(quads.Quads) == 0 || len(quads.Quads[0]) < 8 {
		return proto.Point{}, fmt.Errorf("%s is not visible", e.ref)
	}
	q := quads.Quads[0]
	pt := proto.Point{X: (q[0] + q[2] + q[4] + q[6]) / 4, Y: (q[1] + q[3] + q[5] + q[7]) / 4}
	hit, err := e.call(`function (x, y) {
		const h = document.elementFromPoint(x, y);
		if (!h || this.ownerDocument !== document || h === this || this.contains(h) || h.contains(this)) return '';
		if (h.control === this || (this.labels && [...this.labels].includes(h))) return '';
		return h.tagName.toLowerCase() + (h.id ? '#' + h.id : '') + (typeof h.className === 'string' && h.className ? '.' + h.className.split(' ')[0] : '');
	}`, pt.X, pt.Y)
	if err == nil && hit.Str() != "" {
		return proto.Point{}, fmt.Errorf("%s is covered by another element (%s: a pop-over or banner?); close it first or use click_at", e.ref, hit.Str())
	}
	return pt, nil
}

// target resolves ref and the point to aim the mouse at, for verb.
func (b *Browser) target(ctx context.Context, ref, verb string) (*element, proto.Point, error) {
	el, err := b.element(ctx, ref)
	if err != nil {
		return nil, proto.Point{}, err
	}
	pt, err := el.point()
	if err != nil {
		return nil, proto.Point{}, b.wrap(ctx, verb+" "+el.ref, err)
	}
	return el, pt, nil
}

func mouse(p *rod.Page, typ proto.InputDispatchMouseEventType, pt proto.Point, clicks int) error {
	ev := proto.InputDispatchMouseEvent{Type: typ, X: pt.X, Y: pt.Y}
	if typ != proto.InputDispatchMouseEventTypeMouseMoved {
		ev.Button, ev.ClickCount = proto.InputMouseButtonLeft, clicks
		ev.Buttons = gsonInt(1)
	}
	return ev.Call(p)
}

func gsonInt(v int) *int { return &v }

func clickAt(p *rod.Page, pt proto.Point) error {
	for _, typ := range []proto.InputDispatchMouseEventType{proto.InputDispatchMouseEventTypeMouseMoved,
		proto.InputDispatchMouseEventTypeMousePressed, proto.InputDispatchMouseEventTypeMouseReleased} {
		if err := mouse(p, typ, pt, 1); err != nil {
			return err
		}
	}
	return nil
}

// Click clicks the element of a snapshot reference and waits for a
// navigation it starts.
func (b *Browser) Click(ctx context.Context, ref string) error {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	el, pt, err := b.target(actx, ref, "click")
	if err != nil {
		return err
	}
	if err := clickAt(el.p, pt); err != nil {
		return b.wrap(actx, "click "+el.ref, err)
	}
	b.settle(ctx, el.tab)
	return nil
}

// ClickAt clicks at viewport coordinates (CSS pixels).
func (b *Browser) ClickAt(ctx context.Context, x, y float64) error {
	t, err := b.tab()
	if err != nil {
		return err
	}
	if x < 0 || y < 0 || math.IsNaN(x) || math.IsNaN(y) {
		return fmt.Errorf("coordinates (%v, %v) are outside the page", x, y)
	}
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	if err := clickAt(t.page.Context(actx), proto.Point{X: x, Y: y}); err != nil {
		return b.wrap(actx, "click", err)
	}
	b.settle(ctx, t)
	return nil
}

// Hover moves the mouse over an element.
func (b *Browser) Hover(ctx context.Context, ref string) error {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	el, pt, err := b.target(actx, ref, "hover")
	if err != nil {
		return err
	}
	return b.wrap(actx, "hover "+el.ref, mouse(el.p, proto.InputDispatchMouseEventTypeMouseMoved, pt, 0))
}

// Focus focuses an element.
func (b *Browser) Focus(ctx context.Context, ref string) error {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	el, err := b.element(actx, ref)
	if err != nil {
		return err
	}
	return b.wrap(actx, "focus "+el.ref, el.focus())
}

// Fill replaces the value of an input, text area or editable element.
func (b *Browser) Fill(ctx context.Context, ref, text string) error {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	el, err := b.element(actx, ref)
	if err != nil {
		return err
	}
	if err := el.focus(); err != nil {
		return b.wrap(actx, "focus "+el.ref, err)
	}
	// Select what is there so the inserted text replaces it, for inputs
	// and contenteditable elements alike.
	if _, err := el.call(`function () {
		if (typeof this.select === 'function') { this.select(); return; }
		const r = document.createRange(); r.selectNodeContents(this);
		const s = window.getSelection(); s.removeAllRanges(); s.addRange(r);
	}`); err != nil {
		return b.wrap(actx, "fill "+normRef(ref), err)
	}
	if text == "" {
		return b.wrap(actx, "fill "+el.ref, pressKeys(el.p, nil, input.Backspace))
	}
	return b.wrap(actx, "fill "+el.ref, proto.InputInsertText{Text: text}.Call(el.p))
}

// Type types text key by key into the element of ref (or the focused
// element when ref is empty), without clearing it.
func (b *Browser) Type(ctx context.Context, ref, text string) error {
	actx, cancel := context.WithTimeout(ctx, b.limits.Action+time.Duration(len(text))*20*time.Millisecond)
	defer cancel()
	t, err := b.tab()
	if err != nil {
		return err
	}
	p := t.page.Context(actx)
	if ref != "" {
		el, err := b.element(actx, ref)
		if err != nil {
			return err
		}
		if err := el.focus(); err != nil {
			return b.wrap(actx, "focus "+el.ref, err)
		}
	}
	for _, r := range text {
		if k, ok := printableKey(r); ok {
			if err := pressKeys(p, nil, k); err != nil {
				return b.wrap(actx, "type", err)
			}
			continue
		}
		if err := (proto.InputInsertText{Text: string(r)}).Call(p); err != nil {
			return b.wrap(actx, "type", err)
		}
	}
	return nil
}

// Press presses a key or a combination ("Enter", "Control+a",
// "Shift+ArrowDown") on the focused element.
func (b *Browser) Press(ctx context.Context, combo string) error {
	t, err := b.tab()
	if err != nil {
		return err
	}
	mods, key, err := parseCombo(combo)
	if err != nil {
		return err
	}
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	if err := pressKeys(t.page.Context(actx), mods, key); err != nil {
		return b.wrap(actx, "press "+combo, err)
	}
	b.settle(ctx, t)
	return nil
}

// Scroll scrolls the element of ref into view, or the page by dx, dy
// pixels, returning the page's scroll position.
func (b *Browser) Scroll(ctx context.Context, ref string, dx, dy float64) (string, error) {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	t, err := b.tab()
	if err != nil {
		return "", err
	}
	if ref != "" {
		el, err := b.element(actx, ref)
		if err != nil {
			return "", err
		}
		if _, err := el.call(`function () { this.scrollIntoView({block: 'center', inline: 'nearest'}) }`); err != nil {
			return "", b.wrap(actx, "scroll to "+el.ref, err)
		}
	} else {
		if _, err := evalPage(t.page.Context(actx), `(dx, dy) => window.scrollBy(dx, dy)`, dx, dy); err != nil {
			return "", b.wrap(actx, "scroll", err)
		}
	}
	res, err := evalPage(t.page.Context(actx), `() => JSON.stringify({x: Math.round(scrollX), y: Math.round(scrollY), height: document.documentElement.scrollHeight, viewport: innerHeight})`)
	if err != nil {
		return "", b.wrap(actx, "read the scroll position", err)
	}
	return res.Str(), nil
}

// Text returns the visible text of the element of ref, or of the page.
func (b *Browser) Text(ctx context.Context, ref string) (string, error) {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	if ref != "" {
		el, err := b.element(actx, ref)
		if err != nil {
			return "", err
		}
		res, err := el.call(`function () { return String(this.innerText ?? this.textContent ?? '').slice(0, 400000) }`)
		if err != nil {
			return "", b.wrap(actx, "read the text of "+el.ref, err)
		}
		return res.Str(), nil
	}
	t, err := b.tab()
	if err != nil {
		return "", err
	}
	// Capped in the page: a huge document must not be copied whole.
	res, err := evalPage(t.page.Context(actx), `(max) => { const s = document.body ? document.body.innerText : (document.documentElement ? document.documentElement.textContent : ''); return s.length > max ? s.slice(0, max) : s }`, 400_000)
	if err != nil {
		return "", b.wrap(actx, "read the page text", err)
	}
	return res.Str(), nil
}

// WaitFor waits until the page's text contains text (or, with text empty,
// for d), at most d.
func (b *Browser) WaitFor(ctx context.Context, text string, d time.Duration) (bool, error) {
	t, err := b.tab()
	if err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if text == "" {
		<-wctx.Done()
		return true, nil
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, acancel := context.WithTimeout(wctx, 2*time.Second)
		res, err := evalPage(t.page.Context(actx), `(t) => !!document.body && document.body.innerText.includes(t)`, text)
		acancel()
		if err == nil && res.Bool() {
			return true, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, nil
		case <-tick.C:
		}
	}
}

// Screenshot captures the active tab as PNG: the viewport, or the whole
// page up to MaxScreenshotHeight; annotate draws the snapshot references
// on their elements.
func (b *Browser) Screenshot(ctx context.Context, fullPage, annotate bool) ([]byte, error) {
	t, err := b.tab()
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, 2*b.limits.Action)
	defer cancel()
	p := t.page.Context(actx)
	if annotate {
		remove, err := b.annotate(p, t)
		if err != nil {
			return nil, err
		}
		defer remove()
	}
	req := proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng, OptimizeForSpeed: true}
	if fullPage {
		m, err := proto.PageGetLayoutMetrics{}.Call(p)
		if err != nil {
			return nil, b.wrap(actx, "measure the page", err)
		}
		w, h := m.CSSContentSize.Width, m.CSSContentSize.Height
		if h > MaxScreenshotHeight {
			h = MaxScreenshotHeight
			b.note(fmt.Sprintf("the page is %.0f pixels high; the screenshot shows the first %d", m.CSSContentSize.Height, MaxScreenshotHeight))
		}
		req.Clip = &proto.PageViewport{X: 0, Y: 0, Width: math.Max(w, 1), Height: math.Max(h, 1), Scale: 1}
		req.CaptureBeyondViewport = true
	}
	// A capture sent while a navigation commits can be refused (the tab is
	// between two documents: the new one is attached within a frame or two)
	// or, now and then, never answered (the renderer it reached was swapped
	// out). So each attempt waits a bounded time, doubling from
	// captureAttempt, and a refused or unanswered capture is sent again
	// until the action's own limit.
	wait := captureAttempt
	for {
		cctx, ccancel := context.WithTimeout(actx, wait)
		res, err := req.Call(t.page.Context(cctx))
		timedOut := cctx.Err() != nil
		ccancel()
		switch {
		case err == nil:
			return res.Data, nil
		case actx.Err() != nil:
		case detached(err):
			time.Sleep(10 * time.Millisecond)
			continue
		case timedOut:
			wait *= 2
			continue
		}
		return nil, b.wrap(actx, "take a screenshot", err)
	}
}

// captureAttempt is how long a screenshot's first attempt waits for the
// browser's answer before it is sent again (see Screenshot).
const captureAttempt = 2 * time.Second

// detached reports the error a page-level call gets while the tab swaps
// documents during a navigation.
func detached(err error) bool {
	var ce *cdp.Error
	return errors.As(err, &ce) && ce.Message == "Not attached to an active page"
}

// annotate draws each reference of the latest snapshot over its element
// and returns a function removing the drawing.
func (b *Browser) annotate(p *rod.Page, t *Tab) (func(), error) {
	t.mu.Lock()
	refs := make(map[string]proto.DOMBackendNodeID, len(t.refs))
	for k, v := range t.refs {
		refs[k] = v
	}
	t.mu.Unlock()
	if len(refs) == 0 {
		return nil, errors.New("nothing to annotate: take a snapshot first")
	}
	type box struct {
		Label string     `json:"label"`
		Rect  [4]float64 `json:"rect"`
	}
	boxes := make([]box, 0, len(refs))
	for ref, id := range refs {
		m, err := proto.DOMGetBoxModel{BackendNodeID: id}.Call(p)
		if err != nil || m.Model == nil || len(m.Model.Border) < 8 {
			continue // not rendered
		}
		q := m.Model.Border
		x0, y0 := math.Min(q[0], q[6]), math.Min(q[1], q[3])
		x1, y1 := math.Max(q[2], q[4]), math.Max(q[5], q[7])
		boxes = append(boxes, box{Label: ref, Rect: [4]float64{x0, y0, x1 - x0, y1 - y0}})
	}
	if _, err := evalPage(p, `(boxes) => {
		const host = document.createElement('picobot-annotations');
		host.style.cssText = 'position:absolute;left:0;top:0;width:0;height:0;z-index:2147483647;pointer-events:none';
		const root = host.attachShadow({mode: 'closed'});
		for (const b of boxes) {
			const [x, y, w, h] = b.rect;
			const f = document.createElement('div');
			f.style.cssText = 'position:absolute;border:2px solid #e11d48;box-sizing:border-box;' +
				'left:' + (x + scrollX) + 'px;top:' + (y + scrollY) + 'px;width:' + w + 'px;height:' + h + 'px';
			const l = document.createElement('span');
			l.textContent = b.label;
			l.style.cssText = 'position:absolute;left:-2px;top:-16px;background:#e11d48;color:#fff;font:bold 11px/14px monospace;padding:0 3px;white-space:nowrap';
			f.appendChild(l);
			root.appendChild(f);
		}
		(document.body || document.documentElement).appendChild(host);
		window.__picobotAnnotations = host;
	}`, boxes); err != nil {
		return nil, fmt.Errorf("failed to draw the annotations: %w", err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(b.ctx, b.limits.Action)
		defer cancel()
		_, _ = evalPage(p.Context(ctx), `() => { if (window.__picobotAnnotations) { window.__picobotAnnotations.remove(); delete window.__picobotAnnotations; } }`)
	}, nil
}

// MaxPDFBytes caps a PDF export.
const MaxPDFBytes = 20 << 20

// PDF prints the active tab to PDF.
func (b *Browser) PDF(ctx context.Context) ([]byte, error) {
	t, err := b.tab()
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, 3*b.limits.Action)
	defer cancel()
	res, err := proto.PagePrintToPDF{PrintBackground: true}.Call(t.page.Context(actx))
	if err != nil {
		return nil, b.wrap(actx, "print the page to PDF", err)
	}
	if len(res.Data) > MaxPDFBytes {
		return nil, fmt.Errorf("the PDF is %d MiB, over the %d MiB limit", len(res.Data)>>20, MaxPDFBytes>>20)
	}
	return res.Data, nil
}

// Tabs lists the open tabs, dropping those the page closed itself.
func (b *Browser) Tabs(ctx context.Context) ([]TabInfo, error) {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	targets, err := proto.TargetGetTargets{}.Call(b.rod.Context(actx))
	if err != nil {
		return nil, b.wrap(actx, "list the tabs", err)
	}
	live := map[proto.TargetTargetID]*proto.TargetTargetInfo{}
	for _, ti := range targets.TargetInfos {
		live[ti.TargetID] = ti
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.tabs[:0]
	var out []TabInfo
	for _, t := range b.tabs {
		ti := live[t.page.TargetID]
		if ti == nil {
			t.cancel()
			if b.active == t {
				b.active = nil
			}
			continue
		}
		kept = append(kept, t)
		out = append(out, TabInfo{ID: t.ID, URL: ti.URL, Title: ti.Title, Active: t == b.active})
	}
	b.tabs = kept
	if b.active == nil && len(kept) > 0 {
		b.active = kept[len(kept)-1]
		out[len(out)-1].Active = true
	}
	return out, nil
}

func (b *Browser) findTab(id string) (*Tab, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for _, t := range b.tabs {
		if t.ID == id {
			return t, nil
		}
		ids = append(ids, t.ID)
	}
	return nil, fmt.Errorf("no tab %q; open tabs: %s", id, strings.Join(ids, ", "))
}

// SwitchTab makes tab id the active one.
func (b *Browser) SwitchTab(ctx context.Context, id string) (PageInfo, error) {
	t, err := b.findTab(id)
	if err != nil {
		return PageInfo{}, err
	}
	b.mu.Lock()
	b.active = t
	b.mu.Unlock()
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	_ = proto.TargetActivateTarget{TargetID: t.page.TargetID}.Call(b.rod.Context(actx))
	return b.Info(ctx)
}

// CloseTab closes tab id; the last opened remaining tab becomes active.
func (b *Browser) CloseTab(ctx context.Context, id string) error {
	t, err := b.findTab(id)
	if err != nil {
		return err
	}
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	if err := t.page.Context(actx).Close(); err != nil {
		return b.wrap(actx, "close tab "+id, err)
	}
	t.cancel()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.tabs {
		if x == t {
			b.tabs = append(b.tabs[:i], b.tabs[i+1:]...)
			break
		}
	}
	if b.active == t {
		b.active = nil
		if n := len(b.tabs); n > 0 {
			b.active = b.tabs[n-1]
		}
	}
	return nil
}

// Console returns the active tab's console messages and uncaught errors
// (oldest first), clearing them when reset is set.
func (b *Browser) Console(reset bool) ([]string, error) {
	t, err := b.tab()
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.console...)
	if reset {
		t.console = nil
	}
	return out, nil
}

// Upload puts files into the file input of ref, as if chosen in the file
// dialog. The bytes travel over DevTools, so it works with remote browsers
// too.
func (b *Browser) Upload(ctx context.Context, ref string, files []File) error {
	total := 0
	for _, f := range files {
		total += len(f.Data)
	}
	if total > MaxUploadBytes {
		return fmt.Errorf("the files total %d MiB, over the %d MiB upload limit", total>>20, MaxUploadBytes>>20)
	}
	actx, cancel := context.WithTimeout(ctx, 3*b.limits.Action)
	defer cancel()
	el, err := b.element(actx, ref)
	if err != nil {
		return err
	}
	type jsFile struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Data string `json:"data"`
	}
	arg := make([]jsFile, 0, len(files))
	for _, f := range files {
		arg = append(arg, jsFile{Name: f.Name, Type: f.MediaType, Data: base64.StdEncoding.EncodeToString(f.Data)})
	}
	res, err := el.call(`function (files) {
		if (!(this instanceof HTMLInputElement) || this.type !== 'file') return 'not a file input';
		if (files.length > 1 && !this.multiple) return 'this file input takes one file';
		const dt = new DataTransfer();
		for (const f of files) {
			const bin = atob(f.data), bytes = new Uint8Array(bin.length);
			for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
			dt.items.add(new File([bytes], f.name, {type: f.type}));
		}
		this.files = dt.files;
		this.dispatchEvent(new Event('input', {bubbles: true}));
		this.dispatchEvent(new Event('change', {bubbles: true}));
		return '';
	}`, arg)
	if err != nil {
		return b.wrap(actx, "upload to "+el.ref, err)
	}
	if msg := res.Str(); msg != "" {
		return fmt.Errorf("cannot upload to %s: %s", normRef(ref), msg)
	}
	return nil
}
