package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-rod/rod/lib/proto"
)

// ErrNotPasswordField refuses to type a password into a field that would
// show it: a password typed into a text box is in the next snapshot.
var ErrNotPasswordField = errors.New("the field is not a password field (input type=password); a password typed elsewhere would show on the page")

// TypeSecret replaces the value of the editable field of ref with value, a
// saved credential, in one insertion (no per-key events that a slow page
// could split). With password set the field must be an input of type
// password, whose value the page's accessibility tree and snapshots mask.
// The value is never part of an error: anything the browser answers is
// scrubbed of it before it is returned. domains are the sites the
// credential belongs to: the page's address (read from the browser, not
// from the page's script) must be one of them or a subdomain, and the
// field must be in the page itself, not in a frame of another page.
func (b *Browser) TypeSecret(ctx context.Context, ref, value string, password bool, domains []string) error {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	info, err := b.Info(actx)
	if err != nil {
		return err
	}
	if err := onSite(info.URL, domains); err != nil {
		return err
	}
	el, err := b.element(actx, ref)
	if err != nil {
		return err
	}
	// window and top are unforgeable: a frame's script cannot make its
	// field look like the page's.
	top, err := el.call(`function () { return window === window.top; }`)
	if err != nil {
		return b.wrap(actx, "inspect "+el.ref, scrub(err, value))
	}
	if !top.Bool() {
		return fmt.Errorf("%s is inside a frame of another page; a saved credential is typed only into the page of its site", el.ref)
	}
	kind, err := el.call(`function () {
		if (this instanceof HTMLInputElement) return this.type === 'password' ? 'password' : (this.disabled || this.readOnly ? 'locked' : 'input');
		if (this instanceof HTMLTextAreaElement) return this.disabled || this.readOnly ? 'locked' : 'input';
		return this.isContentEditable ? 'input' : 'other';
	}`)
	if err != nil {
		return b.wrap(actx, "inspect "+el.ref, scrub(err, value))
	}
	switch k := kind.Str(); {
	case k == "other":
		return fmt.Errorf("%s is not a text field; take a snapshot and pick the input the credential belongs in", el.ref)
	case k == "locked":
		return fmt.Errorf("%s is disabled or read-only", el.ref)
	case password && k != "password":
		return fmt.Errorf("cannot type a password into %s: %w", el.ref, ErrNotPasswordField)
	}
	if err := el.focus(); err != nil {
		return b.wrap(actx, "focus "+el.ref, scrub(err, value))
	}
	if _, err := el.call(`function () { if (typeof this.select === 'function') this.select(); }`); err != nil {
		return b.wrap(actx, "select "+el.ref, scrub(err, value))
	}
	if err := (proto.InputInsertText{Text: value}).Call(el.p); err != nil {
		return b.wrap(actx, "type into "+el.ref, scrub(err, value))
	}
	return nil
}

// scrub removes value from err's message, keeping its chain for errors.Is
// only when nothing had to be removed.
func scrub(err error, value string) error {
	if err == nil || value == "" || !strings.Contains(err.Error(), value) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), value, "[secret]"))
}

// onSite checks that the page at address is on one of domains (a host or
// a subdomain of it), over http or https.
func onSite(address string, domains []string) error {
	u, err := url.Parse(address)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("the page is not a web site (%q); a saved credential is typed only on %s", address, strings.Join(domains, ", "))
	}
	host := strings.ToLower(u.Hostname())
	// An empty list would allow every host to Allows; a credential with no
	// site is typed nowhere.
	if len(domains) > 0 && Domains(domains).Allows(host) {
		return nil
	}
	return fmt.Errorf("this credential belongs to %s, and the page is on %s: it is not typed here", strings.Join(domains, ", "), host)
}
