/**
 * Resuming a session after a lost connection, against a scripted edge: the
 * next dial presents the edge's single-use token as `?resume=` (once, and
 * only after a transport loss), the `online` event says whether the edge took
 * the session back, and a keyed call the edge delivers again runs its
 * handler once, answered only under the re-delivered id.
 */

import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { afterEach, describe, test } from 'node:test';

import { WebSocketServer, type WebSocket } from 'ws';

import { KeyedCalls, KEYED_MAX_KEYS } from '../../dist/keyed.js';
import { clientUrl } from '../../dist/options.js';
import { upgradeUrl } from '../../dist/transport-browser.js';
import { CallAbortedError, connect, TetherClient, ToolError, type CallStart, type ConnectOptions, type Tool } from '../../dist/node.js';
import { DIGEST, digestFor, FakeEdge, type FakePeer, type Frame } from '../helpers/fake.js';
import { deferred, nextEvent, until, withTimeout } from '../helpers/wait.js';

const RESUME = 'tether.dev/resume';
const KEY = 'tether.dev/idempotency_key';

const made: TetherClient[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

function tool(name: string, handler: Tool['handler'] = () => `${name} done`): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler };
}

function client(edge: FakeEdge, options: Partial<ConnectOptions> = {}): TetherClient {
  const c = new TetherClient(
    { url: 'ws://fake:1', token: 'opaque', info: { name: 'unit', version: '0.0.1' }, tools: [tool('getVisibleScreen')], backoff: { initialMs: 5, maxMs: 10 }, ...options } as ConnectOptions,
    edge.dial,
  );
  made.push(c);
  return c;
}

/** The `resume` query parameter of a connection's upgrade URL, or null. */
const resumeOf = (peer: FakePeer): string | null => new URL(peer.request.url).searchParams.get('resume');

/** A `tools/call` frame; `key` sets the idempotency key. */
function call(id: string, name: string, args: Frame, key?: string): Frame {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, _meta: { 'tether.dev/deadline_ms': 7000, ...(key === undefined ? {} : { [KEY]: key }) } } };
}

const responsesTo = (peer: FakePeer, id: string): Frame[] => peer.sent.filter((f) => f['id'] === id && !('method' in f));

/** A tool `work` whose runs the test counts and releases by hand. */
function heldTool(): { tool: Tool; runs: () => number; started: Promise<AbortSignal>; release: (outcome: string | Error) => void } {
  let runs = 0;
  const started = deferred<AbortSignal>();
  const outcome = deferred<string | Error>();
  return {
    tool: tool('work', async (args, ctx) => {
      runs += 1;
      started.resolve(ctx.signal);
      const o = await outcome.promise;
      if (o instanceof Error) throw o;
      return `${o} for ${String(args['order'])}`;
    }),
    runs: () => runs,
    started: withTimeout(started.promise, 2_000, 'the handler to start'),
    release: outcome.resolve,
  };
}

