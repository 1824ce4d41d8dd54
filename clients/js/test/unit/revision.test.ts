/**
 * MCP 2026-07-28 on the client link, frame by frame against a scripted edge
 * that plays exactly what tests/revisions.rs has the real edge send:
 * `server/discover`, results marked complete, the `subscriptions/listen`
 * stream and its acknowledgement, and `list_changed` tagged with the stream's
 * id and held back until the stream exists. Also: the announcement at the
 * upgrade, and a client that answers the revision the edge starts, not the
 * one it announced.
 */

import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';

import { resolveOptions } from '../../dist/options.js';
import { upgradeUrl } from '../../dist/transport-browser.js';
import { TetherClient, TetherError, type ConnectOptions, type Tool } from '../../dist/node.js';
import { DIGEST, digestFor, envelope as envelopeMeta, FakeEdge, type Frame } from '../helpers/fake.js';
import { nextEvent } from '../helpers/wait.js';

const MODERN = '2026-07-28';
const SUB = 'io.modelcontextprotocol/subscriptionId';
const LIST_CHANGED = 'notifications/tools/list_changed';

const made: TetherClient[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

function tool(name: string): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler: () => `${name} done` };
}

/** A client announcing 2026-07-28 unless `options` say otherwise; `{plain: true}` leaves `protocolVersion` out. */
function client(edge: FakeEdge, options: Partial<ConnectOptions> & { plain?: true } = {}): TetherClient {
  const { plain, ...rest } = options;
  const c = new TetherClient(
    {
      url: 'ws://fake:1',
      token: 'opaque',
      info: { name: 'unit', version: '0.0.1' },
      concept: { instructions: 'A shelf scanner.', nouns: ['shelf'] },
      tools: [tool('scanShelf')],
      ...(plain ? {} : { protocolVersion: MODERN }),
      ...rest,
    } as ConnectOptions,
    edge.dial,
  );
  made.push(c);
  return c;
}

