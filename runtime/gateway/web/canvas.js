/*
 * PicoBot web UI — the canvas panel (docs/canvas.md), driven by the agent's
 * canvas tool. Loaded after ui-core.js and before app.js; app.js hands it
 * the frames and history it needs through window.PicoBotCanvas.
 *
 * Stable element ids and classes (browser tests may rely on them):
 *
 *   #canvas-panel        the panel (<aside>); hidden unless the agent
 *                        presented it; data-url = the page its frame shows
 *     #canvas-close      hides the panel in this tab
 *     #canvas-surfaces   the A2UI v0.8 surfaces:
 *       section.a2ui-surface[data-surface-id], whose components carry
 *       class a2ui-<Type> and data-id (the component id); Button is a
 *       <button class="a2ui-Button">, TextField an <input>
 *     #canvas-frame      the sandboxed <iframe> (sandbox="allow-scripts",
 *                        never allow-same-origin): canvas-frame.html, where
 *                        eval runs, or the page navigate opened
 *
 * Security: A2UI is rendered here as data (text nodes, attributes checked),
 * never as HTML. The agent's JavaScript runs only inside #canvas-frame,
 * whose opaque origin has no access to this page, its storage, cookies or
 * API key; its messages are accepted only as answers to the commands this
 * page sent it (by id).
 */
