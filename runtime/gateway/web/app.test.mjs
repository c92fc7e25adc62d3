// Unit tests of the web UI's pure core (ui-core.js). Run: node --test runtime/gateway/web/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import vm from 'node:vm';

const require = createRequire(import.meta.url);
const UI = require('./ui-core.js');

// ------------------------------------------------------------------ escaping

test('escapeHtml escapes the five HTML specials', () => {
  assert.equal(UI.escapeHtml(`<a href="x" onclick='y'>&</a>`), '&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  assert.equal(UI.escapeHtml(null), '');
});

test('safeUrl allows http(s), mailto and relative urls only', () => {
  assert.equal(UI.safeUrl('https://example.com/a?b=1'), 'https://example.com/a?b=1');
  assert.equal(UI.safeUrl('HTTP://example.com'), 'HTTP://example.com');
  assert.equal(UI.safeUrl('mailto:a@b.c'), 'mailto:a@b.c');
  assert.equal(UI.safeUrl('/api/v1/artifacts/x.png'), '/api/v1/artifacts/x.png');
  assert.equal(UI.safeUrl('docs/readme.md'), 'docs/readme.md');
  for (const bad of ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', 'java\tscript:alert(1)', ' javascript:alert(1)',
    'data:text/html,<script>', 'vbscript:x', 'java\nscript:x', 'file:///etc/passwd', '', 'a b']) {
    assert.equal(UI.safeUrl(bad), null, bad);
  }
});

test('isArtifactUrl and withKey', () => {
  assert.ok(UI.isArtifactUrl('/api/v1/artifacts/a1/chart.png'));
  assert.ok(!UI.isArtifactUrl('https://evil.example/api/v1/artifacts/x.png'));
  assert.ok(!UI.isArtifactUrl('/api/v1/artifacts/'));
  assert.ok(!UI.isArtifactUrl('/api/v1/artifacts/../sessions'));
  assert.ok(!UI.isArtifactUrl('/api/v1/artifacts/x" onerror="y'));
  assert.equal(UI.withKey('/api/v1/artifacts/a.png', 'k&1'), '/api/v1/artifacts/a.png?key=k%261');
  assert.equal(UI.withKey('/api/v1/artifacts/a.png?x=1', 'k'), '/api/v1/artifacts/a.png?x=1&key=k');
  assert.equal(UI.withKey('/api/v1/artifacts/a.png', ''), '/api/v1/artifacts/a.png');
  assert.equal(UI.withKey('https://example.com/a.png', 'k'), 'https://example.com/a.png', 'the key never leaves the gateway');
});

// ------------------------------------------------------------------ markdown

const ALLOWED = new Set(['p', 'br', 'pre', 'code', 'strong', 'em', 'del', 'a', 'img', 'h3', 'h4', 'h5', 'h6', 'ul', 'ol', 'li',
  'blockquote', 'hr', 'div', 'table', 'thead', 'tbody', 'tr', 'th', 'td']);
const ALLOWED_ATTRS = new Set(['href', 'src', 'alt', 'class', 'target', 'rel', 'loading', 'start']);

/**
 * assertSafeHtml checks that html is only allowed tags with allowed,
 * double-quoted attributes, and that no other '<', '>' or '"' appears.
 */
