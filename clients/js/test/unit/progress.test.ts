/**
 * `ctx.progress` frame by frame against a scripted edge: what goes out as
 * `notifications/progress` when the call carried `_meta.progressToken`, and
 * what never does — without a token, after the answer or the abort, or a
 * report whose values MCP forbids (dropped, counted, never thrown).
 */

import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';

import { MAX_PROGRESS_MESSAGE_CHARS, TetherClient, TetherError, type ConnectOptions, type Tool, type ToolContext } from '../../dist/node.js';
import { envelope, FakeEdge, type FakePeer, type Frame } from '../helpers/fake.js';
import { deferred, nextEvent, withTimeout } from '../helpers/wait.js';

const PROGRESS = 'notifications/progress';

const made: TetherClient[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

function tool(name: string, handler: Tool['handler']): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler };
}

function client(edge: FakeEdge, tools: Tool[], options: Partial<ConnectOptions> = {}): TetherClient {
  const c = new TetherClient({ url: 'ws://fake:1', token: 'opaque', info: { name: 'unit', version: '0.0.1' }, tools, ...options } as ConnectOptions, edge.dial);
  made.push(c);
  return c;
}

const progressFrames = (peer: FakePeer): Frame[] => peer.sent.filter((f) => f['method'] === PROGRESS);
const progress = (params: Frame): Frame => ({ jsonrpc: '2.0', method: PROGRESS, params });

/** A client whose one tool `work` hands its ctx to the test and returns when released. */
async function held(options: Partial<ConnectOptions> = {}): Promise<{ c: TetherClient; peer: FakePeer; ctx: Promise<ToolContext>; release: (v: string) => void }> {
  const edge = new FakeEdge();
  const ctx = deferred<ToolContext>();
  const done = deferred<string>();
  const c = client(edge, [tool('work', (_a, x) => { ctx.resolve(x); return done.promise; })], options);
  const peer = await edge.peer(0);
  await peer.handshake();
  return { c, peer, ctx: withTimeout(ctx.promise, 2_000, 'the handler to start'), release: done.resolve };
}

