package browser

import (
	"fmt"
	"sort"
	"strings"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/input"
	"github.com/go-rod/rod/lib/proto"
)

// namedKeys are the keys press accepts by name (case-insensitive).
var namedKeys = map[string]input.Key{
	"enter": input.Enter, "tab": input.Tab, "escape": input.Escape, "esc": input.Escape,
	"backspace": input.Backspace, "delete": input.Delete, "insert": input.Insert,
	"arrowup": input.ArrowUp, "arrowdown": input.ArrowDown, "arrowleft": input.ArrowLeft, "arrowright": input.ArrowRight,
	"home": input.Home, "end": input.End, "pageup": input.PageUp, "pagedown": input.PageDown,
	"space": input.Space, "f1": input.F1, "f2": input.F2, "f3": input.F3, "f4": input.F4, "f5": input.F5,
	"f6": input.F6, "f7": input.F7, "f8": input.F8, "f9": input.F9, "f10": input.F10, "f11": input.F11, "f12": input.F12,
}

// modifierKeys are the modifiers of a combination.
var modifierKeys = map[string]input.Key{
	"shift": input.ShiftLeft, "control": input.ControlLeft, "ctrl": input.ControlLeft,
	"alt": input.AltLeft, "meta": input.MetaLeft, "cmd": input.MetaLeft,
}

// printableKey returns the keyboard key typing r, when there is one on a US
// keyboard.
func printableKey(r rune) (k input.Key, ok bool) {
	if r == ' ' {
		return input.Space, true
	}
	if r < '!' || r > '~' {
		return 0, false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_ = input.Key(r).Info() // panics for keys rod does not know
	return input.Key(r), true
}

// parseCombo reads "Control+Shift+a" into modifiers and a key.
func parseCombo(combo string) ([]input.Key, input.Key, error) {
	parts := strings.Split(strings.TrimSpace(combo), "+")
	if combo == "+" || strings.HasSuffix(combo, "++") {
		parts = append(parts[:len(parts)-2], "+")
	}
	var mods []input.Key
	for _, m := range parts[:len(parts)-1] {
		k, ok := modifierKeys[strings.ToLower(strings.TrimSpace(m))]
		if !ok {
			return nil, 0, fmt.Errorf("unknown modifier %q in %q; use Shift, Control, Alt or Meta", m, combo)
		}
		mods = append(mods, k)
	}
	last := strings.TrimSpace(parts[len(parts)-1])
	if k, ok := namedKeys[strings.ToLower(last)]; ok {
		return mods, k, nil
	}
	if k, ok := modifierKeys[strings.ToLower(last)]; ok {
		return mods, k, nil
	}
	if r := []rune(last); len(r) == 1 {
		if k, ok := printableKey(r[0]); ok {
			return mods, k, nil
		}
	}
	names := make([]string, 0, len(namedKeys))
	for n := range namedKeys {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, 0, fmt.Errorf("unknown key %q; use one character or one of: %s", last, strings.Join(names, ", "))
}

// pressKeys holds the modifiers, presses and releases key, and releases the
// modifiers, each event bounded by p's context.
func pressKeys(p *rod.Page, mods []input.Key, key input.Key) error {
	state := 0
	for _, m := range mods {
		state |= m.Modifier()
		if err := m.Encode(proto.InputDispatchKeyEventTypeKeyDown, state).Call(p); err != nil {
			return err
		}
	}
	if err := key.Encode(proto.InputDispatchKeyEventTypeKeyDown, state).Call(p); err != nil {
		return err
	}
	if err := key.Encode(proto.InputDispatchKeyEventTypeKeyUp, state).Call(p); err != nil {
		return err
	}
	for i := len(mods) - 1; i >= 0; i-- {
		state &^= mods[i].Modifier()
		if err := mods[i].Encode(proto.InputDispatchKeyEventTypeKeyUp, state).Call(p); err != nil {
			return err
		}
	}
	return nil
}