function assertSafeHtml(html, what) {
  const tagRe = /<(\/?)([a-z0-9]+)((?: [a-z]+="[^"<>]*")*)>/g;
  let last = 0;
  for (const m of html.matchAll(tagRe)) {
    const between = html.slice(last, m.index);
    assert.ok(!/[<>"]/.test(between), `stray markup ${JSON.stringify(between)} in ${what}: ${html}`);
    assert.ok(ALLOWED.has(m[2]), `tag <${m[2]}> in ${what}: ${html}`);
    for (const a of m[3].matchAll(/ ([a-z]+)="([^"]*)"/g)) {
      assert.ok(ALLOWED_ATTRS.has(a[1]), `attribute ${a[1]} in ${what}: ${html}`);
      if (a[1] === 'href' || a[1] === 'src') assert.ok(!/^\s*(javascript|data|vbscript):/i.test(a[2]), `url ${a[2]} in ${what}`);
    }
    last = m.index + m[0].length;
  }
  assert.ok(!/[<>"]/.test(html.slice(last)), `stray markup at the end of ${what}: ${html}`);
}

test('renderMarkdown escapes raw HTML and script', () => {
  const evil = [
    '<script>alert(1)</script>',
    '<img src=x onerror=alert(1)>',
    'Hi <b onmouseover="x()">there</b>',
    '**<script>bold()</script>**',
    '`<script>code</script>`',
    '```\n</code></pre><script>x()</script>\n```',
    '[<img src=x onerror=y>](https://ok.example)',
    '[click](javascript:alert(1))',
    '[click](java\tscript:alert(1))',
    '![x](javascript:alert(1))',
    '![x" onerror="alert(1)](/api/v1/artifacts/a.png)',
    '[x](https://a.example/"onmouseover="alert(1))',
    '<a href="javascript:alert(1)">x</a>',
    '| <script>t()</script> | b |\n|---|---|\n| <i>c</i> | d |',
    '> <iframe src="x"></iframe>',
    '- <svg onload=alert(1)>',
    '# <style>*{}</style>',
  ];
  for (const src of evil) {
    assertSafeHtml(UI.renderMarkdown(src), JSON.stringify(src));
    assertSafeHtml(UI.renderPlain(src), 'plain ' + JSON.stringify(src));
  }
  assert.equal(UI.renderMarkdown('<script>alert(1)</script>'), '<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>');
});

test('renderMarkdown output is safe for random markup soup', () => {
  const pieces = ['<', '>', '"', "'", '&', '`', '```', '*', '**', '_', '~~', '[', ']', '(', ')', '![', '](', 'javascript:', 'https://x.example/',
    '/api/v1/artifacts/a.png', '<script>', 'onerror=', '\n', '\n\n', '|', '---', '- ', '1. ', '> ', '# ', '\\', ' ', 'a', 'b'];
  let seed = 42;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  for (let i = 0; i < 3000; i++) {
    let src = '';
    for (let k = rnd(30); k >= 0; k--) src += pieces[rnd(pieces.length)];
    assertSafeHtml(UI.renderMarkdown(src, { key: 'k"<' }), JSON.stringify(src));
    assertSafeHtml(UI.renderPlain(src), 'plain ' + JSON.stringify(src));
  }
});

test('renderMarkdown: paragraphs, line breaks, bold, inline code', () => {
  assert.equal(UI.renderMarkdown('Hello **world**\nsecond `a<b` line\n\nNext'),
    '<p>Hello <strong>world</strong><br>second <code>a&lt;b</code> line</p><p>Next</p>');
  assert.equal(UI.renderMarkdown('*em* and _em_ and snake_case_name and 2 * 3 * 4'),
    '<p><em>em</em> and <em>em</em> and snake_case_name and 2 * 3 * 4</p>');
  assert.equal(UI.renderMarkdown('~~gone~~ \\*literal\\*'), '<p><del>gone</del> *literal*</p>');
});

test('renderMarkdown: fenced code blocks keep content verbatim and escaped', () => {
  const html = UI.renderMarkdown('Before\n```go\nfmt.Println("<hi>") // **not bold**\n\n  indented\n```\nAfter');
  assert.equal(html, '<p>Before</p><pre><code class="language-go">fmt.Println(&quot;&lt;hi&gt;&quot;) // **not bold**\n\n  indented</code></pre><p>After</p>');
  // An unterminated fence (while streaming) still renders as code.
  assert.equal(UI.renderMarkdown('```\npartial <x>'), '<pre><code>partial &lt;x&gt;</code></pre>');
  // A weird info string is not copied into the class attribute.
  assert.equal(UI.renderMarkdown('```a"b\nx\n```'), '<pre><code>x</code></pre>');
});

test('renderMarkdown: links get target=_blank rel=noopener; unsafe ones become text', () => {
  assert.equal(UI.renderMarkdown('[docs](https://example.com/docs)'),
    '<p><a href="https://example.com/docs" target="_blank" rel="noopener">docs</a></p>');
  assert.equal(UI.renderMarkdown('[bad](javascript:alert(1))'), '<p>bad</p>');
  assert.equal(UI.renderMarkdown('see https://example.com/a_(b). ok'),
    '<p>see <a href="https://example.com/a_(b)" target="_blank" rel="noopener">https://example.com/a_(b)</a>. ok</p>');
  assert.equal(UI.renderMarkdown('(https://example.com)'),
    '<p>(<a href="https://example.com" target="_blank" rel="noopener">https://example.com</a>)</p>');
  assert.equal(UI.renderMarkdown('[a **b**](https://x.example "title")'),
    '<p><a href="https://x.example" target="_blank" rel="noopener">a <strong>b</strong></a></p>');
  assert.equal(UI.renderMarkdown('`[not](https://link)`'), '<p><code>[not](https://link)</code></p>');
});

test('renderMarkdown: artifact images inline, other images as links', () => {
  assert.equal(UI.renderMarkdown('![chart](/api/v1/artifacts/s1/chart.png)', { key: 'k' }),
    '<p><a class="artifact-link" href="/api/v1/artifacts/s1/chart.png?key=k" target="_blank" rel="noopener">' +
    '<img class="artifact-img" src="/api/v1/artifacts/s1/chart.png?key=k" alt="chart" loading="lazy"></a></p>');
  assert.equal(UI.renderMarkdown('![remote](https://example.com/x.png)'),
    '<p><a class="image-link" href="https://example.com/x.png" target="_blank" rel="noopener">remote</a></p>');
  assert.equal(UI.renderMarkdown('![a<b](/api/v1/artifacts/x.png)').includes('alt="a&lt;b"'), true);
});

test('renderMarkdown: lists, headings, quotes, rules, tables', () => {
  assert.equal(UI.renderMarkdown('- one\n- two `x`\n\n1. a\n2. b'),
    '<ul><li>one</li><li>two <code>x</code></li></ul><ol><li>a</li><li>b</li></ol>');
  assert.equal(UI.renderMarkdown('3. c\n4. d'), '<ol start="3"><li>c</li><li>d</li></ol>');
  assert.equal(UI.renderMarkdown('# Title\ntext'), '<h3>Title</h3><p>text</p>');
  assert.equal(UI.renderMarkdown('> quoted **b**'), '<blockquote><p>quoted <strong>b</strong></p></blockquote>');
  assert.equal(UI.renderMarkdown('a\n\n---\n\nb'), '<p>a</p><hr><p>b</p>');
  assert.equal(UI.renderMarkdown('| a | b |\n|:--|--:|\n| 1 | `x|y` |'),
    '<div class="table-wrap"><table><thead><tr><th>a</th><th class="align-right">b</th></tr></thead>' +
    '<tbody><tr><td>1</td><td class="align-right"><code>x|y</code></td></tr></tbody></table></div>');
});

test('renderMarkdown tolerates odd input', () => {
  assert.equal(UI.renderMarkdown(''), '');
  assert.equal(UI.renderMarkdown(null), '');
  assert.equal(UI.renderMarkdown('**unclosed and `unclosed and [x]('), '<p>**unclosed and `unclosed and [x](</p>');
  assert.equal(UI.renderMarkdown('a\r\nb'), '<p>a<br>b</p>');
  const long = '*'.repeat(5000) + '_'.repeat(5000) + '['.repeat(2000);
  assert.ok(UI.renderMarkdown(long).length > 0);
});

test('renderPlain escapes everything but links and artifact images', () => {
  const html = UI.renderPlain('**raw** <b>x</b> `c`\n![plot](/api/v1/artifacts/p.png) [site](https://e.example) https://f.example');
  assert.equal(html, '**raw** &lt;b&gt;x&lt;/b&gt; `c`\n' +
    '<a class="artifact-link" href="/api/v1/artifacts/p.png" target="_blank" rel="noopener"><img class="artifact-img" src="/api/v1/artifacts/p.png" alt="plot" loading="lazy"></a> ' +
    '<a href="https://e.example" target="_blank" rel="noopener">site</a> <a href="https://f.example" target="_blank" rel="noopener">https://f.example</a>');
  assert.equal(UI.renderPlain('![plot](/api/v1/artifacts/p.png)', { noImages: true }),
    '<a class="artifact-link" href="/api/v1/artifacts/p.png" target="_blank" rel="noopener">plot</a>');
  assert.equal(UI.renderPlain('[x](javascript:alert(1)) <script>'), 'x &lt;script&gt;');
  assert.deepEqual(UI.extractArtifactImages('a ![p](/api/v1/artifacts/p.png) ![q](https://x/q.png) ![r](/api/v1/artifacts/r.jpg)'),
    [{ alt: 'p', url: '/api/v1/artifacts/p.png' }, { alt: 'r', url: '/api/v1/artifacts/r.jpg' }]);
});

test('artifact links: images inline, other files as download links', () => {
  assert.equal(UI.renderMarkdown('[notes.md](/api/v1/artifacts/a1)', { key: 'k' }),
    '<p><a class="artifact-file" href="/api/v1/artifacts/a1?key=k" target="_blank" rel="noopener">notes.md</a></p>');
  assert.equal(UI.renderMarkdown('[chart.PNG](/api/v1/artifacts/a2)'),
    '<p><a class="artifact-link" href="/api/v1/artifacts/a2" target="_blank" rel="noopener">' +
    '<img class="artifact-img" src="/api/v1/artifacts/a2" alt="chart.PNG" loading="lazy"></a></p>');
  // /dump's reply is rendered as plain text: the link still becomes a file link.
  assert.equal(UI.renderPlain('Saved 4 messages as markdown: [default.md](/api/v1/artifacts/x9)'),
    'Saved 4 messages as markdown: <a class="artifact-file" href="/api/v1/artifacts/x9" target="_blank" rel="noopener">default.md</a>');
  // An empty link text names the file by its id; hostile text stays text.
  for (const empty of ['[](/api/v1/artifacts/x1)', '[ ](/api/v1/artifacts/x1)']) {
    assert.equal(UI.renderMarkdown(empty), '<p><a class="artifact-file" href="/api/v1/artifacts/x1" target="_blank" rel="noopener">x1</a></p>');
  }
  assertSafeHtml(UI.renderMarkdown('[<b>x</b>.png"](/api/v1/artifacts/x1) [a"b](/api/v1/artifacts/y)'), 'artifact link text');
  // Links elsewhere are ordinary links, never images.
  assert.equal(UI.renderMarkdown('[a.png](https://example.com/a.png)'),
    '<p><a href="https://example.com/a.png" target="_blank" rel="noopener">a.png</a></p>');
  assert.ok(UI.isImageName('x.jpeg') && UI.isImageName(' y.webp ') && !UI.isImageName('x.svg') && !UI.isImageName('png'));
});

test('extractArtifacts and normalizeAttachments', () => {
  assert.deepEqual(UI.extractArtifacts('![p](/api/v1/artifacts/p) [r.md](/api/v1/artifacts/r) [s.png](/api/v1/artifacts/s) [w](https://x/y) ![p2](/api/v1/artifacts/p)'),
    [{ name: 'p', url: '/api/v1/artifacts/p', image: true }, { name: 'r.md', url: '/api/v1/artifacts/r', image: false },
      { name: 's.png', url: '/api/v1/artifacts/s', image: true }]);
  assert.deepEqual(UI.extractArtifacts(null), []);
  assert.deepEqual(UI.normalizeAttachments([
    { id: 'a1', name: 'shot.png', media_type: 'image/png' },
    { url: '/api/v1/artifacts/a2', name: 'report.pdf', media_type: 'application/pdf' },
    { id: 'a3', name: 'logo.svg', media_type: 'image/svg+xml' },
    { id: 'a/4', name: 'odd' },
    { url: 'https://evil.example/x.png', name: 'x.png' },
    { url: 'javascript:alert(1)' },
    null, 'x',
  ]), [
    { name: 'shot.png', url: '/api/v1/artifacts/a1', image: true },
    { name: 'report.pdf', url: '/api/v1/artifacts/a2', image: false },
    { name: 'logo.svg', url: '/api/v1/artifacts/a3', image: false },
    { name: 'odd', url: '/api/v1/artifacts/a%2F4', image: false },
  ]);
  assert.deepEqual(UI.normalizeAttachments(undefined), []);
});

test('shortArgs and prettyArgs', () => {
  assert.equal(UI.shortArgs('{"url":"https://example.com","depth":2}'), 'url: https://example.com, depth: 2');
  assert.equal(UI.shortArgs('not json\n at all'), 'not json at all');
  assert.equal(UI.shortArgs(''), '');
  assert.ok(UI.shortArgs(JSON.stringify({ text: 'x'.repeat(500) }), 40).length <= 40);
  assert.equal(UI.prettyArgs('{"a":1}'), '{\n  "a": 1\n}');
  assert.equal(UI.prettyArgs('plain'), 'plain');
});

// ------------------------------------------------------------------ ids, commands

test('chat and message ids', () => {
  const id = UI.newChatId();
  assert.match(id, /^browser-[0-9a-f]{16}$/);
  assert.ok(UI.isValidChatId(id));
  assert.equal(UI.newChatId(new Uint8Array([0, 255])), 'browser-00ff');
  for (const bad of ['', 'a:b', 'a/b', null, 'x'.repeat(201)]) assert.ok(!UI.isValidChatId(bad), String(bad));
  const a = UI.newMessageId(), b = UI.newMessageId();
  assert.notEqual(a, b);
  assert.ok(a.length <= 128);
});

test('parseCommand and isKnownCommand', () => {
  assert.deepEqual(UI.parseCommand('/rename  My plans '), { name: 'rename', args: 'My plans' });
  assert.deepEqual(UI.parseCommand('/NEW'), { name: 'new', args: '' });
  assert.deepEqual(UI.parseCommand('/?'), { name: 'help', args: '' });
  assert.equal(UI.parseCommand('hello /new'), null);
  assert.equal(UI.parseCommand('/etc/hosts is broken'), null);
  assert.ok(UI.isKnownCommand('/switch d_1'));
  assert.ok(UI.isKnownCommand('/health'));
  assert.ok(!UI.isKnownCommand('/unknown thing'));
});

// ------------------------------------------------------------------ health

test('healthView sorts the checks into required, feature and optional sections', () => {
  const r = {
    status: 'degraded', ok: false,
    groups: [
      { kind: 'core', name: 'model', checks: [
        { name: 'agent a', ok: false, kind: 'core', message: 'model configured but unreachable: openai/m at http://127.0.0.1:9/v1: connection refused', fix: 'check the endpoint' },
        { name: 'agent b', ok: true, kind: 'core', message: 'openai/m at http://x/v1 answers', fix: 'never shown' }] },
      { kind: 'feature', name: 'agent a', checks: [
        { name: 'browser executable', ok: true, kind: 'feature', message: '/usr/bin/chromium' },
        { name: 'browser headless launch', ok: true, kind: 'feature', message: 'Chrome/140 started headless' }] },
      { kind: 'optional', name: 'programs', checks: [{ name: 'git', ok: false, kind: 'optional', message: 'git not found on PATH', fix: 'apt-get install -y git' }] },
    ],
  };
  const v = UI.healthView(r);
  assert.equal(v.ok, false);
  assert.equal(v.count, 5);
  assert.equal(v.summary, 'degraded · 1 failing · 1 optional missing');
  assert.deepEqual(v.sections.map((s) => [s.kind, s.title]),
    [['core', 'Required'], ['feature', 'Required by enabled features'], ['optional', 'Optional']]);
  assert.deepEqual(v.sections[0].checks[0], { name: 'model: agent a', kind: 'core', ok: false, label: 'required', state: 'FAIL',
    message: 'model configured but unreachable: openai/m at http://127.0.0.1:9/v1: connection refused', fix: 'check the endpoint' });
  assert.equal(v.sections[0].checks[1].fix, '', 'a passing check shows no fix');
  assert.deepEqual(v.sections[1].checks.map((c) => [c.name, c.state, c.label]),
    [['agent a: browser executable', 'OK', 'feature'], ['agent a: browser headless launch', 'OK', 'feature']]);
  assert.deepEqual(v.sections[2].checks.map((c) => [c.name, c.state, c.label]), [['programs: git', 'WARN', 'optional']]);
});

test('healthView of a healthy report, an older flat answer and an empty one', () => {
  const ok = UI.healthView({ status: 'ok', ok: true, groups: [{ kind: 'optional', name: 'programs', checks: [{ name: 'npx', ok: false, kind: 'optional' }] }] });
  assert.equal(ok.ok, true);
  assert.equal(ok.summary, 'All required checks pass · 1 optional missing');
  const flat = UI.healthView({ status: 'degraded', checks: [{ name: 'agent x model', ok: false, fix: 'f' }, { name: 'tool sandbox: Landlock', ok: true, kind: 'optional' }] });
  assert.equal(flat.ok, false);
  assert.deepEqual(flat.sections.map((s) => [s.kind, s.checks.map((c) => c.name)]), [['core', ['agent x model']], ['optional', ['tool sandbox: Landlock']]]);
  const none = UI.healthView(null);
  assert.deepEqual([none.ok, none.count, none.sections], [false, 0, []]);
});

test('control-channel frames', () => {
  assert.deepEqual(UI.dialogFrame('d-1', 'list', 'assistant', 'c1'), { v: 1, type: 'dialog', id: 'd-1', op: 'list', agent: 'assistant', chat_id: 'c1' });
  assert.deepEqual(UI.dialogFrame('d-2', 'create', 'a', 'c', { title: ' Trip\n to Hangzhou ', dialogId: 'ignored' }),
    { v: 1, type: 'dialog', id: 'd-2', op: 'create', agent: 'a', chat_id: 'c', title: 'Trip to Hangzhou' });
  assert.deepEqual(UI.dialogFrame('d-3', 'create', 'a', 'c', { title: '   ' }), { v: 1, type: 'dialog', id: 'd-3', op: 'create', agent: 'a', chat_id: 'c' });
  for (const op of ['switch', 'archive', 'delete']) {
    assert.deepEqual(UI.dialogFrame('d-4', op, 'a', 'c', { dialogId: 'd_k3', title: 'x' }), { v: 1, type: 'dialog', id: 'd-4', op, agent: 'a', chat_id: 'c', dialog_id: 'd_k3' });
  }
  assert.deepEqual(UI.dialogFrame('d-5', 'rename', 'a', 'c', { dialogId: 'd_k3', title: 'New name' }),
    { v: 1, type: 'dialog', id: 'd-5', op: 'rename', agent: 'a', chat_id: 'c', dialog_id: 'd_k3', title: 'New name' });
  assert.throws(() => UI.dialogFrame('d-6', 'purge', 'a', 'c'), /unknown dialog op/);
  assert.deepEqual(UI.stopFrame('a', 'c1', 's-1'), { v: 1, type: 'stop', agent: 'a', chat_id: 'c1', id: 's-1' });
  assert.match(UI.newControlId(), /^d-/);
  assert.match(UI.newControlId('s'), /^s-/);
  assert.notEqual(UI.newControlId(), UI.newControlId());
  assert.equal(UI.cleanTitle('x'.repeat(300)).length, 200);
  assert.equal(UI.cleanTitle('\u{1F600}'.repeat(250)), '\u{1F600}'.repeat(200), 'characters, not UTF-16 units');
  assert.equal(UI.cleanTitle('a\u0000b'), 'a b');
});

test('dialogView marks the current dialog', () => {
  const list = [
    { id: 'web:a/c:d_2', dialog_id: 'd_2', title: 'Trip', last_message_at: '2025-01-02T00:00:00Z', archived: false },
    { id: 'web:a/c:default', dialog_id: 'default', title: 'hello', last_message_at: '2025-01-01T00:00:00Z', archived: false },
  ];
  let v = UI.dialogView('default', list);
  assert.equal(v.current, 'default');
  assert.equal(v.implicit, false);
  assert.deepEqual(v.rows.map((r) => [r.dialog_id, r.current]), [['d_2', false], ['default', true]]);
  // No current dialog (none chosen, or it was deleted): the most recent one gets the next message.
  v = UI.dialogView('', list);
  assert.equal(v.current, 'd_2');
  assert.equal(v.implicit, true);
  assert.deepEqual(v.rows.map((r) => r.current), [true, false]);
  // A current dialog missing from the list (archived) is shown on top, titled from what was seen before.
  v = UI.dialogView('d_old', list, { d_old: { dialog_id: 'd_old', title: 'Old', archived: true, id: 'web:a/c:d_old' } });
  assert.deepEqual(v.rows.map((r) => [r.dialog_id, r.current, r.title, !!r.archived]), [['d_old', true, 'Old', true], ['d_2', false, 'Trip', false], ['default', false, 'hello', false]]);
  v = UI.dialogView('d_new', []);
  assert.deepEqual(v.rows, [{ id: '', title: '', last_message_at: '', archived: false, dialog_id: 'd_new', current: true }]);
  assert.deepEqual(UI.dialogView('', null), { current: '', implicit: false, rows: [] });
  assert.deepEqual(UI.dialogView('', [null, { dialog_id: '' }, {}]).rows, []);
  assert.equal(UI.dialogLabel({ dialog_id: 'd_2', title: ' Trip ' }), 'Trip');
  assert.equal(UI.dialogLabel({ dialog_id: 'default', title: '' }), 'Default conversation');
  assert.equal(UI.dialogLabel({ dialog_id: 'd_9', title: '' }), 'd_9');
  assert.equal(UI.dialogLabel(null), '');
});

test('describeError explains every protocol error code', () => {
  for (const code of ['bad_request', 'unauthorized', 'forbidden', 'not_found', 'unknown_agent', 'unknown_session', 'unknown_dialog',
    'unknown_artifact', 'busy', 'stopped', 'too_large', 'rate_limited', 'no_model', 'internal']) {
    const d = UI.describeError(code, 'server text');
    assert.ok(d.title && !d.title.startsWith('Error ('), code);
  }
  assert.deepEqual(UI.describeError('no_model', 'Agent a has no usable model: set OPENAI_API_KEY'),
    { title: 'The agent has no model', message: 'Agent a has no usable model: set OPENAI_API_KEY', hint: 'Give it one (see Configuration → Health for the exact fix), then send again.' });
  assert.equal(UI.describeError('rate_limited', 'slow down', 2500).hint, 'Try again in 3 s.');
  assert.equal(UI.describeError('rate_limited', 'slow down').hint, 'Try again in 1 s.');
  assert.equal(UI.describeError('busy', '').title, 'Busy');
  assert.deepEqual(UI.describeError('stopped', 'stopped; what was done so far is kept'),
    { title: 'Stopped', message: 'What was done so far is kept', hint: '' }, 'neither the title nor the hint repeated');
  assert.equal(UI.describeError('busy', 'busy').message, 'busy', 'a message that is only the title stays');
  assert.equal(UI.describeError('stopped', '').hint, 'What was done so far is kept.');
  assert.equal(UI.describeError('internal', 'internal error').message, '', 'no empty detail');
  assert.equal(UI.describeError('teapot', 'short and stout').title, 'Error (teapot)');
  assert.equal(UI.describeError(undefined, undefined).title, 'Something went wrong on the gateway');
});

test('wsUrl, sessionIdFor, dialogOf', () => {
  assert.equal(UI.wsUrl({ protocol: 'http:', host: '127.0.0.1:8080' }), 'ws://127.0.0.1:8080/api/v1/ws');
  assert.equal(UI.wsUrl({ protocol: 'https:', host: 'bot.example' }, 'a b'), 'wss://bot.example/api/v1/ws?key=a%20b');
  assert.equal(UI.sessionIdFor('assistant', 'browser-1', 'default'), 'web:assistant/browser-1:default');
  assert.equal(UI.dialogOf('web:assistant/browser-1:d_k3x9'), 'd_k3x9');
  assert.equal(UI.dialogOf(''), '');
});

// ------------------------------------------------------------------ frames

const ev = (id, event, session = 'web:assistant/c1:default') => ({ v: 1, type: 'event', id, session, event });

test('a streamed turn with tools: tool blocks first, final replaces the stream', () => {
  let s = UI.initialState();
  const turn = UI.newTurn('c-1', 'Plan my week', { agent: 'assistant' });
  assert.deepEqual(UI.sendFrame(turn, 'c1'), { v: 1, type: 'send', id: 'c-1', agent: 'assistant', chat_id: 'c1', text: 'Plan my week' });
  s = UI.reduce(s, { type: 'send', turn });
  assert.equal(s.active, 'c-1');
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'ack', id: 'c-1' } });
  assert.equal(s.turns['c-1'].status, 'running');
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'delta', text: 'Let me ' }) });
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'delta', text: 'check.' }) });
  assert.equal(s.turns['c-1'].stream, 'Let me check.');
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'tool_call', call_id: 'call_1', name: 'web_fetch', arguments: '{"url":"https://x"}' }) });
  let t = s.turns['c-1'];
  assert.equal(t.stream, '', 'text streamed before a tool call moves above the tools');
  assert.deepEqual(t.items.map((x) => x.type), ['interim', 'tool']);
  assert.equal(t.items[1].hasResult, false);
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'tool_result', call_id: 'call_1', name: 'web_fetch', content: 'boom', is_error: true }) });
  t = s.turns['c-1'];
  assert.deepEqual([t.items[1].hasResult, t.items[1].isError, t.items[1].content], [true, true, 'boom']);
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'usage', input_tokens: 10, output_tokens: 3 }) });
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'usage', input_tokens: 5, output_tokens: 2 }) });
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'delta', text: 'Here is your wek' }) });
  s = UI.reduce(s, { type: 'frame', frame: ev('c-1', { kind: 'final', text: 'Here is your week.' }) });
  t = s.turns['c-1'];
  assert.equal(t.final, 'Here is your week.');
  assert.equal(t.stream, '');
  assert.deepEqual(t.usage, { input: 15, output: 5 });
  assert.equal(s.active, 'c-1', 'still running until done');
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-1', session: 'web:assistant/c1:default' } });
  t = s.turns['c-1'];
  assert.equal(t.done, true);
  assert.equal(t.status, 'done');
  assert.equal(t.session, 'web:assistant/c1:default');
  assert.equal(s.active, null, 'done re-enables sending');
});