const listChanged = (f: Frame): boolean => f['method'] === LIST_CHANGED;
const tick = (ms = 50): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('MCP 2026-07-28', () => {
  test('announced at the upgrade only when chosen; an unknown revision is refused at connect()', async () => {
    const edge = new FakeEdge();
    client(edge);
    client(edge, { protocolVersion: '2025-11-25' });
    client(edge, { plain: true });
    const [modern, explicit, implicit] = await Promise.all([edge.peer(0), edge.peer(1), edge.peer(2)]);
    assert.equal(modern.request.announce, MODERN);
    assert.equal(explicit.request.announce, undefined, 'the default is not announced: the edge greets it with initialize anyway');
    assert.equal(implicit.request.announce, undefined);
    const base = { url: 'ws://h:1', token: 't', info: { name: 'a', version: '1' } };
    assert.equal(resolveOptions(base).protocolVersion, '2025-11-25');
    assert.throws(
      () => resolveOptions({ ...base, protocolVersion: '2099-01-01' } as unknown as ConnectOptions),
      (e: unknown) => e instanceof TetherError && e.code === 'invalid_options' && /2026-07-28/.test(e.message),
    );
  });

  test('the browser announces in the query, beside the credential; the default announces nothing', () => {
    assert.equal(
      upgradeUrl({ url: 'ws://h:1/v1/client', token: 'a.b.c', announce: MODERN }),
      'ws://h:1/v1/client?access_token=a.b.c&mcp_protocol_version=2026-07-28',
    );
    assert.equal(upgradeUrl({ url: 'wss://h/mount/v1/client', token: 'a.b.c' }), 'wss://h/mount/v1/client?access_token=a.b.c');
  });

  test('discover, complete results, the acknowledged listen stream, and list_changed tagged with its id', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const online = nextEvent(c, 'online', 2_000);
    const peer = await edge.peer(0);
    const { discover, pages } = await peer.discover('sess-7');
    assert.deepEqual(discover['result'], {
      resultType: 'complete',
      supportedVersions: [MODERN],
      capabilities: { tools: { listChanged: true } },
      instructions: 'A shelf scanner.',
      ttlMs: 0,
      cacheScope: 'private',
      _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'unit', version: '0.0.1' }, 'tether.dev/concept': { nouns: ['shelf'] } },
    });
    assert.deepEqual(pages[0]?.['result'], {
      resultType: 'complete',
      tools: [{ name: 'scanShelf', description: 'The scanShelf tool.', inputSchema: { type: 'object' } }],
      _meta: { 'tether.dev/seq': 1, [DIGEST]: digestFor([tool('scanShelf')]) },
      ttlMs: 0,
      cacheScope: 'private',
    });

    peer.listen(41);
    const ack = await peer.waitSent((f) => f['method'] === 'notifications/subscriptions/acknowledged');
    assert.deepEqual(ack, {
      jsonrpc: '2.0',
      method: 'notifications/subscriptions/acknowledged',
      params: { _meta: { [SUB]: 41 }, notifications: { toolsListChanged: true } },
    });
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/tether.dev/manifest_applied', params: { seq: 1, kept: 1, dropped: [] } });
    assert.deepEqual(await online, { sessionId: 'sess-7', seq: 1, resumed: false });
    assert.equal(c.protocolVersion, MODERN);

    c.setTools([tool('countItems')]);
    const changed = await peer.waitSent(listChanged);
    assert.deepEqual(changed, { jsonrpc: '2.0', method: LIST_CHANGED, params: { _meta: { [SUB]: 41, 'tether.dev/seq': 2, [DIGEST]: digestFor([tool('countItems')]) } } });

    const call = await peer.ask('tools/call', { name: 'countItems', arguments: {}, _meta: { ...envelopeMeta(), 'tether.dev/deadline_ms': 7000 } });
    assert.deepEqual(call['result'], {
      resultType: 'complete',
      content: [{ type: 'text', text: 'countItems done' }],
      _meta: { 'tether.dev/seq': 2, [DIGEST]: digestFor([tool('countItems')]) },
    });
    const gone = await peer.ask('tools/call', { name: 'scanShelf', arguments: {}, _meta: envelopeMeta() });
    const goneResult = gone['result'] as Frame;
    assert.equal(goneResult['resultType'], 'complete');
    assert.equal((goneResult['structuredContent'] as Frame)['code'], 'tool_unavailable');
    assert.deepEqual((await peer.ask('ping'))['result'], { resultType: 'complete' }, 'not expected on 2026-07-28, but answered');

    await tick();
    assert.equal(peer.sent.filter((f) => f['id'] === 41).length, 0, 'the listen request stays open: answering it would end the stream');
    assert.equal(c.state, 'online');
  });

  test('changes before the listen stream opens are held, coalesced, and sent on it once it opens', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const peer = await edge.peer(0);
    await peer.discover();
    c.setTools([tool('a')]);
    await tick(0);
    c.setContext({ pointer: { screen: 'b' } });
    await tick();
    assert.equal(peer.sent.filter(listChanged).length, 0, 'no list_changed outside a listen stream');
    peer.listen(9);
    const changed = await peer.waitSent(listChanged);
    assert.deepEqual(changed['params'], { _meta: { [SUB]: 9, 'tether.dev/seq': 3, [DIGEST]: digestFor([tool('a')], { pointer: { screen: 'b' } }) } });
    await tick();
    assert.equal(peer.sent.filter(listChanged).length, 1);
  });

  test('a held change the edge already read is not announced again', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const peer = await edge.peer(0);
    peer.open();
    await peer.ask('server/discover', { _meta: envelopeMeta() });
    c.setTools([tool('a')]); // before the first read: that read serves seq 2
    await tick();
    const page = await peer.ask('tools/list', { _meta: envelopeMeta() });
    assert.equal(((page['result'] as Frame)['_meta'] as Frame)['tether.dev/seq'], 2);
    peer.listen(5);
    await peer.waitSent((f) => f['method'] === 'notifications/subscriptions/acknowledged');
    await tick();
    assert.equal(peer.sent.filter(listChanged).length, 0);
  });

  test('a listen stream for notifications the device never sends is acknowledged empty and carries no list_changed', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const peer = await edge.peer(0);
    await peer.discover();
    peer.deliver({ jsonrpc: '2.0', id: 12, method: 'subscriptions/listen', params: { notifications: { resourcesListChanged: true } } });
    const ack = await peer.waitSent((f) => f['method'] === 'notifications/subscriptions/acknowledged');
    assert.deepEqual(ack['params'], { _meta: { [SUB]: 12 }, notifications: {} });
    c.setTools([tool('a')]);
    await tick();
    assert.equal(peer.sent.filter(listChanged).length, 0, 'held for a stream that asks for tool changes');
    peer.listen(13);
    assert.deepEqual((await peer.waitSent(listChanged))['params'], { _meta: { [SUB]: 13, 'tether.dev/seq': 2, [DIGEST]: digestFor([tool('a')]) } });
  });

  test('announcing 2026-07-28 to an edge that greets with initialize: answered as 2025-11-25, as before', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const peer = await edge.peer(0);
    const { initialize, tools } = await peer.handshake('sess-old');
    assert.equal((initialize['result'] as Frame)['protocolVersion'], '2025-11-25');
    assert.equal(tools.length, 1);
    await c.ready(2_000);
    assert.equal(c.protocolVersion, '2025-11-25');
    const page = await peer.ask('tools/list');
    assert.equal((page['result'] as Frame)['resultType'], undefined);
    c.setTools([tool('b')]);
    assert.deepEqual((await peer.waitSent(listChanged))['params'], { _meta: { 'tether.dev/seq': 2, [DIGEST]: digestFor([tool('b')]) } });
  });

  test('a client that announced nothing still answers an edge that discovers it', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { plain: true });
    const peer = await edge.peer(0);
    const { discover } = await peer.discover('sess-d');
    assert.deepEqual((discover['result'] as Frame)['supportedVersions'], [MODERN]);
    peer.listen(3);
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/tether.dev/manifest_applied', params: { seq: 1, kept: 1, dropped: [] } });
    assert.equal(await c.ready(2_000), 'sess-d');
    assert.equal(c.protocolVersion, MODERN);
  });
});
