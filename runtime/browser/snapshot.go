package browser

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
	"github.com/ysmood/gson"
)

// interactiveRoles get a reference in snapshots.
var interactiveRoles = map[string]bool{
	"button": true, "link": true, "textbox": true, "searchbox": true, "checkbox": true, "radio": true,
	"combobox": true, "listbox": true, "option": true, "menuitem": true, "menuitemcheckbox": true,
	"menuitemradio": true, "tab": true, "switch": true, "slider": true, "spinbutton": true, "treeitem": true,
}

// transparentRoles are skipped (their children are shown in their place)
// unless they carry a name.
var transparentRoles = map[string]bool{
	"none": true, "generic": true, "presentation": true, "InlineTextBox": true, "LineBreak": true,
	"RootWebArea": true, "WebArea": true, "group": true, "Section": true, "LayoutTable": true,
	"LayoutTableRow": true, "LayoutTableCell": true, "sectionheader": true, "sectionfooter": true,
}

// Snapshot returns the active tab's accessibility tree as an indented list,
// one node a line, with a reference (@e1, @e2, ...) on every interactive
// element; the references serve later actions until the next snapshot or
// navigation. At most Limits.MaxSnapshotNodes nodes are walked.
func (b *Browser) Snapshot(ctx context.Context) (string, error) {
	t, err := b.tab()
	if err != nil {
		return "", err
	}
	actx, cancel := context.WithTimeout(ctx, 2*b.limits.Action)
	defer cancel()
	p := t.page.Context(actx)
	// The accessibility tree of a huge document takes Chromium seconds to
	// build; such pages get the DOM walk, which stops at the node cap.
	count, err := evalPage(p, `() => document.getElementsByTagName('*').length`)
	if err == nil && count.Int() > b.limits.MaxSnapshotNodes/4 {
		text, refs, err := b.domSnapshot(p, count.Int())
		if err != nil {
			return "", b.wrap(actx, "read the page structure", err)
		}
		t.mu.Lock()
		t.refs = refs
		t.mu.Unlock()
		return text, nil
	}
	res, err := proto.AccessibilityGetFullAXTree{}.Call(p)
	if err != nil {
		return "", b.wrap(actx, "read the page structure", err)
	}
	s := renderAX(res.Nodes, b.limits.MaxSnapshotNodes)
	t.mu.Lock()
	t.refs = s.refs
	t.mu.Unlock()
	return s.text, nil
}

// maxDOMRefs caps references in a DOM-walk snapshot.
const maxDOMRefs = 500