test('command, error and stopped turns', () => {
  let s = UI.initialState();
  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-2', '/new', { agent: 'a', quiet: true }) });
  assert.equal(s.turns['c-2'].command, 'new');
  s = UI.reduce(s, { type: 'frame', frame: ev('c-2', { kind: 'command', text: 'Started a new conversation (d_k3x9qa2m).' }) });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-2' } });
  assert.deepEqual(s.turns['c-2'].commands, ['Started a new conversation (d_k3x9qa2m).']);
  assert.equal(s.turns['c-2'].status, 'done');
  // A notice of the runtime (a budget nearly spent) shows as a note of its turn.
  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-n', 'hi', { agent: 'a' }) });
  s = UI.reduce(s, { type: 'frame', frame: ev('c-n', { kind: 'notice', text: "80% of today's model budget is used." }) });
  assert.deepEqual(s.turns['c-n'].commands, ["80% of today's model budget is used."]);
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-n' } });

  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-3', 'hi', { agent: 'a' }) });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'error', id: 'c-3', code: 'no_model', message: 'Agent a has no usable model: set OPENAI_API_KEY' } });
  assert.equal(s.active, 'c-3', 'an error is followed by done');
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-3' } });
  assert.equal(s.turns['c-3'].status, 'error');
  assert.deepEqual(s.turns['c-3'].errors, [{ code: 'no_model', message: 'Agent a has no usable model: set OPENAI_API_KEY' }]);
  assert.equal(s.active, null);

  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-4', 'long job', { agent: 'a' }) });
  s = UI.reduce(s, { type: 'frame', frame: ev('c-4', { kind: 'delta', text: 'Working' }) });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'error', id: 'c-4', code: 'stopped', message: 'stopped; what was done so far is kept' } });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-4' } });
  assert.equal(s.turns['c-4'].status, 'stopped');
  assert.equal(s.turns['c-4'].stream, 'Working', 'partial text is kept');
  assert.deepEqual(UI.stopFrame('a', 'c1'), { v: 1, type: 'stop', agent: 'a', chat_id: 'c1' });

  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-5', 'again', { agent: 'a' }) });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'error', id: 'c-5', code: 'rate_limited', message: 'rate limit', retry_after_ms: 1500 } });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-5' } });
  assert.deepEqual(s.turns['c-5'].errors, [{ code: 'rate_limited', message: 'rate limit', retryAfterMs: 1500 }]);
});