describe('ctx.progress', () => {
  test('with a progressToken: one notifications/progress per report, under the same token, before the answer', async () => {
    const edge = new FakeEdge();
    client(edge, [
      tool('export', (_a, ctx) => {
        ctx.progress(1, 3);
        ctx.progress(2, 3, 'page 2 of 3');
        ctx.progress(2.5);
        return 'exported';
      }),
    ]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const res = await peer.ask('tools/call', { name: 'export', arguments: {}, _meta: { progressToken: 'p-7' } });
    assert.deepEqual(progressFrames(peer), [
      progress({ progressToken: 'p-7', progress: 1, total: 3 }),
      progress({ progressToken: 'p-7', progress: 2, total: 3, message: 'page 2 of 3' }),
      progress({ progressToken: 'p-7', progress: 2.5 }),
    ]);
    const answerAt = peer.sent.indexOf(res);
    const lastProgressAt = peer.sent.map((f) => f['method']).lastIndexOf(PROGRESS);
    assert.ok(lastProgressAt < answerAt, 'every report goes out before the answer');
  });

  test('a numeric token is sent back as the same number; each call reports under its own token', async () => {
    const edge = new FakeEdge();
    client(edge, [tool('step', (args, ctx) => { ctx.progress(Number(args['n'])); return 'ok'; })]);
    const peer = await edge.peer(0);
    await peer.handshake();
    await peer.ask('tools/call', { name: 'step', arguments: { n: 0 }, _meta: { progressToken: 42 } });
    await peer.ask('tools/call', { name: 'step', arguments: { n: 0 }, _meta: { progressToken: 'other' } });
    assert.deepEqual(progressFrames(peer), [progress({ progressToken: 42, progress: 0 }), progress({ progressToken: 'other', progress: 0 })]);
  });

  test('on MCP 2026-07-28 the token is read from the same _meta.progressToken, beside the envelope', async () => {
    const edge = new FakeEdge();
    client(edge, [tool('work', (_a, ctx) => { ctx.progress(1, 2); return 'ok'; })], { protocolVersion: '2026-07-28' });
    const peer = await edge.peer(0);
    await peer.discover();
    const res = await peer.ask('tools/call', { name: 'work', arguments: {}, _meta: { ...envelope(), progressToken: 'm-1' } });
    assert.equal((res['result'] as Frame)['resultType'], 'complete');
    assert.deepEqual(progressFrames(peer), [progress({ progressToken: 'm-1', progress: 1, total: 2 })]);
  });

  test('without a progressToken (or with one MCP does not allow) nothing is sent and nothing is reported', async () => {
    const edge = new FakeEdge();
    const c = client(edge, [tool('work', (_a, ctx) => { ctx.progress(1, 3, 'one'); ctx.progress(Number.NaN); return 'ok'; })]);
    const problems: Error[] = [];
    c.on('error', (e) => problems.push(e));
    const peer = await edge.peer(0);
    await peer.handshake();
    for (const meta of [undefined, {}, { progressToken: null }, { progressToken: { id: 1 } }, { progressToken: true }]) {
      const ended = nextEvent(c, 'callEnd', 2_000);
      const res = await peer.ask('tools/call', { name: 'work', arguments: {}, ...(meta === undefined ? {} : { _meta: meta }) });
      assert.deepEqual(((res['result'] as Frame)['content'] as Frame[])[0], { type: 'text', text: 'ok' });
      assert.equal((await ended).progressDropped, undefined);
    }
    assert.deepEqual(progressFrames(peer), []);
    assert.deepEqual(problems, []);
  });

  test('after the call has settled, a report is never sent', async () => {
    const { peer, ctx, release } = await held();
    peer.deliver({ jsonrpc: '2.0', id: 11, method: 'tools/call', params: { name: 'work', arguments: {}, _meta: { progressToken: 'late' } } });
    const x = await ctx;
    x.progress(1, 2);
    release('done');
    await peer.response(11);
    x.progress(2, 2, 'after the answer');
    await peer.ask('ping'); // a later frame round-trips, so anything queued would have been sent by now
    assert.deepEqual(progressFrames(peer), [progress({ progressToken: 'late', progress: 1, total: 2 })]);
  });

  test('after the signal aborted (cancelled, or the answer ceiling passed), a report is never sent', async () => {
    const { peer, ctx } = await held();
    peer.deliver({ jsonrpc: '2.0', id: 21, method: 'tools/call', params: { name: 'work', arguments: {}, _meta: { progressToken: 'c' } } });
    const x = await ctx;
    x.progress(1);
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 21, reason: 'stop' } });
    assert.equal(x.signal.aborted, true);
    x.progress(2);
    await peer.ask('ping');
    assert.deepEqual(progressFrames(peer), [progress({ progressToken: 'c', progress: 1 })]);
    assert.equal(peer.sent.filter((f) => f['id'] === 21).length, 0);

    const slow = await held({ limits: { answerCeilingMs: 50 } });
    slow.peer.deliver({ jsonrpc: '2.0', id: 22, method: 'tools/call', params: { name: 'work', arguments: {}, _meta: { progressToken: 't' } } });
    const y = await slow.ctx;
    y.progress(1);
    const res = await slow.peer.response(22);
    assert.equal(((res['result'] as Frame)['structuredContent'] as Frame)['code'], 'device_timeout');
    assert.equal(y.signal.aborted, true);
    y.progress(2);
    await slow.peer.ask('ping');
    assert.deepEqual(progressFrames(slow.peer), [progress({ progressToken: 't', progress: 1 })]);
  });

  test('invalid values are dropped, not thrown: the valid reports around them still go out; the first drop is an error event, callEnd counts them all', async () => {
    const edge = new FakeEdge();
    const bad: [unknown, unknown][] = [
      [Number.NaN, undefined],
      [Number.POSITIVE_INFINITY, undefined],
      [-1, undefined],
      ['2', undefined],
      [1, undefined], // equal to the last one sent
      [0.5, undefined], // below it
      [2, 1], // total below done
      [2, Number.NaN],
      [2, Number.POSITIVE_INFINITY],
      [2, '3'],
      [2, null],
    ];
    const c = client(edge, [
      tool('bar', (_a, ctx) => {
        ctx.progress(1, 10);
        for (const [done, total] of bad) (ctx.progress as (d: unknown, t?: unknown) => void)(done, total);
        ctx.progress(2, 2, 'done');
        return 'ok';
      }),
    ]);
    const problems: Error[] = [];
    c.on('error', (e) => problems.push(e));
    const peer = await edge.peer(0);
    await peer.handshake();
    const ended = nextEvent(c, 'callEnd', 2_000);
    const res = await peer.ask('tools/call', { name: 'bar', arguments: {}, _meta: { progressToken: 'b' } });
    assert.equal((res['result'] as Frame)['isError'], undefined, 'the handler did not fail');
    assert.deepEqual(progressFrames(peer), [
      progress({ progressToken: 'b', progress: 1, total: 10 }),
      progress({ progressToken: 'b', progress: 2, total: 2, message: 'done' }),
    ]);
    const end = await ended;
    assert.equal(end.outcome, 'ok');
    assert.equal(end.progressDropped, bad.length);
    assert.equal(problems.length, 1, 'one error event per call, however many drops');
    const [problem] = problems;
    assert.ok(problem instanceof TetherError);
    assert.equal(problem.code, 'invalid_progress');
    assert.match(problem.message, /^bar: .*done must be a finite number, got NaN/);
  });

  test('message: sent only when a string, cut to the cap with an ellipsis, never splitting a surrogate pair', async () => {
    const edge = new FakeEdge();
    const long = 'x'.repeat(1_000);
    const emoji = `${'y'.repeat(MAX_PROGRESS_MESSAGE_CHARS - 2)}😀tail`; // the pair straddles the cut
    client(edge, [
      tool('msg', (_a, ctx) => {
        (ctx.progress as (d: number, t?: number, m?: unknown) => void)(1, undefined, { text: 'not a string' });
        ctx.progress(2, undefined, long);
        ctx.progress(3, undefined, emoji);
        ctx.progress(4, undefined, 'x'.repeat(MAX_PROGRESS_MESSAGE_CHARS));
        return 'ok';
      }),
    ]);
    const peer = await edge.peer(0);
    await peer.handshake();
    await peer.ask('tools/call', { name: 'msg', arguments: {}, _meta: { progressToken: 'm' } });
    const params = progressFrames(peer).map((f) => f['params'] as Frame);
    assert.equal(MAX_PROGRESS_MESSAGE_CHARS, 256);
    assert.deepEqual(params[0], { progressToken: 'm', progress: 1 });
    assert.equal(params[1]?.['message'], `${'x'.repeat(255)}…`);
    assert.equal(params[2]?.['message'], `${'y'.repeat(254)}…`);
    assert.equal(params[3]?.['message'], 'x'.repeat(256), 'a message at the cap is sent whole');
  });
});