describe('resume: the token', () => {
  test('after a dropped connection (1006) the next dial presents ?resume=<token from initialize>, once', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const first = await edge.peer(0);
    assert.equal(resumeOf(first), null, 'the first dial has nothing to resume');
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.closeFromEdge(1006);

    const second = await edge.peer(1);
    assert.equal(second.request.url, 'ws://fake:1/v1/client?resume=sess-1.aa11');
    assert.equal(second.request.token, 'opaque', 'the credential is unchanged (the transport presents it)');
    // This attempt fails before the edge says anything: the token was presented, so it is not presented again.
    second.open();
    second.closeFromEdge(1006);
    const third = await edge.peer(2);
    assert.equal(resumeOf(third), null, 'a resume token is single-use');
    const online = nextEvent(c, 'online', 2_000);
    await third.handshake('sess-2');
    assert.deepEqual(await online, { sessionId: 'sess-2', seq: 1, resumed: false });
  });

  test('the edge takes the session back: online says resumed with the same id; the next drop presents the new token; a refusal is a new session', async () => {
    const edge = new FakeEdge();
    const c = client(edge);
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    const back = nextEvent(c, 'online', 2_000, (e) => e.resumed);
    first.closeFromEdge(1006);

    const second = await edge.peer(1);
    assert.equal(resumeOf(second), 'sess-1.aa11');
    await second.handshake('sess-1', { [RESUME]: 'sess-1.bb22' });
    assert.deepEqual(await back, { sessionId: 'sess-1', seq: 1, resumed: true });
    assert.equal(c.sessionId, 'sess-1');

    // The edge going away (1001) is a lost transport too; the token is the resumed session's new one.
    const fresh = nextEvent(c, 'online', 2_000);
    second.closeFromEdge(1001, 'restarting');
    const third = await edge.peer(2);
    assert.equal(resumeOf(third), 'sess-1.bb22');
    await third.handshake('sess-3', { [RESUME]: 'sess-3.cc33' });
    assert.deepEqual(await fresh, { sessionId: 'sess-3', seq: 1, resumed: false }, 'refused: whatever id the edge sent');
    assert.equal(c.sessionId, 'sess-3');
  });

  test('an edge that went silent (heartbeat) is resumed; on MCP 2026-07-28 the token comes with server/discover', async () => {
    const edge = new FakeEdge();
    client(edge, { protocolVersion: '2026-07-28', heartbeat: { intervalMs: 30, timeoutMs: 60 } });
    const first = await edge.peer(0);
    await first.discover('sess-m', { [RESUME]: 'sess-m.dd44' });
    first.deliver({ jsonrpc: '2.0', method: 'notifications/tether.dev/manifest_applied', params: { seq: 1, kept: 1, dropped: [] } });
    await first.waitSent((f) => f['method'] === 'ping', 1_000, 'a heartbeat ping');
    const second = await edge.peer(1, 2_000);
    assert.equal(first.closedBy?.code, 4000, 'declared dead by the heartbeat');
    assert.equal(resumeOf(second), 'sess-m.dd44');
  });

  test('no resume after a close the edge chose (1008, 1012, 1002, 1003, 1007, 1009, 1000), nor when the edge gave no token', async () => {
    const edge = new FakeEdge();
    client(edge);
    const codes = [1008, 1012, 1002, 1003, 1007, 1009, 1000];
    for (const [i, code] of codes.entries()) {
      const peer = await edge.peer(i);
      if (i > 0) assert.equal(resumeOf(peer), null, `after ${codes[i - 1]}`);
      await peer.handshake(`s${i}`, { [RESUME]: `s${i}.token` });
      peer.closeFromEdge(code, 'on purpose');
    }
    const last = await edge.peer(codes.length);
    assert.equal(resumeOf(last), null, `after ${codes.at(-1)}`);
    await last.handshake('no-token');
    last.closeFromEdge(1006);
    assert.equal(resumeOf(await edge.peer(codes.length + 1)), null, 'resume off at the edge: nothing to present');
  });

  test('after close() nothing is dialed; the url may not carry a token; the browser presents it beside access_token', async () => {
    const edge = new FakeEdge();
    const c = client(edge, { backoff: { initialMs: 200, maxMs: 200 } });
    const peer = await edge.peer(0);
    await peer.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    const offline = nextEvent(c, 'offline', 1_000);
    peer.closeFromEdge(1006);
    assert.equal((await offline).willRetry, true);
    await c.close();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(edge.peers.length, 1, 'no dial after close()');

    assert.throws(() => clientUrl('ws://h:1/v1/client?resume=x'), /adds `resume` itself/);
    const url = new URL(upgradeUrl({ url: 'ws://h:1/v1/client?resume=sess-1.aa11', token: 'jwt', announce: '2026-07-28' }));
    assert.deepEqual([...url.searchParams.keys()].sort(), ['access_token', 'mcp_protocol_version', 'resume']);
    assert.equal(url.searchParams.get('resume'), 'sess-1.aa11');
  });

  test('the Node transport puts resume in the query and keeps the credential in the Authorization header', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, handleProtocols: () => 'tether.v1' });
    const upgrades: { url: string; auth: string | undefined }[] = [];
    wss.on('connection', (ws: WebSocket, req: IncomingMessage) => {
      upgrades.push({ url: req.url ?? '', auth: req.headers.authorization });
      if (upgrades.length > 1) return;
      ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { _meta: { 'tether.dev/session': 'sess-n', [RESUME]: 'sess-n.ee55' } } }));
      ws.on('message', () => ws.terminate()); // the answer arrived: drop the connection without a close frame
    });
    try {
      await new Promise<void>((r) => wss.once('listening', r));
      const { port } = wss.address() as { port: number };
      const c = connect({ url: `ws://127.0.0.1:${port}`, token: 'node-jwt', info: { name: 'unit', version: '0' }, tools: [], backoff: { initialMs: 5, maxMs: 10 } });
      made.push(c);
      await until(() => (upgrades.length >= 2 ? true : undefined), 3_000, 'the reconnect');
      assert.deepEqual(upgrades, [
        { url: '/v1/client', auth: 'Bearer node-jwt' },
        { url: '/v1/client?resume=sess-n.ee55', auth: 'Bearer node-jwt' },
      ]);
    } finally {
      for (const ws of wss.clients) ws.terminate();
      await new Promise((r) => wss.close(r));
    }
  });
});

