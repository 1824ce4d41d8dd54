/**
 * The public types in use, as an application writes them: typed handler
 * arguments, tools of different argument types in one list, events with
 * their payload types. This file failing to compile is the failure.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { TetherClient, ToolError, type CallToolResult, type ClientEvents, type ConnectOptions, type Tool } from '../../dist/node.js';
import { FakeEdge } from '../helpers/fake.js';

interface WeatherArgs {
  city: string;
  units?: 'c' | 'f';
}

const weather: Tool<WeatherArgs> = {
  name: 'getWeather',
  description: 'Weather for a city.',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  handler: async (args, ctx) => {
    const city: string = args.city;
    if (ctx.signal.aborted) throw new ToolError('cancelled', 'stopped');
    return { city, tempC: 21, units: args.units ?? 'c' };
  },
};

const raw: Tool = {
  name: 'raw',
  description: 'Returns a full result.',
  inputSchema: { type: 'object' },
  handler: (): CallToolResult => ({ content: [{ type: 'text', text: 'hi' }], structuredContent: { ok: true } }),
};

test('typed tools of different argument types share one catalog', async () => {
  const edge = new FakeEdge();
  const options: ConnectOptions = { url: 'ws://fake:1', token: 't', info: { name: 'types', version: '1' }, tools: [weather, raw] };
  const client = new TetherClient(options, edge.dial);
  const online: ClientEvents['online'][] = [];
  client.on('online', (e) => online.push(e));
  const peer = await edge.peer(0);
  await peer.handshake('s');
  const res = await peer.ask('tools/call', { name: 'getWeather', arguments: { city: 'Oslo' } });
  assert.deepEqual((res['result'] as Record<string, unknown>)['structuredContent'], { city: 'Oslo', tempC: 21, units: 'c' });
  assert.deepEqual(online, [{ sessionId: 's', seq: 1, resumed: false }]);
  await client.close();
});
