/**
 * Calls end to end through a real edge: the backend calls `client__…`, the
 * handler runs under its own name, and every way a call can end reaches the
 * backend as the protocol says.
 */

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { CallAbortedError, ToolError, type CallEnd, type TetherClient, type Tool, type ToolContext } from '../../dist/node.js';
import { rpcError, type Notification } from '../helpers/backend.js';
import { Fixture } from '../helpers/fixture.js';
import { deferred, nextEvent, until, withTimeout } from '../helpers/wait.js';

const obj = { type: 'object' } as const;

describe('calls', () => {
  let fx: Fixture;
  let client: TetherClient;
  let session: string;
  const seen: { ctx?: ToolContext; args?: unknown } = {};
  const aborted = deferred<CallAbortedError>();
  const cancelled = deferred<CallAbortedError>();

  /** Resolves with the reason once `signal` aborts; never resolves otherwise. */
  const untilAborted = (signal: AbortSignal): Promise<never> =>
    new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }));

  const tools: Tool[] = [
    {
      name: 'getWeather',
      title: 'Weather',
      description: 'Current weather for a city.',
      inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      outputSchema: { type: 'object', properties: { city: { type: 'string' }, tempC: { type: 'number' } } },
      annotations: { readOnlyHint: true },
      handler: (args, ctx) => {
        seen.ctx = ctx;
        seen.args = args;
        return { city: String(args['city']), tempC: 21 };
      },
    },
    {
      name: 'scanBarcode',
      description: 'Scan a code; the user may decline.',
      inputSchema: obj,
      handler: () => {
        throw new ToolError('user_declined', 'The user dismissed the scanner.');
      },
    },
    {
      name: 'printLabel',
      description: 'Print a label.',
      inputSchema: obj,
      handler: async () => {
        await Promise.resolve();
        throw Object.assign(new Error('The printer is busy.'), { code: 'busy', retryable: true, retry_after_ms: 1500 });
      },
    },
    {
      name: 'crash',
      description: 'A handler with a bug.',
      inputSchema: obj,
      handler: () => {
        throw new TypeError('cannot read properties of undefined');
      },
    },
    {
      name: 'waitForever',
      description: 'Never finishes unless aborted.',
      inputSchema: obj,
      handler: async (_args, ctx) => {
        try {
          return await untilAborted(ctx.signal);
        } catch (err) {
          aborted.resolve(err as CallAbortedError);
          throw err;
        }
      },
    },
    {
      name: 'waitForCancel',
      description: 'Never finishes unless aborted.',
      inputSchema: obj,
      handler: async (_args, ctx) => {
        seen.ctx = ctx;
        try {
          return await untilAborted(ctx.signal);
        } catch (err) {
          cancelled.resolve(err as CallAbortedError);
          throw err;
        }
      },
    },
    {
      name: 'syncPages',
      description: 'Syncs three pages, reporting progress after each of the first two.',
      inputSchema: obj,
      handler: (_args, ctx) => {
        ctx.progress(1, 3, 'page 1 of 3');
        ctx.progress(2, 3, 'page 2 of 3');
        return 'synced 3 pages';
      },
    },
    {
      name: 'exportReport',
      description: 'Returns a report too large for one result.',
      inputSchema: obj,
      handler: () => 'x'.repeat(20_000),
    },
  ];

  before(async () => {
    fx = await Fixture.start();
    client = fx.client({ tools, concept: { instructions: 'A test app.', app: 'Test', nouns: ['weather'] }, context: { pointer: { screen: 'home' } } });
    session = await fx.online(client);
  });
  after(async () => fx?.dispose());

  test('the backend sees the declared tools under namespaced names, with concept and context', async () => {
    const m = await fx.backend.tools(session);
    assert.deepEqual(
      m.tools.map((t) => t.name).sort(),
      ['client__crash', 'client__export_report', 'client__get_weather', 'client__print_label', 'client__scan_barcode', 'client__sync_pages', 'client__wait_for_cancel', 'client__wait_forever'],
    );
    assert.equal(m.instructions, 'A test app.');
    assert.deepEqual(m.concept, { app: 'Test', nouns: ['weather'] });
    assert.deepEqual(m.context, { pointer: { screen: 'home' } });
    assert.equal(m.seq, 1);
    const [info] = (await fx.backend.sessions()).filter((s) => s.session === session);
    assert.deepEqual(info?.server_info, { name: 'test-app', version: '1.0.0' });
  });

  test('a call by namespaced name runs the handler under its own name, with the edge deadline and idempotency key', async () => {
    const ended = nextEvent(client, 'callEnd', 5_000, (e) => e.name === 'getWeather');
    const r = await fx.call(session, 'client__get_weather', { city: 'Oslo' }, { idempotency_key: 'turn-1:call-1' });
    assert.deepEqual(r.result.structuredContent, { city: 'Oslo', tempC: 21 });
    assert.equal(r.result.isError, undefined);
    assert.equal(r.result._meta?.['tether.dev/seq'], 1, 'every result carries the current seq');
    assert.deepEqual(seen.args, { city: 'Oslo' });
    assert.equal(seen.ctx?.name, 'getWeather');
    assert.equal(seen.ctx?.sessionId, session);
    assert.equal(seen.ctx?.deadlineMs, 7000);
    assert.equal(seen.ctx?.idempotencyKey, 'turn-1:call-1');
    assert.equal(seen.ctx?.signal.aborted, false);
    const end: CallEnd = await ended;
    assert.equal(end.outcome, 'ok');
    assert.equal(end.answered, true);
  });

  test('a handler that throws a ToolError fails the call with its code', async () => {
    const r = await fx.call(session, 'client__scan_barcode');
    assert.equal(r.result.isError, true);
    assert.deepEqual(r.result.structuredContent, { code: 'user_declined', retryable: false });
    assert.deepEqual(r.result.content, [{ type: 'text', text: 'The user dismissed the scanner.' }]);
  });

  test('a thrown error object carries its own code, retryable and retry_after_ms', async () => {
    const r = await fx.call(session, 'client__print_label');
    assert.deepEqual(r.result.structuredContent, { code: 'busy', retryable: true, retry_after_ms: 1500 });
  });

  test('any other throw is handler_error, not retryable', async () => {
    const r = await fx.call(session, 'client__crash');
    assert.equal(r.result.isError, true);
    assert.deepEqual(r.result.structuredContent, { code: 'handler_error', retryable: false });
    assert.match(String(r.result.content[0]?.['text']), /cannot read properties/);
  });

  test('a handler past the 2 s ceiling is aborted and answered with a structured device_timeout', async () => {
    const ended = nextEvent(client, 'callEnd', 5_000, (e) => e.name === 'waitForever');
    const started = Date.now();
    const r = await fx.call(session, 'client__wait_forever');
    const took = Date.now() - started;
    assert.equal(r.result.isError, true);
    assert.deepEqual(r.result.structuredContent, { code: 'device_timeout', retryable: true });
    assert.ok(took >= 1_900 && took < 4_000, `answered after ${took} ms, expected about 2000`);
    const reason = await withTimeout(aborted.promise, 1_000, 'the handler signal to abort');
    assert.ok(reason instanceof CallAbortedError);
    assert.equal(reason.why, 'ceiling');
    const end = await ended;
    assert.equal(end.outcome, 'timeout');
    assert.equal(end.code, 'device_timeout');
  });

  test('progress the handler reports reaches the backend that asked, under its progressToken and with the session', async () => {
    // Bounded well under 5 s in all: an edge that does not relay progress fails this fast.
    const r = await withTimeout(fx.call(session, 'client__sync_pages', {}, { progressToken: 'p-7' }), 2_000, 'the sync_pages result');
    assert.deepEqual(r.result.content, [{ type: 'text', text: 'synced 3 pages' }]);
    const mine = (): Notification[] =>
      fx.backend.notifications.filter((n) => n.method === 'notifications/progress' && n.params['progressToken'] === 'p-7');
    await until(() => (mine().length >= 2 ? true : undefined), 2_500, 'two notifications/progress for p-7 on the backend link');
    const got = mine();
    assert.deepEqual(got.map((n) => n.params['progress']), [1, 2]);
    for (const n of got) {
      assert.equal(n.params['total'], 3);
      assert.equal(n.params['session'], session);
    }
  });

  test('a result over the result cap fails locally and is never sent', async () => {
    const r = await fx.call(session, 'client__export_report');
    assert.equal(r.result.isError, true);
    const sc = r.result.structuredContent ?? {};
    assert.equal(sc['code'], 'payload_too_large');
    assert.equal(sc['limit'], 12_288);
    assert.ok(Number(sc['bytes']) > 20_000);
    assert.equal(await fx.edge.counter('tether_results_too_large_total'), 0, 'the edge never saw the oversized result');
  });

  test('notifications/cancelled aborts the signal and nothing is answered', async () => {
    const ended = nextEvent(client, 'callEnd', 5_000, (e) => e.name === 'waitForCancel');
    // budget_ms shortens the edge's tool_call leg below the client's ceiling: the edge gives up first and cancels.
    const err = await rpcError(fx.call(session, 'client__wait_for_cancel', {}, { budget_ms: 300 }));
    assert.equal(err.kind, 'timeout');
    assert.equal(err.data['outcome'], 'unknown');
    assert.equal(seen.ctx?.deadlineMs, 300);
    const reason = await withTimeout(cancelled.promise, 2_000, 'the handler signal to abort on cancel');
    assert.equal(reason.why, 'cancelled');
    assert.match(reason.message, /stopped waiting after 300 ms/);
    const end = await ended;
    assert.equal(end.outcome, 'cancelled');
    assert.equal(end.answered, false);
    assert.equal(await fx.edge.counter('tether_cancels_sent_total'), 1);
    assert.equal(await fx.edge.counter('tether_late_answers_total'), 0, 'a cancelled call is not answered');
  });

  test('calls run concurrently: a slow one does not hold up a fast one', async () => {
    const slow = fx.call(session, 'client__wait_forever');
    const fast = await fx.call(session, 'client__get_weather', { city: 'Bergen' });
    assert.deepEqual(fast.result.structuredContent, { city: 'Bergen', tempC: 21 });
    const s = await slow;
    assert.equal(s.result.structuredContent?.['code'], 'device_timeout');
  });
});