// domSnapshotJS walks the visible DOM in document order, naming elements
// the way assistive technology roughly would, up to max lines. It returns an
// array: the text first, then the interactive elements in ref order.
const domSnapshotJS = `function (max, maxRefs) {
  const lines = [], els = [];
  const roleOf = (el) => {
    const r = el.getAttribute('role'); if (r) return r;
    const t = el.tagName.toLowerCase();
    if (t === 'a' && el.hasAttribute('href')) return 'link';
    if (t === 'button') return 'button';
    if (t === 'select') return 'combobox';
    if (t === 'textarea') return 'textbox';
    if (t === 'input') {
      const ty = (el.type || 'text').toLowerCase();
      if (ty === 'hidden') return '';
      if (['checkbox', 'radio'].includes(ty)) return ty;
      if (['button', 'submit', 'reset', 'image'].includes(ty)) return 'button';
      if (ty === 'range') return 'slider';
      return ty === 'search' ? 'searchbox' : 'textbox';
    }
    if (/^h[1-6]$/.test(t)) return 'heading';
    if (t === 'img') return 'img';
    return '';
  };
  const interactive = new Set(['button','link','textbox','searchbox','checkbox','radio','combobox','listbox','option','menuitem','tab','switch','slider','spinbutton','treeitem']);
  const nameOf = (el) => {
    const l = el.getAttribute('aria-label'); if (l) return l;
    if (el.id) { const lab = document.querySelector('label[for="' + CSS.escape(el.id) + '"]'); if (lab) return lab.innerText; }
    const p = el.closest('label'); if (p && p !== el) return p.innerText;
    return el.getAttribute('alt') || el.getAttribute('title') || el.getAttribute('placeholder') || (el.innerText || el.value || '');
  };
  const clean = (s) => { s = String(s).replace(/\s+/g, ' ').trim(); return s.length > 200 ? s.slice(0, 200) + '…' : s; };
  let walked = 0, cut = false;
  const walk = (el, depth) => {
    for (const c of el.children) {
      if (++walked > max) { cut = true; return; }
      if (c.checkVisibility && !c.checkVisibility()) continue;
      const role = roleOf(c);
      if (role) {
        let line = '  '.repeat(depth) + '- ' + role + ' ' + JSON.stringify(clean(nameOf(c)));
        const attrs = [];
        if (interactive.has(role) && els.length < maxRefs) { els.push(c); attrs.push('ref=@e' + els.length); }
        if (role === 'heading') attrs.push('level=' + c.tagName[1]);
        if (c.checked) attrs.push('checked=true');
        if (c.disabled) attrs.push('disabled');
        if (attrs.length) line += ' [' + attrs.join(', ') + ']';
        lines.push(line);
        if (interactive.has(role) || role === 'heading' || role === 'img') continue;
      } else if (c.children.length === 0 && c.innerText && c.innerText.trim()) {
        lines.push('  '.repeat(depth) + '- text: ' + clean(c.innerText));
        continue;
      }
      walk(c, role ? depth + 1 : depth);
      if (cut) return;
    }
  };
  if (document.body) walk(document.body, 0);
  if (cut) lines.push('[snapshot cut after ' + max + ' nodes: the page is very large; use get_text or scroll]');
  return [lines.join('\n') + '\n', ...els];
}`

// domSnapshot is the snapshot of a huge page: a capped DOM walk whose
// interactive elements get references through their backend node ids.
func (b *Browser) domSnapshot(p *rod.Page, elements int) (string, map[string]proto.DOMBackendNodeID, error) {
	doc, err := proto.RuntimeEvaluate{Expression: "document"}.Call(p)
	if err != nil {
		return "", nil, err
	}
	res, err := proto.RuntimeCallFunctionOn{FunctionDeclaration: domSnapshotJS, ObjectID: doc.Result.ObjectID,
		Arguments: []*proto.RuntimeCallArgument{{Value: gson.New(b.limits.MaxSnapshotNodes)}, {Value: gson.New(maxDOMRefs)}}}.Call(p)
	if err != nil {
		return "", nil, err
	}
	if res.ExceptionDetails != nil {
		return "", nil, fmt.Errorf("snapshot script failed: %s", exceptionText(res.ExceptionDetails))
	}
	defer func() { _ = proto.RuntimeReleaseObject{ObjectID: res.Result.ObjectID}.Call(p) }()
	props, err := proto.RuntimeGetProperties{ObjectID: res.Result.ObjectID, OwnProperties: true}.Call(p)
	if err != nil {
		return "", nil, err
	}
	text := ""
	refs := map[string]proto.DOMBackendNodeID{}
	for _, pr := range props.Result {
		i, err := strconv.Atoi(pr.Name)
		if err != nil || pr.Value == nil {
			continue
		}
		if i == 0 {
			text = pr.Value.Value.Str()
			continue
		}
		node, err := proto.DOMDescribeNode{ObjectID: pr.Value.ObjectID}.Call(p)
		if err != nil {
			continue
		}
		refs[fmt.Sprintf("@e%d", i)] = node.Node.BackendNodeID
	}
	return fmt.Sprintf("[simplified snapshot: the page has %d elements]\n", elements) + text, refs, nil
}

type axRender struct {
	byID    map[proto.AccessibilityAXNodeID]*proto.AccessibilityAXNode
	refs    map[string]proto.DOMBackendNodeID
	b       strings.Builder
	walked  int
	max     int
	cut     bool
	text    string
	visited map[proto.AccessibilityAXNodeID]bool
}