describe('resume: keyed calls delivered again', () => {
  test('a keyed call running when the connection dropped runs once; only the re-delivered id gets the answer', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, { tools: [work.tool] });
    const starts: CallStart[] = [];
    c.on('callStart', (e) => starts.push(e));
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('old-7', 'work', { order: 42 }, 'turn-1:call-1'));
    const signal = await work.started;
    const lostEnd = nextEvent(c, 'callEnd', 2_000, (e) => e.callId === 'old-7');
    first.closeFromEdge(1006);

    const second = await edge.peer(1);
    assert.equal(resumeOf(second), 'sess-1.aa11');
    await second.handshake('sess-1', { [RESUME]: 'sess-1.bb22' });
    assert.equal(signal.aborted, false, 'a keyed run outlives the lost connection');
    second.deliver(call('new-9', 'work', { order: 42 }, 'turn-1:call-1'));
    await until(() => (starts.length === 2 ? true : undefined), 1_000, 'the re-delivery to arrive');
    work.release('shipped');

    const answer = await second.response('new-9');
    assert.deepEqual(answer['result'], { content: [{ type: 'text', text: 'shipped for 42' }], _meta: { 'tether.dev/seq': 1, [DIGEST]: digestFor([work.tool]) } });
    assert.equal(work.runs(), 1, 'the handler ran once');
    assert.deepEqual(responsesTo(second, 'old-7'), [], 'nothing under the old id on the new socket');
    assert.deepEqual(responsesTo(first, 'old-7'), [], 'the old socket was gone');
    assert.equal(second.sent.filter((f) => !('method' in f) && f['result'] !== undefined && JSON.stringify(f).includes('shipped')).length, 1);
    const lost = await lostEnd;
    assert.equal(lost.outcome, 'disconnected');
    assert.equal(lost.answered, false);
    assert.deepEqual(starts.map((s) => [s.callId, s.deduplicated]), [['old-7', undefined], ['new-9', true]]);
  });

  test('a keyed run that outlived its connection reports its progress to the re-delivery, under the new token, on the new socket', async () => {
    const edge = new FakeEdge();
    const halfway = deferred<void>();
    const outcome = deferred<string>();
    const work = tool('work', async (_args, ctx) => {
      await halfway.promise;
      ctx.progress(1, 2, 'half');
      return outcome.promise;
    });
    const c = client(edge, { tools: [work] });
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    const keyed = (id: string, token: string): Frame => {
      const frame = call(id, 'work', {}, 'turn-1:call-2');
      (frame['params'] as Frame)['_meta'] = { ...((frame['params'] as Frame)['_meta'] as Frame), progressToken: token };
      return frame;
    };
    first.deliver(keyed('old-7', 'p-old'));
    const starts: CallStart[] = [];
    c.on('callStart', (e) => starts.push(e));
    first.closeFromEdge(1006);
    const second = await edge.peer(1);
    await second.handshake('sess-1', { [RESUME]: 'sess-1.bb22' });
    second.deliver(keyed('new-9', 'p-new'));
    await until(() => (starts.some((s) => s.callId === 'new-9') ? true : undefined), 1_000, 'the re-delivery to arrive');
    halfway.resolve();
    const progress = await until(
      () => second.sent.find((f) => f['method'] === 'notifications/progress'),
      1_000,
      'the progress on the new socket',
    );
    assert.deepEqual(progress['params'], { progressToken: 'p-new', progress: 1, total: 2, message: 'half' });
    outcome.resolve('done');
    const answer = await second.response('new-9');
    assert.equal(((answer['result'] as Frame)['content'] as Frame[])[0]?.['text'], 'done');
    const reports = second.sent.filter((f) => f['method'] === 'notifications/progress');
    assert.equal(reports.length, 1, 'one report, before the answer');
    assert.ok(second.sent.indexOf(reports[0] as Frame) < second.sent.indexOf(answer), 'the answer is the last word');
  });

  test('a keyed call that finished before the re-delivery is answered from memory, success or error, without running again', async () => {
    const edge = new FakeEdge();
    let runs = 0;
    const gate = deferred();
    const reserve = tool('reserve', async (args) => {
      runs += 1;
      await gate.promise;
      if (args['sku'] === 'gone') throw new ToolError('out_of_stock', 'No more of those.', { retryable: false });
      return { reserved: String(args['sku']) };
    });
    const c = client(edge, { tools: [reserve] });
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('a', 'reserve', { sku: 'tent' }, 'k-ok'));
    first.deliver(call('b', 'reserve', { sku: 'gone' }, 'k-err'));
    await until(() => (runs === 2 ? true : undefined), 1_000, 'both handlers to start');
    const ends = [nextEvent(c, 'callEnd', 1_000, (e) => e.callId === 'a'), nextEvent(c, 'callEnd', 1_000, (e) => e.callId === 'b')];
    first.closeFromEdge(1006);
    gate.resolve(); // both finish while there is no socket
    assert.deepEqual((await Promise.all(ends)).map((e) => [e.outcome, e.answered]), [['disconnected', false], ['disconnected', false]]);

    const second = await edge.peer(1);
    await second.handshake('sess-1');
    c.setContext({ pointer: { screen: 'cart' } }); // the catalog moved meanwhile: the answer carries today's seq
    await second.waitSent((f) => f['method'] === 'notifications/tools/list_changed');
    const repeated = nextEvent(c, 'callEnd', 1_000, (e) => e.callId === 'a2');
    second.deliver(call('a2', 'reserve', { sku: 'tent' }, 'k-ok'));
    second.deliver(call('b2', 'reserve', { sku: 'gone' }, 'k-err'));
    const ok = (await second.response('a2'))['result'] as Frame;
    assert.deepEqual(ok['structuredContent'], { reserved: 'tent' });
    assert.deepEqual(ok['_meta'], { 'tether.dev/seq': 2, [DIGEST]: digestFor([reserve], { pointer: { screen: 'cart' } }) });
    const err = (await second.response('b2'))['result'] as Frame;
    assert.equal(err['isError'], true);
    assert.deepEqual(err['structuredContent'], { code: 'out_of_stock', retryable: false });
    assert.equal(runs, 2, 'no handler ran again');
    const end = await repeated;
    assert.equal(end.deduplicated, true);
    assert.equal(end.outcome, 'ok');
    assert.equal(end.answered, true);
    assert.equal(end.sessionId, 'sess-1');

    // The same key on the same session (a retry after an answer) is answered from memory too.
    second.deliver(call('a3', 'reserve', { sku: 'tent' }, 'k-ok'));
    assert.deepEqual(((await second.response('a3'))['result'] as Frame)['structuredContent'], { reserved: 'tent' });
    assert.equal(runs, 2);
  });

  test('calls without a key are never de-duplicated; an unkeyed call in flight is aborted at the drop as before', async () => {
    const edge = new FakeEdge();
    let runs = 0;
    const aborted = deferred<CallAbortedError>();
    client(edge, {
      tools: [
        tool('count', () => `run ${++runs}`),
        tool('hold', (_a, ctx) => new Promise((_, reject) => ctx.signal.addEventListener('abort', () => { aborted.resolve(ctx.signal.reason as CallAbortedError); reject(new Error('stopped')); }))),
      ],
    });
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('c1', 'count', { n: 1 }));
    first.deliver(call('c2', 'count', { n: 1 }));
    assert.deepEqual(((await first.response('c1'))['result'] as Frame)['content'], [{ type: 'text', text: 'run 1' }]);
    assert.deepEqual(((await first.response('c2'))['result'] as Frame)['content'], [{ type: 'text', text: 'run 2' }]);
    first.deliver(call('h1', 'hold', {})); // the handler starts synchronously
    first.closeFromEdge(1006);
    assert.equal((await withTimeout(aborted.promise, 1_000, 'the unkeyed call to abort')).why, 'disconnected');

    const second = await edge.peer(1);
    await second.handshake('sess-1');
    second.deliver(call('c3', 'count', { n: 1 }));
    assert.deepEqual(((await second.response('c3'))['result'] as Frame)['content'], [{ type: 'text', text: 'run 3' }]);
  });

  test('without a resume (no token, or a close the edge chose) a keyed call in flight is aborted and forgotten', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    client(edge, { tools: [work.tool] });
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('x1', 'work', { order: 1 }, 'k-policy'));
    const signal = await work.started;
    first.closeFromEdge(1008, 'token expired');
    assert.equal((signal.reason as CallAbortedError).why, 'disconnected');
    const second = await edge.peer(1);
    await second.handshake('sess-2');
    work.release('done');
    second.deliver(call('x2', 'work', { order: 1 }, 'k-policy'));
    assert.deepEqual(((await second.response('x2'))['result'] as Frame)['content'], [{ type: 'text', text: 'done for 1' }]);
    assert.equal(work.runs(), 2, 'an aborted run is not remembered: the retry runs the handler');
  });

  test('a keyed run that reaches the answer ceiling answers the waiting re-delivery with device_timeout and is forgotten', async () => {
    const edge = new FakeEdge();
    let runs = 0;
    client(edge, { limits: { answerCeilingMs: 600 }, tools: [tool('slow', () => { runs += 1; return new Promise(() => undefined); })] });
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('s1', 'slow', {}, 'k-slow'));
    await until(() => (runs === 1 ? true : undefined), 1_000, 'the handler to start');
    first.closeFromEdge(1006);
    const second = await edge.peer(1);
    await second.handshake('sess-1');
    second.deliver(call('s2', 'slow', {}, 'k-slow'));
    const res = (await second.response('s2'))['result'] as Frame;
    assert.deepEqual(res['structuredContent'], { code: 'device_timeout', retryable: true });
    assert.equal(runs, 1);
    second.deliver(call('s3', 'slow', {}, 'k-slow'));
    await until(() => (runs === 2 ? true : undefined), 1_000, 'a retry after a timeout to run the handler');
  });

  test('close() aborts a keyed run that outlived its session', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, { tools: [work.tool], backoff: { initialMs: 500, maxMs: 500 } });
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('w1', 'work', {}, 'k-close'));
    const signal = await work.started;
    first.closeFromEdge(1006);
    assert.equal(signal.aborted, false);
    await c.close();
    assert.equal((signal.reason as CallAbortedError).why, 'closed');
  });

  test(`the memory is bounded: the newest ${KEYED_MAX_KEYS} keys; the oldest key runs again`, async () => {
    const edge = new FakeEdge();
    const runs = new Map<string, number>();
    client(edge, { tools: [tool('mark', (args) => { const k = String(args['k']); runs.set(k, (runs.get(k) ?? 0) + 1); return k; })] });
    const peer = await edge.peer(0);
    await peer.handshake();
    for (let i = 0; i <= KEYED_MAX_KEYS; i++) peer.deliver(call(`m${i}`, 'mark', { k: `k${i}` }, `k${i}`));
    await peer.response(`m${KEYED_MAX_KEYS}`);
    peer.deliver(call('again-newest', 'mark', { k: `k${KEYED_MAX_KEYS}` }, `k${KEYED_MAX_KEYS}`));
    peer.deliver(call('again-second', 'mark', { k: 'k1' }, 'k1'));
    peer.deliver(call('again-oldest', 'mark', { k: 'k0' }, 'k0'));
    await peer.response('again-oldest');
    assert.equal(runs.get('k0'), 2, `key 0 was pushed out by ${KEYED_MAX_KEYS} newer keys`);
    assert.equal(runs.get('k1'), 1);
    assert.equal(runs.get(`k${KEYED_MAX_KEYS}`), 1);
  });
});