test('attachments of tool results and final answers', () => {
  let t = UI.newTurn('c-9', 'screenshot please');
  t = UI.reduceTurn(t, ev('c-9', { kind: 'tool_call', call_id: 'call_1', name: 'browser', arguments: '{"action":"screenshot"}' }));
  t = UI.reduceTurn(t, ev('c-9', { kind: 'tool_result', call_id: 'call_1', name: 'browser', content: 'saved',
    attachments: [{ id: 'art1', name: 'page.png', media_type: 'image/png' }] }));
  assert.deepEqual(t.items[0].attachments, [{ name: 'page.png', url: '/api/v1/artifacts/art1', image: true }]);
  t = UI.reduceTurn(t, ev('c-9', { kind: 'final', text: 'Here it is.', attachments: [{ id: 'art2', name: 'page.pdf', media_type: 'application/pdf' }] }));
  assert.deepEqual(t.attachments, [{ name: 'page.pdf', url: '/api/v1/artifacts/art2', image: false }]);
  t = UI.reduceTurn(t, ev('c-9', { kind: 'tool_result', call_id: 'call_2', name: 'x', content: 'no files' }));
  assert.deepEqual(t.items[1].attachments, []);
});

test('frames for unknown ids, errors without id, unknown kinds', () => {
  let s = UI.initialState();
  const same = UI.reduce(s, { type: 'frame', frame: ev('nope', { kind: 'delta', text: 'x' }) });
  assert.equal(same, s);
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'error', code: 'bad_request', message: 'frame is not valid JSON' } });
  assert.deepEqual(s.notices, [{ code: 'bad_request', message: 'frame is not valid JSON' }]);
  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-5', 'x') });
  const before = s.turns['c-5'];
  s = UI.reduce(s, { type: 'frame', frame: ev('c-5', { kind: 'compressed', text: 'whatever' }) });
  assert.equal(s.turns['c-5'].stream, before.stream);
  assert.equal(UI.reduce(s, { type: 'frame', frame: null }), s);
  assert.equal(UI.reduce(s, { type: 'frame', frame: { type: 'mystery', id: 'c-5' } }), s);
});

