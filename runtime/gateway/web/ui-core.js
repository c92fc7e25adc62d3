/*
 * PicoBot web UI — the pure core (no DOM, no network).
 *
 * Loaded by index.html as a classic script before app.js (it defines the global
 * `PicoBotUI`) and by app.test.mjs through require() (CommonJS export). Keep it
 * free of browser globals so `node --test` can exercise it.
 *
 * Contents:
 *   - HTML escaping and URL safety (escapeHtml, safeUrl, isArtifactUrl, withKey,
 *     isImageName)
 *   - a small, safe markdown renderer (renderMarkdown, renderInline, renderPlain):
 *     every piece of model text is escaped; only the tags it builds itself
 *     (p, br, pre, code, strong, em, del, a, img, h3-h6, ul, ol, li, blockquote,
 *     hr, table) are emitted, links only to http(s)/mailto/relative urls.
 *     Links to artifacts ([name](/api/v1/artifacts/ID)) become file links
 *     (class artifact-file), or inline images when the name is an image file.
 *   - tool-call and artifact helpers (shortArgs, prettyArgs, extractArtifacts,
 *     extractArtifactImages, normalizeAttachments)
 *   - the state reducer for the WebSocket protocol (newTurn, reduceTurn,
 *     initialState, reduce) and history grouping (historyToTurns)
 *   - control-channel frames and the conversation list (dialogFrame,
 *     stopFrame, approveFrame, approvalOutcomeText, cleanTitle, dialogView, dialogLabel)
 *   - error texts (describeError), the health page's model (healthView)
 *   - ids (newChatId, isValidChatId, newMessageId, newControlId), parseCommand, wsUrl.
 */
