/*
 * PicoBot web UI — DOM wiring. The pure parts (markdown, reducer, history
 * grouping, ids) live in ui-core.js (global PicoBotUI), loaded first.
 * Protocol: docs/protocol.md (version 1). No framework, no build step, no
 * external resources.
 *
 * Stable element ids and classes (browser tests may rely on them):
 *
 *   #agent-select        <select> of agents (GET /api/v1/agents)
 *   #agent-model         the chosen agent's model ("provider / model")
 *   #banner              warning/error banner; shows the agent's `message`
 *                        when it is not ready (e.g. NoModelConfigured); hidden otherwise
 *   #auth-form, #api-key shown when the gateway answers 401 (key kept in localStorage)
 *   #conn-status         connection state; attribute data-state =
 *                        "connecting" | "open" | "closed" | "auth"
 *   #messages            the conversation (role="log")
 *     .turn              one send and its answer; data-turn-id, data-status =
 *                        sending|running|done|error|stopped|interrupted
 *     .msg.user          the user's message
 *     .msg.assistant     the answer bubble; aria-busy="true" while streaming,
 *                        class .streaming while deltas arrive
 *       .activity        tool calls etc., always before .content
 *         .interim       text the model streamed before calling tools
 *         .tool-item     wrapper of one call: details.tool-call + .tool-media
 *           .tool-call   <details> per tool call; classes .pending (no result yet),
 *                        .error (is_error); data-call-id, data-tool
 *             .tool-name, .tool-args (summary), .tool-status,
 *             .tool-args-full, .tool-result (<pre> in the body)
 *           .tool-media  artifact images of the result, visible when collapsed
 *       .content         the answer (markdown rendered safely)
 *       .typing          "thinking" indicator while waiting
 *       .usage           token counts after the turn
 *     .msg.system        command replies (`command` events) and notes
 *       .attachments     files attached to the answer (event `attachments`)
 *     .msg.error         `error` frames (data-code) and failed operations:
 *                        .error-title, .error-message, .error-hint (and a
 *                        .error-action button to the Health page for no_model);
 *                        .stopped for code "stopped", .interrupted when the
 *                        connection dropped mid-turn
 *     .empty-state       shown when the dialog has no messages
 *     img.artifact-img   inline image of an /api/v1/artifacts/... url
 *     a.artifact-file    link to a non-image artifact (a download)
 *   #input               message textarea (Enter sends, Shift+Enter new line,
 *                        Escape stops a running turn); slash commands typed
 *                        here go to the runtime as messages
 *   #attach, #file-input the Attach button and its file picker; files pasted
 *                        into #input or dropped on #chat-view (class
 *                        .dropping while dragged over) upload too
 *   #pending-files       the files to send with the next message:
 *                        li.pending-file[data-name] .uploading|.ready|.error
 *                        with .pending-state (size, or why it was refused)
 *                        and button.pending-remove
 *     .msg.user .msg-files  the files a message carried
 *   #send, #stop         buttons; #send is disabled while a turn runs or offline,
 *                        #stop is enabled only while a turn runs
 *   #composer-hint       short feedback under the input (empty when idle; then
 *                        .composer-idle shows the keyboard help)
 *   #canvas-queue        in the canvas panel: how many canvas actions (A2UI
 *                        button clicks) wait for the running reply to end,
 *                        data-count = that number; hidden when none do
 *     .msg.system.actions-dropped  notice of queued canvas actions dropped
 *                        because the conversation shown changed
 *   #sessions            <ul> of the chat's dialogs (control channel `list`);
 *                        each li.session-row[data-dialog-id] holds
 *                        button.session (switch) and .session-actions with
 *                        button.session-rename / .session-archive /
 *                        .session-delete; the current row and its button have
 *                        class .current, the button aria-current="true".
 *                        Renaming shows form.rename-form > input.rename-input.
 *   #session-search      search box of the conversation list (GET /api/v1/search);
 *                        while it holds a query #search-results replaces
 *                        #sessions: li > button.search-hit[data-dialog-id]
 *                        [data-seq] with .search-hit-title and
 *                        .search-hit-snippet (or li.search-empty); a click
 *                        opens the conversation at the message (.turn.found)
 *   #sessions-status     outcome of the last dialog operation (role=status)
 *   #new-dialog          control channel `create`; rename/archive/delete/switch
 *                        are control-channel operations too
 *   #info-dialog, #compact-dialog, #dump-dialog
 *                        send /info, /compact, /dump
 *   #confirm-dialog      modal <dialog> confirming a delete (#confirm-ok,
 *                        #confirm-cancel)
 *   #chat-id             this browser's chat id
 *   #sidebar, #sidebar-toggle   conversations sidebar (a drawer on small screens)
 *   #chat-tab, #health-tab      view tabs; #chat-view, #config-view their panels
 *   #health              the health checks (GET /api/v1/health), one
 *                        section.health-kind[data-kind] per kind (core,
 *                        feature, optional), each .check[data-kind] .ok /
 *                        .check.warn (a failed optional one) /
 *                        .check.fail with .check-name, .check-state,
 *                        .check-message, .check-fix
 *   #health-summary, #health-refresh, #agents-info
 *   #agent-config        form of the chosen agent's configuration
 *                        (GET/PUT /api/v1/config/agents/{name});
 *                        data-editable "true" in embedded mode: #cfg-provider,
 *                        #cfg-model, #cfg-base-url, #cfg-api-key, #cfg-profile,
 *                        #cfg-allow, #cfg-deny, #cfg-save; #cfg-status says
 *                        how a save went (.ok / .fail), #cfg-edit where the
 *                        configuration lives (code.cfg-kubectl in cluster mode)
 *
 * URL parameters: ?agent=NAME preselects an agent; ?key=KEY stores the API key
 * (then removed from the address bar). #health opens the health view.
 * localStorage: picobot.chatId, picobot.agent, picobot.apiKey.
 */