test('a tool_result without a matching call still shows', () => {
  let t = UI.newTurn('c-6', 'x');
  t = UI.reduceTurn(t, ev('c-6', { kind: 'tool_result', call_id: 'call_9', name: 'shell', content: 'ok' }));
  assert.equal(t.items.length, 1);
  assert.equal(t.items[0].name, 'shell');
  assert.equal(t.items[0].hasResult, true);
});

test('a dropped connection interrupts running turns; clear keeps them', () => {
  let s = UI.initialState();
  s = UI.reduce(s, { type: 'conn', state: 'open' });
  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-7', 'a') });
  s = UI.reduce(s, { type: 'frame', frame: { v: 1, type: 'done', id: 'c-7' } });
  s = UI.reduce(s, { type: 'send', turn: UI.newTurn('c-8', 'b') });
  const kept = UI.reduce(s, { type: 'clear' });
  assert.deepEqual(kept.order, ['c-8']);
  s = UI.reduce(s, { type: 'conn', state: 'closed' });
  assert.equal(s.conn, 'closed');
  assert.equal(s.active, null);
  assert.equal(s.turns['c-8'].status, 'interrupted');
  assert.equal(s.turns['c-7'].status, 'done');
});

// ------------------------------------------------------------------ history

test('starterPrompts show off the tools the agent has, and end asking what it can do', () => {
  assert.deepEqual(UI.starterPrompts(undefined), ['What can you do?']);
  assert.deepEqual(UI.starterPrompts(['calculator', 'web_fetch']), ['What is 1234 * 5678?', 'Summarise https://example.com', 'What can you do?']);
  const all = UI.starterPrompts(['web_fetch', 'memory_store', 'bash', 'calculator']);
  assert.equal(all.length, 4, 'three tools at most, then the question');
  assert.equal(all[3], 'What can you do?');
});