func renderAX(nodes []*proto.AccessibilityAXNode, maxNodes int) *axRender {
	r := &axRender{byID: make(map[proto.AccessibilityAXNodeID]*proto.AccessibilityAXNode, len(nodes)),
		refs: map[string]proto.DOMBackendNodeID{}, max: maxNodes, visited: map[proto.AccessibilityAXNodeID]bool{}}
	for _, n := range nodes {
		r.byID[n.NodeID] = n
	}
	for _, n := range nodes {
		if n.ParentID == "" {
			r.walk(n, 0, "")
		}
	}
	if r.cut {
		fmt.Fprintf(&r.b, "[snapshot cut after %d nodes: the page is very large; use get_text or scroll]\n", r.max)
	}
	if r.b.Len() == 0 {
		r.b.WriteString("[the page has no content]\n")
	}
	r.text = r.b.String()
	return r
}

func axString(v *proto.AccessibilityAXValue) string {
	if v == nil || v.Value.Nil() {
		return ""
	}
	if s, ok := v.Value.Val().(string); ok {
		return s
	}
	return v.Value.JSON("", "")
}

func clean(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return truncateRunes(s, n)
}

func (r *axRender) walk(n *proto.AccessibilityAXNode, depth int, parentName string) {
	if r.cut || r.visited[n.NodeID] {
		return
	}
	r.visited[n.NodeID] = true
	r.walked++
	if r.walked > r.max {
		r.cut = true
		return
	}
	role := axString(n.Role)
	name := clean(axString(n.Name), 200)
	children := func(d int, pn string) {
		for _, id := range n.ChildIDs {
			if c := r.byID[id]; c != nil {
				r.walk(c, d, pn)
			}
		}
	}
	if n.Ignored {
		children(depth, parentName)
		return
	}
	indent := strings.Repeat("  ", depth)
	switch {
	case role == "StaticText":
		if name != "" && name != parentName {
			fmt.Fprintf(&r.b, "%s- text: %s\n", indent, name)
		}
		return
	case interactiveRoles[role]:
		ref := fmt.Sprintf("@e%d", len(r.refs)+1)
		if n.BackendDOMNodeID != 0 {
			r.refs[ref] = n.BackendDOMNodeID
		} else {
			ref = ""
		}
		r.line(indent, role, name, n, ref)
		children(depth+1, name)
		return
	case transparentRoles[role] && name == "":
		children(depth, parentName)
		return
	case role == "heading" || role == "img" || role == "image":
		r.line(indent, role, name, n, "")
		children(depth+1, name)
		return
	}
	r.line(indent, role, name, n, "")
	children(depth+1, name)
}

func (r *axRender) line(indent, role, name string, n *proto.AccessibilityAXNode, ref string) {
	r.b.WriteString(indent)
	r.b.WriteString("- ")
	r.b.WriteString(role)
	if name != "" {
		fmt.Fprintf(&r.b, " %q", name)
	}
	var attrs []string
	if ref != "" {
		attrs = append(attrs, "ref="+ref)
	}
	for _, p := range n.Properties {
		v := axString(p.Value)
		switch p.Name {
		case "level":
			attrs = append(attrs, "level="+v)
		case "checked", "pressed", "expanded", "selected":
			if v != "" && v != "false" {
				attrs = append(attrs, string(p.Name)+"="+v)
			}
		case "disabled", "required", "readonly":
			if v == "true" {
				attrs = append(attrs, string(p.Name))
			}
		}
	}
	if v := clean(axString(n.Value), 100); v != "" && interactiveRoles[axString(n.Role)] {
		attrs = append(attrs, fmt.Sprintf("value=%q", v))
	}
	if len(attrs) > 0 {
		r.b.WriteString(" [" + strings.Join(attrs, ", ") + "]")
	}
	r.b.WriteString("\n")
}