describe('an edge whose tool_call leg is shorter than the client ceiling', () => {
  let fx: Fixture;
  before(async () => {
    // [budgets] from docs/OPERATIONS.md: the edge stops waiting after 1 s and sends notifications/cancelled.
    fx = await Fixture.start({ config: '[budgets]\nclient_answer_ms = 500\ntool_call_ms = 1000\n' });
  });
  after(async () => fx?.dispose());

  test('the edge cancels at its leg: the signal fires with why "cancelled" and the backend gets timeout', async () => {
    const reason = deferred<CallAbortedError>();
    const client = fx.client({
      tools: [
        {
          name: 'slowScan',
          description: 'Waits for the camera.',
          inputSchema: obj,
          handler: (_a, ctx) =>
            new Promise((_, reject) =>
              ctx.signal.addEventListener('abort', () => {
                reason.resolve(ctx.signal.reason as CallAbortedError);
                reject(ctx.signal.reason as Error);
              }),
            ),
        },
      ],
    });
    const session = await fx.online(client);
    const started = Date.now();
    const err = await rpcError(fx.call(session, 'client__slow_scan'));
    assert.equal(err.kind, 'timeout');
    assert.equal(err.data['budget_ms'], 1000);
    const why = await withTimeout(reason.promise, 2_000, 'the cancel to reach the handler');
    assert.equal(why.why, 'cancelled');
    const took = Date.now() - started;
    assert.ok(took < 1_900, `cancelled after ${took} ms: before the client's own 2000 ms ceiling`);
  });
});