test('historyToTurns groups messages into turns like live ones', () => {
  const msgs = [
    { seq: 1, role: 'user', content: 'weather?', created_at: '2025-01-01T00:00:00Z' },
    { seq: 2, role: 'assistant', content: 'Checking.', tool_calls: [{ id: 'call_1', name: 'web_fetch', arguments: '{"url":"https://w"}' }] },
    { seq: 3, role: 'tool', content: 'sunny ![map](/api/v1/artifacts/m.png)', tool_call_id: 'call_1', name: 'web_fetch' },
    { seq: 4, role: 'assistant', content: 'It is **sunny**.', usage: { input_tokens: 120, output_tokens: 9 } },
    { seq: 5, role: 'system', content: 'Summary of earlier talk' },
    { seq: 6, role: 'user', content: 'thanks' },
    { seq: 7, role: 'tool', content: 'orphan', tool_call_id: 'call_x', name: 'shell', is_error: true },
  ];
  const turns = UI.historyToTurns(msgs);
  assert.equal(turns.length, 3);
  assert.equal(turns[0].text, 'weather?');
  assert.equal(turns[0].done, true);
  assert.deepEqual(turns[0].items.map((x) => x.type), ['interim', 'tool']);
  assert.equal(turns[0].items[1].content, 'sunny ![map](/api/v1/artifacts/m.png)');
  assert.equal(turns[0].final, 'It is **sunny**.');
  assert.deepEqual(turns[0].usage, { input: 120, output: 9 }, 'the stored tokens, as the live turn showed them');
  assert.equal(turns[1].quiet, true);
  assert.deepEqual(turns[1].commands, ['Summary of earlier talk']);
  assert.equal(turns[2].text, 'thanks');
  assert.equal(turns[2].items[0].isError, true);
  assert.equal(turns[2].final, null);
  assert.equal(turns[2].usage, null, 'no answer, no token line');
  // A window that starts mid-turn opens a turn without a user message.
  const mid = UI.historyToTurns([{ seq: 9, role: 'assistant', content: 'tail' }]);
  assert.equal(mid[0].quiet, true);
  assert.equal(mid[0].final, 'tail');
  assert.deepEqual(UI.historyToTurns(null), []);
  // A stopped turn comes back stopped, without the stored marker.
  const stopped = UI.historyToTurns([
    { seq: 1, role: 'user', content: 'long story' },
    { seq: 2, role: 'assistant', content: 'Once upon\n\n[stopped]\n\n![map](/api/v1/artifacts/m.png)' },
    { seq: 3, role: 'user', content: 'again' },
    { seq: 4, role: 'assistant', content: '[stopped]' },
    { seq: 5, role: 'user', content: 'quote' },
    { seq: 6, role: 'assistant', content: 'They wrote "[stopped]" there.' },
  ]);
  assert.equal(stopped[0].final, 'Once upon\n\n![map](/api/v1/artifacts/m.png)');
  assert.equal(stopped[0].status, 'stopped');
  assert.deepEqual(stopped[0].errors.map((e) => e.code), ['stopped']);
  assert.equal(stopped[1].final, '');
  assert.equal(stopped[1].status, 'stopped');
  assert.equal(stopped[2].final, 'They wrote "[stopped]" there.');
  assert.equal(stopped[2].status, 'done');
  // A turn that failed comes back with the error its client was told.
  const failed = UI.historyToTurns([
    { seq: 1, role: 'user', content: 'summarise', error: { code: 'model_rejected', message: 'the model refused the request (HTTP 400): too long' } },
    { seq: 2, role: 'user', content: 'shorter then' },
    { seq: 3, role: 'assistant', content: 'Done.' },
  ]);
  assert.equal(failed[0].status, 'error');
  assert.deepEqual(failed[0].errors, [{ code: 'model_rejected', message: 'the model refused the request (HTTP 400): too long' }]);
  assert.equal(failed[0].final, null);
  assert.equal(failed[1].status, 'done');
  assert.deepEqual(failed[1].errors, []);
});