(function () {
  'use strict';

  const UI = window.PicoBotUI;
  if (!UI) {
    document.body.textContent = 'PicoBot: ui-core.js did not load.';
    return;
  }
  const canvas = window.PicoBotCanvas || null; // the canvas panel (canvas.js; docs/canvas.md)

  // ------------------------------------------------------------ helpers

  const $ = (id) => document.getElementById(id);
  const els = {
    app: $('app'),
    agentSelect: $('agent-select'),
    agentModel: $('agent-model'),
    banner: $('banner'),
    authForm: $('auth-form'),
    apiKey: $('api-key'),
    conn: $('conn-status'),
    messages: $('messages'),
    composer: $('composer'),
    input: $('input'),
    send: $('send'),
    stop: $('stop'),
    hint: $('composer-hint'),
    sessions: $('sessions'),
    sessionsStatus: $('sessions-status'),
    newDialog: $('new-dialog'),
    compactDialog: $('compact-dialog'),
    infoDialog: $('info-dialog'),
    dumpDialog: $('dump-dialog'),
    confirm: $('confirm-dialog'),
    confirmTitle: $('confirm-title'),
    confirmText: $('confirm-text'),
    confirmOk: $('confirm-ok'),
    chatId: $('chat-id'),
    sidebar: $('sidebar'),
    sidebarToggle: $('sidebar-toggle'),
    sidebarBackdrop: $('sidebar-backdrop'),
    chatTab: $('chat-tab'),
    healthTab: $('health-tab'),
    chatView: $('chat-view'),
    configView: $('config-view'),
    health: $('health'),
    healthSummary: $('health-summary'),
    healthRefresh: $('health-refresh'),
    agentsInfo: $('agents-info'),
    attach: $('attach'),
    fileInput: $('file-input'),
    pendingFiles: $('pending-files'),
    search: $('session-search'),
    cfgForm: $('agent-config'),
    cfgName: $('agent-config-name'),
    cfgMode: $('agent-config-mode'),
    cfgProvider: $('cfg-provider'),
    cfgModel: $('cfg-model'),
    cfgBaseURL: $('cfg-base-url'),
    cfgKey: $('cfg-api-key'),
    cfgProfile: $('cfg-profile'),
    cfgAllow: $('cfg-allow'),
    cfgDeny: $('cfg-deny'),
    cfgSave: $('cfg-save'),
    cfgStatus: $('cfg-status'),
    cfgEdit: $('cfg-edit'),
    searchResults: $('search-results'),
    canvasQueue: $('canvas-queue'),
  };

  /** h builds an element; string children become text nodes (never HTML). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c == null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const storage = {
    get(k) { try { return window.localStorage.getItem(k); } catch (_) { return null; } },
    set(k, v) { try { window.localStorage.setItem(k, v); } catch (_) { /* private mode */ } },
    del(k) { try { window.localStorage.removeItem(k); } catch (_) { /* private mode */ } },
  };

  const K_CHAT = 'picobot.chatId';
  const K_AGENT = 'picobot.agent';
  const K_KEY = 'picobot.apiKey';

  function initChatId() {
    let id = storage.get(K_CHAT);
    if (!UI.isValidChatId(id)) {
      id = UI.newChatId();
      storage.set(K_CHAT, id);
    }
    return id;
  }

  function initKey() {
    const url = new URL(window.location.href);
    const k = url.searchParams.get('key');
    if (k) {
      storage.set(K_KEY, k);
      url.searchParams.delete('key');
      try { window.history.replaceState(null, '', url.pathname + url.search + url.hash); } catch (_) { /* ignore */ }
      return k;
    }
    return storage.get(K_KEY) || '';
  }

  function relTime(iso) {
    const t = Date.parse(iso);
    if (!Number.isFinite(t) || t <= 0) return '';
    const s = Math.round((Date.now() - t) / 1000);
    if (s < 45) return 'just now';
    if (s < 3600) return Math.round(s / 60) + ' min ago';
    if (s < 86400) return Math.round(s / 3600) + ' h ago';
    if (s < 7 * 86400) return Math.round(s / 86400) + ' d ago';
    return new Date(t).toLocaleDateString();
  }

  // ------------------------------------------------------------ state

  const chatId = initChatId();
  let apiKey = initKey();
  const params = new URLSearchParams(window.location.search);

  const app = {
    state: UI.initialState(),
    agents: [],
    agentsError: null,
    agent: '',
    sessions: [],          // rows of UI.dialogView: the list as shown
    known: {},             // dialog id → dialog last seen (titles of archived ones)
    currentDialog: '',
    currentImplicit: false, // no current dialog: the most recent one gets the next message
    currentSessionId: '',
    renaming: '',          // dialog id whose title is being edited
    renameDraft: '',       // the title typed so far (kept when the list is redrawn)
    renameStart: false,    // the rename field still has to take focus
    opBusy: false,         // a dialog operation is in flight
    pending: new Map(),    // control/stop frame id → {resolve, reject, timer}
    sessionsToken: 0,
    historyToken: 0,
    ws: null,
    everOpened: false,
    retry: 0,
    retryTimer: null,
    retryAt: 0,
    countdown: null,
    authNeeded: false,
    needsReload: false,
    turnEls: new Map(), // live turn id → render record
    noticeCount: 0,
    atBottom: true,        // the conversation is scrolled to its end
    uploads: [],           // files to send with the next message: {key, name, size, status, error, file}
    searchToken: 0,
    searchTimer: null,
    actions: [],           // canvas actions waiting to be sent: {text, agent, session} (UI.queueAction)
    actionHolds: 0,        // loads under way that may change the conversation: the queue waits for them
    drainTimer: null,
  };

  // ------------------------------------------------------------ REST

  async function api(path) {
    const headers = { Accept: 'application/json' };
    if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
    let res;
    try {
      res = await fetch(path, { headers, cache: 'no-store' });
    } catch (e) {
      const err = new Error('The gateway cannot be reached.');
      err.status = 0;
      throw err;
    }
    let body = null;
    try { body = await res.json(); } catch (_) { body = null; }
    if (!res.ok) {
      const e = body && body.error;
      const err = new Error((e && e.message) || ('HTTP ' + res.status));
      err.status = res.status;
      err.code = e && e.code;
      if (res.status === 401) needAuth();
      throw err;
    }
    return body || {};
  }

  // ------------------------------------------------------------ auth

  function needAuth() {
    if (app.authNeeded) return;
    app.authNeeded = true;
    clearTimeout(app.retryTimer);
    if (app.ws) { const ws = app.ws; app.ws = null; try { ws.close(); } catch (_) { /* ignore */ } }
    rejectPending();
    dispatch({ type: 'conn', state: 'closed' });
    setConn('auth');
    if (app.agents.length === 0) els.agentSelect.replaceChildren(h('option', { value: '' }, '—'));
    els.authForm.hidden = false;
    const label = els.authForm.querySelector('label');
    label.textContent = apiKey ? 'The API key was refused; enter the right one.' : 'This gateway needs an API key.';
    renderBanner();
    updateControls();
    els.apiKey.focus();
  }

  els.authForm.addEventListener('submit', (e) => {
    e.preventDefault();
    const k = els.apiKey.value.trim();
    if (!k) return;
    apiKey = k;
    storage.set(K_KEY, k);
    els.apiKey.value = '';
    els.authForm.hidden = true;
    app.authNeeded = false;
    app.retry = 0;
    loadAgents();
    connect();
  });

  // ------------------------------------------------------------ banner, agents

  function renderBanner() {
    const b = els.banner;
    b.replaceChildren();
    b.className = 'banner';
    if (app.authNeeded) { b.hidden = true; return; }
    if (app.agentsError) {
      b.classList.add('error');
      b.append(h('strong', null, 'Cannot load agents. '), app.agentsError);
      b.hidden = false;
      return;
    }
    if (app.agents.length === 0) {
      b.hidden = true;
      return;
    }
    const a = app.agents.find((x) => x.name === app.agent);
    if (!a) {
      b.classList.add('warn');
      b.append(h('strong', null, 'No agent selected. '), 'Pick an agent above.');
      b.hidden = false;
      return;
    }
    if (a.ready && a.model) { b.hidden = true; return; }
    b.classList.add('warn');
    b.dataset.reason = a.reason || '';
    b.append(
      h('strong', null, 'Agent “' + a.name + '” is not ready' + (a.reason ? ' (' + a.reason + ')' : '') + '. '),
      h('span', { class: 'banner-message' }, a.message || a.reason || 'The agent cannot answer yet.'),
      h('span', { class: 'banner-note' }, ' Slash commands such as /help still work. '),
      h('a', { href: '#health', class: 'banner-link' }, 'Configuration → Health'),
    );
    b.hidden = false;
  }

  function renderAgentModel() {
    const a = app.agents.find((x) => x.name === app.agent);
    els.agentModel.textContent = a && a.model ? a.model.provider + ' / ' + a.model.model : a ? 'no model' : '';
    els.agentModel.title = a && a.model && a.model.source ? 'Model from ' + a.model.source : '';
  }

  async function loadAgents() {
    let r;
    try {
      r = await api('/api/v1/agents');
    } catch (e) {
      if (e.status === 401) return;
      app.agentsError = e.message;
      renderBanner();
      return;
    }
    app.agentsError = null;
    app.agents = Array.isArray(r.agents) ? r.agents : [];
    const sel = els.agentSelect;
    sel.replaceChildren();
    if (app.agents.length === 0) {
      sel.append(h('option', { value: '' }, 'No agents'));
      sel.disabled = true;
      app.agentsError = 'The gateway has no agents. Add an Agent manifest and restart it.';
      renderBanner();
      renderAgentsInfo();
      return;
    }
    for (const a of app.agents) {
      sel.append(h('option', { value: a.name }, a.ready ? a.name : a.name + ' (not ready)'));
    }
    const names = app.agents.map((a) => a.name);
    const want = [app.agent, params.get('agent'), storage.get(K_AGENT)].find((n) => n && names.includes(n));
    const firstReady = app.agents.find((a) => a.ready);
    const name = want || (firstReady ? firstReady.name : names[0]);
    sel.value = name;
    renderAgentsInfo();
    if (name !== app.agent) await selectAgent(name);
    else { renderBanner(); renderAgentModel(); updateControls(); }
  }

  /** selectAgent shows the agent's chat; queued canvas actions wait until it is loaded (then are dropped). */
  function selectAgent(name) {
    return holdActions(showAgent(name));
  }

  async function showAgent(name) {
    app.agent = name;
    storage.set(K_AGENT, name);
    els.agentSelect.value = name;
    app.sessions = [];
    app.currentDialog = '';
    app.currentSessionId = '';
    app.uploads = []; // uploads belong to the agent's chat
    els.search.value = '';
    runSearch();
    renderPendingFiles();
    renderBanner();
    renderAgentModel();
    renderSessions();
    updateControls();
    if (els.app.dataset.view === 'config') loadAgentConfig();
    await refreshSessions();
    await loadHistory();
  }

  els.agentSelect.addEventListener('change', () => {
    if (app.state.active) { els.agentSelect.value = app.agent; return; }
    selectAgent(els.agentSelect.value);
  });

  // ------------------------------------------------------------ sessions (control channel)

  /** wsOpen: the WebSocket is connected and usable. */
  function wsOpen() {
    return !!app.ws && app.ws.readyState === WebSocket.OPEN && app.state.conn === 'open' && !app.authNeeded;
  }

  /**
   * request writes a frame with an id (a control-channel `dialog` frame or a
   * `stop`) and resolves with the server's answer of the same id; an `error`
   * frame rejects with an Error carrying .code.
   */
  function request(frame) {
    return new Promise((resolve, reject) => {
      if (!wsOpen()) {
        reject(Object.assign(new Error('Not connected to the gateway.'), { code: 'offline' }));
        return;
      }
      const timer = setTimeout(() => {
        app.pending.delete(frame.id);
        reject(Object.assign(new Error('The gateway did not answer in time.'), { code: 'timeout' }));
      }, 20000);
      app.pending.set(frame.id, { resolve, reject, timer });
      try {
        app.ws.send(JSON.stringify(frame));
      } catch (e) {
        clearTimeout(timer);
        app.pending.delete(frame.id);
        reject(Object.assign(new Error('Could not send: ' + e.message), { code: 'offline' }));
      }
    });
  }

  /** settle hands an answer to the request waiting for its id; it reports whether one was. */
  function settle(f) {
    const p = f.id ? app.pending.get(f.id) : null;
    if (!p) return false;
    app.pending.delete(f.id);
    clearTimeout(p.timer);
    if (f.type === 'error') {
      const err = new Error(f.message || 'The gateway refused the operation.');
      err.code = f.code || 'internal';
      err.retryAfterMs = f.retry_after_ms;
      p.reject(err);
    } else p.resolve(f);
    return true;
  }

  function rejectPending() {
    for (const [id, p] of app.pending) {
      clearTimeout(p.timer);
      p.reject(Object.assign(new Error('The connection to the gateway dropped.'), { code: 'offline' }));
      app.pending.delete(id);
    }
  }

  /** control runs a dialog operation of the control channel for the current agent and chat. */
  function control(op, fields) {
    return request(UI.dialogFrame(UI.newControlId(), op, app.agent, chatId, fields));
  }

  /**
   * refreshSessions reloads the conversation list: over the control channel
   * (`list`) when connected, else over REST (GET /api/v1/dialogs, the same
   * list). It reports whether the list was updated.
   */
  function refreshSessions() {
    if (!app.agent) return Promise.resolve(false);
    const p = fetchSessions(app.agent, ++app.sessionsToken);
    app.sessionsLatest = p;
    return p;
  }

  /**
   * fetchSessions is one refreshSessions call. One that a newer call
   * superseded waits for that one instead of answering at once: a caller
   * that loads the history next (selectAgent, while the WebSocket's first
   * open refreshes the list too) then sees the current dialog applied.
   */
  async function fetchSessions(agent, token) {
    let r;
    try {
      if (wsOpen()) r = await control('list');
      else r = await api('/api/v1/dialogs?agent=' + encodeURIComponent(agent) + '&chat_id=' + encodeURIComponent(chatId));
    } catch (e) {
      if (token === app.sessionsToken && e.status !== 401) {
        els.sessions.replaceChildren(h('li', { class: 'sessions-error' }, 'Could not load conversations: ' + e.message));
      }
      return false;
    }
    if (agent !== app.agent) return false;
    if (token !== app.sessionsToken) return app.sessionsLatest;
    applyDialogs(r.current || '', Array.isArray(r.dialogs) ? r.dialogs : Array.isArray(r.sessions) ? r.sessions : []);
    return true;
  }

  function remember(d) {
    if (d && d.dialog_id) app.known[d.dialog_id] = d;
  }

  function applyDialogs(current, list) {
    for (const d of list) remember(d);
    const view = UI.dialogView(current, list, app.known);
    app.currentDialog = view.current;
    app.currentImplicit = view.implicit;
    app.sessions = view.rows;
    const cur = view.rows.find((r) => r.current);
    app.currentSessionId = cur && cur.id ? cur.id : view.current ? UI.sessionIdFor(app.agent, chatId, view.current) : '';
    if (app.renaming && !view.rows.some((r) => r.dialog_id === app.renaming)) app.renaming = '';
    renderSessions();
  }

  function currentTitle() {
    return UI.dialogLabel(app.sessions.find((s) => s.current)) || app.currentDialog;
  }

  function sessionsStatus(text, isError) {
    els.sessionsStatus.textContent = text || '';
    els.sessionsStatus.classList.toggle('error', !!isError);
    clearTimeout(sessionsStatus.timer);
    if (text) sessionsStatus.timer = setTimeout(() => { els.sessionsStatus.textContent = ''; }, 8000);
  }

  function renderSessions() {
    const ul = els.sessions;
    const focused = document.activeElement && ul.contains(document.activeElement) ? focusKey(document.activeElement) : null;
    ul.replaceChildren();
    if (app.sessions.length === 0) {
      ul.append(h('li', { class: 'sessions-empty' }, app.agent ? 'No conversations yet. Your first message starts one.' : ''));
      updateControls();
      return;
    }
    for (const s of app.sessions) ul.append(sessionRow(s));
    updateControls();
    if (focused) {
      const el = ul.querySelector(focused);
      if (el) el.focus();
    }
  }

  /** focusKey: a selector finding the same control after the list is rebuilt. */
  function focusKey(el) {
    const row = el.closest('li.session-row');
    if (!row) return null;
    const cls = ['rename-input', 'session-rename', 'session-archive', 'session-delete', 'session'].find((c) => el.classList.contains(c));
    return cls ? 'li.session-row[data-dialog-id="' + CSS.escape(row.dataset.dialogId) + '"] .' + cls : null;
  }

  function sessionRow(s) {
    const label = UI.dialogLabel(s);
    // The dialog id is for /switch, not for reading: it stays in the row's tooltip.
    const meta = [relTime(s.last_message_at), s.archived ? 'archived' : ''].filter(Boolean).join(' · ');
    const badge = s.current && app.currentImplicit ? 'Your next message goes here' : '';
    const li = h('li', { class: 'session-row' + (s.current ? ' current' : '') + (s.archived ? ' archived' : ''), 'data-dialog-id': s.dialog_id });
    if (app.renaming === s.dialog_id) {
      const input = h('input', { class: 'rename-input', type: 'text', maxlength: UI.MAX_TITLE_CHARS, required: true, 'aria-label': 'New title for “' + label + '”' });
      input.value = app.renameDraft;
      input.addEventListener('input', () => { app.renameDraft = input.value; });
      const form = h('form', { class: 'rename-form', 'data-dialog-id': s.dialog_id },
        input,
        h('div', { class: 'rename-buttons' },
          h('button', { type: 'submit', class: 'primary rename-save' }, 'Save'),
          h('button', { type: 'button', class: 'rename-cancel' }, 'Cancel')));
      li.append(form);
      if (app.renameStart) { // focus and select the old title once, when the edit starts
        app.renameStart = false;
        setTimeout(() => { if (input.isConnected) { input.focus(); input.select(); } }, 0);
      }
      return li;
    }
    li.append(h('button', {
      type: 'button',
      class: 'session' + (s.current ? ' current' : ''),
      'data-dialog-id': s.dialog_id,
      'data-session-id': s.id || null,
      'aria-current': s.current ? 'true' : null,
      title: (s.current ? 'Current conversation: ' + label : 'Switch to “' + label + '”') + ' (' + s.dialog_id + ')',
    }, h('span', { class: 'session-title' }, label), h('span', { class: 'session-meta' }, meta),
    badge ? h('span', { class: 'session-badge' }, badge) : null));
    li.append(h('div', { class: 'session-actions', role: 'group', 'aria-label': 'Actions for “' + label + '”' },
      h('button', { type: 'button', class: 'session-rename', 'aria-label': 'Rename “' + label + '”', title: 'Rename' }, 'Rename'),
      s.archived ? null : h('button', { type: 'button', class: 'session-archive', 'aria-label': 'Archive “' + label + '”', title: 'Hide it from the list (reachable with /switch ' + s.dialog_id + ')' }, 'Archive'),
      h('button', { type: 'button', class: 'session-delete danger', 'aria-label': 'Delete “' + label + '”', title: 'Delete' }, 'Delete')));
    return li;
  }

  /** dialogOp runs one control-channel operation with the list locked, reporting failures. */
  async function dialogOp(what, fn) {
    if (app.opBusy) return false;
    if (app.state.active) { sessionsStatus('Wait for the running reply to finish, or press Stop.', true); return false; }
    app.opBusy = true;
    updateControls();
    try {
      await fn();
      return true;
    } catch (e) {
      const d = UI.describeError(e.code, e.message, e.retryAfterMs);
      sessionsStatus('Could not ' + what + ': ' + (d.message || d.title) + (d.hint ? ' ' + d.hint : ''), true);
      if (e.code === 'unknown_dialog') await refreshSessions();
      return false;
    } finally {
      app.opBusy = false;
      updateControls();
    }
  }

  function newDialog() {
    return dialogOp('start a conversation', async () => {
      const r = await control('create');
      if (r.dialog) remember(r.dialog);
      app.currentDialog = r.current || '';
      await refreshSessions();
      await loadHistory();
      sessionsStatus('Started a new conversation.');
      els.input.focus();
    });
  }

  function switchDialog(id) {
    return dialogOp('switch', async () => {
      const r = await control('switch', { dialogId: id });
      if (r.dialog) remember(r.dialog);
      await refreshSessions();
      await loadHistory();
      sessionsStatus('Switched to “' + currentTitle() + '”.');
    });
  }

  async function renameDialog(id, title) {
    const t = UI.cleanTitle(title);
    if (!t) { sessionsStatus('A title needs at least one character.', true); return false; }
    const ok = await dialogOp('rename', async () => {
      const r = await control('rename', { dialogId: id, title: t });
      if (r.dialog) remember(r.dialog);
      app.renaming = '';
      await refreshSessions();
      sessionsStatus('Renamed to “' + t + '”.');
    });
    if (ok) focusRow(id, '.session-rename');
    return ok;
  }

  async function archiveDialog(id) {
    const label = UI.dialogLabel(app.sessions.find((s) => s.dialog_id === id)) || id;
    const ok = await dialogOp('archive', async () => {
      const r = await control('archive', { dialogId: id });
      if (r.dialog) remember(r.dialog);
      await refreshSessions();
      sessionsStatus('Archived “' + label + '”; /switch ' + id + ' reaches it again.');
    });
    if (ok) focusCurrentRow();
    return ok;
  }

  async function deleteDialog(id) {
    const label = UI.dialogLabel(app.sessions.find((s) => s.dialog_id === id)) || id;
    if (!(await confirmDelete(label))) return false;
    const wasCurrent = id === app.currentDialog;
    const ok = await dialogOp('delete', async () => {
      await control('delete', { dialogId: id });
      delete app.known[id];
      await refreshSessions();
      if (wasCurrent) await loadHistory();
      sessionsStatus('Deleted “' + label + '”.');
    });
    if (ok) focusCurrentRow();
    return ok;
  }

  /** confirmDelete asks in a modal <dialog>; it resolves true when the user confirms. */
  function confirmDelete(label) {
    const d = els.confirm;
    if (typeof d.showModal !== 'function') return Promise.resolve(window.confirm('Delete the conversation “' + label + '”?'));
    els.confirmTitle.textContent = 'Delete conversation?';
    els.confirmText.textContent = '“' + label + '” disappears from the list. Its messages are kept on the server.';
    d.returnValue = '';
    const opener = document.activeElement;
    return new Promise((resolve) => {
      d.addEventListener('close', () => {
        resolve(d.returnValue === 'ok');
        if (opener && opener.isConnected) opener.focus();
      }, { once: true });
      d.showModal();
    });
  }

  els.sessions.addEventListener('click', (e) => {
    const row = e.target.closest('li.session-row');
    if (!row) return;
    const id = row.dataset.dialogId;
    if (e.target.closest('.rename-cancel')) { app.renaming = ''; renderSessions(); focusRow(id, '.session-rename'); return; }
    if (e.target.closest('.session-rename')) {
      app.renaming = id;
      app.renameDraft = (app.sessions.find((s) => s.dialog_id === id) || {}).title || '';
      app.renameStart = true;
      renderSessions();
      return;
    }
    if (e.target.closest('.session-archive')) { archiveDialog(id); return; }
    if (e.target.closest('.session-delete')) { deleteDialog(id); return; }
    if (e.target.closest('button.session')) {
      closeSidebar();
      if (id === app.currentDialog && !app.currentImplicit) { loadHistory(); return; }
      switchDialog(id);
    }
  });

  els.sessions.addEventListener('submit', (e) => {
    const form = e.target.closest('form.rename-form');
    if (!form) return;
    e.preventDefault();
    renameDialog(form.dataset.dialogId, form.querySelector('.rename-input').value);
  });

  els.sessions.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || !e.target.closest('form.rename-form')) return;
    e.stopPropagation();
    const id = app.renaming;
    app.renaming = '';
    renderSessions();
    focusRow(id, '.session-rename');
  });

  // ------------------------------------------------------------ conversation search

  /**
   * search asks the gateway for the chat's messages holding the words typed
   * (GET /api/v1/search: the store's full-text index); while a query is
   * typed the hits replace the list, and a click opens the conversation at
   * the message.
   */
  async function runSearch() {
    const q = els.search.value.trim();
    const token = ++app.searchToken;
    const searching = q !== '' && !!app.agent;
    els.searchResults.hidden = !searching;
    els.sessions.hidden = searching;
    if (!searching) { els.searchResults.replaceChildren(); return; }
    els.searchResults.setAttribute('aria-busy', 'true');
    let r;
    try {
      r = await api('/api/v1/search?' + new URLSearchParams({ agent: app.agent, chat_id: chatId, q }).toString());
    } catch (e) {
      if (token !== app.searchToken) return;
      els.searchResults.removeAttribute('aria-busy');
      els.searchResults.replaceChildren(h('li', { class: 'search-empty error' }, 'Search failed: ' + e.message));
      return;
    }
    if (token !== app.searchToken) return;
    els.searchResults.removeAttribute('aria-busy');
    const hits = Array.isArray(r.hits) ? r.hits : [];
    if (hits.length === 0) {
      els.searchResults.replaceChildren(h('li', { class: 'search-empty' }, 'No message holds “' + q + '”.'));
      return;
    }
    els.searchResults.replaceChildren(...hits.map((hit) => h('li', null,
      h('button', { type: 'button', class: 'search-hit', 'data-dialog-id': hit.dialog_id, 'data-seq': hit.seq },
        h('span', { class: 'search-hit-title' }, UI.cleanTitle(hit.title) || 'Conversation'),
        h('span', { class: 'search-hit-snippet' }, (hit.role === 'user' ? 'You: ' : '') + hit.snippet),
        h('span', { class: 'session-meta' }, relTime(hit.created_at))))));
  }

  els.search.addEventListener('input', () => {
    clearTimeout(app.searchTimer);
    app.searchTimer = setTimeout(runSearch, 250);
  });
  els.search.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && els.search.value) {
      e.stopPropagation(); // clears the search, does not close the drawer
      els.search.value = '';
      runSearch();
    }
  });

  els.searchResults.addEventListener('click', async (e) => {
    const b = e.target.closest('button.search-hit');
    if (!b) return;
    const id = b.dataset.dialogId;
    const seq = Number(b.dataset.seq);
    closeSidebar();
    if (id !== app.currentDialog || app.currentImplicit) {
      if (!(await switchDialog(id))) return;
    }
    showMessage(seq);
  });

  /** showMessage scrolls to the turn holding the stored message seq and marks it for a moment. */
  function showMessage(seq) {
    let best = null;
    let bestSeq = -1;
    for (const el of els.messages.querySelectorAll('.turn[data-turn-id^="h-"]')) {
      const n = Number(el.dataset.turnId.slice(2));
      if (n <= seq && n > bestSeq) { best = el; bestSeq = n; }
    }
    if (!best) { hint('That message is older than the part of the conversation shown.'); return; }
    for (const el of els.messages.querySelectorAll('.turn.found')) el.classList.remove('found');
    best.classList.add('found');
    best.scrollIntoView({ block: 'center' });
    app.atBottom = nearBottom();
  }

  /** focusCurrentRow moves focus to the current conversation (or New) after its row went away. */
  function focusCurrentRow() {
    if (document.activeElement && document.activeElement !== document.body && document.activeElement.isConnected) return;
    const el = els.sessions.querySelector('li.session-row.current button.session') || els.newDialog;
    el.focus();
  }

  function focusRow(id, sel) {
    const el = els.sessions.querySelector('li.session-row[data-dialog-id="' + CSS.escape(id) + '"] ' + sel);
    if (el) el.focus();
  }

  els.newDialog.addEventListener('click', () => { closeSidebar(); newDialog(); });
  els.compactDialog.addEventListener('click', () => submit('/compact', { quiet: true }));
  els.infoDialog.addEventListener('click', () => submit('/info', { quiet: true }));
  els.dumpDialog.addEventListener('click', () => submit('/dump', { quiet: true }));

  // ------------------------------------------------------------ history

  function showEmptyState() {
    if (els.messages.querySelector('.turn, .msg')) {
      const e = els.messages.querySelector('.empty-state');
      if (e) e.remove();
      return;
    }
    if (!els.messages.querySelector('.empty-state')) {
      // A few first messages to try: a click puts one in the input, to
      // send as it is or to change first.
      const agent = app.agents.find((x) => x.name === app.agent);
      const starters = h('div', { class: 'starters' });
      for (const text of UI.starterPrompts(agent && agent.tools)) {
        const b = h('button', { type: 'button', class: 'starter' }, text);
        b.addEventListener('click', () => {
          els.input.value = text;
          els.input.focus();
          els.input.dispatchEvent(new Event('input'));
        });
        starters.append(b);
      }
      els.messages.append(h('div', { class: 'empty-state' },
        h('p', null, 'No messages yet.'),
        h('p', null, 'Say hello, or type /help to list the commands.'),
        starters));
    }
  }

  /**
   * loadHistory shows the current dialog's last 50 messages; live turns (and
   * keepIds) stay below it. Queued canvas actions wait until it is shown.
   */
  function loadHistory(keepIds) {
    return holdActions(showHistory(keepIds));
  }

  async function showHistory(keepIds) {
    const token = ++app.historyToken;
    const before = new Set(app.state.order);
    const sid = app.currentSessionId;
    let msgs = [];
    let failure = null;
    if (sid) {
      els.messages.setAttribute('aria-busy', 'true');
      try {
        const r = await api('/api/v1/sessions/' + encodeURIComponent(sid) + '/messages?last=50');
        msgs = Array.isArray(r.messages) ? r.messages : [];
      } catch (e) {
        if (e.status !== 404) failure = e.message;
        if (e.status === 0) app.needsReload = true; // retried when the connection is back
      }
    }
    if (token !== app.historyToken) return;
    els.messages.removeAttribute('aria-busy');
    const keep = new Set(keepIds || []);
    for (const id of app.state.order) {
      const t = app.state.turns[id];
      if (!t.done || !before.has(id)) keep.add(id);
    }
    flushRender(); // pending updates of turns about to leave the state
    dispatch({ type: 'clear' });
    const kept = [];
    for (const [id, rec] of app.turnEls) if (keep.has(id)) kept.push([id, rec]);
    app.turnEls = new Map(kept);
    els.messages.replaceChildren();
    const frag = document.createDocumentFragment();
    for (const t of UI.historyToTurns(msgs)) {
      const rec = newRec(t);
      renderTurn(t, rec);
      frag.append(rec.el);
    }
    if (failure) frag.append(h('div', { class: 'msg error', 'data-code': 'history' }, 'Could not load the conversation: ' + failure));
    for (const [, rec] of kept) frag.append(rec.el);
    els.messages.append(frag);
    showEmptyState();
    scrollToBottom();
    if (canvas) canvas.conversation(sid);
  }

  // ------------------------------------------------------------ rendering turns

  function newRec(turn) {
    return {
      el: h('article', { class: 'turn', 'data-turn-id': turn.id }),
      user: null, asst: null, activity: null, content: null, typing: null, usage: null, files: null, fileCount: 0,
      items: new Map(), contentHtml: null, notes: 0, errors: 0, interrupted: null, actions: null,
    };
  }

  function mdOpts() { return { key: apiKey }; }

  function createAssistant(rec) {
    rec.activity = h('div', { class: 'activity' });
    rec.content = h('div', { class: 'content md' });
    rec.typing = h('div', { class: 'typing' }, h('span', { class: 'dot' }), h('span', { class: 'dot' }), h('span', { class: 'dot' }),
      h('span', { class: 'sr-only' }, 'PicoBot is working…'));
    rec.usage = h('div', { class: 'usage' });
    rec.files = h('div', { class: 'attachments' });
    rec.files.hidden = true;
    rec.asst = h('div', { class: 'msg assistant' }, rec.activity, rec.content, rec.files, rec.typing, rec.usage);
    if (rec.user) rec.user.after(rec.asst);
    else rec.el.prepend(rec.asst);
  }

  function createToolItem() {
    const r = {};
    r.name = h('span', { class: 'tool-name' });
    r.args = h('span', { class: 'tool-args' });
    r.status = h('span', { class: 'tool-status' });
    r.argsPre = h('pre', { class: 'tool-args-full' });
    r.resPre = h('pre', { class: 'tool-result' });
    r.det = h('details', { class: 'tool-call' },
      h('summary', null, h('span', { class: 'tool-icon', 'aria-hidden': 'true' }, '⚙'), r.name, r.args, r.status),
      h('div', { class: 'tool-body' },
        h('div', { class: 'tool-label' }, 'Arguments'), r.argsPre,
        h('div', { class: 'tool-label' }, 'Result'), r.resPre));
    r.media = h('div', { class: 'tool-media' });
    r.media.hidden = true;
    r.el = h('div', { class: 'tool-item' }, r.det, r.media);
    return r;
  }

  /** createApprovalItem shows a command waiting for the user, with Approve and Deny. */
  function createApprovalItem(turn) {
    const r = {};
    r.title = h('div', { class: 'approval-title' });
    r.command = h('pre', { class: 'approval-command' });
    r.reason = h('div', { class: 'approval-reason' });
    r.approve = h('button', { type: 'button', class: 'approval-approve' }, 'Approve');
    r.deny = h('button', { type: 'button', class: 'approval-deny' }, 'Deny');
    r.outcome = h('div', { class: 'approval-outcome', role: 'status' });
    r.el = h('div', { class: 'approval', role: 'group', 'aria-label': 'Approval request' },
      r.title, r.command, r.reason, h('div', { class: 'approval-actions' }, r.approve, r.deny), r.outcome);
    const answer = (decision) => {
      r.approve.disabled = r.deny.disabled = true;
      request(UI.approveFrame(turn.agent || app.agent, chatId, r.item.code, decision, UI.newControlId('a')))
        .then((f) => { if (!f.answered) r.outcome.textContent = 'This request is no longer waiting (answered, timed out, or its turn ended).'; })
        .catch((e) => { r.outcome.textContent = 'Could not answer: ' + e.message; r.approve.disabled = r.deny.disabled = !!r.item.outcome; });
    };
    r.approve.addEventListener('click', () => answer('approve'));
    r.deny.addEventListener('click', () => answer('deny'));
    return r;
  }

  function updateApprovalItem(r, item, turnDone) {
    r.el.dataset.code = item.code;
    r.el.dataset.outcome = item.outcome || (turnDone ? 'ended' : 'waiting');
    r.title.textContent = 'Approve this ' + item.tool + ' command? (' + item.code + ')';
    r.command.textContent = item.command;
    r.reason.textContent = item.reason + (item.timeoutMs ? ' — refused without an answer within ' + Math.round(item.timeoutMs / 1000) + ' s.' : '');
    const open = !item.outcome && !turnDone;
    r.approve.hidden = r.deny.hidden = !open;
    if (!open) r.approve.disabled = r.deny.disabled = true;
    if (item.outcome) r.outcome.textContent = UI.approvalOutcomeText(item.outcome);
    r.item = item;
    r.done = turnDone;
  }

  function updateToolItem(r, item, turnDone) {
    r.det.dataset.callId = item.callId || '';
    r.det.dataset.tool = item.name;
    r.el.dataset.callId = item.callId || '';
    r.name.textContent = item.name;
    const short = UI.shortArgs(item.arguments, 80);
    r.args.textContent = short;
    r.args.title = short;
    r.det.classList.toggle('error', !!item.isError);
    r.det.classList.toggle('pending', !item.hasResult);
    r.status.textContent = item.hasResult ? (item.isError ? 'error' : 'done') : turnDone ? 'no result' : 'running…';
    r.argsPre.textContent = UI.prettyArgs(item.arguments) || '(no arguments)';
    if (item.hasResult) {
      const html = UI.renderPlain(item.content, Object.assign(mdOpts(), { noImages: true }));
      if (html) r.resPre.innerHTML = html; // renderPlain escapes all text
      else r.resPre.textContent = '(empty)';
      const files = mergeArtifacts(UI.extractArtifacts(item.content), item.attachments);
      r.media.replaceChildren(...files.map(artifactEl));
      r.media.hidden = files.length === 0;
    } else {
      r.resPre.textContent = turnDone ? '(no result)' : 'Running…';
    }
    r.item = item;
    r.done = turnDone;
    updateRunCards(r, item, turnDone);
  }

  // ------------------------------------------------------------ sub-agent run cards
  //
  // A delegate or sessions_spawn call shows one card per run it starts,
  // after its .tool-call, in request order:
  //
  //   .run-card            data-run-id (once known), data-status = running |
  //                        succeeded | failed | cancelled
  //     .run-target, .run-task, .run-status, .run-progress (the run's tool
  //     steps so far), .run-result, button.run-cancel (while a run with an
  //     id runs)
  //
  // A run with an id that has not ended is read every runPollMs from
  // GET /api/v1/runs/{id}; its result also comes back as the chat's
  // continuation turn (background) or the call's result (foreground).

  const runTools = new Set(['delegate', 'sessions_spawn']);
  const runPollMs = 2000;
  const runEnded = new Set(['succeeded', 'failed', 'cancelled']);
  /** continuationsShown: background runs whose continuation turn the history was reloaded for. */
  const continuationsShown = new Set();

  function parseJSON(s) {
    try { return JSON.parse(s); } catch (_) { return null; }
  }

  /** runTasks lists the tasks a call names, in request order. */
  function runTasks(item) {
    const a = parseJSON(item.arguments) || {};
    if (item.name === 'sessions_spawn') return [{ target: a.agentId || '', task: a.task || '', label: a.label || '' }];
    if (Array.isArray(a.tasks) && a.tasks.length) return a.tasks.map((t) => ({ target: (t && t.target) || a.target || '', task: (t && t.task) || '' }));
    return [{ target: a.target || '', task: a.task || '' }];
  }

  /** runResults reads the call's result: one {run_id, status, result} per task. */
  function runResults(item) {
    if (!item.hasResult) return [];
    const v = parseJSON(item.content);
    if (Array.isArray(v)) return v;
    if (v && v.runId) return [{ run_id: v.runId, status: v.status === 'accepted' ? 'running' : v.status }];
    if (v && (v.run_id || v.status)) return [v];
    return [{ status: 'failed', result: item.content }];
  }

  function createRunCard() {
    const c = { status: '' };
    c.target = h('span', { class: 'run-target' });
    c.task = h('div', { class: 'run-task' });
    c.statusEl = h('span', { class: 'run-status', role: 'status' });
    c.progress = h('div', { class: 'run-progress' });
    c.result = h('pre', { class: 'run-result' });
    c.result.hidden = true;
    c.cancel = h('button', { type: 'button', class: 'run-cancel' }, 'Cancel');
    c.cancel.hidden = true;
    c.cancel.addEventListener('click', () => cancelRun(c));
    c.el = h('div', { class: 'run-card', role: 'group', 'aria-label': 'Sub-agent run' },
      h('div', { class: 'run-head' }, h('span', { class: 'run-icon', 'aria-hidden': 'true' }, '⇢'), c.target, c.statusEl, c.cancel),
      c.task, c.progress, c.result);
    return c;
  }

  function setRunStatus(c, status, result) {
    c.status = status;
    c.el.dataset.status = status;
    c.statusEl.textContent = status;
    c.cancel.hidden = !c.runId || runEnded.has(status);
    if (result != null && result !== '' && status !== 'running') {
      c.result.textContent = result;
      c.result.hidden = false;
    }
  }

  /** showRun updates a card from its GET /api/v1/runs answer. */
  function showRun(c, run) {
    if (!run) return;
    if (run.label) c.task.textContent = run.label + ': ' + (run.task || '');
    c.progress.textContent = run.steps ? run.steps + (run.steps === 1 ? ' step' : ' steps') + (run.last_tool ? ' · last: ' + run.last_tool : '') : '';
    c.waiting = run.mode === 'background' && run.completion === 'ready'; // its continuation turn is yet to answer
    if (run.completion === 'reserved' || run.completion === 'ready') c.undelivered = true;
    setRunStatus(c, run.status, run.result);
    if (run.mode === 'background' && run.completion === 'delivered' && !continuationsShown.has(run.run_id)) {
      // The continuation turn answered: it is a turn of this chat the
      // browser did not start, so it comes in with the history.
      continuationsShown.add(run.run_id);
      if (c.undelivered) loadHistory(); // seen before it came, not read with it
    }
  }

  function runPath(c, suffix) {
    return '/api/v1/runs/' + encodeURIComponent(c.runId) + (suffix || '') + '?agent=' + encodeURIComponent(app.agent) + '&chat_id=' + encodeURIComponent(chatId);
  }

  /** pollRun reads a running run's card until it ends or leaves the page. */
  function pollRun(c) {
    clearTimeout(c.timer);
    c.timer = setTimeout(async () => {
      c.timer = null;
      if (!c.el.isConnected) return;
      try {
        const body = await api(runPath(c));
        c.polled = true;
        showRun(c, body.run);
      } catch (e) {
        if (e.status === 404) { c.progress.textContent = 'This run is no longer kept.'; return; }
      }
      if (!runEnded.has(c.status) || c.waiting) pollRun(c);
    }, c.polled ? runPollMs : 0);
  }

  async function cancelRun(c) {
    c.cancel.disabled = true;
    const headers = { Accept: 'application/json' };
    if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
    try {
      const res = await fetch(runPath(c, '/cancel'), { method: 'POST', headers, cache: 'no-store' });
      const body = await res.json().catch(() => null);
      if (res.ok && body) showRun(c, body.run);
      else c.progress.textContent = 'Could not cancel: ' + ((body && body.error && body.error.message) || 'HTTP ' + res.status);
    } catch (_) {
      c.progress.textContent = 'Could not cancel: the gateway cannot be reached.';
    }
    c.cancel.disabled = false;
  }

  function updateRunCards(r, item, turnDone) {
    if (!runTools.has(item.name)) return;
    const tasks = runTasks(item);
    const results = runResults(item);
    r.cards = r.cards || [];
    tasks.forEach((t, i) => {
      let c = r.cards[i];
      if (!c) {
        c = createRunCard();
        r.cards[i] = c;
        r.el.append(c.el);
      }
      c.target.textContent = t.target || 'sub-agent';
      if (!c.polled) c.task.textContent = t.label ? t.label + ': ' + t.task : t.task;
      const res = results[i] || {};
      if (res.run_id && !c.runId) {
        c.runId = res.run_id;
        c.el.dataset.runId = res.run_id;
      }
      if (!c.polled) {
        const status = res.status || (item.hasResult ? 'failed' : turnDone ? 'failed' : 'running');
        setRunStatus(c, status, res.error || res.result);
      }
      if (c.runId && !runEnded.has(c.status) && !c.timer) pollRun(c);
    });
  }

  /** maxHighlight bounds the code highlight.js colours (bigger blocks stay plain). */
  const maxHighlight = 100000;

  /**
   * decorateCode colours the code blocks of a finished answer (highlight.js,
   * vendored; it reads the text and writes escaped spans) and gives each a
   * Copy button. A streaming answer is left plain: it is redrawn per delta.
   */
  function decorateCode(root) {
    for (const code of root.querySelectorAll('pre > code')) {
      if (window.hljs && code.textContent.length <= maxHighlight) {
        try { window.hljs.highlightElement(code); } catch (_) { /* stays plain */ }
      }
      const btn = h('button', { type: 'button', class: 'code-copy', 'aria-label': 'Copy code', title: 'Copy code' }, 'Copy');
      btn.addEventListener('click', () => copyText(code.textContent, btn));
      code.parentElement.append(btn);
    }
  }

  /** copyText puts text on the clipboard and says so on btn. */
  async function copyText(text, btn) {
    try {
      await navigator.clipboard.writeText(text);
      btn.textContent = 'Copied';
    } catch (_) {
      btn.textContent = 'Copy failed';
    }
    setTimeout(() => { btn.textContent = 'Copy'; }, 2000);
  }

  /** mergeArtifacts joins artifact lists, each url once. */
  function mergeArtifacts(...lists) {
    const seen = new Set();
    const out = [];
    for (const list of lists) {
      for (const a of list || []) {
        if (seen.has(a.url)) continue;
        seen.add(a.url);
        out.push(a);
      }
    }
    return out;
  }

  /** artifactEl shows one artifact: an image inline (linked to the full file) or a file link. */
  function artifactEl(a) {
    const href = UI.withKey(a.url, apiKey);
    if (a.image) {
      return h('a', { class: 'artifact-link', href, target: '_blank', rel: 'noopener' },
        h('img', { class: 'artifact-img', src: href, alt: a.name || 'image', loading: 'lazy' }));
    }
    return h('a', { class: 'artifact-file', href, target: '_blank', rel: 'noopener' }, a.name || 'file');
  }

  /** errorEl renders an error: what happened, the server's message, what to do. */
  function errorEl(err, extraClass) {
    const d = UI.describeError(err.code, err.message, err.retryAfterMs);
    const stopped = err.code === 'stopped';
    const el = h('div', { class: 'msg error' + (stopped ? ' stopped' : '') + (extraClass ? ' ' + extraClass : ''), 'data-code': err.code, role: stopped ? null : 'alert' },
      h('strong', { class: 'error-title' }, d.title + (d.message || d.hint ? '. ' : '')),
      d.message ? h('span', { class: 'error-message' }, d.message + ' ') : null,
      d.hint ? h('span', { class: 'error-hint' }, d.hint) : null);
    if (err.code === 'no_model') {
      const b = h('button', { type: 'button', class: 'error-action' }, 'Open Configuration → Health');
      b.addEventListener('click', () => { setHash('#health'); showView('config', true); });
      el.append(' ', b);
    }
    return el;
  }

  function renderItems(turn, rec) {
    let prevEl = null;
    turn.items.forEach((item, idx) => {
      const key = item.type === 'tool' ? 'tool:' + (item.callId || '#' + idx) : item.type === 'approval' ? 'approval:' + item.code : 'interim:' + idx;
      let r = rec.items.get(key);
      if (!r) {
        if (item.type === 'tool') r = createToolItem();
        else if (item.type === 'approval') r = createApprovalItem(turn);
        else r = { el: h('div', { class: 'interim md' }) };
        rec.items.set(key, r);
        if (prevEl) prevEl.after(r.el);
        else rec.activity.prepend(r.el);
      }
      if (r.item !== item || r.done !== turn.done) {
        if (item.type === 'tool') updateToolItem(r, item, turn.done);
        else if (item.type === 'approval') updateApprovalItem(r, item, turn.done);
        else { r.el.innerHTML = UI.renderMarkdown(item.text, mdOpts()); r.item = item; r.done = turn.done; }
      }
      prevEl = r.el;
    });
    rec.activity.hidden = turn.items.length === 0;
  }

  function renderTurn(turn, rec) {
    rec.el.dataset.status = turn.status;
    if (!rec.user && !turn.quiet && (turn.text || turn.files.length)) {
      rec.user = h('div', { class: 'msg user' });
      rec.user.innerHTML = UI.renderPlain(turn.text, mdOpts()); // escaped text with links
      if (turn.files.length) rec.user.append(h('div', { class: 'msg-files' }, ...turn.files.map(artifactEl)));
      if (turn.createdAt) rec.user.title = new Date(turn.createdAt).toLocaleString();
      rec.el.prepend(rec.user);
    }
    const answerText = turn.final != null ? turn.final : turn.stream;
    const hasAnswer = turn.items.length > 0 || answerText !== '' || turn.final != null || turn.attachments.length > 0;
    const waiting = !turn.done && !UI.isKnownCommand(turn.text);
    if ((hasAnswer || waiting) && !rec.asst) createAssistant(rec);
    if (rec.asst) {
      if (turn.done && !hasAnswer) {
        rec.asst.remove();
        rec.asst = null;
        rec.items.clear();
        rec.contentHtml = null;
      } else {
        rec.asst.setAttribute('aria-busy', turn.done ? 'false' : 'true');
        renderItems(turn, rec);
        // A file a tool produced shows under its card; the answer (whose
        // stored text links the turn's files again) shows it once.
        const shown = new Set();
        for (const item of turn.items) {
          if (item.type !== 'tool' || !item.hasResult) continue;
          for (const a of mergeArtifacts(UI.extractArtifacts(item.content), item.attachments)) shown.add(a.url);
        }
        const files = turn.attachments.filter((a) => !shown.has(a.url));
        const html = answerText ? UI.renderMarkdown(answerText, Object.assign(mdOpts(), { shown })) : '';
        const finished = turn.done || turn.final != null;
        if (html !== rec.contentHtml || finished !== rec.codeDone) {
          rec.content.innerHTML = html; // renderMarkdown escapes all model text
          rec.contentHtml = html;
          rec.codeDone = finished;
          if (finished) decorateCode(rec.content);
        }
        rec.content.hidden = html === '';
        if (rec.fileCount !== files.length) {
          rec.files.replaceChildren(...files.map(artifactEl));
          rec.files.hidden = files.length === 0;
          rec.fileCount = files.length;
        }
        rec.asst.classList.toggle('streaming', !turn.done && turn.final == null && turn.stream !== '');
        rec.typing.hidden = turn.done || answerText !== '' || turn.final != null;
        if (turn.done && turn.usage && (turn.usage.input || turn.usage.output)) {
          rec.usage.textContent = turn.usage.input + ' tokens in · ' + turn.usage.output + ' out';
          rec.usage.hidden = false;
        } else rec.usage.hidden = true;
      }
    }
    for (; rec.notes < turn.commands.length; rec.notes++) {
      const note = h('div', { class: 'msg system' });
      note.innerHTML = UI.renderPlain(turn.commands[rec.notes], mdOpts());
      rec.el.append(note);
    }
    for (; rec.errors < turn.errors.length; rec.errors++) rec.el.append(errorEl(turn.errors[rec.errors]));
    if (turn.status === 'interrupted' && !rec.interrupted) {
      rec.interrupted = h('div', { class: 'msg error interrupted', 'data-code': 'disconnected' },
        'The connection dropped before this reply finished; it may still complete on the server. The conversation reloads when the connection is back.');
      rec.el.append(rec.interrupted);
    }
    if (turn.done && !rec.actions && !turn.quiet && (turn.text || turn.files.length) && !UI.parseCommand(turn.text)) {
      rec.actions = turnActions(turn);
      rec.el.append(rec.actions);
    }
  }

  /**
   * turnActions are the buttons under a finished turn: copy its answer (the
   * markdown as the model wrote it), edit the message (into the input, to
   * change and send as a new message) and regenerate (send the same text
   * again: the conversation keeps both answers, and the model sees the
   * first one when it writes the second).
   */
  function turnActions(turn) {
    const bar = h('div', { class: 'turn-actions' });
    if (turn.final) {
      const copy = h('button', { type: 'button', class: 'turn-copy', title: 'Copy the answer' }, 'Copy');
      copy.addEventListener('click', () => copyText(turn.final, copy));
      bar.append(copy);
    }
    const edit = h('button', { type: 'button', class: 'turn-edit', title: 'Edit this message and send it again' }, 'Edit');
    edit.addEventListener('click', () => {
      app.uploads = turn.files.map((f) => ({ key: UI.newControlId('u'), name: f.name, status: 'ready', file: f }));
      renderPendingFiles();
      els.input.value = turn.text;
      els.input.dispatchEvent(new Event('input'));
      els.input.focus();
      els.input.setSelectionRange(turn.text.length, turn.text.length);
    });
    const again = h('button', { type: 'button', class: 'turn-regenerate', title: 'Send this message again for a new answer' }, 'Regenerate');
    again.addEventListener('click', () => submit(turn.text, { files: turn.files }));
    bar.append(edit, again);
    return bar;
  }

  // Rendering of live turns is batched per animation frame.
  const dirty = new Set();
  let renderScheduled = false;

  function scheduleRender() {
    if (renderScheduled) return;
    renderScheduled = true;
    if (document.hidden || typeof window.requestAnimationFrame !== 'function') setTimeout(flushRender, 30);
    else window.requestAnimationFrame(flushRender);
  }

  function flushRender() {
    renderScheduled = false;
    const stick = nearBottom();
    for (const id of dirty) {
      const turn = app.state.turns[id];
      if (!turn) continue;
      let rec = app.turnEls.get(id);
      if (!rec) {
        rec = newRec(turn);
        app.turnEls.set(id, rec);
        els.messages.append(rec.el);
      }
      renderTurn(turn, rec);
    }
    dirty.clear();
    showEmptyState();
    if (stick) scrollToBottom();
  }

  function nearBottom() {
    const m = els.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  function scrollToBottom() {
    els.messages.scrollTop = els.messages.scrollHeight;
    app.atBottom = true;
  }

  // An image that loads below a reader at the bottom keeps them there.
  els.messages.addEventListener('scroll', () => { app.atBottom = nearBottom(); }, { passive: true });
  els.messages.addEventListener('load', (e) => {
    if (e.target instanceof HTMLImageElement && app.atBottom) scrollToBottom();
  }, true);

  function renderNotices() {
    const notices = app.state.notices;
    for (; app.noticeCount < notices.length; app.noticeCount++) {
      const n = notices[app.noticeCount];
      els.messages.append(errorEl(n));
    }
    if (notices.length < app.noticeCount) app.noticeCount = notices.length;
    showEmptyState();
    scrollToBottom();
  }

  // ------------------------------------------------------------ state updates

  function dispatch(action) {
    const prev = app.state;
    app.state = UI.reduce(prev, action);
    if (app.state === prev) return;
    for (const id of app.state.order) {
      if (app.state.turns[id] !== prev.turns[id]) dirty.add(id);
    }
    if (dirty.size) scheduleRender();
    if (app.state.notices !== prev.notices) renderNotices();
    if (app.state.active !== prev.active || app.state.conn !== prev.conn) updateControls();
  }

  function updateControls() {
    const busy = !!app.state.active;
    const online = app.state.conn === 'open' && !app.authNeeded;
    const locked = busy || !online || app.opBusy;
    els.send.disabled = busy || !online;
    els.stop.disabled = !busy || !online;
    for (const b of [els.newDialog, els.compactDialog, els.infoDialog, els.dumpDialog]) b.disabled = locked || !app.agent;
    els.attach.disabled = !app.agent || app.authNeeded;
    for (const b of els.sessions.querySelectorAll('button')) b.disabled = locked;
    els.sessions.setAttribute('aria-busy', app.opBusy ? 'true' : 'false');
    els.agentSelect.disabled = busy || app.agents.length === 0;
    els.app.dataset.busy = busy ? 'true' : 'false';
    renderActionQueue();
    scheduleDrain(); // a reply ended, the connection came back or a dialog operation finished
  }

  function hint(text) {
    els.hint.textContent = text || '';
    clearTimeout(hint.timer);
    if (text) hint.timer = setTimeout(() => { els.hint.textContent = ''; }, 6000);
  }

  // ------------------------------------------------------------ sending

  /** submit sends text as a `send` frame; quiet turns (sidebar commands) show no user bubble. */
  function submit(text, opts) {
    opts = opts || {};
    const pending = !opts.files && !opts.quiet;
    if (pending && app.uploads.some((u) => u.status === 'uploading')) {
      hint('Wait for the files to finish uploading.');
      return false;
    }
    const files = opts.files || (pending ? app.uploads.filter((u) => u.status === 'ready').map((u) => u.file) : []);
    if ((!text || !text.trim()) && files.length === 0) return false;
    if (app.state.active) {
      const c = UI.parseCommand(text);
      if (c && c.name === 'stop') { stopTurn(); return true; }
      hint('A reply is still running: wait for it, or press Stop.');
      return false;
    }
    if (app.authNeeded) { hint('Enter the API key first.'); return false; }
    if (!wsOpen()) {
      hint('Not connected to the gateway yet; retrying…');
      connectNow();
      return false;
    }
    if (!app.agent) { hint('No agent to talk to.'); return false; }
    if (UI.textBytes(text) > UI.MAX_TEXT_BYTES) {
      hint('The message is too long (the limit is ' + UI.MAX_TEXT_BYTES / 1024 + ' KiB).');
      return false;
    }
    const turn = UI.newTurn(UI.newMessageId(), text, { agent: app.agent, quiet: !!opts.quiet, files });
    try {
      app.ws.send(JSON.stringify(UI.sendFrame(turn, chatId)));
    } catch (e) {
      hint('Could not send: ' + e.message);
      return false;
    }
    hint(opts.quiet ? 'Running ' + text.trim().split(/\s/)[0] + '…' : '');
    if (pending && app.uploads.length) {
      app.uploads = [];
      renderPendingFiles();
    }
    dispatch({ type: 'send', turn });
    const e = els.messages.querySelector('.empty-state');
    if (e) e.remove();
    flushRender();
    scrollToBottom();
    return true;
  }

  // ------------------------------------------------------------ canvas actions

  /**
   * sendAction sends a canvas action (a click on an A2UI button; canvas.js,
   * docs/canvas.md) as a message of the chat, as submit does typed text.
   * Unlike typed text it is not refused while a reply runs, or while the
   * page is offline: it is queued (at most UI.MAX_QUEUED_ACTIONS, in click
   * order) and sent by drainActions one message at a time as each reply
   * ends, however it ends. It carries no pending attachment.
   */
  function sendAction(text) {
    if (!app.agent) { hint('No agent to talk to.'); return false; }
    if (UI.textBytes(text) > UI.MAX_TEXT_BYTES) {
      hint('The action is too long to send (the limit is ' + UI.MAX_TEXT_BYTES / 1024 + ' KiB).');
      return false;
    }
    if (app.actions.length === 0 && !app.state.active && wsOpen() && app.actionHolds === 0 && !app.opBusy) {
      return submit(text, { files: [] });
    }
    const running = app.state.active ? app.state.turns[app.state.active] : null;
    const session = app.currentSessionId || (running && running.session) || '';
    const r = UI.queueAction(app.actions, { text, agent: app.agent, session });
    if (!r.queued) {
      hint(UI.actionQueueFullText());
      return false;
    }
    app.actions = r.queue;
    const n = app.actions.length;
    hint('Action queued (' + n + ' waiting): it is sent ' +
      (app.state.active ? 'when the reply ends.' : !wsOpen() ? 'once connected.' : 'once the conversation is loaded.'));
    renderActionQueue();
    if (!wsOpen()) connectNow();
    scheduleDrain();
    return true;
  }

  /** holdActions keeps the queued canvas actions waiting while p runs. */
  async function holdActions(p) {
    app.actionHolds++;
    try {
      return await p;
    } finally {
      app.actionHolds--;
      scheduleDrain();
    }
  }

  function scheduleDrain() {
    if (app.actions.length === 0 || app.drainTimer) return;
    app.drainTimer = setTimeout(drainActions, 0); // after the frame or operation being handled
  }

  /**
   * drainActions drops the queued actions of a conversation no longer shown
   * (with a notice), then sends the first of the others when nothing runs.
   * Its turn's end calls it again (updateControls), for the next one.
   */
  function drainActions() {
    app.drainTimer = null;
    if (app.actions.length === 0 || app.actionHolds > 0 || app.opBusy) return;
    const ready = !app.state.active && wsOpen();
    const r = UI.nextAction(app.actions, { agent: app.agent, session: app.currentSessionId, ready });
    app.actions = r.queue;
    if (r.dropped.length) {
      const text = UI.actionsDroppedText(r.dropped.length);
      els.messages.append(h('div', { class: 'msg system actions-dropped', role: 'status' }, text));
      hint(text);
      scrollToBottom();
    }
    if (r.action && !submit(r.action.text, { files: [] })) app.actions.unshift(r.action); // tried again on the next change
    renderActionQueue();
  }

  function renderActionQueue() {
    const el = els.canvasQueue;
    if (!el) return;
    const n = app.actions.length;
    el.textContent = UI.actionQueueText(n, !wsOpen());
    el.dataset.count = String(n);
    el.hidden = n === 0;
  }

  // ------------------------------------------------------------ attachments

  /**
   * addFiles uploads files (from the Attach button, a paste or a drop) to
   * the chat at once; each shows as a chip above the input until the
   * message that carries them is sent. What the gateway would refuse (too
   * large, empty) is refused here first, with the same words.
   */
  function addFiles(list) {
    const files = Array.from(list || []);
    if (files.length === 0) return;
    if (!app.agent) { hint('No agent to send files to.'); return; }
    for (const f of files) {
      const u = { key: UI.newControlId('u'), name: f.name || 'pasted', size: f.size, status: 'uploading', error: '', file: null };
      if (app.uploads.length >= UI.MAX_FILES) {
        hint('A message may carry at most ' + UI.MAX_FILES + ' files.');
        break;
      }
      const why = UI.checkUpload(u.name, f.type, f.size);
      if (why) {
        u.status = 'error';
        u.error = why;
        hint(why);
      }
      app.uploads.push(u);
      if (!why) uploadFile(u, f, app.agent);
    }
    renderPendingFiles();
  }

  async function uploadFile(u, f, agent) {
    const headers = { 'Content-Type': 'application/octet-stream', Accept: 'application/json' };
    if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
    let body = null;
    let status = 0;
    try {
      const res = await fetch(UI.uploadPath(agent, chatId, u.name, f.type), { method: 'POST', headers, body: f, cache: 'no-store' });
      status = res.status;
      try { body = await res.json(); } catch (_) { body = null; }
    } catch (e) {
      body = null;
    }
    if (status === 201 && body && body.id) {
      u.status = 'ready';
      u.file = { id: body.id, name: body.name || u.name, url: body.url, image: /^image\/(png|jpeg|gif|webp)$/.test(body.media_type || '') };
    } else {
      u.status = 'error';
      u.error = (body && body.error && body.error.message) || (status ? 'HTTP ' + status : 'The gateway cannot be reached.');
      if (status === 401) needAuth();
      hint('Could not attach ' + u.name + ': ' + u.error);
    }
    renderPendingFiles();
  }

  function renderPendingFiles() {
    const box = els.pendingFiles;
    box.replaceChildren(...app.uploads.map((u) => {
      const remove = h('button', { type: 'button', class: 'pending-remove', title: 'Remove ' + u.name }, '×');
      remove.addEventListener('click', () => {
        app.uploads = app.uploads.filter((x) => x !== u);
        renderPendingFiles();
        els.input.focus();
      });
      const state = u.status === 'uploading' ? 'uploading…' : u.status === 'error' ? u.error : (u.size ? UI.sizeText(u.size) : 'ready');
      return h('li', { class: 'pending-file ' + u.status, 'data-name': u.name, title: u.name + ' — ' + state },
        u.file && u.file.image ? h('img', { class: 'pending-thumb', src: UI.withKey(u.file.url, apiKey), alt: '' }) : h('span', { class: 'pending-icon', 'aria-hidden': 'true' }, (u.name.match(/\.([a-z0-9]{1,4})$/i) || [null, 'file'])[1]),
        h('span', { class: 'pending-name' }, u.name),
        h('span', { class: 'pending-state' }, state),
        remove);
    }));
    box.hidden = app.uploads.length === 0;
  }

  els.attach.addEventListener('click', () => els.fileInput.click());
  els.fileInput.addEventListener('change', () => {
    addFiles(els.fileInput.files);
    els.fileInput.value = '';
    els.input.focus();
  });
  els.input.addEventListener('paste', (e) => {
    const files = e.clipboardData && e.clipboardData.files;
    if (files && files.length > 0) {
      e.preventDefault(); // a pasted image is a file, not its name as text
      addFiles(files);
    }
  });
  const hasFiles = (e) => !!e.dataTransfer && Array.from(e.dataTransfer.types || []).includes('Files');
  els.chatView.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
    els.chatView.classList.add('dropping');
  });
  els.chatView.addEventListener('dragleave', (e) => {
    if (!els.chatView.contains(e.relatedTarget)) els.chatView.classList.remove('dropping');
  });
  els.chatView.addEventListener('drop', (e) => {
    els.chatView.classList.remove('dropping');
    if (!hasFiles(e)) return;
    e.preventDefault();
    addFiles(e.dataTransfer.files);
  });

  function stopTurn() {
    if (!wsOpen() || !app.state.active) return;
    const turn = app.state.turns[app.state.active];
    hint('Stopping…');
    request(UI.stopFrame(turn ? turn.agent : app.agent, chatId, UI.newControlId('s')))
      .then((f) => { if (!f.stopped && app.state.active) hint('Nothing was running on the server; the reply should end by itself.'); })
      .catch((e) => hint('Could not stop: ' + e.message));
  }

  els.composer.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = els.input.value.replace(/\s+$/, '');
    if (submit(text)) {
      els.input.value = '';
      autoGrow();
    }
    els.input.focus();
  });

  els.input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      if (typeof els.composer.requestSubmit === 'function') els.composer.requestSubmit();
      else els.composer.dispatchEvent(new Event('submit', { cancelable: true }));
    } else if (e.key === 'Escape' && app.state.active) {
      stopTurn();
    }
  });

  function autoGrow() {
    const t = els.input;
    t.style.height = 'auto';
    t.style.height = Math.min(t.scrollHeight, Math.round(window.innerHeight * 0.4)) + 'px';
  }
  els.input.addEventListener('input', autoGrow);

  els.stop.addEventListener('click', stopTurn);

  // ------------------------------------------------------------ WebSocket

  function setConn(state, delayMs) {
    const c = els.conn;
    c.dataset.state = state;
    clearInterval(app.countdown);
    app.countdown = null;
    switch (state) {
      case 'open': c.textContent = 'Connected'; break;
      case 'connecting': c.textContent = app.everOpened ? 'Reconnecting…' : 'Connecting…'; break;
      case 'auth': c.textContent = 'API key needed'; break;
      case 'closed': {
        const tick = () => {
          const s = Math.max(0, Math.ceil((app.retryAt - Date.now()) / 1000));
          c.textContent = 'Offline · retrying in ' + s + ' s';
        };
        app.retryAt = Date.now() + (delayMs || 0);
        tick();
        app.countdown = setInterval(tick, 1000);
        break;
      }
      default: c.textContent = state;
    }
  }

  function connect() {
    clearTimeout(app.retryTimer);
    app.retryTimer = null;
    if (app.authNeeded || app.ws) return;
    setConn('connecting');
    dispatch({ type: 'conn', state: 'connecting' });
    let ws;
    try {
      ws = new WebSocket(UI.wsUrl(window.location, apiKey));
    } catch (e) {
      scheduleReconnect(false);
      return;
    }
    app.ws = ws;
    let opened = false;
    ws.onopen = () => {
      if (app.ws !== ws) return;
      opened = true;
      const first = !app.everOpened;
      app.everOpened = true;
      app.retry = 0;
      setConn('open');
      dispatch({ type: 'conn', state: 'open' });
      // Queued canvas actions are sent once the agents and the
      // conversation are read again (an action of another one is dropped).
      if (!first || app.agentsError) holdActions(onReconnected());
      else if (app.agent) holdActions(refreshSessions()); // the list again, now over the control channel
    };
    ws.onmessage = (ev) => {
      if (app.ws !== ws) return;
      let f;
      try { f = JSON.parse(ev.data); } catch (_) { return; }
      handleFrame(f);
    };
    ws.onclose = () => {
      if (app.ws !== ws) return;
      app.ws = null;
      rejectPending();
      if (app.state.active) app.needsReload = true;
      dispatch({ type: 'conn', state: 'closed' });
      scheduleReconnect(opened);
    };
    ws.onerror = () => { /* onclose follows */ };
  }

  function scheduleReconnect(wasOpen) {
    if (app.authNeeded) return;
    const base = Math.min(30000, 500 * Math.pow(2, app.retry));
    const delay = Math.round(base * (0.75 + Math.random() * 0.5));
    app.retry = Math.min(app.retry + 1, 10);
    setConn('closed', delay);
    clearTimeout(app.retryTimer);
    app.retryTimer = setTimeout(connect, delay);
    // A handshake that keeps failing may be a refused key: REST tells.
    if (!wasOpen && app.retry >= 2) api('/api/v1/agents').catch(() => { /* needAuth on 401 */ });
  }

  function connectNow() {
    if (app.ws || app.authNeeded) return;
    app.retry = 0;
    connect();
  }

  async function onReconnected() {
    // The gateway may have restarted with other agents, or an agent become
    // (not) ready: the list is read again (the current agent stays chosen
    // while it exists).
    const before = app.agent;
    await loadAgents();
    if (app.agent !== before || app.agentsError || app.agents.length === 0) return; // selectAgent loaded the rest
    await refreshSessions();
    if (app.needsReload) {
      app.needsReload = false;
      await loadHistory();
    }
  }

  function handleFrame(f) {
    if (!f || typeof f !== 'object') return;
    if (settle(f)) return; // the answer to a control-channel or stop request
    if (canvas) canvas.frame(f);
    dispatch({ type: 'frame', frame: f });
    // Queued canvas actions wait for the list the turn's end reads again:
    // another tab of this chat may have switched its conversation.
    if (f.type === 'done' && f.id && app.state.turns[f.id]) holdActions(onTurnDone(app.state.turns[f.id]));
  }

  async function onTurnDone(turn) {
    hint('');
    const agent = app.agent;
    const prevDialog = app.currentDialog;
    await refreshSessions();
    if (app.agent !== agent || turn.agent !== agent) return;
    const isCommand = turn.commands.length > 0;
    if (isCommand && (app.currentDialog !== prevDialog || UI.DIALOG_COMMANDS.has(turn.command))) {
      await loadHistory([turn.id]);
    }
    if (document.activeElement === document.body) els.input.focus();
  }

  window.addEventListener('online', connectNow);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) connectNow(); });

  // ------------------------------------------------------------ views, health

  function showView(view, focus) {
    const config = view === 'config';
    els.chatView.hidden = config;
    els.configView.hidden = !config;
    els.chatTab.setAttribute('aria-selected', String(!config));
    els.healthTab.setAttribute('aria-selected', String(config));
    els.chatTab.tabIndex = config ? -1 : 0;
    els.healthTab.tabIndex = config ? 0 : -1;
    els.app.dataset.view = config ? 'config' : 'chat';
    if (focus) (config ? els.healthTab : els.chatTab).focus();
    if (config) {
      loadHealth();
      loadAgents();
      loadAgentConfig();
    }
  }

  function setHash(hash) {
    try { window.history.replaceState(null, '', window.location.pathname + window.location.search + hash); } catch (_) { /* ignore */ }
  }

  els.chatTab.addEventListener('click', () => { setHash(''); showView('chat'); });
  els.healthTab.addEventListener('click', () => { setHash('#health'); showView('config'); });
  for (const tab of [els.chatTab, els.healthTab]) {
    tab.addEventListener('keydown', (e) => {
      if (e.key !== 'ArrowLeft' && e.key !== 'ArrowRight' && e.key !== 'Home' && e.key !== 'End') return;
      e.preventDefault();
      const toConfig = e.key === 'End' || (e.key !== 'Home' && tab === els.chatTab);
      setHash(toConfig ? '#health' : '');
      showView(toConfig ? 'config' : 'chat', true);
    });
  }
  window.addEventListener('hashchange', () => showView(window.location.hash === '#health' ? 'config' : 'chat'));

  async function loadHealth() {
    els.health.setAttribute('aria-busy', 'true');
    els.healthSummary.textContent = 'Checking…';
    els.healthSummary.className = 'health-summary';
    let r;
    try {
      r = await api('/api/v1/health');
    } catch (e) {
      els.health.removeAttribute('aria-busy');
      els.healthSummary.textContent = 'Unavailable';
      els.healthSummary.classList.add('fail');
      els.health.replaceChildren(h('div', { class: 'check fail' },
        h('span', { class: 'check-state' }, 'FAIL'),
        h('div', { class: 'check-body' }, h('div', { class: 'check-name' }, 'gateway'), h('div', { class: 'check-message' }, e.message))));
      return;
    }
    els.health.removeAttribute('aria-busy');
    const view = UI.healthView(r);
    els.healthSummary.textContent = view.summary;
    els.healthSummary.classList.add(view.ok ? 'ok' : 'fail');
    els.health.replaceChildren(...view.sections.map((sec) => h('section', { class: 'health-kind', 'data-kind': sec.kind },
      h('h4', { class: 'health-kind-title' }, sec.title),
      ...sec.checks.map((c) => h('div', { class: 'check ' + (c.ok ? 'ok' : c.kind === 'optional' ? 'warn' : 'fail'), 'data-name': c.name, 'data-kind': c.kind },
        h('span', { class: 'check-state' }, c.state),
        h('div', { class: 'check-body' },
          h('div', { class: 'check-name' }, c.name, ' ', h('span', { class: 'check-kind' }, c.label)),
          c.message ? h('div', { class: 'check-message' }, c.message) : null,
          c.fix ? h('div', { class: 'check-fix' }, h('span', { class: 'check-fix-label' }, 'Fix: '), c.fix) : null))))));
    if (view.count === 0) els.health.append(h('p', { class: 'muted' }, 'No checks reported.'));
  }

  els.healthRefresh.addEventListener('click', loadHealth);

  // ------------------------------------------------------------ agent configuration

  const listText = (a) => (Array.isArray(a) ? a.join(', ') : '');
  const textList = (s) => s.split(',').map((x) => x.trim()).filter(Boolean);

  /**
   * loadAgentConfig shows the chosen agent's model, key and tools
   * (GET /api/v1/config/agents/{name}). In embedded mode the form saves
   * them into the manifest folder (PUT: the loader's validation, then a
   * reload); in cluster mode it is read-only and names the kubectl command.
   */
  async function loadAgentConfig() {
    const name = app.agent;
    els.cfgName.textContent = name ? '“' + name + '”' : '';
    els.cfgStatus.textContent = '';
    els.cfgStatus.className = 'cfg-status';
    if (!name) { els.cfgForm.hidden = true; return; }
    let r;
    try {
      r = await api('/api/v1/config/agents/' + encodeURIComponent(name));
    } catch (e) {
      els.cfgForm.hidden = true;
      els.cfgMode.textContent = 'Unavailable: ' + e.message;
      return;
    }
    if (name !== app.agent) return;
    showAgentConfig(r.config || {});
  }

  function showAgentConfig(c) {
    els.cfgForm.hidden = false;
    els.cfgForm.dataset.editable = c.editable ? 'true' : 'false';
    els.cfgProvider.value = c.provider || 'openai';
    els.cfgModel.value = c.model || '';
    els.cfgBaseURL.value = c.base_url || '';
    els.cfgKey.value = '';
    els.cfgKey.placeholder = c.key_set ? 'set (' + (c.key_source || 'hidden') + '); type a new one to replace it' : 'not set: paste the provider\'s key';
    els.cfgProfile.value = c.tools_profile || '';
    els.cfgAllow.value = listText(c.tools_allow);
    els.cfgDeny.value = listText(c.tools_deny);
    for (const el of [els.cfgProvider, els.cfgModel, els.cfgBaseURL, els.cfgKey, els.cfgProfile, els.cfgAllow, els.cfgDeny]) el.disabled = !c.editable;
    els.cfgSave.hidden = !c.editable;
    if (c.mode === 'cluster') {
      els.cfgMode.textContent = 'Read-only: cluster mode';
      els.cfgEdit.replaceChildren('Agents are Kubernetes resources here; change this one with ', h('code', { class: 'cfg-kubectl' }, c.edit || 'kubectl edit agent ' + c.agent), '.');
    } else if (!c.editable) {
      els.cfgMode.textContent = 'Read-only';
      els.cfgEdit.replaceChildren('Only the installation\'s own API key may change the agents; the manifest is ', h('code', null, c.edit || ''), '.');
    } else {
      els.cfgMode.textContent = 'Saved to the manifest folder';
      els.cfgEdit.replaceChildren('Saving rewrites ', h('code', null, c.edit || 'the agent\'s manifest'),
        ' (a new key goes to a Secret manifest of its own) after the same validation as at start-up, then reloads the agent.');
    }
  }

  els.cfgForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (els.cfgForm.dataset.editable !== 'true' || !app.agent) return;
    const body = {
      provider: els.cfgProvider.value, model: els.cfgModel.value.trim(), base_url: els.cfgBaseURL.value.trim(),
      api_key: els.cfgKey.value.trim(), tools_profile: els.cfgProfile.value,
      tools_allow: textList(els.cfgAllow.value), tools_deny: textList(els.cfgDeny.value),
    };
    els.cfgSave.disabled = true;
    els.cfgStatus.className = 'cfg-status';
    els.cfgStatus.textContent = 'Saving…';
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json' };
    if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
    let res = null;
    let out = null;
    try {
      res = await fetch('/api/v1/config/agents/' + encodeURIComponent(app.agent), { method: 'PUT', headers, body: JSON.stringify(body), cache: 'no-store' });
      try { out = await res.json(); } catch (_) { out = null; }
    } catch (_) { /* below */ }
    els.cfgSave.disabled = false;
    if (res && res.ok && out && out.config) {
      showAgentConfig(out.config);
      els.cfgStatus.className = 'cfg-status ok';
      els.cfgStatus.textContent = 'Saved; the agent reloaded.';
      loadAgents();
      loadHealth();
      return;
    }
    els.cfgStatus.className = 'cfg-status fail';
    els.cfgStatus.textContent = 'Not saved: ' + ((out && out.error && out.error.message) || (res ? 'HTTP ' + res.status : 'the gateway cannot be reached'));
  });

  function renderAgentsInfo() {
    const box = els.agentsInfo;
    box.replaceChildren();
    if (app.agents.length === 0) {
      box.append(h('p', { class: 'muted' }, app.agentsError || 'No agents.'));
      return;
    }
    for (const a of app.agents) {
      const model = a.model ? a.model.provider + ' / ' + a.model.model + (a.model.source ? ' (from ' + a.model.source + ')' : '') : 'none';
      const tools = Array.isArray(a.tools) && a.tools.length ? a.tools.join(', ') : 'none';
      box.append(h('div', { class: 'agent-card ' + (a.ready ? 'ok' : 'fail'), 'data-agent': a.name },
        h('div', { class: 'agent-card-head' }, h('strong', null, a.name), h('span', { class: 'check-state' }, a.ready ? 'ready' : 'not ready')),
        h('dl', null,
          h('dt', null, 'Model'), h('dd', null, model),
          !a.ready && a.reason ? h('dt', null, 'Reason') : null, !a.ready && a.reason ? h('dd', null, a.reason) : null,
          a.message ? h('dt', null, 'Message') : null, a.message ? h('dd', null, a.message) : null,
          h('dt', null, 'Tools'), h('dd', null, tools))));
    }
  }

  // ------------------------------------------------------------ sidebar (small screens)

  function openSidebar() {
    els.app.dataset.sidebar = 'open';
    els.sidebarToggle.setAttribute('aria-expanded', 'true');
    els.sidebarBackdrop.hidden = false;
    const first = els.sidebar.querySelector('button:not([disabled])');
    if (first) first.focus();
  }

  function closeSidebar() {
    if (els.app.dataset.sidebar !== 'open') return;
    els.app.dataset.sidebar = '';
    els.sidebarToggle.setAttribute('aria-expanded', 'false');
    els.sidebarBackdrop.hidden = true;
  }

  els.sidebarToggle.addEventListener('click', () => (els.app.dataset.sidebar === 'open' ? closeSidebar() : openSidebar()));
  els.sidebarBackdrop.addEventListener('click', closeSidebar);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') closeSidebar(); });

  // ------------------------------------------------------------ start

  // The canvas panel (canvas.js) sends through this page's connection.
  if (canvas) {
    canvas.attach({ api, request, submit, action: sendAction, chatId, agent: () => app.agent });
  }

  els.chatId.textContent = chatId;
  showEmptyState();
  updateControls();
  if (window.location.hash === '#health') showView('config');
  loadAgents();
  connect();

  // For debugging and browser tests.
  window.PicoBotApp = {
    get state() { return app.state; },
    get agent() { return app.agent; },
    get currentDialog() { return app.currentDialog; },
    chatId,
    submit,
    get actions() { return app.actions.map((a) => a.text); },
    reconnect: connectNow,
  };
})();
