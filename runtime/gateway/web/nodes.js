// Paired devices (`picobot node`): the Devices section of the configuration
// view lists the tenant's nodes, pending requests first, with Approve and
// Reject for a pending node and Revoke for an approved one (GET
// /api/v1/nodes, POST /api/v1/nodes/{id}/{decision}; docs/nodes.md). It is
// self-contained: it reads the API key app.js keeps in localStorage.
//
// Element ids browser tests may rely on: #nodes (the list; one li.node per
// node with data-node-id and data-state, its buttons .node-approve,
// .node-reject, .node-revoke), #nodes-refresh, #nodes-status.
(function () {
  'use strict';
  const list = document.getElementById('nodes');
  const status = document.getElementById('nodes-status');
  const refresh = document.getElementById('nodes-refresh');
  if (!list) return;
  // The outcome of the user's last decision (or why it failed): kept across
  // the re-renders that follow it, which would otherwise blank it at once.
  let note = '';

  function headers() {
    const h = { Accept: 'application/json' };
    let key = '';
    try { key = localStorage.getItem('picobot.apiKey') || ''; } catch (_) { key = ''; }
    if (key) h.Authorization = 'Bearer ' + key;
    return h;
  }

  async function call(path, method) {
    const res = await fetch(path, { method: method || 'GET', headers: headers(), cache: 'no-store' });
    let body = null;
    try { body = await res.json(); } catch (_) { body = null; }
    if (!res.ok) {
      const e = body && body.error;
      throw new Error((e && e.message) || ('HTTP ' + res.status));
    }
    return body || {};
  }

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const kid of kids) e.append(kid);
    return e;
  }

  function button(cls, label, id, decision) {
    const b = el('button', { type: 'button', class: cls }, label);
    b.addEventListener('click', () => decide(id, decision));
    return b;
  }

  function render(nodes) {
    list.replaceChildren();
    const order = { pending: 0, approved: 1, rejected: 2, revoked: 3 };
    nodes.sort((a, b) => (order[a.state] - order[b.state]) || a.id.localeCompare(b.id));
    for (const n of nodes) {
      const actions = el('span', { class: 'node-actions' });
      if (n.state === 'pending') {
        actions.append(button('primary node-approve', 'Approve', n.id, 'approve'), button('node-reject', 'Reject', n.id, 'reject'));
      } else if (n.state === 'approved') {
        actions.append(button('danger node-revoke', 'Revoke', n.id, 'revoke'));
      }
      const caps = (n.capabilities || []).join(', ');
      list.append(el('li', { class: 'node', 'data-node-id': n.id, 'data-state': n.state },
        el('span', { class: 'node-name' }, n.name || n.id),
        el('code', { class: 'node-id' }, n.id),
        el('span', { class: 'node-state' }, n.state + (n.connected ? ' · online' : ' · offline')),
        el('span', { class: 'node-caps' }, (n.platform || '') + (caps ? ' — ' + caps : '')),
        actions));
    }
    status.textContent = nodes.length ? note : 'No paired devices. Run `picobot node` on a machine to pair it.';
  }

  async function load() {
    try {
      const body = await call('/api/v1/nodes');
      render(body.nodes || []);
    } catch (e) {
      status.textContent = 'Could not load the devices: ' + e.message;
    }
  }

  async function decide(id, decision) {
    try {
      const body = await call('/api/v1/nodes/' + encodeURIComponent(id) + '/' + decision, 'POST');
      note = 'Node ' + id + ': ' + ((body.node && body.node.state) || decision) + '.';
    } catch (e) {
      note = 'Could not ' + decision + ' ' + id + ': ' + e.message;
    }
    status.textContent = note;
    load();
  }

  if (refresh) refresh.addEventListener('click', load);
  const tab = document.getElementById('health-tab');
  if (tab) tab.addEventListener('click', load);
  // New pairing requests show while the view is open.
  setInterval(() => {
    const view = document.getElementById('config-view');
    if (view && !view.hidden && document.visibilityState === 'visible') load();
  }, 5000);
  load();
})();
