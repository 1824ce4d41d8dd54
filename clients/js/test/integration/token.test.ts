/**
 * Credentials that expire. The edge closes a session with 1008 at its
 * token's `exp`; with `getToken` the client moves to a fresh token first
 * (make-before-break), and if that fails it reconnects with a fresh one after
 * the close. A fixed token that expired is not retried in a loop.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { TetherError, tokenExpiry, type Tool } from '../../dist/node.js';
import { Fixture } from '../helpers/fixture.js';
import { deferred, nextEvent, until } from '../helpers/wait.js';

describe('token expiry', () => {
  let fx: Fixture;
  before(async () => {
    fx = await Fixture.start();
  });
  after(async () => fx?.dispose());

  test('getToken: a fresh token is fetched before expiry and the session moves to it without going offline; a call in flight finishes on the old one', async () => {
    const release = deferred<string>();
    const held = deferred();
    const tools: Tool[] = [
      { name: 'echo', description: 'Echo.', inputSchema: { type: 'object' }, handler: (a) => a },
      {
        name: 'held',
        description: 'Answers when the test says so.',
        inputSchema: { type: 'object' },
        handler: async () => {
          held.resolve();
          return release.promise;
        },
      },
    ];
    const issued: string[] = [];
    const client = fx.client({
      tools,
      getToken: () => {
        const t = fx.edge.token('tether-client', { ttl: '5s' });
        issued.push(t);
        return t;
      },
      limits: { answerCeilingMs: 10_000 },
    });
    const offline: unknown[] = [];
    client.on('offline', (e) => offline.push(e));
    const first = await fx.online(client);
    const firstExp = tokenExpiry(issued[0] ?? '') ?? 0;
    assert.ok(firstExp > Date.now(), 'the first token has an exp in the future');

    const inFlight = fx.call(first, 'client__held');
    await held.promise;
    const moved = await nextEvent(client, 'online', 8_000, (e) => e.sessionId !== first);
    assert.equal(issued.length, 2, 'one token at connect, one for the refresh');
    assert.ok(Date.now() < firstExp, 'the move happened before the first token expired');
    assert.equal(client.state, 'online');
    // The old session waits for its call before it closes.
    assert.ok((await fx.backend.sessions()).some((s) => s.session === first), 'the old session stays while its call runs');
    release.resolve('done on the old session');
    const r = await inFlight;
    assert.deepEqual(r.result.content, [{ type: 'text', text: 'done on the old session' }]);
    const closed = await fx.backend.notification('notifications/session/closed', (p) => p['session'] === first, 5_000);
    assert.equal(closed.params['reason'], 'disconnected', 'the client closed it, not the edge');

    // Past the first token's expiry, the session is alive and callable.
    await until(() => (Date.now() > firstExp + 1_000 ? true : undefined), 8_000, 'the first token to expire');
    const after = await fx.call(moved.sessionId, 'client__echo', { still: 'here' });
    assert.deepEqual(after.result.structuredContent, { still: 'here' });
    assert.deepEqual(offline, [], 'the client never went offline');
    assert.equal(await fx.edge.counter('tether_credentials_expired_total'), 0, 'the edge never had to close an expired session');
    await client.close();
  });

  test('getToken failing at refresh time: the edge closes with 1008 at expiry and the client reconnects with a fresh token', async () => {
    let refuse = false;
    let fetched = 0;
    const client = fx.client({
      tools: [{ name: 'echo', description: 'Echo.', inputSchema: { type: 'object' }, handler: (a) => a }],
      getToken: () => {
        fetched += 1;
        if (refuse) throw new Error('identity provider unavailable');
        return fx.edge.token('tether-client', { ttl: '3s' });
      },
    });
    const errors: Error[] = [];
    client.on('error', (e) => errors.push(e));
    const first = await fx.online(client);
    refuse = true;
    const expiredBefore = await fx.edge.counter('tether_credentials_expired_total');
    const off = await nextEvent(client, 'offline', 6_000);
    assert.equal(off.code, 1008);
    assert.equal(off.reason, 'policy');
    assert.equal(off.willRetry, true);
    refuse = false;
    const back = await nextEvent(client, 'online', 5_000);
    assert.notEqual(back.sessionId, first);
    assert.ok(errors.some((e) => e instanceof TetherError && e.code === 'token_unavailable'), 'the failed refresh was reported');
    assert.ok(fetched >= 3, `getToken was asked at connect, at refresh and on reconnect (${fetched})`);
    assert.equal(await fx.edge.counter('tether_credentials_expired_total'), expiredBefore + 1);
    await fx.backend.waitForSession(back.sessionId);
    const r = await fx.call(back.sessionId, 'client__echo', { ok: true });
    assert.deepEqual(r.result.structuredContent, { ok: true });
    await client.close();
  });

  test('a fixed token that expires: the edge closes with 1008 and the client stops with unauthenticated instead of looping', async () => {
    const client = fx.client({
      tools: [{ name: 'echo', description: 'Echo.', inputSchema: { type: 'object' }, handler: (a) => a }],
      token: fx.edge.token('tether-client', { ttl: '2s' }),
    });
    await client.ready(5_000);
    const final = await nextEvent(client, 'offline', 5_000);
    assert.equal(final.code, 1008);
    assert.equal(final.reason, 'token_expired');
    assert.equal(final.willRetry, false, 'no reconnect with a token that cannot work');
    assert.ok(final.error instanceof TetherError && final.error.code === 'unauthenticated', String(final.error));
    assert.match(final.error.message, /getToken/);
  });
});
