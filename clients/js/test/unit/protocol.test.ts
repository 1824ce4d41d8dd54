/**
 * The device side of the client link, frame by frame, against a scripted
 * edge: what the client answers, when it says it is online, how it
 * announces a moved catalog, and the paths a real edge cannot be made to
 * take on demand (a call racing a navigation, a silent edge).
 */

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { afterEach, describe, test } from 'node:test';

import { CallAbortedError, TetherClient, type ConnectOptions, type Json, type Tool, type ToolContext, type TraceContext } from '../../dist/node.js';
import { DIGEST, digestFor, envelope, FakeEdge, type FakePeer, type Frame } from '../helpers/fake.js';
import { deferred, nextEvent, until, withTimeout } from '../helpers/wait.js';

const made: TetherClient[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

function tool(name: string, handler: Tool['handler'] = () => `${name} done`): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler };
}

function client(edge: FakeEdge, options: Partial<ConnectOptions> = {}): TetherClient {
  const c = new TetherClient(
    { url: 'ws://fake:1', token: 'opaque', info: { name: 'unit', version: '0.0.1' }, tools: [tool('getVisibleScreen')], ...options } as ConnectOptions,
    edge.dial,
  );
  made.push(c);
  return c;
}

const fixture = (name: string): Frame =>
  JSON.parse(readFileSync(new URL(`../../../../proto-fixtures/frames/client/${name}`, import.meta.url), 'utf8')) as Frame;

