/**
 * Losing the edge and coming back: reconnect with backoff re-declares the
 * current catalog on the new session; handlers in flight learn the socket is
 * gone; failures retrying cannot fix stop the client with a clear error.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { CallAbortedError, connect, TetherError, type ConnectionState, type TetherClient, type Tool } from '../../dist/node.js';
import { Backend, RpcError } from '../helpers/backend.js';
import { Edge } from '../helpers/edge.js';
import { Fixture } from '../helpers/fixture.js';
import { deferred, nextEvent, withTimeout } from '../helpers/wait.js';

function tool(name: string, handler: Tool['handler'] = () => `${name} done`): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler };
}

describe('reconnect', () => {
  let fx: Fixture;
  before(async () => {
    fx = await Fixture.start();
  });
  after(async () => fx?.dispose());

  test('after the edge restarts the client reconnects and re-declares its current tools; a call in flight sees its signal abort', async () => {
    const inFlight = deferred<CallAbortedError>();
    const started = deferred();
    const client = fx.client({
      tools: [
        tool('first'),
        tool('hold', async (_a, ctx) => {
          started.resolve();
          return new Promise((_, reject) =>
            ctx.signal.addEventListener('abort', () => {
              inFlight.resolve(ctx.signal.reason as CallAbortedError);
              reject(ctx.signal.reason as Error);
            }),
          );
        }),
      ],
      backoff: { initialMs: 100, maxMs: 1_000 },
    });
    const states: ConnectionState[] = [];
    client.on('state', (s) => states.push(s.state));
    const first = await fx.online(client);

    const call = fx.call(first, 'client__hold').then(
      () => 'answered',
      (e: unknown) => (e instanceof RpcError ? e.kind : String(e)),
    );
    await withTimeout(started.promise, 5_000, 'the held call to reach the handler');
    const offline = nextEvent(client, 'offline', 5_000);
    const online = nextEvent(client, 'online', 10_000, (e) => e.sessionId !== first);
    await fx.edge.restart();

    const off = await offline;
    assert.equal(off.willRetry, true);
    assert.ok(off.retryInMs !== undefined && off.retryInMs <= 1_000);
    const reason = await withTimeout(inFlight.promise, 2_000, 'the in-flight handler to be aborted');
    assert.equal(reason.why, 'disconnected');
    assert.equal(await call, 'channel_closed', 'the edge fails the call in flight as it stops');

    // Declared while offline: the next session must carry it.
    client.setTools([tool('second'), tool('third')]);
    const back = await online;
    assert.notEqual(back.sessionId, first);
    assert.equal(back.seq, client.seq);
    assert.deepEqual(states.slice(0, 3), ['connecting', 'online', 'offline']);
    assert.equal(states.at(-1), 'online');
    assert.ok(states.includes('connecting'));

    const backend = await Backend.connect(fx.edge.url, fx.edge.token('tether-backend', { sub: 'agent' }), fx.userToken());
    try {
      await backend.waitForSession(back.sessionId);
      const m = await backend.tools(back.sessionId);
      assert.deepEqual(m.tools.map((t) => t.name).sort(), ['client__second', 'client__third']);
      const r = await backend.call(back.sessionId, 'client__third', {}, { credential: fx.userToken() });
      assert.deepEqual(r.result.content, [{ type: 'text', text: 'third done' }]);
    } finally {
      backend.close();
    }
    await client.close();
  });

  test('the edge answers the client\'s JSON-RPC heartbeats, so a quiet session stays online', async () => {
    const client = fx.client({ tools: [tool('x')], heartbeat: { intervalMs: 30, timeoutMs: 400 } });
    await client.ready(5_000);
    // Unanswered pings would end the session after about 430 ms with heartbeat_timeout.
    await assert.rejects(nextEvent(client, 'offline', 1_000), /timed out/);
    assert.equal(client.state, 'online');
    await client.close();
  });

  test('close() stops reconnecting: the client stays offline and ready() rejects', async () => {
    const client = fx.client({ tools: [tool('x')] });
    await client.ready(5_000);
    const offline = nextEvent(client, 'offline', 2_000);
    await client.close();
    const e = await offline;
    assert.equal(e.reason, 'closed');
    assert.equal(e.willRetry, false);
    assert.equal(client.state, 'offline');
    assert.equal(client.sessionId, undefined);
    await assert.rejects(client.ready(100), (err: unknown) => err instanceof TetherError && err.code === 'not_online');
  });

  test('a token from another secret is refused (HTTP 401) and the client stops with unauthenticated', async () => {
    const other = await Edge.start();
    let foreign: string;
    try {
      foreign = other.token('tether-client');
    } finally {
      await other.dispose();
    }
    const client = fx.client({ tools: [tool('x')], token: foreign });
    const off = await nextEvent(client, 'offline', 5_000);
    assert.equal(off.willRetry, false);
    assert.equal(off.httpStatus, 401);
    assert.ok(off.error instanceof TetherError && off.error.code === 'unauthenticated', String(off.error));
    await assert.rejects(client.ready(100), /refused the token/);
  });

  test('a wrong path is refused (HTTP 404) and the client stops instead of retrying forever', async () => {
    const client = fx.client({ tools: [tool('x')], url: `${fx.edge.url}/not-tether` });
    const off = await nextEvent(client, 'offline', 5_000);
    assert.equal(off.willRetry, false);
    assert.equal(off.httpStatus, 404);
    assert.ok(off.error instanceof TetherError && off.error.code === 'refused');
  });

  test('an edge that is not there: offline with growing, bounded retry delays, then online once it appears', async () => {
    const edge = await Edge.start();
    const url = edge.url;
    const token = edge.token('tether-client');
    await edge.stop();
    const client: TetherClient = connect({
      url,
      token,
      info: { name: 'late', version: '1' },
      tools: [tool('x')],
      backoff: { initialMs: 100, maxMs: 400 },
    });
    try {
      const delays: number[] = [];
      client.on('offline', (e) => {
        if (e.retryInMs !== undefined) delays.push(e.retryInMs);
      });
      await nextEvent(client, 'connecting', 5_000, (e) => e.attempt === 4);
      assert.ok(delays.length >= 3);
      assert.ok(delays[0]! >= 50 && delays[0]! <= 100, `first delay ${delays[0]}`);
      assert.ok(delays[2]! >= 200 && delays[2]! <= 400, `third delay ${delays[2]}`);
      assert.ok(delays.every((d) => d <= 400), `delays are capped: ${delays.join(',')}`);
      const online = nextEvent(client, 'online', 5_000);
      await edge.restart();
      assert.ok((await online).sessionId.length > 0);
    } finally {
      await client.close();
      await edge.dispose();
    }
  });
});
