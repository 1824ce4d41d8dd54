/**
 * Resuming against a real edge: a relay between client and edge is cut (no
 * close frame, as in a network blip), the client presents its resume token,
 * the edge takes the session back and delivers the keyed call in flight
 * again, and the handler runs once.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import type { Tool } from '../../dist/node.js';
import { Fixture } from '../helpers/fixture.js';
import { Relay } from '../helpers/relay.js';
import { deferred, nextEvent, withTimeout } from '../helpers/wait.js';

describe('resume', () => {
  let fx: Fixture;
  let relay: Relay;
  before(async () => {
    fx = await Fixture.start();
    relay = await Relay.start(fx.edge.port);
  });
  after(async () => {
    await relay?.close();
    await fx?.dispose();
  });

  test('a connection cut mid-call resumes the same session; the keyed call in flight runs once and answers the backend', async () => {
    let runs = 0;
    const started = deferred<AbortSignal>();
    const release = deferred();
    const reserve: Tool = {
      name: 'reserve',
      description: 'Reserves an item.',
      inputSchema: { type: 'object' },
      handler: async (_a, ctx) => {
        runs += 1;
        started.resolve(ctx.signal);
        await release.promise;
        return 'reserved';
      },
    };
    const client = fx.client({ url: relay.url, backoff: { initialMs: 50, maxMs: 100 }, tools: [reserve] });
    const first = await fx.online(client);
    const ends: { outcome: string; deduplicated: boolean }[] = [];
    client.on('callEnd', (e) => ends.push({ outcome: e.outcome, deduplicated: e.deduplicated === true }));
    const call = fx.call(first, 'client__reserve', {}, { idempotency_key: 'turn-1:call-1' });
    const signal = await withTimeout(started.promise, 5_000, 'the handler to start');

    const back = nextEvent(client, 'online', 10_000);
    relay.cut();
    assert.deepEqual(await back, { sessionId: first, seq: client.seq, resumed: true });
    assert.equal(signal.aborted, false, 'the keyed run outlives the cut');
    release.resolve();

    const r = await withTimeout(call, 8_000, "the backend's answer");
    assert.deepEqual(r.result.content, [{ type: 'text', text: 'reserved' }]);
    assert.equal(runs, 1, 'the handler ran once');
    assert.deepEqual(ends, [
      { outcome: 'disconnected', deduplicated: false },
      { outcome: 'ok', deduplicated: true },
    ]);
  });
});