describe('KeyedCalls', () => {
  const replay = (text: string) => ({ result: { content: [{ type: 'text', text }] }, outcome: 'ok' as const });

  test('remembers a finished run for ttlMs after it finished; a run of another tool under the key is not a match', () => {
    let now = 0;
    const keyed = new KeyedCalls(8, 1_000, () => now);
    const run = keyed.start('k', 'a', () => undefined);
    assert.equal(keyed.find('k', 'a')?.replay, undefined, 'running');
    now = 5_000;
    run.end(replay('r'));
    assert.deepEqual(keyed.find('k', 'a')?.replay, replay('r'));
    assert.equal(keyed.find('k', 'b'), undefined);
    now = 5_999;
    assert.ok(keyed.find('k', 'a'));
    now = 6_000;
    assert.equal(keyed.find('k', 'a'), undefined);
    assert.equal(keyed.size, 0);
  });

  test('keeps the newest maxKeys by arrival; aborted and timed-out runs are forgotten at once', async () => {
    const keyed = new KeyedCalls(3, 60_000);
    for (const k of ['k1', 'k2', 'k3', 'k4']) keyed.start(k, 't', () => undefined).end(replay(k));
    assert.equal(keyed.size, 3);
    assert.equal(keyed.find('k1', 't'), undefined);
    assert.ok(keyed.find('k4', 't'));
    const aborted = keyed.start('k5', 't', () => undefined);
    aborted.end('cancelled');
    assert.equal(keyed.find('k5', 't'), undefined);
    const timedOut = keyed.start('k6', 't', () => undefined);
    timedOut.end({ ...replay('late'), outcome: 'timeout' });
    assert.equal(keyed.find('k6', 't'), undefined);
    let stopped = '';
    const running = keyed.start('k7', 't', (why) => { stopped = why; });
    const done = keyed.find('k7', 't')?.done;
    keyed.abortAll('closed');
    assert.equal(stopped, 'closed');
    running.end('closed');
    assert.equal(await done, 'closed');
  });

  test('a running key passes its progress to its followers until it ends or they stop', () => {
    const keyed = new KeyedCalls();
    const run = keyed.start('k', 't', () => undefined);
    const heard: unknown[] = [];
    const unfollow = keyed.find('k', 't')?.follow((r) => heard.push(r)) ?? (() => {});
    run.progress({ progress: 1 });
    unfollow();
    run.progress({ progress: 2 });
    keyed.find('k', 't')?.follow((r) => heard.push(r));
    run.end(replay('r'));
    run.progress({ progress: 3 });
    assert.deepEqual(heard, [{ progress: 1 }], 'nothing after unfollowing, nor after the end');
  });
});
