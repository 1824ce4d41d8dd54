/**
 * The catalog moving mid-session: setTools / setContext bump the seq, the
 * edge re-reads, the backend is told, and a call to a tool that left gets
 * `tool_unavailable` listing what is there now.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { TetherError, type TetherClient, type Tool } from '../../dist/node.js';
import { rpcError } from '../helpers/backend.js';
import { Fixture } from '../helpers/fixture.js';
import { nextEvent, until } from '../helpers/wait.js';

function tool(name: string, handler: Tool['handler'] = () => `${name} done`): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler };
}

describe('manifest changes', () => {
  let fx: Fixture;
  let client: TetherClient;
  let session: string;

  const cartTools: Tool[] = [tool('getCart'), tool('checkout')];
  const catalogTools: Tool[] = [
    tool('listProducts'),
    tool('openProduct'),
    tool('goToCart', () => {
      // Navigating inside a handler: the result carries the new seq.
      client.update({ tools: cartTools, context: { pointer: { screen: 'cart' } } });
      return 'on the cart screen';
    }),
  ];

  before(async () => {
    fx = await Fixture.start();
    client = fx.client({ tools: catalogTools, context: { pointer: { screen: 'catalog' } } });
    session = await fx.online(client);
  });
  after(async () => fx?.dispose());

  test('setTools mid-session: the edge re-reads, the backend is told the new seq, the removed tool is unavailable', async () => {
    const applied = nextEvent(client, 'manifest', 5_000, (m) => m.seq === 2);
    const seq = client.setTools([tool('getProduct'), tool('addToCart')]);
    assert.equal(seq, 2);
    assert.equal((await applied).kept, 2);
    await fx.backend.notification('notifications/tools/list_changed', (p) => p['session'] === session && p['seq'] === 2, 5_000);
    const m = await fx.backend.tools(session);
    assert.equal(m.seq, 2);
    assert.deepEqual(m.tools.map((t) => t.name).sort(), ['client__add_to_cart', 'client__get_product']);

    const err = await rpcError(fx.call(session, 'client__open_product', {}, { bound_seq: 1 }));
    assert.equal(err.kind, 'tool_unavailable');
    assert.deepEqual([...(err.data['available'] as string[])].sort(), ['client__add_to_cart', 'client__get_product']);
    assert.equal(err.data['seq'], 2);

    const ok = await fx.call(session, 'client__get_product');
    assert.equal(ok.result._meta?.['tether.dev/seq'], 2);
  });

  test('setContext moves the seq and the backend reads the new context', async () => {
    const applied = nextEvent(client, 'manifest', 5_000, (m) => m.seq === 3);
    assert.equal(client.setContext({ pointer: { screen: 'product', id: 'P-7' }, snapshot: { price: 12 } }), 3);
    await applied;
    const m = await fx.backend.tools(session);
    assert.equal(m.seq, 3);
    assert.deepEqual(m.context, { pointer: { screen: 'product', id: 'P-7' }, snapshot: { price: 12 } });
  });

  test('navigating inside a handler: the result carries the new seq and the backend gets the fresh manifest with it', async () => {
    const applied = nextEvent(client, 'manifest', 5_000, (m) => m.seq === 5);
    client.setTools(catalogTools); // seq 4
    await nextEvent(client, 'manifest', 5_000, (m) => m.seq === 4);
    const r = await fx.call(session, 'client__go_to_cart', {}, { bound_seq: 4 });
    assert.equal(r.result._meta?.['tether.dev/seq'], 5);
    assert.equal(r.seq, 5);
    assert.deepEqual(r.manifest?.tools.map((t) => t.name).sort(), ['client__checkout', 'client__get_cart']);
    assert.deepEqual(r.manifest?.context, { pointer: { screen: 'cart' } });
    await applied;
  });

  test('an invalid setTools throws and leaves the catalog and seq as they were', () => {
    const before = client.seq;
    assert.throws(() => client.setTools([tool('a'), tool('a')]), (e: unknown) => e instanceof TetherError && e.code === 'invalid_tool' && /unique/.test(e.message));
    assert.throws(
      () => client.setTools([{ ...tool('big'), description: 'd'.repeat(3_000) }]),
      (e: unknown) => e instanceof TetherError && e.code === 'invalid_tool' && /2048/.test(e.message),
    );
    assert.equal(client.seq, before);
    assert.deepEqual(client.toolNames, ['getCart', 'checkout']);
  });

  test('re-declaring the applied catalog moves the seq, and its digest spares the edge a re-read', async () => {
    const screen = { pointer: { screen: 'scanner' } };
    const device = fx.client({ tools: [tool('scan')], context: screen });
    const sid = await fx.online(device);
    const manifests: number[] = [];
    device.on('manifest', (m) => manifests.push(m.seq));
    const skipped = await fx.edge.counter('tether_rereads_skipped_total');
    assert.equal(device.update({ tools: [tool('scan', () => 'a new handler')], context: { pointer: { screen: 'scanner' } } }), 2);
    await until(async () => ((await fx.edge.counter('tether_rereads_skipped_total')) === skipped + 1 ? true : undefined), 5_000, 'the edge to re-stamp seq 2');
    assert.equal((await fx.backend.tools(sid)).seq, 2);
    const applied = nextEvent(device, 'manifest', 5_000, (m) => m.seq === 3);
    device.setContext({ pointer: { screen: 'results' } });
    await applied;
    assert.deepEqual(manifests, [3], 'seq 2 was never re-read; seq 3 (a new context) was');
    assert.equal(await fx.edge.counter('tether_rereads_skipped_total'), skipped + 1);
    assert.deepEqual((await fx.backend.tools(sid)).context, { pointer: { screen: 'results' } });
  });

  test('a catalog larger than one frame is paged with nextCursor and the edge reads every page', async () => {
    const many = Array.from({ length: 30 }, (_, i) => ({
      ...tool(`bulkTool${String(i).padStart(2, '0')}`),
      description: `Bulk tool ${i}. ${'Lorem ipsum dolor sit amet. '.repeat(40)}`.slice(0, 1_200),
    }));
    const declared = many.reduce((n, t) => n + JSON.stringify({ name: t.name, description: t.description, inputSchema: t.inputSchema }).length, 0);
    assert.ok(declared > 2 * 15_360, `the catalog (${declared} bytes) must need at least three frames`);
    const applied = nextEvent(client, 'manifest', 5_000, (m) => m.seq === client.seq);
    client.setTools(many);
    const report = await applied;
    // The edge saw all 30 (kept or dropped by its 12 KB manifest cap): every page arrived.
    assert.equal(report.kept + report.dropped.length, 30);
    assert.ok(report.dropped.every((d) => d.reason === 'manifest_too_large'), JSON.stringify(report.dropped));
    const m = await fx.backend.tools(session);
    assert.equal(m.tools.length, report.kept);
  });
});
