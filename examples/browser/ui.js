// Rendering: connection state, the app's screen, the declared tools and the
// live call log. Pure DOM, no framework.

import { namespacedNames } from './sdk/browser.js';
import { PRODUCTS } from './shop.js';

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'dataset') Object.assign(node.dataset, v);
    else node[k] = v;
  }
  node.append(...children);
  return node;
}

export function renderState(state, sessionId, seq) {
  const badge = $('state');
  badge.textContent = state;
  badge.dataset.state = state;
  $('session').textContent = sessionId ?? '—';
  $('seq').textContent = seq ?? '—';
}

export function log(text) {
  const item = el('li', { textContent: `${new Date().toLocaleTimeString()}  ${text}` });
  $('log').prepend(item);
}

export function renderScreen(shop) {
  for (const b of document.querySelectorAll('nav button')) {
    if (b.dataset.screen === shop.screen) b.setAttribute('aria-current', 'page');
    else b.removeAttribute('aria-current');
  }
  const screen = $('screen');
  screen.replaceChildren();
  if (shop.screen === 'catalog') {
    screen.append(el('ul', {}, ...PRODUCTS.map((p) => el('li', { textContent: `${p.name} — ${p.price} € ${p.stock === 0 ? '(out of stock)' : ''}` }))));
  } else if (shop.screen === 'product') {
    const p = shop.product();
    screen.append(el('p', {}, el('strong', { textContent: p.name }), ` — ${p.price} €, ${p.stock} in stock`));
  } else {
    const rows = shop.cart.map((i) => el('li', { textContent: `${i.quantity} × ${shop.product(i.productId)?.name}` }));
    screen.append(rows.length === 0 ? el('p', { className: 'note', textContent: 'The cart is empty.' }) : el('ul', {}, ...rows), el('p', { textContent: `Total ${shop.total()} €` }));
  }
  const confirm = $('confirm');
  confirm.hidden = shop.pendingConfirm === null;
  if (shop.pendingConfirm !== null) $('confirm-text').textContent = shop.pendingConfirm.text;
  const pickup = $('pickup');
  pickup.hidden = shop.pendingPickup === null;
  if (shop.pendingPickup !== null) $('pickup-text').textContent = shop.pendingPickup.text;
}

export function renderTools(tools) {
  const names = namespacedNames(tools.map((t) => t.name));
  $('tools').replaceChildren(
    ...tools.map((t) =>
      el('li', { dataset: { tool: names.get(t.name) } }, el('code', { textContent: names.get(t.name) }), ` ← ${t.name}`, el('span', { textContent: t.description })),
    ),
  );
}

export function renderManifest(report) {
  const dropped = report.dropped.length === 0 ? '' : `; dropped ${report.dropped.map((d) => `${d.name} (${d.reason})`).join(', ')}`;
  $('manifest').textContent = `The edge applied seq ${report.seq}: kept ${report.kept} tools${dropped}.`;
}

const rows = new Map();

export function callStarted(call) {
  $('no-calls').hidden = true;
  const outcome = el('td', { className: 'outcome', textContent: call.taskId === undefined ? 'running…' : 'task running…', dataset: { outcome: 'running' } });
  const latency = el('td', { className: 'latency', textContent: '' });
  const row = el(
    'tr',
    { dataset: { callId: String(call.callId), tool: call.name, outcome: 'running' } },
    el('td', { textContent: new Date().toLocaleTimeString() }),
    el('td', {}, el('code', { textContent: call.name })),
    el('td', { className: 'args', title: JSON.stringify(call.arguments), textContent: JSON.stringify(call.arguments) }),
    outcome,
    latency,
  );
  // A task's row stays running past its call's answer: it ends when the handler settles.
  if (call.taskId !== undefined) row.dataset.task = call.taskId;
  rows.set(`${call.sessionId}/${call.callId}`, { row, outcome, latency });
  $('calls').prepend(row);
}

export function callEnded(call) {
  const r = rows.get(`${call.sessionId}/${call.callId}`);
  if (r === undefined) return;
  rows.delete(`${call.sessionId}/${call.callId}`);
  r.outcome.dataset.outcome = call.outcome;
  r.outcome.textContent = call.code === undefined ? call.outcome : `${call.outcome}: ${call.code}`;
  r.latency.textContent = `${call.latencyMs} ms`;
  r.row.dataset.outcome = call.outcome;
}