describe('client link protocol', () => {
  test('dials /v1/client offering tether.v1, answers initialize with serverInfo, listChanged, instructions and concept', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { concept: { instructions: 'Fieldkit is an app.', app: 'Fieldkit', nouns: ['work order'], cannot: ['approve'] } });
    const peer = await edge.peer(0);
    assert.equal(peer.request.url, 'ws://fake:1/v1/client');
    assert.equal(peer.request.protocol, 'tether.v1');
    assert.equal(peer.request.token, 'opaque');
    peer.open();
    const req = fixture('initialize.request.json');
    peer.deliver(req);
    const res = await peer.response(req['id'] as number);
    assert.deepEqual(res['result'], {
      protocolVersion: '2025-11-25',
      serverInfo: { name: 'unit', version: '0.0.1' },
      capabilities: { tools: { listChanged: true } },
      instructions: 'Fieldkit is an app.',
      _meta: { 'tether.dev/concept': { app: 'Fieldkit', nouns: ['work order'], cannot: ['approve'] } },
    });
    assert.equal(c.state, 'connecting', 'not online before the edge applied a manifest');
  });

  test('online after manifest_applied, with the session id from initialize; the report is an event', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const manifest = nextEvent(c, 'manifest', 2_000);
    const online = nextEvent(c, 'online', 2_000);
    const peer = await edge.peer(0);
    await peer.handshake('sess-42');
    assert.deepEqual(await online, { sessionId: 'sess-42', seq: 1, resumed: false });
    assert.equal(c.sessionId, 'sess-42');
    assert.deepEqual(await manifest, { sessionId: 'sess-42', seq: 1, kept: 1, dropped: [] });
  });

  test('ping is answered with {} under the same id; an unknown method gets -32601; garbage is reported and survived', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const peer = await edge.peer(0);
    await peer.handshake();
    const ping = fixture('ping.request.json');
    peer.deliver(ping);
    assert.deepEqual(await peer.response('k1'), fixture('ping.response.json'));
    const unknown = await peer.ask('resources/list');
    assert.equal((unknown['error'] as Frame)['code'], -32601);
    const problem = nextEvent(c, 'error', 2_000);
    peer.deliver('{"jsonrpc":"2.0","id":');
    assert.match((await problem).message, /not JSON-RPC/);
    const again = await peer.ask('ping');
    assert.deepEqual(again['result'], {});
    assert.equal(c.state, 'online');
  });

  test('setTools and setContext in one tick send one list_changed with the final seq; the re-read serves the new catalog', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const peer = await edge.peer(0);
    await peer.handshake();
    c.setTools([tool('scanBarcode')]);
    c.setContext({ pointer: { screen: 'scanner' } });
    const changed = await peer.waitSent((f) => f['method'] === 'notifications/tools/list_changed');
    const digest = digestFor([tool('scanBarcode')], { pointer: { screen: 'scanner' } });
    assert.deepEqual(changed, { jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: { _meta: { 'tether.dev/seq': 3, [DIGEST]: digest } } });
    await withTimeout(Promise.resolve(), 50, 'a tick');
    assert.equal(peer.sent.filter((f) => f['method'] === 'notifications/tools/list_changed').length, 1);
    const page = await peer.ask('tools/list');
    assert.deepEqual(page['result'], {
      tools: [{ name: 'scanBarcode', description: 'The scanBarcode tool.', inputSchema: { type: 'object' } }],
      _meta: { 'tether.dev/seq': 3, [DIGEST]: digest, 'tether.dev/context': { pointer: { screen: 'scanner' } } },
    });
  });

  test('the digest rides beside the seq on tools/list, call results and list_changed; a re-declared catalog keeps it', async () => {
    const edge = new FakeEdge();
    const home = [tool('getVisibleScreen')];
    const c = client(edge, { tools: home, context: { pointer: { screen: 'home' } } });
    const peer = await edge.peer(0);
    await peer.handshake();
    const meta = (f: Frame): Frame => ((f['result'] ?? f['params']) as Frame)['_meta'] as Frame;
    const homeDigest = digestFor(home, { pointer: { screen: 'home' } });
    const page = await peer.ask('tools/list');
    assert.deepEqual(meta(page), { 'tether.dev/seq': 1, [DIGEST]: homeDigest, 'tether.dev/context': { pointer: { screen: 'home' } } });
    const call = await peer.ask('tools/call', { name: 'getVisibleScreen', arguments: {} });
    assert.deepEqual(meta(call), { 'tether.dev/seq': 1, [DIGEST]: homeDigest });

    c.setContext({ pointer: { screen: 'cart' } });
    const moved = await peer.waitSent((f) => f['method'] === 'notifications/tools/list_changed');
    const cartDigest = digestFor(home, { pointer: { screen: 'cart' } });
    assert.notEqual(cartDigest, homeDigest);
    assert.deepEqual(meta(moved), { 'tether.dev/seq': 2, [DIGEST]: cartDigest });
    assert.deepEqual(meta(await peer.ask('tools/call', { name: 'getVisibleScreen', arguments: {} })), { 'tether.dev/seq': 2, [DIGEST]: cartDigest });

    // Back home: the seq moves on, the digest is the one the edge applied first, so it can re-stamp without a read.
    c.update({ tools: [tool('getVisibleScreen', () => 'a new handler')], context: { pointer: { screen: 'home' } } });
    const back = await peer.waitSent((f) => f['method'] === 'notifications/tools/list_changed' && meta(f)['tether.dev/seq'] === 3);
    assert.deepEqual(meta(back), { 'tether.dev/seq': 3, [DIGEST]: homeDigest });
    assert.deepEqual(meta(await peer.ask('tools/list')), { 'tether.dev/seq': 3, [DIGEST]: homeDigest, 'tether.dev/context': { pointer: { screen: 'home' } } });
  });

  test('a handler cannot stamp its own seq or digest over the catalog\'s', async () => {
    const edge = new FakeEdge();
    const forged = tool('forge', () => ({ content: [], _meta: { 'tether.dev/seq': 99, [DIGEST]: 'forged', mine: 1 } }));
    client(edge, { tools: [forged] });
    const peer = await edge.peer(0);
    await peer.handshake();
    const res = await peer.ask('tools/call', { name: 'forge', arguments: {} });
    assert.deepEqual((res['result'] as Frame)['_meta'], { mine: 1, 'tether.dev/seq': 1, [DIGEST]: digestFor([forged]) });
  });

  test('a call that races a navigation gets tool_unavailable listing the namespaced names available now, stamped with the new seq', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { tools: [tool('openOrder'), tool('listOrders')] });
    const peer = await edge.peer(0);
    await peer.handshake();
    c.setTools([tool('getCart'), tool('checkoutNow')]);
    const ended = nextEvent(c, 'callEnd', 2_000);
    const res = await peer.ask('tools/call', { name: 'openOrder', arguments: {}, _meta: { 'tether.dev/deadline_ms': 7000 } });
    const result = res['result'] as Frame;
    assert.equal(result['isError'], true);
    assert.deepEqual(result['structuredContent'], { code: 'tool_unavailable', retryable: false, available: ['client__get_cart', 'client__checkout_now'] });
    assert.deepEqual(result['_meta'], { 'tether.dev/seq': 2, [DIGEST]: digestFor([tool('getCart'), tool('checkoutNow')]) });
    assert.equal((await ended).outcome, 'unavailable');
  });

  test('a result exactly at the result cap is sent; one byte over is replaced by payload_too_large', async () => {
    const edge = new FakeEdge();
    let size = 0;
    client(edge, { tools: [tool('blob', () => ({ content: [{ type: 'text', text: 'x'.repeat(size) }] }))], limits: { resultBytes: 1_000 } });
    const peer = await edge.peer(0);
    await peer.handshake();
    // Frame bytes for a text of length n: fixed overhead + n. Find the overhead with n = 0.
    const zero = await peer.ask('tools/call', { name: 'blob', arguments: {} });
    const overhead = Buffer.byteLength(JSON.stringify(zero));
    size = 1_000 - overhead;
    const exact = await peer.ask('tools/call', { name: 'blob', arguments: {} });
    assert.equal(Buffer.byteLength(JSON.stringify(exact)), 1_000);
    assert.equal((exact['result'] as Frame)['isError'], undefined);
    size += 1;
    const over = await peer.ask('tools/call', { name: 'blob', arguments: {} });
    const sc = (over['result'] as Frame)['structuredContent'] as Frame;
    assert.equal(sc['code'], 'payload_too_large');
    assert.equal(sc['limit'], 1_000);
    assert.equal(sc['bytes'], 1_001);
  });

  test('the answer ceiling is configurable, and a handler that returns after it is ignored', async () => {
    const edge = new FakeEdge();
    const c = client(edge, {
      tools: [tool('slow', async () => new Promise((r) => setTimeout(() => r('late'), 200)))],
      limits: { answerCeilingMs: 50 },
    });
    const peer = await edge.peer(0);
    await peer.handshake();
    const res = await peer.ask('tools/call', { name: 'slow', arguments: {} });
    assert.deepEqual((res['result'] as Frame)['structuredContent'], { code: 'device_timeout', retryable: true });
    const late = c.on('callEnd', () => assert.fail('a late handler must not produce a second outcome'));
    await new Promise((r) => setTimeout(r, 250)); // let the handler finish: nothing more may be sent
    late();
    assert.equal(peer.sent.filter((f) => f['id'] === res['id']).length, 1);
  });

  test('notifications/cancelled for an unknown id is ignored; for a running call it aborts without an answer', async () => {
    const edge = new FakeEdge();
    const reason = deferred<CallAbortedError>();
    client(edge, {
      tools: [tool('wait', (_a, ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => { reason.resolve(ctx.signal.reason as CallAbortedError); reject(new Error('stopped')); })))],
    });
    const peer = await edge.peer(0);
    await peer.handshake();
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 999, reason: 'nope' } });
    peer.deliver({ jsonrpc: '2.0', id: 50, method: 'tools/call', params: { name: 'wait', arguments: {} } });
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 50, reason: 'tether edge stopped waiting after 7000 ms' } });
    const why = await withTimeout(reason.promise, 1_000, 'the abort');
    assert.equal(why.why, 'cancelled');
    const answer = await peer.ask('ping'); // a later frame arrives, so an answer to 50 would have been sent by now
    assert.ok(answer);
    assert.equal(peer.sent.filter((f) => f['id'] === 50).length, 0);
  });

  test('close() aborts running handlers with why "closed" and closes the socket with 1000', async () => {
    const edge = new FakeEdge();
    const reason = deferred<CallAbortedError>();
    const c = client(edge, { tools: [tool('wait', (_a, ctx) => new Promise(() => ctx.signal.addEventListener('abort', () => reason.resolve(ctx.signal.reason as CallAbortedError))))] });
    const peer = await edge.peer(0);
    await peer.handshake();
    const started = nextEvent(c, 'callStart', 1_000);
    peer.deliver({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'wait', arguments: {} } });
    await started;
    await c.close();
    assert.equal((await withTimeout(reason.promise, 1_000, 'the abort')).why, 'closed');
    assert.deepEqual(peer.closedBy, { code: 1000, reason: 'client closed' });
  });

  test('an edge that stops answering pings is declared dead and the client reconnects', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { heartbeat: { intervalMs: 40, timeoutMs: 80 }, backoff: { initialMs: 10, maxMs: 20 } });
    const peer = await edge.peer(0);
    const offline = nextEvent(c, 'offline', 2_000);
    await peer.handshake();
    const ping = await peer.waitSent((f) => f['method'] === 'ping', 1_000, 'a heartbeat ping');
    assert.match(String(ping['id']), /ping/);
    const off = await offline;
    assert.equal(off.reason, 'heartbeat_timeout');
    assert.equal(off.willRetry, true);
    assert.equal(peer.closedBy?.code, 4000);
    const second = await edge.peer(1);
    const online = nextEvent(c, 'online', 2_000);
    await second.handshake('sess-2');
    assert.equal((await online).sessionId, 'sess-2');
  });

  test('answered pings keep the session: no reconnect', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { heartbeat: { intervalMs: 30, timeoutMs: 500 } });
    const peer = await edge.peer(0);
    await peer.handshake();
    const answered = new Set<unknown>();
    while (answered.size < 5) {
      const ping = await peer.waitSent((f) => f['method'] === 'ping' && !answered.has(f['id']), 1_000, 'a ping');
      answered.add(ping['id']);
      peer.deliver({ jsonrpc: '2.0', id: ping['id'] as string, result: {} });
    }
    assert.equal(c.state, 'online');
    assert.equal(edge.peers.length, 1);
  });

  test('an edge that never initializes is abandoned after handshakeTimeoutMs', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { handshakeTimeoutMs: 100, backoff: { initialMs: 10, maxMs: 20 } });
    const peer = await edge.peer(0);
    peer.open();
    const off = await nextEvent(c, 'offline', 2_000);
    assert.equal(off.reason, 'handshake_timeout');
    assert.equal(off.willRetry, true);
    await edge.peer(1);
  });

  test('close codes from the edge are named and retried: 1012 drain, 1001 going away, 1008 policy', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { backoff: { initialMs: 10, maxMs: 20 } });
    const seen: string[] = [];
    c.on('offline', (e) => seen.push(`${e.reason}:${String(e.willRetry)}`));
    for (const [i, code] of [1012, 1001, 1008].entries()) {
      const peer = await edge.peer(i);
      await peer.handshake(`s${i}`);
      peer.closeFromEdge(code, 'bye');
    }
    await edge.peer(3);
    assert.deepEqual(seen, ['edge_draining:true', 'edge_going_away:true', 'policy:true']);
  });

  test('tool handlers get the call id, deadline and idempotency key from the frame', async () => {
    const edge = new FakeEdge();
    const got = deferred<unknown>();
    client(edge, { tools: [tool('t', (args, ctx) => { got.resolve({ args, callId: ctx.callId, deadline: ctx.deadlineMs, key: ctx.idempotencyKey, session: ctx.sessionId }); return 'ok'; })] });
    const peer = await edge.peer(0);
    await peer.handshake('sess-9');
    const call = fixture('tools_call.request.json');
    const params = call['params'] as Frame;
    params['name'] = 't';
    peer.deliver(call);
    assert.deepEqual(await got.promise, { args: { symbologies: ['qr'] }, callId: 3, deadline: 7000, key: 'turn-41:call-2', session: 'sess-9' });
  });
});