// ------------------------------------------------------------------ files

test('ui-core.js also works as a browser script (global PicoBotUI)', () => {
  const src = readFileSync(new URL('./ui-core.js', import.meta.url), 'utf8');
  const ctx = { window: {} };
  ctx.globalThis = ctx;
  vm.createContext(ctx);
  vm.runInContext(src, ctx);
  assert.equal(typeof ctx.PicoBotUI.renderMarkdown, 'function');
});

test('index.html has the documented ids and loads only local files', () => {
  const html = readFileSync(new URL('./index.html', import.meta.url), 'utf8');
  for (const id of ['agent-select', 'messages', 'input', 'send', 'stop', 'sessions', 'sessions-status', 'new-dialog', 'banner', 'health-tab', 'health',
    'compact-dialog', 'info-dialog', 'dump-dialog', 'confirm-dialog', 'confirm-ok', 'confirm-cancel', 'conn-status', 'chat-view', 'config-view', 'canvas-queue']) {
    assert.match(html, new RegExp(`id="${id}"`), id);
  }
  assert.ok(!/(src|href)="(https?:)?\/\//.test(html), 'no external resources');
  assert.ok(!/<script(?![^>]*\ssrc=)[^>]*>/.test(html), 'no inline script');
  assert.ok(!/\son[a-z]+=/i.test(html), 'no inline event handlers');
  assert.ok(!/\sstyle=/i.test(html), 'no inline styles');
  const csp = /<meta http-equiv="Content-Security-Policy" content="([^"]+)">/.exec(html);
  assert.ok(csp, 'index.html declares a Content-Security-Policy');
  assert.match(csp[1], /default-src 'none'/);
  assert.match(csp[1], /script-src 'self'(;|$)/);
  assert.ok(!/unsafe-inline|unsafe-eval/.test(csp[1]), 'no unsafe-* sources');
  // Every label points at a control that exists; every button has a type.
  for (const m of html.matchAll(/<label for="([^"]+)"/g)) assert.match(html, new RegExp(`id="${m[1]}"`), 'label for ' + m[1]);
  for (const m of html.matchAll(/<button\b[^>]*>/g)) assert.match(m[0], /type="(button|submit)"/, m[0]);
  assert.ok(html.indexOf('ui-core.js') < html.indexOf('app.js'), 'ui-core.js loads first');
  const app = readFileSync(new URL('./app.js', import.meta.url), 'utf8');
  for (const m of app.matchAll(/\.innerHTML = ([^;]+);/g)) {
    assert.match(m[1], /^UI\.render(Markdown|Plain)\(|^html$/, `innerHTML only from the escaping renderers: ${m[1]}`);
  }
});

test('approval events become an approval item that its result closes', () => {
  let t = UI.newTurn('c-a', 'run it');
  t = UI.reduceTurn(t, ev('c-a', { kind: 'tool_call', call_id: 'call_1', name: 'exec', arguments: '{"command":"make"}' }));
  t = UI.reduceTurn(t, ev('c-a', { kind: 'approval', code: 'K7Q2', name: 'exec', command: 'make', reason: 'ask: always', timeout_ms: 120000 }));
  assert.deepEqual(t.items[1], { type: 'approval', code: 'K7Q2', tool: 'exec', command: 'make', reason: 'ask: always', timeoutMs: 120000, outcome: '' });
  t = UI.reduceTurn(t, ev('c-a', { kind: 'approval_result', code: 'OTHR', outcome: 'approved' }));
  assert.equal(t.items[1].outcome, '', 'another code changes nothing');
  t = UI.reduceTurn(t, ev('c-a', { kind: 'approval_result', code: 'K7Q2', outcome: 'timed_out' }));
  assert.equal(t.items[1].outcome, 'timed_out');
  assert.equal(UI.approvalOutcomeText('timed_out'), 'No answer in time: the command was refused.');
});

test('approveFrame', () => {
  assert.deepEqual(UI.approveFrame('assistant', 'tab', 'K7Q2', 'deny', 'a-1'),
    { v: 1, type: 'approve', agent: 'assistant', chat_id: 'tab', code: 'K7Q2', decision: 'deny', id: 'a-1' });
  assert.throws(() => UI.approveFrame('assistant', 'tab', 'K7Q2', 'maybe'), /unknown decision/);
});

test('an image already shown under a tool card is a link in the answer', () => {
  const md = 'Here: ![chart](/api/v1/artifacts/c1) and ![other](/api/v1/artifacts/c2)';
  const html = UI.renderMarkdown(md, { shown: new Set(['/api/v1/artifacts/c1']) });
  assert.equal((html.match(/<img /g) || []).length, 1, html);
  assert.match(html, /<a class="artifact-link" href="\/api\/v1\/artifacts\/c1"[^>]*>chart<\/a>/);
  assert.match(html, /<img class="artifact-img" src="\/api\/v1\/artifacts\/c2"/);
  assert.equal((UI.renderMarkdown(md).match(/<img /g) || []).length, 2, 'both images without shown');
});

// ------------------------------------------------------------------ attachments

