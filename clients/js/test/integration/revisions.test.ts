/**
 * The SDK speaking MCP 2026-07-28 to a real edge: announced at the upgrade
 * (the `MCP-Protocol-Version` header under Node), discovered instead of
 * initialized, called, and its catalog changes carried on the listen stream
 * the edge opens. The default client stays on 2025-11-25. The edge reports
 * which revision each session speaks in `sessions/list`.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import type { TetherClient, Tool } from '../../dist/node.js';
import { rpcError } from '../helpers/backend.js';
import { Fixture } from '../helpers/fixture.js';
import { nextEvent } from '../helpers/wait.js';

function tool(name: string): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler: (args) => ({ tool: name, args }) };
}

describe('MCP revisions against a real edge', () => {
  let fx: Fixture;
  let modern: TetherClient;
  let session: string;

  before(async () => {
    fx = await Fixture.start();
    modern = fx.client({
      tools: [tool('scanShelf'), tool('countItems')],
      concept: { instructions: 'A shelf scanner in a warehouse.', nouns: ['shelf'] },
      protocolVersion: '2026-07-28',
    });
    session = await fx.online(modern);
  });
  after(async () => fx?.dispose());

  test('a 2026-07-28 client is discovered: the edge lists it under that revision, with its identity and concept', async () => {
    const listed = await fx.backend.waitForSession(session);
    assert.equal(listed.protocol_version, '2026-07-28', JSON.stringify(listed));
    assert.equal(listed.server_info['name'], 'test-app');
    assert.equal(listed.tools, 2);
    assert.equal(modern.protocolVersion, '2026-07-28');
    const m = await fx.backend.tools(session);
    assert.equal(m.instructions, 'A shelf scanner in a warehouse.');
    assert.deepEqual(m.concept, { nouns: ['shelf'] });
  });

  test('calls work, and carry the seq', async () => {
    const r = await fx.call(session, 'client__scan_shelf', { aisle: 4 });
    assert.equal(r.result.isError, undefined);
    assert.deepEqual(r.result.structuredContent, { tool: 'scanShelf', args: { aisle: 4 } });
    assert.equal(r.result._meta?.['tether.dev/seq'], 1);
  });

  test('setTools reaches the backend as list_changed over the listen stream; the removed tool is unavailable', async () => {
    const applied = nextEvent(modern, 'manifest', 5_000, (m) => m.seq === 2);
    assert.equal(modern.setTools([tool('countItems'), tool('printLabel')]), 2);
    await applied;
    await fx.backend.notification('notifications/tools/list_changed', (p) => p['session'] === session && p['seq'] === 2, 5_000);
    const m = await fx.backend.tools(session);
    assert.deepEqual(m.tools.map((t) => t.name).sort(), ['client__count_items', 'client__print_label']);
    const err = await rpcError(fx.call(session, 'client__scan_shelf', {}, { bound_seq: 1 }));
    assert.equal(err.kind, 'tool_unavailable');
    const ok = await fx.call(session, 'client__print_label');
    assert.equal(ok.result._meta?.['tether.dev/seq'], 2);
    const metrics = await fx.edge.metrics();
    assert.match(metrics, /^tether_subscriptions_ended_total 0$/m, 'the listen stream was never answered');
    assert.match(metrics, /^tether_sessions_by_revision_total\{revision="2026-07-28"\} 1$/m);
  });

  test('the default client speaks 2025-11-25', async () => {
    const plain = fx.client({ tools: [tool('scanShelf')] });
    const sid = await fx.online(plain);
    const listed = await fx.backend.waitForSession(sid);
    assert.equal(listed.protocol_version, '2025-11-25');
    assert.equal(plain.protocolVersion, '2025-11-25');
    const r = await fx.call(sid, 'client__scan_shelf');
    assert.deepEqual(r.result.structuredContent, { tool: 'scanShelf', args: {} });
  });
});