(function (root, factory) {
  'use strict';
  const api = factory();
  if (typeof module === 'object' && module && module.exports) module.exports = api;
  if (root) root.PicoBotUI = api;
})(typeof globalThis !== 'undefined' ? globalThis : this, function () {
  'use strict';

  const PROTOCOL_VERSION = 1;
  const MAX_TEXT_BYTES = 64 << 10;
  const MAX_TITLE_CHARS = 200;
  // Limits of attached files (runtime/gateway/uploads.go; the server checks
  // them again).
  const MAX_UPLOAD_BYTES = 10 << 20;
  const MAX_UPLOAD_IMAGE_BYTES = Math.floor((3 << 20) * 5 / 4);
  const MAX_FILES = 10;
  // Canvas button clicks waiting for the running reply to end (app.js).
  const MAX_QUEUED_ACTIONS = 20;
  const MODEL_IMAGES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);

  // ---------------------------------------------------------------- escaping

  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

  /** escapeHtml makes any string safe as HTML text or a quoted attribute value. */
  function escapeHtml(s) {
    return String(s == null ? '' : s).replace(/[&<>"']/g, (c) => ESC[c]);
  }

  /**
   * safeUrl returns url when it may be used as a link target, else null:
   * http(s) and mailto urls, and scheme-less (relative) urls. Anything with
   * whitespace or control characters is refused (browsers strip those, which
   * would turn "java\tscript:" into a script url).
   */
  function safeUrl(url) {
    if (typeof url !== 'string') return null;
    let u = url.trim();
    if (u.startsWith('<') && u.endsWith('>')) u = u.slice(1, -1);
    if (u === '' || /[\s\x00-\x1f\x7f]/.test(u)) return null;
    if (/^[^/?#]*:/.test(u)) {
      return /^(https?|mailto):/i.test(u) ? u : null;
    }
    return u;
  }

  const ARTIFACT_PREFIX = '/api/v1/artifacts/';

  /** isArtifactUrl: a relative url of the gateway's artifact store, rendered inline as an image. */
  function isArtifactUrl(url) {
    return typeof url === 'string' && url.startsWith(ARTIFACT_PREFIX) && url.length > ARTIFACT_PREFIX.length &&
      !/[\s\x00-\x1f\x7f"'<>\\]/.test(url) && !/(^|\/)\.\.(\/|$|\?)/.test(url);
  }

  const IMAGE_NAME_RE = /\.(png|jpe?g|gif|webp|avif|bmp)$/i;

  /** isImageName: a file name (or link text) that names a raster image the browser can show inline. */
  function isImageName(name) {
    return typeof name === 'string' && IMAGE_NAME_RE.test(name.trim());
  }

  /** withKey adds ?key= to an artifact url (an <img> cannot send an Authorization header). */
  function withKey(url, key) {
    if (!key || !isArtifactUrl(url)) return url;
    const hash = url.indexOf('#');
    const base = hash >= 0 ? url.slice(0, hash) : url;
    const frag = hash >= 0 ? url.slice(hash) : '';
    return base + (base.includes('?') ? '&' : '?') + 'key=' + encodeURIComponent(key) + frag;
  }

  // ---------------------------------------------------------------- markdown

  const isWordChar = (c) => c !== undefined && /[\p{L}\p{N}_]/u.test(c);
  const isSpace = (c) => c === undefined || /\s/.test(c);

  /**
   * matchLink parses "[text](url)" or "[text](url "title")" at s[i] === '['.
   * Returns {text, url, end} (end: index after ')') or null.
   */
  function matchLink(s, i) {
    if (s[i] !== '[') return null;
    let depth = 0;
    let j = i;
    for (; j < s.length; j++) {
      const c = s[j];
      if (c === '\\') { j++; continue; }
      if (c === '\n') return null;
      if (c === '[') depth++;
      else if (c === ']') { depth--; if (depth === 0) break; }
    }
    if (j >= s.length || s[j + 1] !== '(') return null;
    const text = s.slice(i + 1, j);
    let k = j + 2;
    let paren = 0;
    const start = k;
    for (; k < s.length; k++) {
      const c = s[k];
      if (c === '\n') return null;
      if (c === '(') paren++;
      else if (c === ')') { if (paren === 0) break; paren--; }
    }
    if (k >= s.length) return null;
    let inner = s.slice(start, k).trim();
    const titled = /^(\S+)\s+("[^"]*"|'[^']*')$/.exec(inner);
    if (titled) inner = titled[1];
    if (inner.startsWith('<') && inner.endsWith('>')) inner = inner.slice(1, -1);
    if (inner === '' || /\s/.test(inner)) return null;
    return { text, url: inner, end: k + 1 };
  }

  function linkHtml(href, inner, opts, cls) {
    const target = withKey(href, opts.key);
    return '<a' + (cls ? ' class="' + cls + '"' : '') + ' href="' + escapeHtml(target) +
      '" target="_blank" rel="noopener">' + inner + '</a>';
  }

  /** fileLinkHtml: a link to a non-image artifact (a download), named by its link text. */
  function fileLinkHtml(text, url, opts) {
    const name = String(text || '').trim() || url.slice(url.lastIndexOf('/') + 1);
    return linkHtml(url, escapeHtml(name), opts, 'artifact-file');
  }

  function imageHtml(alt, url, opts) {
    if (isArtifactUrl(url)) {
      const src = escapeHtml(withKey(url, opts.key));
      const img = '<img class="artifact-img" src="' + src + '" alt="' + escapeHtml(alt) + '" loading="lazy">';
      if (opts.noLinks) return img; // already inside a link
      // opts.shown: images already on the page (under the turn's tool cards)
      // become links, so each image shows once.
      if (opts.noImages || (opts.shown && opts.shown.has(url))) return linkHtml(url, escapeHtml(alt || url.slice(url.lastIndexOf('/') + 1)), opts, 'artifact-link');
      return '<a class="artifact-link" href="' + src + '" target="_blank" rel="noopener">' + img + '</a>';
    }
    const href = safeUrl(url);
    if (!href || opts.noLinks) return escapeHtml(alt);
    return linkHtml(href, escapeHtml(alt || url), opts, 'image-link');
  }

  /** matchAutolink: a bare http(s) url at s[i], with trailing punctuation left out. */
  function matchAutolink(s, i) {
    if (isWordChar(s[i - 1])) return null;
    const m = /^https?:\/\/[^\s<>"'`]+/i.exec(s.slice(i, i + 2048));
    if (!m) return null;
    let url = m[0];
    for (;;) {
      const last = url[url.length - 1];
      if (/[.,;:!?*_~]/.test(last)) { url = url.slice(0, -1); continue; }
      if (last === ')' && (url.split('(').length - 1) < (url.split(')').length - 1)) { url = url.slice(0, -1); continue; }
      if (last === ']' && (url.split('[').length - 1) < (url.split(']').length - 1)) { url = url.slice(0, -1); continue; }
      break;
    }
    if (url.length <= 'https://'.length - 1) return null;
    return { url, end: i + url.length };
  }

  /** findCloser finds `marker` closing an emphasis opened before `from`. */
  function findCloser(s, from, marker) {
    let k = from;
    while ((k = s.indexOf(marker, k)) !== -1) {
      if (k > from && !isSpace(s[k - 1]) && s[k + marker.length] !== marker[0]) {
        if (marker[0] !== '_' || !isWordChar(s[k + marker.length])) return k;
      }
      k += 1;
    }
    return -1;
  }

  /**
   * renderInline renders one line (or a table cell / list item) of inline
   * markdown: `code`, **bold**, *em*, ~~del~~, [links](url), ![images](url),
   * bare urls, backslash escapes. opts: {key, plain, noLinks}. With
   * opts.plain only links, images and bare urls are recognised (for tool
   * output and command replies); everything else is escaped text.
   */
  function renderInline(s, opts, depth) {
    opts = opts || {};
    depth = depth || 0;
    s = String(s == null ? '' : s);
    let out = '';
    let buf = '';
    const flush = () => { if (buf) { out += escapeHtml(buf); buf = ''; } };
    const n = s.length;
    let i = 0;
    while (i < n) {
      const c = s[i];
      if (!opts.plain) {
        if (c === '\\' && i + 1 < n && /[\\`*_{}[\]()#+\-.!|>~<]/.test(s[i + 1])) {
          buf += s[i + 1]; i += 2; continue;
        }
        if (c === '`') {
          let run = 1;
          while (s[i + run] === '`') run++;
          const fence = '`'.repeat(run);
          let end = s.indexOf(fence, i + run);
          while (end !== -1 && s[end + run] === '`') { // a longer run does not close
            let k = end;
            while (s[k] === '`') k++;
            end = s.indexOf(fence, k);
          }
          if (end !== -1) {
            let code = s.slice(i + run, end);
            if (code.length > 2 && code.startsWith(' ') && code.endsWith(' ')) code = code.slice(1, -1);
            flush();
            out += '<code>' + escapeHtml(code) + '</code>';
            i = end + run;
            continue;
          }
          buf += fence; i += run; continue;
        }
      }
      if (c === '!' && s[i + 1] === '[') {
        const m = matchLink(s, i + 1);
        if (m) { flush(); out += imageHtml(m.text, m.url, opts); i = m.end; continue; }
      }
      if (c === '[' && !opts.noLinks) {
        const m = matchLink(s, i);
        if (m && isArtifactUrl(m.url)) {
          // A link to an artifact: an image file shows inline, anything
          // else is a file link (the gateway serves it as a download).
          flush();
          out += isImageName(m.text) ? imageHtml(m.text, m.url, opts) : fileLinkHtml(m.text, m.url, opts);
          i = m.end;
          continue;
        }
        if (m) {
          const href = safeUrl(m.url);
          const inner = opts.plain ? escapeHtml(m.text) : renderInline(m.text, Object.assign({}, opts, { noLinks: true }), depth + 1);
          flush();
          out += href ? linkHtml(href, inner || escapeHtml(m.url), opts) : inner;
          i = m.end;
          continue;
        }
      }
      if ((c === 'h' || c === 'H') && !opts.noLinks) {
        const m = matchAutolink(s, i);
        if (m) { flush(); out += linkHtml(m.url, escapeHtml(m.url), opts); i = m.end; continue; }
      }
      if (!opts.plain && depth < 8) {
        if ((c === '*' || c === '_') && s[i + 1] === c && !isSpace(s[i + 2]) && (c === '*' || !isWordChar(s[i - 1]))) {
          const end = findCloser(s, i + 2, c + c);
          if (end !== -1) {
            flush();
            out += '<strong>' + renderInline(s.slice(i + 2, end), opts, depth + 1) + '</strong>';
            i = end + 2;
            continue;
          }
        }
        if ((c === '*' || c === '_') && s[i + 1] !== c && !isSpace(s[i + 1]) && (c === '*' || !isWordChar(s[i - 1]))) {
          const end = findCloser(s, i + 1, c);
          if (end !== -1) {
            flush();
            out += '<em>' + renderInline(s.slice(i + 1, end), opts, depth + 1) + '</em>';
            i = end + 1;
            continue;
          }
        }
        if (c === '~' && s[i + 1] === '~' && !isSpace(s[i + 2])) {
          const end = s.indexOf('~~', i + 2);
          if (end > i + 2 && !isSpace(s[end - 1])) {
            flush();
            out += '<del>' + renderInline(s.slice(i + 2, end), opts, depth + 1) + '</del>';
            i = end + 2;
            continue;
          }
        }
      }
      buf += c;
      i++;
    }
    flush();
    return out;
  }

  const RE_FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const RE_HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
  const RE_HR = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const RE_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const RE_QUOTE = /^ {0,3}>\s?(.*)$/;
  const RE_TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

  function splitRow(line) {
    let t = line.trim();
    if (t.startsWith('|')) t = t.slice(1);
    if (t.endsWith('|') && !t.endsWith('\\|')) t = t.slice(0, -1);
    const cells = [];
    let cur = '';
    let inCode = false;
    for (let i = 0; i < t.length; i++) {
      const c = t[i];
      if (c === '\\' && t[i + 1] === '|') { cur += '|'; i++; continue; }
      if (c === '`') inCode = !inCode;
      if (c === '|' && !inCode) { cells.push(cur.trim()); cur = ''; continue; }
      cur += c;
    }
    cells.push(cur.trim());
    return cells;
  }

  /**
   * renderMarkdown turns model text into safe HTML: paragraphs (single line
   * breaks kept), fenced code blocks, headings, lists, quotes, rules, tables
   * and the inline syntax of renderInline. Raw HTML in the text is escaped.
   * opts: {key} — the API key appended to artifact urls.
   */
  function renderMarkdown(src, opts, depth) {
    opts = opts || {};
    depth = depth || 0;
    const lines = String(src == null ? '' : src).replace(/\r\n?/g, '\n').split('\n');
    const out = [];
    let para = [];
    const flushPara = () => {
      if (para.length) {
        out.push('<p>' + para.map((l) => renderInline(l.trim(), opts)).join('<br>') + '</p>');
        para = [];
      }
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = RE_FENCE.exec(line);
      if (fence) {
        flushPara();
        const marker = fence[1];
        const lang = fence[2];
        const body = [];
        i++;
        while (i < lines.length) {
          const t = lines[i].trim();
          if (t.length >= marker.length && t === marker[0].repeat(t.length)) break;
          body.push(lines[i]);
          i++;
        }
        i++; // closing fence (or end of text while streaming)
        const cls = /^[\w+#.-]{1,32}$/.test(lang) ? ' class="language-' + escapeHtml(lang) + '"' : '';
        out.push('<pre><code' + cls + '>' + escapeHtml(body.join('\n')) + '</code></pre>');
        continue;
      }
      if (line.trim() === '') { flushPara(); i++; continue; }
      const h = RE_HEADING.exec(line);
      if (h) {
        flushPara();
        const level = Math.min(6, h[1].length + 2);
        out.push('<h' + level + '>' + renderInline(h[2], opts) + '</h' + level + '>');
        i++;
        continue;
      }
      if (RE_HR.test(line)) { flushPara(); out.push('<hr>'); i++; continue; }
      if (RE_QUOTE.test(line) && depth < 4) {
        flushPara();
        const body = [];
        while (i < lines.length && lines[i].trim() !== '' && (RE_QUOTE.test(lines[i]) || body.length)) {
          const q = RE_QUOTE.exec(lines[i]);
          if (!q && RE_ITEM.test(lines[i])) break;
          body.push(q ? q[1] : lines[i]);
          i++;
        }
        out.push('<blockquote>' + renderMarkdown(body.join('\n'), opts, depth + 1) + '</blockquote>');
        continue;
      }
      const item = RE_ITEM.exec(line);
      if (item && (para.length === 0 || !/^\d/.test(item[2]) || item[2] === '1.' || item[2] === '1)')) {
        flushPara();
        const ordered = /^\d/.test(item[2]);
        const startNum = ordered ? parseInt(item[2], 10) : 1;
        const items = [];
        while (i < lines.length) {
          const l = lines[i];
          const m = RE_ITEM.exec(l);
          if (m && /^\d/.test(m[2]) === ordered && m[1].length <= 3) {
            items.push([m[3]]);
            i++;
            continue;
          }
          if (m && items.length) { // nested or other-kind item: keep it as its own line
            items[items.length - 1].push(l.trim());
            i++;
            continue;
          }
          if (l.trim() !== '' && items.length && /^\s+\S/.test(l)) {
            items[items.length - 1].push(l.trim());
            i++;
            continue;
          }
          break;
        }
        const tag = ordered ? 'ol' : 'ul';
        const start = ordered && startNum !== 1 ? ' start="' + startNum + '"' : '';
        out.push('<' + tag + start + '>' + items.map((parts) => '<li>' + parts.map((p) => renderInline(p, opts)).join('<br>') + '</li>').join('') + '</' + tag + '>');
        continue;
      }
      if (line.includes('|') && i + 1 < lines.length && RE_TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
        const head = splitRow(line);
        const aligns = splitRow(lines[i + 1]).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : ''));
        if (aligns.length === head.length || lines[i + 1].includes('|')) {
          flushPara();
          i += 2;
          const rows = [];
          while (i < lines.length && lines[i].trim() !== '' && lines[i].includes('|')) { rows.push(splitRow(lines[i])); i++; }
          const cell = (tag, text, k) => '<' + tag + (aligns[k] ? ' class="align-' + aligns[k] + '"' : '') + '>' + renderInline(text, opts) + '</' + tag + '>';
          out.push('<div class="table-wrap"><table><thead><tr>' + head.map((c, k) => cell('th', c, k)).join('') + '</tr></thead><tbody>' +
            rows.map((r) => '<tr>' + head.map((_, k) => cell('td', r[k] || '', k)).join('') + '</tr>').join('') + '</tbody></table></div>');
          continue;
        }
      }
      para.push(line);
      i++;
    }
    flushPara();
    return out.join('');
  }

  /**
   * renderPlain renders tool output or a command reply: all text escaped and
   * kept as is (show it in a white-space: pre-wrap element), with markdown
   * images of artifacts as <img> (as links with opts.noImages), other markdown
   * links and bare urls as links.
   */
  function renderPlain(text, opts) {
    return renderInline(String(text == null ? '' : text).replace(/\r\n?/g, '\n'), Object.assign({}, opts || {}, { plain: true }));
  }

  /** extractArtifactImages lists the artifact images ![alt](/api/v1/artifacts/...) in text. */
  function extractArtifactImages(text) {
    return extractArtifacts(text).filter((a) => a.image).map((a) => ({ alt: a.name, url: a.url }));
  }

  /**
   * extractArtifacts lists the artifacts text links to, in order and without
   * repeats: ![alt](/api/v1/artifacts/ID) and [name](/api/v1/artifacts/ID).
   * Each is {name, url, image}; image is true for ![..] and for links whose
   * text is an image file name.
   */
  function extractArtifacts(text) {
    const out = [];
    const seen = new Set();
    const s = String(text == null ? '' : text);
    let i = 0;
    while ((i = s.indexOf('[', i)) !== -1) {
      const m = matchLink(s, i);
      if (!m) { i++; continue; }
      const bang = i > 0 && s[i - 1] === '!';
      if (isArtifactUrl(m.url) && !seen.has(m.url)) {
        seen.add(m.url);
        out.push({ name: m.text, url: m.url, image: bang || isImageName(m.text) });
      }
      i = m.end;
    }
    return out;
  }

  /**
   * normalizeAttachments turns an event's optional `attachments` list
   * ([{id, name, media_type, url}], a field a gateway may add within protocol
   * version 1) into [{name, url, image}], dropping entries that do not point
   * into the gateway's artifact store.
   */
  function normalizeAttachments(list) {
    if (!Array.isArray(list)) return [];
    const out = [];
    for (const a of list) {
      if (!a || typeof a !== 'object') continue;
      let url = typeof a.url === 'string' ? a.url : '';
      if (!url && typeof a.id === 'string' && a.id) url = ARTIFACT_PREFIX + encodeURIComponent(a.id);
      if (!isArtifactUrl(url)) continue;
      const name = typeof a.name === 'string' && a.name ? a.name : url.slice(url.lastIndexOf('/') + 1);
      const mt = typeof a.media_type === 'string' ? a.media_type.toLowerCase() : '';
      const image = mt ? mt.startsWith('image/') && !mt.startsWith('image/svg') : isImageName(name);
      out.push({ name, url, image });
    }
    return out;
  }

  // ---------------------------------------------------------------- tools

  function truncate(s, max) {
    s = String(s);
    return s.length > max ? s.slice(0, Math.max(0, max - 1)) + '…' : s;
  }

  /**
   * shortArgs summarises a tool call's JSON arguments for a one-line summary:
   * {"url":"https://x","depth":2} → 'url: https://x, depth: 2'.
   */
  function shortArgs(args, max) {
    max = max || 80;
    if (args == null || args === '') return '';
    let v = args;
    if (typeof args === 'string') {
      try { v = JSON.parse(args); } catch (_) { return truncate(args.replace(/\s+/g, ' ').trim(), max); }
    }
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const parts = Object.keys(v).map((k) => {
        const x = v[k];
        const val = typeof x === 'string' ? x : JSON.stringify(x);
        return k + ': ' + truncate(String(val).replace(/\s+/g, ' ').trim(), 48);
      });
      return truncate(parts.join(', '), max);
    }
    return truncate(JSON.stringify(v), max);
  }

  /** prettyArgs pretty-prints JSON arguments; other text is returned unchanged. */
  function prettyArgs(args) {
    if (args == null) return '';
    if (typeof args !== 'string') return JSON.stringify(args, null, 2);
    try { return JSON.stringify(JSON.parse(args), null, 2); } catch (_) { return args; }
  }

  // ---------------------------------------------------------------- ids

  const CHAT_ID_RE = /^[A-Za-z0-9._-]{1,200}$/;

  function hex(bytes) {
    return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function randomBytes(n) {
    const a = new Uint8Array(n);
    const c = typeof globalThis !== 'undefined' ? globalThis.crypto : undefined;
    if (c && typeof c.getRandomValues === 'function') c.getRandomValues(a);
    else for (let i = 0; i < n; i++) a[i] = Math.floor(Math.random() * 256);
    return a;
  }

  /** newChatId: a random chat id safe for the protocol (no ':' or '/'). */
  /**
   * starterPrompts are a few first messages to try, for the empty state of
   * a conversation: each shows off a tool the agent has (tools: its tool
   * names), and the last asks what it can do. The make run demo model
   * answers each of them with its tool.
   */
  function starterPrompts(tools) {
    const has = (n) => Array.isArray(tools) && tools.includes(n);
    const out = [];
    if (has('calculator')) out.push('What is 1234 * 5678?');
    if (has('bash')) out.push('Run `uname -a`');
    if (has('memory_store')) out.push('Remember that I prefer short answers');
    if (has('web_fetch')) out.push('Summarise https://example.com');
    return out.slice(0, 3).concat(['What can you do?']);
  }

  // ---------------------------------------------------------------- files

  /** sizeText: a byte count for people ("3.75 MiB", "12 KiB", "900 bytes"), as the server writes it. */
  function sizeText(n) {
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(2).replace(/\.?0+$/, '') + ' MiB';
    if (n >= 1 << 10) return Math.floor(n / 1024) + ' KiB';
    return n + ' bytes';
  }

  /**
   * checkUpload says why a file cannot be attached ('' when it can): empty,
   * over the size limit, or an image too large for the model. The gateway
   * checks again (and the type against the bytes).
   */
  function checkUpload(name, type, size) {
    if (!size) return name + ' is empty';
    if (size > MAX_UPLOAD_BYTES) return name + ' is ' + sizeText(size) + '; a file may be at most ' + sizeText(MAX_UPLOAD_BYTES);
    if (MODEL_IMAGES.has(String(type || '').toLowerCase()) && size > MAX_UPLOAD_IMAGE_BYTES) {
      return name + ' is ' + sizeText(size) + '; an image may be at most ' + sizeText(MAX_UPLOAD_IMAGE_BYTES) + ' (what the model APIs accept)';
    }
    return '';
  }

  /** uploadPath: where a file of the chat is uploaded (POST, body application/octet-stream). */
  function uploadPath(agent, chatId, name, type) {
    const q = new URLSearchParams({ agent, chat_id: chatId, name });
    if (type) q.set('media_type', type);
    return '/api/v1/uploads?' + q.toString();
  }

  // A file line the runtime appends to a user message that carried files
  // (runtime/session/uploads.go): a link to it, and where it is in the
  // workspace; or a note on one that could not be read.
  const FILE_LINE = /^(!?)\[([^\]\n]*)\]\((\/api\/v1\/artifacts\/[^)\s]+)\)(?: \([^\n]*\))?$/;
  const FILE_NOTE = /^\([^\n]* could not be read: [^\n]*\)$/;

  /**
   * splitUserFiles separates a stored user message into the text the user
   * typed and the files they attached: {text, files: [{id, name, url, image}]}.
   */
  function splitUserFiles(content) {
    const s = String(content == null ? '' : content);
    const lines = s.split('\n');
    const files = [];
    let i = lines.length;
    let notes = 0;
    for (; i > 0; i--) {
      const m = FILE_LINE.exec(lines[i - 1]);
      if (m) {
        let id = m[3].slice(ARTIFACT_PREFIX.length);
        try { id = decodeURIComponent(id); } catch (_) { /* keep it */ }
        files.unshift({ id, name: m[2], url: m[3], image: m[1] === '!' });
      } else if (FILE_NOTE.test(lines[i - 1])) notes++;
      else break;
    }
    if (files.length === 0 && notes === 0) return { text: s, files: [] };
    if (i > 0 && lines[i - 1] !== '') return { text: s, files: [] }; // the files follow a blank line
    return { text: lines.slice(0, Math.max(0, i - 1)).join('\n'), files };
  }

  function newChatId(bytes) {
    return 'browser-' + hex(bytes || randomBytes(8));
  }

  function isValidChatId(id) {
    return typeof id === 'string' && CHAT_ID_RE.test(id);
  }

  let seq = 0;
  /** newMessageId: a client message id unique across reloads. */
  function newMessageId(now, prefix) {
    seq = (seq + 1) % 1e6;
    return (prefix || 'c') + '-' + (now || Date.now()).toString(36) + '-' + hex(randomBytes(3)) + '-' + seq;
  }

  /** newControlId: the id of a control-channel (`dialog`) or `stop` frame. */
  function newControlId(prefix) {
    return newMessageId(0, prefix || 'd');
  }

  /** parseCommand: {name, args} for "/name args", else null (names lower-cased). */
  function parseCommand(text) {
    const t = String(text == null ? '' : text).trim();
    const m = /^\/([A-Za-z?]+)(?:\s+([\s\S]*))?$/.exec(t);
    if (!m) return null;
    return { name: m[1] === '?' ? 'help' : m[1].toLowerCase(), args: (m[2] || '').trim() };
  }

  /** The slash commands the runtime knows (anything else goes to the model). */
  const KNOWN_COMMANDS = new Set(['new', 'sessions', 'switch', 'rename', 'delete', 'compact', 'info', 'dump', 'mcp', 'health', 'stop', 'help']);

  /** isKnownCommand: text is a slash command the runtime answers itself. */
  function isKnownCommand(text) {
    const c = parseCommand(text);
    return !!c && KNOWN_COMMANDS.has(c.name);
  }

  /** Commands after which the chat's current dialog may have changed. */
  const DIALOG_COMMANDS = new Set(['new', 'switch', 'delete']);

  function textBytes(s) {
    if (typeof TextEncoder !== 'undefined') return new TextEncoder().encode(s).length;
    return unescape(encodeURIComponent(s)).length;
  }

  /** wsUrl: the WebSocket url for a page location ({protocol, host}). */
  function wsUrl(loc, key) {
    const scheme = loc.protocol === 'https:' ? 'wss:' : 'ws:';
    return scheme + '//' + loc.host + '/api/v1/ws' + (key ? '?key=' + encodeURIComponent(key) : '');
  }

  /** sessionIdFor builds a session id as the protocol defines it. */
  function sessionIdFor(agent, chatId, dialog) {
    return 'web:' + agent + '/' + chatId + ':' + dialog;
  }

  /** dialogOf returns the dialog of a session id ("web:a/c:d" → "d"). */
  function dialogOf(sessionId) {
    const s = String(sessionId || '');
    const k = s.lastIndexOf(':');
    return k > 0 && s.indexOf('/') !== -1 && k > s.indexOf('/') ? s.slice(k + 1) : '';
  }

  // ---------------------------------------------------------------- turns

  /**
   * A turn is one `send` and everything the server answered to it:
   *   {id, agent, text, quiet, command, status, acked, items, stream, final,
   *    commands, errors, usage, session, done}
   * status: 'sending' → 'running' (ack) → 'done' | 'error' | 'stopped' |
   *         'interrupted' (the connection dropped before `done`).
   * items: the activity before the answer, in order:
   *   {type:'tool', callId, name, arguments, content, isError, hasResult}
   *   {type:'interim', text}  (text streamed before a tool call)
   * stream: the answer streamed so far; final: the final answer (or null).
   */
  function newTurn(id, text, opts) {
    opts = opts || {};
    const cmd = parseCommand(text);
    return {
      id,
      agent: opts.agent || '',
      text: String(text == null ? '' : text),
      quiet: !!opts.quiet,
      command: cmd ? cmd.name : '',
      status: 'sending',
      acked: false,
      items: [],
      stream: '',
      final: null,
      commands: [],
      errors: [],
      attachments: [],
      // files: what the user attached to the message [{id, name, url, image}].
      files: Array.isArray(opts.files) ? opts.files.slice() : [],
      usage: null,
      session: '',
      done: false,
    };
  }

  function sendFrame(turn, chatId) {
    const f = { v: PROTOCOL_VERSION, type: 'send', id: turn.id, agent: turn.agent, chat_id: chatId, text: turn.text };
    if (turn.files && turn.files.length) f.files = turn.files.map((x) => x.id);
    return f;
  }

  /** stopFrame: the `stop` frame of a chat; id ties the server's `stopped` answer to it. */
  function stopFrame(agent, chatId, id) {
    const f = { v: PROTOCOL_VERSION, type: 'stop', agent, chat_id: chatId };
    if (id) f.id = id;
    return f;
  }

  /**
   * approveFrame: the `approve` frame answering an exec approval request of
   * a chat (decision 'approve' or 'deny'); id ties the server's `approval`
   * answer to it.
   */
  function approveFrame(agent, chatId, code, decision, id) {
    if (decision !== 'approve' && decision !== 'deny') throw new Error('unknown decision ' + JSON.stringify(decision));
    const f = { v: PROTOCOL_VERSION, type: 'approve', agent, chat_id: chatId, code, decision };
    if (id) f.id = id;
    return f;
  }

  /** approvalOutcomeText says how an approval request ended. */
  function approvalOutcomeText(outcome) {
    switch (outcome) {
      case 'approved': return 'Approved: the command ran.';
      case 'timed_out': return 'No answer in time: the command was refused.';
      case 'denied': return 'Denied: the command was not run.';
      default: return '';
    }
  }

  /** The dialog operations of the control channel (docs/protocol.md). */
  const DIALOG_OPS = new Set(['list', 'create', 'switch', 'rename', 'archive', 'delete']);

  /**
   * dialogFrame builds a control-channel frame: {v, type:'dialog', id, op,
   * agent, chat_id} plus dialog_id (switch, rename, archive, delete) and
   * title (create, rename) when given. It throws on an unknown op.
   */
  function dialogFrame(id, op, agent, chatId, fields) {
    if (!DIALOG_OPS.has(op)) throw new Error('unknown dialog op ' + JSON.stringify(op));
    const f = { v: PROTOCOL_VERSION, type: 'dialog', id, op, agent, chat_id: chatId };
    const x = fields || {};
    if (op !== 'list' && op !== 'create' && x.dialogId) f.dialog_id = x.dialogId;
    if ((op === 'create' || op === 'rename') && typeof x.title === 'string') {
      const t = cleanTitle(x.title);
      if (t) f.title = t;
    }
    return f;
  }

  /** cleanTitle makes a dialog title the protocol accepts: one line, trimmed, at most 200 characters. */
  function cleanTitle(title) {
    const t = String(title == null ? '' : title).replace(/[\x00-\x1f\x7f\s]+/g, ' ').trim();
    return Array.from(t).slice(0, MAX_TITLE_CHARS).join('');
  }

  /**
   * dialogView decides what the conversation list shows from a `list`
   * answer: {current, implicit, rows}. rows are the dialogs (most recent
   * first) with {dialog_id, id, title, last_message_at, archived, current};
   * when the chat has no current dialog (none yet, or it was deleted) its
   * next message goes to the most recent dialog, which is marked current
   * with implicit = true; a current dialog missing from the list (archived,
   * or older than the 10 listed) is shown on top. known maps dialog ids to
   * dialogs seen before (to title a missing current one).
   */
  function dialogView(current, dialogs, known) {
    const list = (Array.isArray(dialogs) ? dialogs : []).filter((d) => d && typeof d.dialog_id === 'string' && d.dialog_id);
    let cur = typeof current === 'string' ? current : '';
    let implicit = false;
    if (!cur && list.length) { cur = list[0].dialog_id; implicit = true; }
    const rows = list.map((d) => Object.assign({}, d, { current: d.dialog_id === cur }));
    if (cur && !rows.some((r) => r.current)) {
      const k = known && known[cur];
      rows.unshift(Object.assign({ id: '', title: '', last_message_at: '', archived: false }, k || {}, { dialog_id: cur, current: true }));
    }
    return { current: cur, implicit, rows };
  }

  /** dialogLabel: how a dialog is named in the UI (its title, else its id). */
  function dialogLabel(d) {
    if (!d) return '';
    return (typeof d.title === 'string' && d.title.trim()) ? d.title.trim() : d.dialog_id === 'default' ? 'Default conversation' : (d.dialog_id || 'New conversation');
  }

  // ---------------------------------------------------------------- health

  // The kinds of health checks, in report order, as the page titles them:
  // core checks are required, feature checks are required by a feature the
  // configuration enables, optional ones never fail the report.
  const HEALTH_KINDS = [
    ['core', 'Required', 'required'],
    ['feature', 'Required by enabled features', 'feature'],
    ['optional', 'Optional', 'optional'],
  ];

  /**
   * healthView turns GET /api/v1/health's answer into what the health page
   * shows: a summary and one section per kind, each check with its state
   * (OK, FAIL, or WARN for a failed optional one), its kind's label and its
   * name as `picobot health` prints it ("group: check"). Answers without
   * groups (an older gateway) are grouped by the checks' own kind.
   */
  function healthView(r) {
    r = r || {};
    const groups = Array.isArray(r.groups) ? r.groups
      : [{ name: '', checks: Array.isArray(r.checks) ? r.checks : [] }];
    const flat = [];
    for (const g of groups) {
      for (const c of (Array.isArray(g.checks) ? g.checks : [])) {
        const kind = c.kind || g.kind || 'core';
        const name = g.name && c.name !== g.name ? g.name + ': ' + c.name : (c.name || '');
        flat.push({ name, kind, ok: !!c.ok, message: c.message || '', fix: c.ok ? '' : (c.fix || '') });
      }
    }
    const sections = [];
    for (const [kind, title, label] of HEALTH_KINDS) {
      const checks = flat.filter((c) => c.kind === kind)
        .map((c) => Object.assign(c, { label, state: c.ok ? 'OK' : kind === 'optional' ? 'WARN' : 'FAIL' }));
      if (checks.length) sections.push({ kind, title, checks });
    }
    const failing = flat.filter((c) => !c.ok && c.kind !== 'optional').length;
    const warnings = flat.filter((c) => !c.ok && c.kind === 'optional').length;
    const ok = typeof r.ok === 'boolean' ? r.ok : r.status === 'ok';
    let summary = ok ? 'All required checks pass' : (r.status || 'unknown') + ' · ' + failing + ' failing';
    if (warnings) summary += ' · ' + warnings + ' optional missing';
    return { ok, summary, sections, count: flat.length };
  }

  // ---------------------------------------------------------------- errors

  const ERROR_TEXT = {
    no_model: ['The agent has no model', 'Give it one (see Configuration → Health for the exact fix), then send again.'],
    busy: ['Busy', 'This conversation is still working on a message. Wait for it to finish, or press Stop.'],
    rate_limited: ['Too many requests', 'This API key hit its rate limit.'],
    stopped: ['Stopped', 'What was done so far is kept.'],
    too_large: ['Too large', 'Shorten the message and send it again.'],
    bad_request: ['Not accepted', ''],
    unauthorized: ['API key refused', 'Enter a valid API key.'],
    forbidden: ['Not allowed', 'This API key is not served by this gateway.'],
    unknown_agent: ['Unknown agent', 'Pick another agent, or reload the page.'],
    unknown_dialog: ['Unknown conversation', 'It may have been deleted; the list was refreshed.'],
    unknown_session: ['Unknown conversation', ''],
    unknown_artifact: ['File not found', ''],
    not_found: ['Not found', ''],
    internal: ['Something went wrong on the gateway', 'Its log has the details; try again.'],
    offline: ['Not connected', 'The gateway cannot be reached; the page reconnects by itself.'],
    timeout: ['No answer', 'The gateway did not answer in time; try again.'],
  };

  /**
   * describeError turns an error frame into what the UI shows:
   * {title, message, hint}. message is the server's own text (it often
   * says exactly what to fix); hint adds what to do. retryAfterMs (from
   * rate_limited) becomes "Try again in N s".
   */
  function describeError(code, message, retryAfterMs) {
    const c = typeof code === 'string' && code ? code : 'internal';
    const known = ERROR_TEXT[c];
    const title = known ? known[0] : 'Error (' + c + ')';
    let hint = known ? known[1] : '';
    if (c === 'rate_limited') {
      const secs = Math.max(1, Math.ceil((Number(retryAfterMs) || 1000) / 1000));
      hint = 'Try again in ' + secs + ' s.';
    }
    let msg = String(message == null ? '' : message).trim();
    if (c === 'internal' && (!msg || msg === 'internal error')) msg = '';
    // The server's message often repeats the title or the hint
    // ("stopped; what was done so far is kept").
    const lead = msg.toLowerCase().indexOf(title.toLowerCase());
    if (lead === 0 && /^\s*[;:,.]\s*\S/.test(msg.slice(title.length))) {
      msg = msg.slice(title.length).replace(/^\s*[;:,.]\s*/, '');
      msg = msg.charAt(0).toUpperCase() + msg.slice(1);
    }
    const bare = (x) => x.toLowerCase().replace(/[.!\s]+$/, '');
    if (hint && msg && bare(msg).includes(bare(hint))) hint = '';
    return { title, message: msg, hint };
  }

  function applyEvent(t, ev, frame) {
    switch (ev.kind) {
      case 'delta':
        t.stream += ev.text || '';
        break;
      case 'tool_call': {
        const items = t.items.slice();
        if (t.stream.trim() !== '') items.push({ type: 'interim', text: t.stream });
        t.stream = '';
        items.push({ type: 'tool', callId: ev.call_id || '', name: ev.name || 'tool', arguments: ev.arguments || '', content: '', isError: false, hasResult: false });
        t.items = items;
        break;
      }
      case 'tool_result': {
        const items = t.items.slice();
        let k = -1;
        if (ev.call_id) k = items.findIndex((x) => x.type === 'tool' && x.callId === ev.call_id);
        if (k === -1) k = items.findIndex((x) => x.type === 'tool' && !x.hasResult && x.name === ev.name && !x.callId);
        const res = { content: ev.content || '', isError: !!ev.is_error, hasResult: true, attachments: normalizeAttachments(ev.attachments) };
        if (k === -1) items.push(Object.assign({ type: 'tool', callId: ev.call_id || '', name: ev.name || 'tool', arguments: '' }, res));
        else items[k] = Object.assign({}, items[k], res);
        t.items = items;
        break;
      }
      case 'usage': {
        const u = t.usage || { input: 0, output: 0 };
        t.usage = { input: u.input + (ev.input_tokens || 0), output: u.output + (ev.output_tokens || 0) };
        break;
      }
      case 'final':
        t.final = ev.text || '';
        t.stream = '';
        t.attachments = t.attachments.concat(normalizeAttachments(ev.attachments));
        break;
      case 'command':
      case 'notice': // the runtime's word to the user during a turn (a budget nearly spent)
        t.commands = t.commands.concat([ev.text || '']);
        break;
      case 'approval': {
        // A command waiting for the user's Approve or Deny (exec approvals).
        const items = t.items.slice();
        if (t.stream.trim() !== '') items.push({ type: 'interim', text: t.stream });
        t.stream = '';
        items.push({ type: 'approval', code: ev.code || '', tool: ev.name || 'exec', command: ev.command || '',
          reason: ev.reason || '', timeoutMs: ev.timeout_ms || 0, outcome: '' });
        t.items = items;
        break;
      }
      case 'approval_result': {
        const k = t.items.findIndex((x) => x.type === 'approval' && x.code === ev.code);
        if (k !== -1) {
          const items = t.items.slice();
          items[k] = Object.assign({}, items[k], { outcome: ev.outcome || 'denied' });
          t.items = items;
        }
        break;
      }
      default:
        break; // future kinds are ignored
    }
    if (frame.session) t.session = frame.session;
  }

  /** errorOf: the {code, message, retryAfterMs} of an error frame. */
  function errorOf(frame) {
    const e = { code: frame.code || 'internal', message: frame.message || 'Something went wrong.' };
    if (frame.retry_after_ms) e.retryAfterMs = frame.retry_after_ms;
    return e;
  }

  /** reduceTurn applies one server frame (already matched by id) to a turn; returns a new turn. */
  function reduceTurn(turn, frame) {
    if (!frame || typeof frame !== 'object') return turn;
    const t = Object.assign({}, turn);
    switch (frame.type) {
      case 'ack':
        t.acked = true;
        if (t.status === 'sending') t.status = 'running';
        break;
      case 'event':
        if (frame.event && typeof frame.event === 'object') applyEvent(t, frame.event, frame);
        if (t.status === 'sending') t.status = 'running';
        break;
      case 'error':
        t.errors = t.errors.concat([errorOf(frame)]);
        t.status = frame.code === 'stopped' ? 'stopped' : 'error';
        if (frame.session) t.session = frame.session;
        break;
      case 'done':
        t.done = true;
        if (t.status === 'sending' || t.status === 'running') t.status = 'done';
        if (frame.session) t.session = frame.session;
        break;
      default:
        return turn;
    }
    return t;
  }

  /** interruptTurn marks a turn whose connection dropped before `done`. */
  function interruptTurn(turn) {
    if (turn.done) return turn;
    return Object.assign({}, turn, { done: true, status: 'interrupted' });
  }

  // ---------------------------------------------------------------- app state

  /**
   * The app state reduced from actions:
   *   {turns: {id: turn}, order: [id], active: id|null, conn, notices: [{code, message}]}
   * Actions:
   *   {type:'send', turn}            a send frame was written
   *   {type:'frame', frame}          a frame from the server
   *   {type:'conn', state}           'connecting' | 'open' | 'closed'
   *   {type:'clear'}                 forget finished turns (history reloaded)
   */
  function initialState() {
    return { turns: {}, order: [], active: null, conn: 'connecting', notices: [] };
  }

  function reduce(state, action) {
    if (!action) return state;
    switch (action.type) {
      case 'send': {
        const turn = action.turn;
        return Object.assign({}, state, {
          turns: Object.assign({}, state.turns, { [turn.id]: turn }),
          order: state.order.concat([turn.id]),
          active: turn.id,
        });
      }
      case 'frame': {
        const f = action.frame;
        if (!f || typeof f !== 'object') return state;
        const turn = f.id ? state.turns[f.id] : undefined;
        if (!turn) {
          if (f.type === 'error') {
            return Object.assign({}, state, { notices: state.notices.concat([errorOf(f)]) });
          }
          return state;
        }
        const next = reduceTurn(turn, f);
        if (next === turn) return state;
        return Object.assign({}, state, {
          turns: Object.assign({}, state.turns, { [f.id]: next }),
          active: next.done && state.active === f.id ? null : state.active,
        });
      }
      case 'conn': {
        if (action.state !== 'closed') return Object.assign({}, state, { conn: action.state });
        const turns = {};
        for (const id of state.order) turns[id] = interruptTurn(state.turns[id]);
        return Object.assign({}, state, { conn: 'closed', turns, active: null });
      }
      case 'clear': {
        const order = state.order.filter((id) => !state.turns[id].done);
        const turns = {};
        for (const id of order) turns[id] = state.turns[id];
        return Object.assign({}, state, { turns, order, notices: [] });
      }
      default:
        return state;
    }
  }

  // ---------------------------------------------------------------- canvas action queue

  /**
   * The canvas actions (A2UI button clicks, docs/canvas.md) clicked while a
   * reply runs or the page is offline wait in a queue, in click order, and
   * are sent one at a time as each reply ends. An action is
   *   {text, agent, session}
   * where agent and session are the conversation it was clicked in (session
   * '' when the page knew no id for it yet: the first reply of a chat
   * creates the conversation; such an action goes to the agent's current
   * one).
   *
   * queueAction appends action unless the queue already holds max:
   * {queue, queued}; the queue given is not changed.
   */
  function queueAction(queue, action, max) {
    const limit = max == null ? MAX_QUEUED_ACTIONS : max;
    if (queue.length >= limit) return { queue, queued: false };
    return { queue: queue.concat([action]), queued: true };
  }

  /**
   * nextAction decides what to do with the queue now. ctx is
   *   {agent, session, ready}
   * the conversation shown and whether a message can be sent now (no reply
   * running, connected). Actions of another conversation are dropped (the
   * user switched: sending them to the new one would be wrong, to the old
   * one unseen); then, when ready, the first one is taken.
   * Returns {action (or null), queue (the rest), dropped: [actions]}.
   */
  function nextAction(queue, ctx) {
    const keep = [];
    const dropped = [];
    for (const a of queue) {
      const other = a.agent !== ctx.agent || (a.session !== '' && a.session !== (ctx.session || ''));
      (other ? dropped : keep).push(a);
    }
    if (!ctx.ready || keep.length === 0) return { action: null, queue: keep, dropped };
    return { action: keep[0], queue: keep.slice(1), dropped };
  }

  /** actionQueueText says what waits, for the panel's status line ('' when nothing does). */
  function actionQueueText(n, offline) {
    if (!n) return '';
    const what = n === 1 ? '1 canvas action is queued' : n + ' canvas actions are queued';
    return what + (offline ? ': sent once the connection is back.' : ': sent when the reply ends, one after another.');
  }

  /** actionQueueFullText is the hint for a click refused because the queue is full. */
  function actionQueueFullText(max) {
    return 'This action was not sent: ' + (max == null ? MAX_QUEUED_ACTIONS : max) +
      ' canvas actions are already waiting for the reply to end. Wait for it, or press Stop.';
  }

  /** actionsDroppedText is the notice shown when queued actions are dropped on a conversation switch. */
  function actionsDroppedText(n) {
    return (n === 1 ? '1 queued canvas action was not sent: the conversation it was clicked in' :
      n + ' queued canvas actions were not sent: the conversation they were clicked in') + ' is no longer the current one.';
  }

  // ---------------------------------------------------------------- history

  /**
   * historyToTurns groups stored messages (GET /sessions/{id}/messages) into
   * finished turns shaped like live ones, so both render the same way: a user
   * message opens a turn; assistant tool calls and tool results become its
   * items; an assistant message without tool calls is its final answer.
   */
  const STOPPED_MARK = /(?:^|\n\n)\[stopped\](?=\n\n|$)/;

  function historyToTurns(messages) {
    const turns = [];
    let cur = null;
    const open = (text, m) => {
      cur = newTurn('h-' + (m && m.seq != null ? m.seq : turns.length), text || '');
      cur.status = 'done';
      cur.done = true;
      cur.acked = true;
      cur.history = true;
      cur.quiet = text == null;
      cur.command = '';
      cur.createdAt = m && m.created_at ? m.created_at : '';
      turns.push(cur);
      return cur;
    };
    for (const m of Array.isArray(messages) ? messages : []) {
      if (!m || typeof m !== 'object') continue;
      const content = typeof m.content === 'string' ? m.content : '';
      switch (m.role) {
        case 'user': {
          const split = splitUserFiles(content);
          open(split.text, m);
          cur.files = split.files;
          // A turn that failed without an answer: the server keeps what
          // the client was told and returns it on the user message.
          if (m.error && typeof m.error === 'object') {
            cur.errors = [errorOf(m.error)];
            cur.status = 'error';
          }
          break;
        }
        case 'assistant': {
          const t = cur || open(null, m);
          const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
          if (t.final != null) { t.items = t.items.concat([{ type: 'interim', text: t.final }]); t.final = null; }
          if (calls.length) {
            const items = t.items.slice();
            if (content.trim() !== '') items.push({ type: 'interim', text: content });
            for (const c of calls) {
              items.push({ type: 'tool', callId: c.id || '', name: c.name || 'tool', arguments: c.arguments || '', content: '', isError: false, hasResult: false });
            }
            t.items = items;
          } else {
            // A turn the user stopped is stored with its partial text and
            // the server's marker (runtime/session StoppedMarker, with the
            // turn's files after it): shown as the live turn showed it.
            const stopped = content.match(STOPPED_MARK);
            t.final = stopped ? content.replace(STOPPED_MARK, '').replace(/^\n+|\n+$/g, '') : content;
            // The turn's tokens, stored with its answer: the line the live
            // turn showed comes back after a reload.
            const u = m.usage;
            if (u && typeof u === 'object' && (u.input_tokens > 0 || u.output_tokens > 0)) {
              t.usage = { input: Number(u.input_tokens) || 0, output: Number(u.output_tokens) || 0 };
            }
            if (stopped) {
              t.status = 'stopped';
              t.errors = t.errors.concat([{ code: 'stopped', message: 'Stopped; what was done so far is kept.' }]);
            }
          }
          break;
        }
        case 'tool': {
          const t = cur || open(null, m);
          const items = t.items.slice();
          const k = m.tool_call_id ? items.findIndex((x) => x.type === 'tool' && x.callId === m.tool_call_id) : -1;
          const res = { content, isError: !!m.is_error, hasResult: true };
          if (k === -1) items.push(Object.assign({ type: 'tool', callId: m.tool_call_id || '', name: m.name || 'tool', arguments: '' }, res));
          else items[k] = Object.assign({}, items[k], res);
          t.items = items;
          break;
        }
        default: { // system and unknown roles: a note of their own
          const t = open(null, m);
          t.commands = [content];
          cur = null;
          break;
        }
      }
    }
    return turns;
  }

  return {
    PROTOCOL_VERSION,
    MAX_TEXT_BYTES,
    MAX_TITLE_CHARS,
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_IMAGE_BYTES,
    MAX_FILES,
    MAX_QUEUED_ACTIONS,
    queueAction,
    nextAction,
    actionQueueText,
    actionQueueFullText,
    actionsDroppedText,
    DIALOG_COMMANDS,
    sizeText,
    checkUpload,
    uploadPath,
    splitUserFiles,
    escapeHtml,
    safeUrl,
    isArtifactUrl,
    withKey,
    renderInline,
    renderMarkdown,
    renderPlain,
    extractArtifactImages,
    extractArtifacts,
    normalizeAttachments,
    isImageName,
    shortArgs,
    prettyArgs,
    truncate,
    newChatId,
    isValidChatId,
    starterPrompts,
    newMessageId,
    newControlId,
    parseCommand,
    isKnownCommand,
    KNOWN_COMMANDS,
    healthView,
    textBytes,
    wsUrl,
    sessionIdFor,
    dialogOf,
    newTurn,
    sendFrame,
    stopFrame,
    approveFrame,
    approvalOutcomeText,
    dialogFrame,
    cleanTitle,
    dialogView,
    dialogLabel,
    describeError,
    reduceTurn,
    interruptTurn,
    initialState,
    reduce,
    historyToTurns,
  };
});
