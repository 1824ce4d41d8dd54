/**
 * The device's user approving a write (docs/PROTOCOL.md, "Writes: approvals,
 * keys and receipts"), frame by frame against a scripted edge: the handshake
 * declares `tether.dev/approvals` only when the application gave an
 * `onApproval` hook, `tether.dev/approve` is answered `{approve}` with what
 * the hook decided (a throw or a non-boolean declines), a request the hook
 * outlives (its window, a cancel, the socket) gets no answer, and a device
 * without a hook does not serve the method at all.
 */

import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';

import { resolveOptions } from '../../dist/options.js';
import {
  ApprovalAbortedError,
  TetherClient,
  TetherError,
  type ApprovalRequest,
  type ConnectOptions,
  type Tool,
} from '../../dist/node.js';
import { envelope, FakeEdge, type FakePeer, type Frame } from '../helpers/fake.js';
import { deferred, nextEvent, until, withTimeout } from '../helpers/wait.js';

const APPROVE = 'tether.dev/approve';
const APPROVALS = 'tether.dev/approvals';

const made: TetherClient[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

const deleteOrder: Tool = {
  name: 'deleteOrder',
  title: 'Delete order',
  description: 'Deletes a work order.',
  inputSchema: { type: 'object', properties: { id: { type: 'number' } } },
  annotations: { destructiveHint: true },
  handler: () => 'deleted',
};

function client(edge: FakeEdge, options: Partial<ConnectOptions> = {}): TetherClient {
  const c = new TetherClient(
    { url: 'ws://fake:1', token: 'opaque', info: { name: 'unit', version: '0.0.1' }, tools: [deleteOrder], ...options } as ConnectOptions,
    edge.dial,
  );
  made.push(c);
  return c;
}

/** What the edge sends (crates/contract/src/writes.rs, `ApproveParams`). */
function params(overrides: Frame = {}): Frame {
  return {
    approval: 'ap-1',
    tool: 'deleteOrder',
    title: 'Delete order',
    description: 'Deletes a work order.',
    arguments: { id: 7 },
    expires_in_ms: 120_000,
    ...overrides,
  };
}

/** A client with `hook`, online on a scripted 2025-11-25 edge; `initialize` is its answer to the handshake. */
async function online(
  hook: ConnectOptions['onApproval'],
  options: Partial<ConnectOptions> = {},
): Promise<{ c: TetherClient; peer: FakePeer; initialize: Frame }> {
  const edge = new FakeEdge();
  const c = client(edge, hook === undefined ? options : { ...options, onApproval: hook });
  const peer = await edge.peer(0);
  const { initialize } = await peer.handshake('sess-ap');
  return { c, peer, initialize };
}

const tick = (ms = 50): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Whether the client sent anything under request id `id`. */
const answered = (peer: FakePeer, id: number): boolean => peer.sent.some((f) => f['id'] === id && !('method' in f));

describe('onApproval', () => {
  test('the initialize answer declares tether.dev/approvals only when a hook is given, beside the concept', async () => {
    const meta = (f: Frame): Frame | undefined => (f['result'] as Frame)['_meta'] as Frame | undefined;
    const { initialize: without } = await online(undefined);
    assert.equal(meta(without), undefined, 'no hook, no concept: no _meta at all');
    const { initialize: conceptOnly } = await online(undefined, { concept: { app: 'Fieldkit' } });
    assert.deepEqual(meta(conceptOnly), { 'tether.dev/concept': { app: 'Fieldkit' } });
    const { initialize: withHook } = await online(() => true);
    assert.deepEqual(meta(withHook), { [APPROVALS]: true });
    const { initialize: both } = await online(() => true, { concept: { app: 'Fieldkit' } });
    assert.deepEqual(meta(both), { 'tether.dev/concept': { app: 'Fieldkit' }, [APPROVALS]: true });
  });

  test('the server/discover answer (2026-07-28) declares it likewise, and the answer is marked complete', async () => {
    for (const hook of [undefined, () => true]) {
      const edge = new FakeEdge();
      client(edge, { protocolVersion: '2026-07-28', ...(hook === undefined ? {} : { onApproval: hook }) });
      const peer = await edge.peer(0);
      const { discover } = await peer.discover('sess-m');
      const meta = (discover['result'] as Frame)['_meta'] as Frame;
      assert.equal(meta[APPROVALS], hook === undefined ? undefined : true, `hook: ${String(hook !== undefined)}`);
      assert.equal(meta['io.modelcontextprotocol/serverInfo'] !== undefined, true);
      if (hook === undefined) continue;
      const res = await peer.ask(APPROVE, { ...params(), _meta: envelope() });
      assert.deepEqual(res['result'], { resultType: 'complete', approve: true });
    }
  });

  test('the hook sees the request and its answer is sent: true approves, false declines', async () => {
    const seen: ApprovalRequest[] = [];
    let answer = true;
    const { peer } = await online((request, signal) => {
      assert.equal(signal.aborted, false);
      seen.push(request);
      return answer;
    });
    const yes = await peer.ask(APPROVE, params());
    assert.deepEqual(yes, { jsonrpc: '2.0', id: yes['id'] as number, result: { approve: true } });
    answer = false;
    const no = await peer.ask(APPROVE, params({ approval: 'ap-2', title: null, description: null }));
    assert.deepEqual(no['result'], { approve: false });
    assert.deepEqual(seen, [
      { approval: 'ap-1', tool: 'deleteOrder', title: 'Delete order', description: 'Deletes a work order.', arguments: { id: 7 }, expiresInMs: 120_000, sessionId: 'sess-ap' },
      { approval: 'ap-2', tool: 'deleteOrder', arguments: { id: 7 }, expiresInMs: 120_000, sessionId: 'sess-ap' },
    ]);
  });

  test('an async hook (a human) is waited for; the answer goes out under the request id', async () => {
    const decision = deferred<boolean>();
    const { peer } = await online(() => decision.promise);
    peer.deliver({ jsonrpc: '2.0', id: 'ap-req', method: APPROVE, params: params() });
    await tick();
    assert.equal(peer.sent.some((f) => f['id'] === 'ap-req'), false, 'not answered before the user decides');
    decision.resolve(true);
    assert.deepEqual((await peer.response('ap-req'))['result'], { approve: true });
  });

  test('a hook that throws, rejects or returns a non-boolean declines, reports approval_failed, and the client carries on', async () => {
    const hooks: ConnectOptions['onApproval'][] = [
      () => {
        throw new Error('the dialog broke');
      },
      () => Promise.reject(new Error('async dialog broke')),
      () => 'yes' as unknown as boolean,
      () => Promise.resolve(1 as unknown as boolean),
    ];
    for (const hook of hooks) {
      const { c, peer } = await online(hook);
      const problem = nextEvent(c, 'error', 2_000);
      const res = await peer.ask(APPROVE, params());
      assert.deepEqual(res['result'], { approve: false });
      const err = await problem;
      assert.ok(err instanceof TetherError);
      assert.equal(err.code, 'approval_failed');
      assert.match(err.message, /deleteOrder/);
      assert.deepEqual((await peer.ask('ping'))['result'], {});
      assert.equal(c.state, 'online');
    }
  });

  test('without a hook tether.dev/approve is method not found (-32601), as any unknown method', async () => {
    const { peer } = await online(undefined);
    const res = await peer.ask(APPROVE, params());
    assert.equal((res['error'] as Frame)['code'], -32601);
    assert.equal(res['result'], undefined);
  });

  test('params the contract does not allow are -32602 and the hook does not run', async () => {
    let ran = 0;
    const { peer } = await online(() => {
      ran += 1;
      return true;
    });
    for (const bad of [{ approval: 7 }, { approval: '' }, { tool: null }, { arguments: [1] }, { expires_in_ms: -1 }, { expires_in_ms: 'soon' }]) {
      const res = await peer.ask(APPROVE, params(bad as Frame));
      assert.equal((res['error'] as Frame)['code'], -32602, JSON.stringify(bad));
    }
    assert.equal(ran, 0);
  });

  test('the signal aborts when expires_in_ms passes, and the late decision is not sent', async () => {
    const decision = deferred<boolean>();
    const reasons: unknown[] = [];
    const { peer } = await online(async (_request, signal) => {
      signal.addEventListener('abort', () => reasons.push(signal.reason));
      return decision.promise;
    });
    peer.deliver({ jsonrpc: '2.0', id: 900, method: APPROVE, params: params({ expires_in_ms: 40 }) });
    await until(() => (reasons.length > 0 ? true : undefined), 2_000, 'the signal to abort');
    const reason = reasons[0];
    assert.ok(reason instanceof ApprovalAbortedError);
    assert.equal(reason.why, 'expired');
    assert.equal(reason.name, 'AbortError');
    decision.resolve(true);
    await tick();
    assert.equal(answered(peer, 900), false, 'a decision after the window is not sent');
  });

  test('notifications/cancelled aborts the signal with why "cancelled"; nothing is sent', async () => {
    const aborted = deferred<unknown>();
    const { peer } = await online(
      (_request, signal) =>
        new Promise<boolean>((resolve) => {
          signal.addEventListener('abort', () => {
            aborted.resolve(signal.reason);
            resolve(true);
          });
        }),
    );
    peer.deliver({ jsonrpc: '2.0', id: 901, method: APPROVE, params: params() });
    await tick();
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 901, reason: 'decided by the caller' } });
    const reason = await withTimeout(aborted.promise, 2_000, 'the abort');
    assert.ok(reason instanceof ApprovalAbortedError);
    assert.equal(reason.why, 'cancelled');
    await tick();
    assert.equal(answered(peer, 901), false);
  });

  test('the connection ending aborts the signal (disconnected, closed) and nothing is sent', async () => {
    for (const [end, why] of [['drop', 'disconnected'], ['close', 'closed']] as const) {
      const aborted = deferred<unknown>();
      const decision = deferred<boolean>();
      const { c, peer } = await online((_request, signal) => {
        signal.addEventListener('abort', () => aborted.resolve(signal.reason));
        return decision.promise;
      });
      peer.deliver({ jsonrpc: '2.0', id: 902, method: APPROVE, params: params() });
      await tick();
      if (end === 'drop') peer.closeFromEdge(1006);
      else await c.close();
      const reason = await withTimeout(aborted.promise, 2_000, `the abort on ${end}`);
      assert.ok(reason instanceof ApprovalAbortedError);
      assert.equal(reason.why, why);
      decision.resolve(true);
      await tick();
      assert.equal(answered(peer, 902), false);
    }
  });

  test('an approval does not hold up tool calls, and vice versa', async () => {
    const decision = deferred<boolean>();
    const { peer } = await online(() => decision.promise);
    peer.deliver({ jsonrpc: '2.0', id: 903, method: APPROVE, params: params() });
    const call = await peer.ask('tools/call', { name: 'deleteOrder', arguments: { id: 7 } });
    assert.equal(((call['result'] as Frame)['content'] as Frame[])[0]?.['text'], 'deleted');
    decision.resolve(false);
    assert.deepEqual((await peer.response(903))['result'], { approve: false });
  });

  test('connect() refuses an onApproval that is not a function', () => {
    assert.throws(
      () => resolveOptions({ url: 'ws://x:1', token: 't', info: { name: 'a', version: '1' }, onApproval: true as unknown as () => boolean }),
      (err: unknown) => err instanceof TetherError && err.code === 'invalid_options' && /onApproval/.test(err.message),
    );
  });
});