(function () {
  'use strict';

  const FRAME_DOC = 'canvas-frame.html';
  const ACTION_PREFIX = '[canvas action] ';
  const MAX_IMAGE_CHARS = 240 * 1024; // a canvas_result frame stays under the gateway's 256 KiB frame limit

  let host = null; // set by attach: {api, request, submit, action, chatId, agent()}
  const state = { visible: false, url: '', surfaces: new Map() };
  const waiting = new Map(); // frame command id -> {resolve, timer}
  let frameReady = null; // a promise resolved when canvas-frame.html has loaded
  let frameLoaded = null;
  let historyToken = 0;

  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------ state

  function emptySurface() {
    return { components: new Map(), data: {}, root: '', styles: null };
  }

  /** applyA2UI applies one A2UI v0.8 message to the surfaces. */
  function applyA2UI(msg) {
    if (!msg || typeof msg !== 'object') return;
    const surface = (id) => {
      let s = state.surfaces.get(id);
      if (!s) { s = emptySurface(); state.surfaces.set(id, s); }
      return s;
    };
    if (msg.surfaceUpdate) {
      const u = msg.surfaceUpdate;
      const s = surface(String(u.surfaceId));
      for (const c of u.components || []) {
        if (c && typeof c.id === 'string' && c.component && typeof c.component === 'object') s.components.set(c.id, c.component);
      }
    } else if (msg.dataModelUpdate) {
      const u = msg.dataModelUpdate;
      const s = surface(String(u.surfaceId));
      const target = u.path ? ensurePath(s.data, u.path) : s.data;
      for (const e of u.contents || []) {
        if (e && typeof e.key === 'string') target[e.key] = entryValue(e);
      }
    } else if (msg.beginRendering) {
      const u = msg.beginRendering;
      const s = surface(String(u.surfaceId));
      s.root = String(u.root || '');
      s.styles = u.styles || null;
    } else if (msg.deleteSurface) {
      state.surfaces.delete(String(msg.deleteSurface.surfaceId));
    }
  }

  /** entryValue is the value of a dataModelUpdate entry (valueMap nests). */
  function entryValue(e) {
    if ('valueString' in e) return String(e.valueString);
    if ('valueNumber' in e) return Number(e.valueNumber);
    if ('valueBoolean' in e) return !!e.valueBoolean;
    if (Array.isArray(e.valueMap)) {
      const o = {};
      for (const x of e.valueMap) if (x && typeof x.key === 'string') o[x.key] = entryValue(x);
      return o;
    }
    return null;
  }

  function pathParts(path) {
    return String(path).split('/').filter((p) => p !== '' && p !== '__proto__' && p !== 'constructor' && p !== 'prototype');
  }

  function ensurePath(root, path) {
    let o = root;
    for (const p of pathParts(path)) {
      if (!o[p] || typeof o[p] !== 'object') o[p] = {};
      o = o[p];
    }
    return o;
  }

  function getPath(root, path) {
    let o = root;
    for (const p of pathParts(path)) {
      if (o == null || typeof o !== 'object' || !Object.prototype.hasOwnProperty.call(o, p)) return undefined;
      o = o[p];
    }
    return o;
  }

  function setPath(root, path, value) {
    const parts = pathParts(path);
    if (parts.length === 0) return;
    const last = parts.pop();
    const parent = ensurePath(root, '/' + parts.join('/'));
    parent[last] = value;
  }

  /** textSurface is a2ui_push's text shortcut (as the tool builds it). */
  function textSurface(text) {
    return [
      { surfaceUpdate: { surfaceId: 'main', components: [
        { id: 'root', component: { Column: { children: { explicitList: ['text'] } } } },
        { id: 'text', component: { Text: { text: { literalString: text } } } }] } },
      { beginRendering: { surfaceId: 'main', root: 'root' } },
    ];
  }

  /**
   * apply applies one canvas command (the `canvas` of a canvas event, or a
   * command rebuilt from the history) to the state; it does not render.
   */
  function apply(cmd) {
    switch (cmd.action) {
      case 'present':
        state.visible = true;
        if (cmd.url) state.url = cmd.url;
        break;
      case 'hide':
        state.visible = false;
        break;
      case 'navigate':
        state.visible = true;
        state.url = cmd.url || '';
        break;
      case 'a2ui_push':
        state.visible = true;
        for (const m of cmd.messages || []) applyA2UI(m);
        break;
      case 'a2ui_reset':
        if (cmd.surface_id) state.surfaces.delete(cmd.surface_id);
        else state.surfaces.clear();
        break;
      default:
        break;
    }
  }

  function reset() {
    state.visible = false;
    state.url = '';
    state.surfaces.clear();
  }

  /** commandOfCall rebuilds the command of a stored canvas tool call (null for eval and snapshot). */
  function commandOfCall(argsText) {
    let a;
    try { a = JSON.parse(argsText || '{}'); } catch (_) { return null; }
    if (!a || typeof a !== 'object') return null;
    switch (a.action) {
      case 'present': case 'hide': case 'navigate': case 'a2ui_reset':
        return { action: a.action, url: a.url || '', surface_id: a.surfaceId || '' };
      case 'a2ui_push': {
        let messages = [];
        if (a.text) messages = textSurface(String(a.text));
        else {
          for (const line of String(a.jsonl || '').split('\n')) {
            if (!line.trim()) continue;
            try { messages.push(JSON.parse(line)); } catch (_) { return null; }
          }
        }
        return { action: 'a2ui_push', messages };
      }
      default:
        return null;
    }
  }

  /**
   * replay rebuilds the canvas of a conversation from its stored messages:
   * every canvas call whose result was not an error, in order.
   */
  function replay(msgs) {
    reset();
    const calls = new Map();
    for (const m of msgs) {
      if (m.role === 'assistant' && Array.isArray(m.tool_calls)) {
        for (const c of m.tool_calls) if (c && c.name === 'canvas') calls.set(c.id, c.arguments);
      } else if (m.role === 'tool' && calls.has(m.tool_call_id) && !m.is_error) {
        const cmd = commandOfCall(calls.get(m.tool_call_id));
        if (cmd) {
          // A page is shown again only when it was navigated to after the last reset.
          apply(cmd);
        }
      }
    }
  }

  // ------------------------------------------------------------ rendering

  function panel() { return $('canvas-panel'); }

  function render() {
    const p = panel();
    if (!p) return;
    p.hidden = !state.visible;
    document.getElementById('app').dataset.canvas = state.visible ? 'open' : 'closed';
    p.dataset.url = state.url;
    const frame = $('canvas-frame');
    const want = state.url || FRAME_DOC;
    if (frame.getAttribute('src') !== want) loadFrame(want);
    const box = $('canvas-surfaces');
    box.replaceChildren();
    for (const [id, s] of state.surfaces) {
      if (!s.root) continue; // not yet beginRendering
      const sec = document.createElement('section');
      sec.className = 'a2ui-surface';
      sec.dataset.surfaceId = id;
      sec.setAttribute('aria-label', 'Canvas surface ' + id);
      const seen = new Set();
      const el = renderComponent(id, s, s.root, '', seen);
      if (el) sec.append(el);
      box.append(sec);
    }
    box.hidden = box.childElementCount === 0;
  }

  function loadFrame(src) {
    const frame = $('canvas-frame');
    frameReady = new Promise((resolve) => { frameLoaded = resolve; });
    frame.setAttribute('src', src);
  }

  /** resolve reads a BoundValue ({literalString}, {path}, ...) in scope. */
  function resolve(s, v, scope) {
    if (v == null) return undefined;
    if (typeof v !== 'object') return v;
    if (typeof v.path === 'string') {
      const p = v.path.startsWith('/') ? v.path : scope + '/' + v.path;
      const got = getPath(s.data, p);
      if (got !== undefined) return got;
    }
    if ('literalString' in v) return v.literalString;
    if ('literalNumber' in v) return v.literalNumber;
    if ('literalBoolean' in v) return v.literalBoolean;
    if ('literalArray' in v) return v.literalArray;
    return undefined;
  }

  function absPath(v, scope) {
    if (!v || typeof v.path !== 'string') return '';
    return v.path.startsWith('/') ? v.path : scope + '/' + v.path;
  }

  function text(v) {
    if (v == null) return '';
    return typeof v === 'object' ? JSON.stringify(v) : String(v);
  }

  function node(tag, cls, id) {
    const el = document.createElement(tag);
    el.className = cls;
    if (id) el.dataset.id = id;
    return el;
  }

  /** childList renders the children of a Row, Column or List: an explicit list or a template over a data list. */
  function childList(surfaceId, s, children, scope, seen) {
    const out = [];
    if (!children) return out;
    if (Array.isArray(children.explicitList)) {
      for (const cid of children.explicitList) {
        const el = renderComponent(surfaceId, s, String(cid), scope, seen);
        if (el) out.push(el);
      }
    } else if (children.template && typeof children.template === 'object') {
      const t = children.template;
      const base = String(t.dataBinding || '').startsWith('/') ? String(t.dataBinding) : scope + '/' + String(t.dataBinding || '');
      const items = getPath(s.data, base);
      const keys = Array.isArray(items) ? items.map((_, i) => String(i)) : items && typeof items === 'object' ? Object.keys(items) : [];
      for (const k of keys.slice(0, 500)) {
        const el = renderComponent(surfaceId, s, String(t.componentId), base + '/' + k, new Set(seen));
        if (el) out.push(el);
      }
    }
    return out;
  }

  function renderComponent(surfaceId, s, id, scope, seen) {
    const comp = s.components.get(id);
    if (!comp || seen.has(id) || seen.size > 2000) return null; // missing, or a cycle
    seen.add(id);
    try {
      const type = Object.keys(comp)[0];
      const p = comp[type] || {};
      const child = (cid) => (cid ? renderComponent(surfaceId, s, String(cid), scope, seen) : null);
      let el;
      switch (type) {
        case 'Text': {
          const hint = String(p.usageHint || 'body');
          const tag = /^h[1-5]$/.test(hint) ? hint : 'p';
          el = node(tag, 'a2ui-Text', id);
          if (hint === 'caption') el.classList.add('a2ui-caption');
          el.textContent = text(resolve(s, p.text, scope));
          break;
        }
        case 'Image': {
          el = node('img', 'a2ui-Image', id);
          const url = text(resolve(s, p.url, scope));
          el.alt = text(resolve(s, p.altText, scope)) || 'image';
          // The page's CSP loads images from the gateway and data: URLs only
          // (nothing tells a third party who reads the chat); others show
          // their alternative text.
          if (/^(data:image\/(png|jpeg|gif|webp);|\/api\/v1\/artifacts\/)/i.test(url)) el.src = url;
          else el.title = url;
          break;
        }
        case 'Icon':
          el = node('span', 'a2ui-Icon', id);
          el.textContent = text(resolve(s, p.name, scope));
          break;
        case 'Divider':
          el = node('hr', 'a2ui-Divider', id);
          break;
        case 'Row': case 'Column': case 'List':
          el = node('div', 'a2ui-' + type, id);
          if (type === 'List' && p.direction === 'horizontal') el.classList.add('a2ui-horizontal');
          if (p.distribution) el.dataset.distribution = String(p.distribution);
          if (p.alignment) el.dataset.alignment = String(p.alignment);
          el.append(...childList(surfaceId, s, p.children, scope, seen));
          break;
        case 'Card': {
          el = node('div', 'a2ui-Card', id);
          const c = child(p.child);
          if (c) el.append(c);
          break;
        }
        case 'Tabs': {
          el = node('div', 'a2ui-Tabs', id);
          const bar = node('div', 'a2ui-tab-bar');
          const body = node('div', 'a2ui-tab-body');
          const items = Array.isArray(p.tabItems) ? p.tabItems : [];
          const show = (i) => {
            body.replaceChildren();
            const c = items[i] ? renderComponent(surfaceId, s, String(items[i].child), scope, new Set(seen)) : null;
            if (c) body.append(c);
            [...bar.children].forEach((b, j) => b.setAttribute('aria-selected', String(i === j)));
          };
          items.forEach((t, i) => {
            const b = node('button', 'a2ui-tab');
            b.type = 'button';
            b.textContent = text(resolve(s, t.title, scope)) || 'Tab ' + (i + 1);
            b.addEventListener('click', () => show(i));
            bar.append(b);
          });
          el.append(bar, body);
          show(0);
          break;
        }
        case 'Button': {
          el = node('button', 'a2ui-Button', id);
          el.type = 'button';
          if (p.primary) el.classList.add('primary');
          const c = child(p.child);
          if (c) el.append(c);
          else el.textContent = (p.action && p.action.name) || 'Button';
          el.addEventListener('click', () => userAction(surfaceId, s, id, p.action, scope));
          break;
        }
        case 'CheckBox': {
          el = node('label', 'a2ui-CheckBox', id);
          const box = document.createElement('input');
          box.type = 'checkbox';
          box.checked = !!resolve(s, p.value, scope);
          const path = absPath(p.value, scope);
          box.addEventListener('change', () => { if (path) setPath(s.data, path, box.checked); });
          el.append(box, document.createTextNode(' ' + text(resolve(s, p.label, scope))));
          break;
        }
        case 'TextField': case 'DateTimeInput': case 'Slider': {
          el = node('label', 'a2ui-' + type, id);
          const input = document.createElement(type === 'TextField' && p.textFieldType === 'longText' ? 'textarea' : 'input');
          input.dataset.id = id;
          const bound = type === 'TextField' ? p.text : p.value;
          if (type === 'Slider') {
            input.type = 'range';
            if (p.minValue != null) input.min = String(p.minValue);
            if (p.maxValue != null) input.max = String(p.maxValue);
          } else if (type === 'DateTimeInput') {
            input.type = p.enableDate === false ? 'time' : p.enableTime ? 'datetime-local' : 'date';
          } else if (input.tagName === 'INPUT') {
            input.type = { number: 'number', obscured: 'password', date: 'date' }[p.textFieldType] || 'text';
          }
          const v = resolve(s, bound, scope);
          input.value = v == null ? '' : text(v);
          const path = absPath(bound, scope);
          input.addEventListener('input', () => { if (path) setPath(s.data, path, type === 'Slider' ? Number(input.value) : input.value); });
          const label = text(resolve(s, p.label, scope));
          if (label) el.append(document.createTextNode(label), document.createElement('br'));
          el.append(input);
          break;
        }
        case 'MultipleChoice': {
          el = node('fieldset', 'a2ui-MultipleChoice', id);
          const path = absPath(p.selections, scope);
          let chosen = resolve(s, p.selections, scope);
          chosen = Array.isArray(chosen) ? chosen.slice() : [];
          for (const o of Array.isArray(p.options) ? p.options : []) {
            const l = document.createElement('label');
            const box = document.createElement('input');
            box.type = 'checkbox';
            box.value = text(o.value);
            box.checked = chosen.includes(o.value);
            box.addEventListener('change', () => {
              chosen = chosen.filter((x) => x !== o.value);
              if (box.checked) chosen.push(o.value);
              if (path) setPath(s.data, path, chosen.slice());
            });
            l.append(box, document.createTextNode(' ' + text(resolve(s, o.label, scope))));
            el.append(l);
          }
          break;
        }
        default:
          el = node('div', 'a2ui-unsupported', id);
          el.textContent = 'Unsupported component ' + type;
      }
      return el;
    } finally {
      seen.delete(id);
    }
  }

  /**
   * userAction sends a button's action to the agent as a message: the A2UI
   * v0.8 userAction (name, surface, component, context resolved from the
   * surface's data model) after ACTION_PREFIX.
   */
  function userAction(surfaceId, s, componentId, action, scope) {
    if (!host || !action || typeof action !== 'object') return;
    const context = {};
    for (const e of Array.isArray(action.context) ? action.context : []) {
      if (e && typeof e.key === 'string') context[e.key] = resolve(s, e.value, scope) ?? null;
    }
    const ua = { userAction: { name: String(action.name || ''), surfaceId, sourceComponentId: componentId,
      timestamp: new Date().toISOString(), context } };
    host.action(ACTION_PREFIX + JSON.stringify(ua)); // sent now, or queued while a reply runs
  }

  // ------------------------------------------------------------ commands the client answers

  /** ask sends a command to canvas-frame.html and waits for its answer. */
  async function ask(msg, timeoutMs) {
    if (state.url) throw new Error('the canvas shows ' + state.url + ', a page of another site, which the canvas cannot script or capture; navigate without url returns to the canvas document');
    const frame = $('canvas-frame');
    if (!frameReady) loadFrame(FRAME_DOC);
    await frameReady;
    const id = 'f' + Math.random().toString(36).slice(2) + Date.now().toString(36);
    return new Promise((resolve) => {
      const timer = setTimeout(() => { waiting.delete(id); resolve({ error: 'the canvas frame did not answer in time' }); }, Math.max(1000, timeoutMs || 15000));
      waiting.set(id, { resolve, timer });
      frame.contentWindow.postMessage(Object.assign({ id }, msg), '*');
    });
  }

  window.addEventListener('message', (ev) => {
    const frame = $('canvas-frame');
    if (!frame || ev.source !== frame.contentWindow || ev.origin !== 'null') return; // only the sandboxed frame
    const d = ev.data;
    if (!d || typeof d !== 'object' || typeof d.id !== 'string') return;
    if (d.ready === true) return;
    const w = waiting.get(d.id);
    if (!w) return; // not an answer to a command of this page
    waiting.delete(d.id);
    clearTimeout(w.timer);
    w.resolve({ value: typeof d.value === 'string' ? d.value : undefined, image: typeof d.image === 'string' ? d.image : undefined,
      error: typeof d.error === 'string' ? d.error : undefined });
  });

  /** snapshot draws the panel: the surfaces, then the frame's document under them. */
  async function snapshot(format, timeoutMs) {
    const type = format === 'jpeg' ? 'image/jpeg' : 'image/png';
    const box = $('canvas-surfaces');
    const parts = [];
    if (!box.hidden && box.childElementCount > 0) parts.push(await rasterize(box));
    if (!state.url) {
      const r = await ask({ type: 'snapshot' }, timeoutMs);
      if (r.error) throw new Error(r.error);
      parts.push(await loadImage(r.image));
    } else if (parts.length === 0) {
      throw new Error('the canvas shows ' + state.url + ', a page of another site, which the canvas cannot capture');
    }
    const w = Math.max(...parts.map((p) => p.width));
    const hgt = parts.reduce((n, p) => n + p.height, 0);
    const c = document.createElement('canvas');
    c.width = Math.max(1, w);
    c.height = Math.max(1, hgt);
    const ctx = c.getContext('2d');
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, c.width, c.height);
    let y = 0;
    for (const p of parts) { ctx.drawImage(p, 0, y); y += p.height; }
    let url = c.toDataURL(type, 0.9);
    for (let q = 0.8; url.length > MAX_IMAGE_CHARS && q > 0.2; q -= 0.2) url = c.toDataURL('image/jpeg', q);
    if (url.length > MAX_IMAGE_CHARS) throw new Error('the snapshot is too large to send');
    return url;
  }

  function loadImage(src) {
    return new Promise((resolve, reject) => {
      const img = new Image();
      img.onload = () => resolve(img);
      img.onerror = () => reject(new Error('the canvas image could not be decoded'));
      img.src = src;
    });
  }

  /** rasterize draws an element of this page (styles inlined into an SVG foreignObject). */
  async function rasterize(el) {
    const r = el.getBoundingClientRect();
    const w = Math.ceil(r.width) || 1;
    const hgt = Math.ceil(el.scrollHeight) || 1;
    const xml = serialize(el);
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" width="' + w + '" height="' + hgt + '"><foreignObject x="0" y="0" width="100%" height="100%">' +
      '<div xmlns="http://www.w3.org/1999/xhtml">' + xml + '</div></foreignObject></svg>';
    return loadImage('data:image/svg+xml;charset=utf-8,' + encodeURIComponent(svg));
  }

  const VOID = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'source', 'track', 'wbr']);

  function esc(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  }

  /** serialize writes el as XHTML with its computed style on every element (no DOM is changed). */
  function serialize(el) {
    if (el.nodeType === Node.TEXT_NODE) return esc(el.nodeValue);
    if (el.nodeType !== Node.ELEMENT_NODE) return '';
    const tag = el.tagName.toLowerCase();
    if (tag === 'script' || tag === 'iframe') return '';
    const cs = getComputedStyle(el);
    let style = '';
    for (let i = 0; i < cs.length; i++) style += cs[i] + ':' + cs.getPropertyValue(cs[i]) + ';';
    let out = '<' + tag + ' style="' + esc(style) + '"';
    if (tag === 'img' && el.currentSrc && el.currentSrc.startsWith('data:')) out += ' src="' + esc(el.currentSrc) + '"';
    if (tag === 'input') {
      out += ' type="' + esc(el.type) + '" value="' + esc(el.value) + '"';
      if (el.checked) out += ' checked="checked"';
    }
    if (VOID.has(tag)) return out + '/>';
    out += '>';
    if (tag === 'textarea') out += esc(el.value);
    else for (const c of el.childNodes) out += serialize(c);
    return out + '</' + tag + '>';
  }

  /** run runs a command the tool waits on and sends the answer. */
  async function run(cmd) {
    let answer;
    try {
      if (cmd.action === 'eval') {
        const r = await ask({ type: 'eval', code: String(cmd.javascript || '') }, cmd.timeout_ms);
        answer = r.error ? { message: r.error } : { value: r.value == null ? 'undefined' : r.value };
      } else if (cmd.action === 'snapshot') {
        answer = { image: await snapshot(cmd.format, cmd.timeout_ms) };
      } else {
        answer = { message: 'this web UI cannot ' + cmd.action };
      }
    } catch (e) {
      answer = { message: (e && e.message) || String(e) };
    }
    if (answer.value && answer.value.length > 60000) answer.value = answer.value.slice(0, 60000) + '… (truncated)';
    const frame = Object.assign({ v: 1, type: 'canvas_result', id: 'c' + Math.random().toString(36).slice(2), agent: host.agent(),
      chat_id: host.chatId, canvas_id: cmd.id }, answer);
    host.request(frame).catch(() => { /* the tool times out and says so */ });
  }

  // ------------------------------------------------------------ hooks (app.js)

  window.PicoBotCanvas = {
    /** attach is called once by app.js with what the panel needs of it. */
    attach(h) {
      host = h;
      const close = $('canvas-close');
      if (close) close.addEventListener('click', () => { state.visible = false; render(); });
      const frame = $('canvas-frame');
      frame.addEventListener('load', () => { if (frameLoaded) frameLoaded(); });
      loadFrame(FRAME_DOC);
    },
    /** frame is called for every server frame; it takes canvas events. */
    frame(f) {
      if (!f || f.type !== 'event' || !f.event || f.event.kind !== 'canvas' || !f.event.canvas) return;
      const cmd = f.event.canvas;
      if (cmd.id) { run(cmd); return; }
      apply(cmd);
      render();
    },
    /** conversation is called when the shown conversation changes: its canvas is rebuilt from its history. */
    async conversation(sessionId) {
      const token = ++historyToken;
      if (!sessionId || !host) { reset(); render(); return; }
      let msgs = [];
      try {
        const r = await host.api('/api/v1/sessions/' + encodeURIComponent(sessionId) + '/messages?last=500');
        msgs = Array.isArray(r.messages) ? r.messages : [];
      } catch (_) { return; /* the chat shows the failure */ }
      if (token !== historyToken) return;
      replay(msgs);
      render();
    },
    // For tests.
    get state() { return { visible: state.visible, url: state.url, surfaces: [...state.surfaces.keys()] }; },
  };
})();