test('checkUpload refuses what the gateway would, in its words', () => {
  assert.equal(UI.checkUpload('a.txt', 'text/plain', 12), '');
  assert.equal(UI.checkUpload('a.txt', 'text/plain', 0), 'a.txt is empty');
  assert.equal(UI.checkUpload('big.zip', 'application/zip', UI.MAX_UPLOAD_BYTES + 1), 'big.zip is 10 MiB; a file may be at most 10 MiB');
  assert.equal(UI.checkUpload('big.png', 'image/png', 4 << 20), 'big.png is 4 MiB; an image may be at most 3.75 MiB (what the model APIs accept)');
  assert.equal(UI.checkUpload('big.svg', 'image/svg+xml', 4 << 20), '', 'only images the model sees have the smaller limit');
  assert.equal(UI.uploadPath('assistant', 'browser-1', 'my notes.md', 'text/markdown'),
    '/api/v1/uploads?agent=assistant&chat_id=browser-1&name=my+notes.md&media_type=text%2Fmarkdown');
});

test('a send frame names its files; the stored message gives them back', () => {
  const files = [{ id: 'a1', name: 'cat.png', url: '/api/v1/artifacts/a1', image: true }];
  const turn = UI.newTurn('c-1', 'what is this?', { agent: 'assistant', files });
  assert.deepEqual(UI.sendFrame(turn, 'chat').files, ['a1']);
  assert.equal(UI.sendFrame(UI.newTurn('c-2', 'hi', {}), 'chat').files, undefined);

  const stored = 'what is this?\n\n![cat.png](/api/v1/artifacts/a1) (in the workspace: uploads/cat.png)\n' +
    '[notes.md](/api/v1/artifacts/a%2F2) (in the workspace: uploads/notes.md)\n(gone.txt could not be read: not found)';
  assert.deepEqual(UI.splitUserFiles(stored), { text: 'what is this?', files: [
    { id: 'a1', name: 'cat.png', url: '/api/v1/artifacts/a1', image: true },
    { id: 'a/2', name: 'notes.md', url: '/api/v1/artifacts/a%2F2', image: false }] });
  assert.deepEqual(UI.splitUserFiles('![x.png](/api/v1/artifacts/b1) (in the workspace: uploads/x.png)').text, '');
  // A link the user typed at the end of their text is text.
  assert.deepEqual(UI.splitUserFiles('see\n[a](/api/v1/artifacts/b1)'), { text: 'see\n[a](/api/v1/artifacts/b1)', files: [] });
  const [t] = UI.historyToTurns([{ role: 'user', content: stored, seq: 1 }, { role: 'assistant', content: 'A cat.', seq: 2 }]);
  assert.equal(t.text, 'what is this?');
  assert.equal(t.files.length, 2);
  assert.equal(t.final, 'A cat.');
});

// ------------------------------------------------------------------ canvas action queue

test('queueAction keeps click order and refuses past the bound', () => {
  const act = (i) => ({ text: '[canvas action] ' + i, agent: 'assistant', session: 's1' });
  let q = [];
  for (let i = 0; i < UI.MAX_QUEUED_ACTIONS; i++) {
    const r = UI.queueAction(q, act(i));
    assert.ok(r.queued, 'action ' + i);
    q = r.queue;
  }
  assert.equal(UI.MAX_QUEUED_ACTIONS, 20);
  assert.deepEqual(q.map((a) => a.text), Array.from({ length: 20 }, (_, i) => '[canvas action] ' + i));
  const full = UI.queueAction(q, act(20));
  assert.equal(full.queued, false);
  assert.equal(full.queue, q, 'a refused action leaves the queue as it was');
  assert.equal(q.length, 20);
  const small = UI.queueAction([act(0)], act(1), 1);
  assert.equal(small.queued, false, 'the bound may be given');
  const before = [act(0)];
  UI.queueAction(before, act(1));
  assert.equal(before.length, 1, 'the queue given is not changed');
  assert.match(UI.actionQueueFullText(), /not sent: 20 canvas actions are already waiting/);
});

test('nextAction sends the first action once ready, one at a time, in order', () => {
  const ctx = { agent: 'assistant', session: 's1' };
  const q = [
    { text: 'a', agent: 'assistant', session: 's1' },
    { text: 'b', agent: 'assistant', session: 's1' },
  ];
  let r = UI.nextAction(q, Object.assign({ ready: false }, ctx));
  assert.equal(r.action, null, 'nothing is sent while a reply runs or offline');
  assert.deepEqual(r.queue.map((a) => a.text), ['a', 'b']);
  assert.deepEqual(r.dropped, []);
  r = UI.nextAction(r.queue, Object.assign({ ready: true }, ctx));
  assert.equal(r.action.text, 'a');
  assert.deepEqual(r.queue.map((a) => a.text), ['b']);
  r = UI.nextAction(r.queue, Object.assign({ ready: true }, ctx));
  assert.equal(r.action.text, 'b');
  assert.deepEqual(r.queue, []);
  r = UI.nextAction(r.queue, Object.assign({ ready: true }, ctx));
  assert.equal(r.action, null);
});

test('nextAction drops the actions of another conversation or agent', () => {
  const q = [
    { text: 'old', agent: 'assistant', session: 's1' },
    { text: 'first chat', agent: 'assistant', session: '' },
    { text: 'other agent', agent: 'planner', session: '' },
    { text: 'new', agent: 'assistant', session: 's2' },
  ];
  const r = UI.nextAction(q, { agent: 'assistant', session: 's2', ready: false });
  assert.deepEqual(r.dropped.map((a) => a.text), ['old', 'other agent'], 'dropped even while not ready');
  assert.deepEqual(r.queue.map((a) => a.text), ['first chat', 'new'], 'an action clicked before the conversation had an id stays');
  const gone = UI.nextAction([q[0]], { agent: 'assistant', session: '', ready: true });
  assert.equal(gone.action, null, 'the conversation shown has no id: a known one was left');
  assert.equal(gone.dropped.length, 1);
  assert.match(UI.actionsDroppedText(1), /^1 queued canvas action was not sent: the conversation it was clicked in is no longer the current one\.$/);
  assert.match(UI.actionsDroppedText(3), /^3 queued canvas actions were not sent: the conversation they were clicked in/);
});

test('actionQueueText says how many actions wait, and for what', () => {
  assert.equal(UI.actionQueueText(0, false), '');
  assert.equal(UI.actionQueueText(1, false), '1 canvas action is queued: sent when the reply ends, one after another.');
  assert.equal(UI.actionQueueText(2, true), '2 canvas actions are queued: sent once the connection is back.');
});
