// Wiring: read the edge URL and token (query string or form), connect with
// the SDK's browser build, and keep the page in step with the client's events.

import { connect } from './sdk/browser.js';
import { Shop } from './shop.js';
import * as ui from './ui.js';

const form = document.getElementById('connect');
const connectButton = document.getElementById('connect-button');
const disconnectButton = document.getElementById('disconnect-button');
let client;

let declared = '';

/** What the model would see: the declarations (without handlers) and the context. */
function manifestKey(tools, context) {
  return JSON.stringify({ tools: tools.map(({ handler, ...declaration }) => declaration), context });
}

const shop = new Shop(() => {
  ui.renderScreen(shop);
  const tools = shop.tools();
  const context = shop.context();
  ui.renderTools(tools);
  // Only a change the model can see moves the seq (a dialog opening does not).
  const key = manifestKey(tools, context);
  if (client !== undefined && key !== declared) {
    declared = key;
    client.update({ tools, context });
    ui.renderState(client.state, client.sessionId, client.seq);
  }
});

function start(edge, token) {
  client = connect({
    url: edge,
    token,
    info: { name: 'shop-web-example', version: '1.0.0' },
    concept: {
      instructions: 'An outdoor-gear web shop; the shopper is on the page and can see what the tools do.',
      app: 'Outdoor shop (web)',
      nouns: ['product', 'cart', 'order'],
      cannot: ['change prices', 'ship outside the EU'],
    },
    tools: shop.tools(),
    context: shop.context(),
    // A write (placing the order) runs only once the shopper approved exactly it.
    onApproval: (request, signal) => shop.approve(request, signal),
  });
  declared = manifestKey(shop.tools(), shop.context());
  const show = () => ui.renderState(client.state, client.sessionId, client.seq);
  client.on('state', show);
  client.on('connecting', (e) => ui.log(`connecting (attempt ${e.attempt})`));
  client.on('online', (e) => {
    show();
    ui.log(`online: session ${e.sessionId}, seq ${e.seq}`);
  });
  client.on('offline', (e) => {
    show();
    const retry = e.willRetry ? `; retrying in ${e.retryInMs} ms` : '; not retrying';
    ui.log(`offline: ${e.reason}${e.code ? ` (close ${e.code})` : ''}${e.error ? ` — ${e.error.message}` : ''}${retry}`);
    if (!e.willRetry) setConnected(false);
  });
  client.on('manifest', (r) => {
    ui.renderManifest(r);
    show();
  });
  client.on('callStart', ui.callStarted);
  client.on('callEnd', ui.callEnded);
  client.on('error', (err) => ui.log(`problem: ${err.message}`));
  setConnected(true);
}

function setConnected(connected) {
  connectButton.disabled = connected;
  disconnectButton.disabled = !connected;
}

form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const data = new FormData(form);
  try {
    start(String(data.get('edge')).trim(), String(data.get('token')).trim());
  } catch (err) {
    ui.log(`cannot connect: ${err.message}`);
  }
});

disconnectButton.addEventListener('click', async () => {
  await client?.close();
  client = undefined;
  setConnected(false);
});

for (const button of document.querySelectorAll('nav button')) {
  button.addEventListener('click', () => shop.navigate(button.dataset.screen));
}
document.getElementById('confirm-yes').addEventListener('click', () => shop.pendingConfirm?.answer(true));
document.getElementById('confirm-no').addEventListener('click', () => shop.pendingConfirm?.answer(false));
document.getElementById('pickup-ready').addEventListener('click', () => shop.pendingPickup?.ready());

ui.renderScreen(shop);
ui.renderTools(shop.tools());
ui.renderState('offline');

// ?edge=ws://…&token=… fills the form and connects; the token is then taken
// out of the address bar so it does not linger in history or screenshots.
const params = new URLSearchParams(location.search);
const edge = params.get('edge');
const token = params.get('token');
if (edge) form.elements.edge.value = edge;
if (token) form.elements.token.value = token;
if (token) {
  params.delete('token');
  history.replaceState(null, '', `${location.pathname}${params.size > 0 ? `?${params}` : ''}`);
}
if (edge && token) form.requestSubmit();
