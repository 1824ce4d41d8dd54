import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { connect, type TetherClient } from '../../dist/node.js';
import { Backend } from '../helpers/backend.js';
import { Edge } from '../helpers/edge.js';

let edge: Edge;
let backend: Backend;
let client: TetherClient | undefined;

before(async () => {
  edge = await Edge.start();
  backend = await Backend.connect(edge.url, edge.token('tether-backend', { sub: 'agent' }));
});
after(async () => {
  await client?.close();
  backend?.close();
  await edge?.dispose();
});

test('smoke', async () => {
  client = connect({
    url: edge.url,
    token: edge.token('tether-client'),
    info: { name: 'smoke', version: '1.0.0' },
    tools: [{ name: 'getWeather', description: 'd', inputSchema: { type: 'object' }, handler: (args) => ({ echo: args }) }],
  });
  client.on('error', (e) => console.log('error', e));
  const sid = await client.ready(5000);
  await backend.waitForSession(sid);
  const r = await backend.call(sid, 'client__get_weather', { city: 'Oslo' }, { credential: edge.token('tether-client') });
  console.log(JSON.stringify(r));
  assert.deepEqual(r.result.structuredContent, { echo: { city: 'Oslo' } });
});
