package browser

import (
	"context"
	"errors"
	"fmt"
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
// scrubbed of it before it is returned.
func (b *Browser) TypeSecret(ctx context.Context, ref, value string, password bool) error {
	actx, cancel := b.actionCtx(ctx)
	defer cancel()
	el, err := b.element(actx, ref)
	if err != nil {
		return err
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