describe('ctx.trace', () => {
  const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
  const PARENT_ID = '00f067aa0ba902b7';
  const TRACEPARENT = `00-${TRACE_ID}-${PARENT_ID}-01`;

  /** A client whose tool `t` records each call's `ctx.trace`, handshaken. */
  async function tracing(): Promise<{ peer: FakePeer; seen: (TraceContext | undefined)[] }> {
    const edge = new FakeEdge();
    const seen: (TraceContext | undefined)[] = [];
    const t: Tool = { ...tool('t', (_a, ctx) => { seen.push(ctx.trace); return 'ok'; }), task: 'optional' };
    client(edge, { tools: [t] });
    const peer = await edge.peer(0);
    await peer.handshake();
    return { peer, seen };
  }

  test('a valid _meta.traceparent reaches the handler as ctx.trace with its trace id and parent id, beside the deadline and key', async () => {
    const edge = new FakeEdge();
    const got = deferred<ToolContext>();
    client(edge, { tools: [tool('t', (_a, ctx) => { got.resolve(ctx); return 'ok'; })] });
    const peer = await edge.peer(0);
    await peer.handshake();
    const call = fixture('tools_call.request.json');
    const params = call['params'] as Frame;
    params['name'] = 't';
    (params['_meta'] as Frame)['traceparent'] = TRACEPARENT;
    peer.deliver(call);
    const ctx = await withTimeout(got.promise, 2_000, 'the handler to start');
    assert.deepEqual(ctx.trace, { traceparent: TRACEPARENT, traceId: TRACE_ID, parentId: PARENT_ID });
    assert.ok(ctx.trace !== undefined && !('tracestate' in ctx.trace), 'no tracestate key when the edge sent none');
    assert.equal(ctx.deadlineMs, 7000);
    assert.equal(ctx.idempotencyKey, 'turn-41:call-2');
  });

  test('tracestate passes through unchanged beside a valid traceparent, also beside the 2026-07-28 envelope and for a task run', async () => {
    const { peer, seen } = await tracing();
    const tracestate = 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7';
    const meta = { 'tether.dev/deadline_ms': 7000, traceparent: TRACEPARENT, tracestate };
    assert.ok('result' in (await peer.ask('tools/call', { name: 't', arguments: {}, _meta: meta })));
    assert.ok('result' in (await peer.ask('tools/call', { name: 't', arguments: {}, _meta: { ...envelope(), ...meta } })));
    assert.ok('result' in (await peer.ask('tools/call', { name: 't', arguments: {}, task: { ttl: 60_000 }, _meta: meta })));
    await until(() => (seen.length === 3 ? true : undefined), 2_000, 'the task run to start');
    const want: TraceContext = { traceparent: TRACEPARENT, tracestate, traceId: TRACE_ID, parentId: PARENT_ID };
    assert.deepEqual(seen, [want, want, want]);
  });

  test('a missing or malformed traceparent gives ctx.trace undefined, never a failed call', async () => {
    const { peer, seen } = await tracing();
    const bad: Json[] = [
      `00-${TRACE_ID}-${PARENT_ID}-1`, // flags one digit short
      `00-${TRACE_ID.slice(1)}-${PARENT_ID}-01`, // trace id 31 digits
      `00-${TRACE_ID}-${PARENT_ID}0-01`, // parent id 17 digits
      `00-${TRACE_ID}-${PARENT_ID}-01-extra`,
      ` ${TRACEPARENT}`,
      `00-${'0'.repeat(32)}-${PARENT_ID}-01`, // all-zero trace id
      `00-${TRACE_ID}-${'0'.repeat(16)}-01`, // all-zero parent id
      `00-${TRACE_ID.toUpperCase()}-${PARENT_ID}-01`, // hex must be lowercase
      `00-${TRACE_ID.replace('4', 'g')}-${PARENT_ID}-01`, // not hex
      `01-${TRACE_ID}-${PARENT_ID}-01`, // a version this SDK does not read
      `ff-${TRACE_ID}-${PARENT_ID}-01`, // the invalid version
      `00_${TRACE_ID}_${PARENT_ID}_01`,
      '',
      42,
      null,
      { traceId: TRACE_ID },
    ];
    const metas: (Frame | undefined)[] = [
      undefined, // no _meta at all
      { 'tether.dev/deadline_ms': 7000 }, // _meta without traceparent
      { tracestate: 'rojo=00f067aa0ba902b7' }, // tracestate alone
      ...bad.map((traceparent): Frame => ({ traceparent, tracestate: 'rojo=00f067aa0ba902b7' })),
    ];
    for (const meta of metas) {
      const res = await peer.ask('tools/call', { name: 't', arguments: {}, ...(meta === undefined ? {} : { _meta: meta }) });
      assert.deepEqual((res['result'] as Frame)['content'], [{ type: 'text', text: 'ok' }], JSON.stringify(meta));
    }
    assert.equal(seen.length, metas.length);
    seen.forEach((trace, i) => assert.equal(trace, undefined, `ctx.trace for _meta ${JSON.stringify(metas[i])}`));
  });
});
