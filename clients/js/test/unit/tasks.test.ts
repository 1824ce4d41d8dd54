/**
 * MCP tasks (2025-11-25) frame by frame against a scripted edge: a tool
 * declared with `task` is answered at once with the Task when the edge asks
 * for one, its handler goes on in the background with status notifications,
 * and `tasks/get`, the blocking `tasks/result` and `tasks/cancel` follow it,
 * also across a resumed connection.
 */

import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';

import { Tasks } from '../../dist/tasks.js';
import { CallAbortedError, MAX_TASKS, TetherClient, TetherError, ToolError, type CallEnd, type CallStart, type ConnectOptions, type Tool, type ToolContext } from '../../dist/node.js';
import { DIGEST, digestFor, envelope, FakeEdge, type FakePeer, type Frame } from '../helpers/fake.js';
import { deferred, nextEvent, until, withTimeout } from '../helpers/wait.js';

const STATUS = 'notifications/tasks/status';
const RELATED = 'io.modelcontextprotocol/related-task';
const RESUME = 'tether.dev/resume';
const KEY = 'tether.dev/idempotency_key';
const TASKS_CAPABILITY = { cancel: {}, requests: { tools: { call: {} } } };

const made: TetherClient[] = [];
afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

function tool(name: string, handler: Tool['handler'] = () => `${name} done`, task?: Tool['task']): Tool {
  return { name, description: `The ${name} tool.`, inputSchema: { type: 'object' }, handler, ...(task === undefined ? {} : { task }) };
}

function client(edge: FakeEdge, tools: Tool[], options: Partial<ConnectOptions> = {}): TetherClient {
  const c = new TetherClient(
    { url: 'ws://fake:1', token: 'opaque', info: { name: 'unit', version: '0.0.1' }, tools, backoff: { initialMs: 5, maxMs: 10 }, ...options } as ConnectOptions,
    edge.dial,
  );
  made.push(c);
  return c;
}

/** A `tools/call` frame; `task` makes it a task call (`{ttl}`), `key` sets the idempotency key. */
function call(id: string, name: string, task?: Frame, key?: string): Frame {
  const meta: Frame = { 'tether.dev/deadline_ms': 7000, ...(key === undefined ? {} : { [KEY]: key }) };
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: {}, ...(task === undefined ? {} : { task }), _meta: meta } };
}

const ask = (id: string, method: string, taskId: string): Frame => ({ jsonrpc: '2.0', id, method, params: { taskId } });
const statuses = (peer: FakePeer): Frame[] => peer.sent.filter((f) => f['method'] === STATUS).map((f) => f['params'] as Frame);
const responsesTo = (peer: FakePeer, id: string): Frame[] => peer.sent.filter((f) => f['id'] === id && !('method' in f));

/** The Task of a task call's answer, checked for MCP's CreateTaskResult shape. */
function createdTask(res: Frame, ttl: number): Frame {
  const result = res['result'] as Frame;
  assert.deepEqual(Object.keys(result), ['task'], 'a CreateTaskResult: the task, no content');
  const task = result['task'] as Frame;
  assert.equal(typeof task['taskId'], 'string');
  assert.ok((task['taskId'] as string).length >= 16, 'an unguessable id');
  assert.equal(task['status'], 'working');
  assert.equal(task['ttl'], ttl);
  assert.equal(typeof task['pollInterval'], 'number');
  for (const at of ['createdAt', 'lastUpdatedAt']) {
    assert.match(task[at] as string, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, `${at} is ISO 8601`);
  }
  assert.deepEqual(Object.keys(task), ['taskId', 'status', 'createdAt', 'lastUpdatedAt', 'ttl', 'pollInterval']);
  return task;
}

/** A task tool `work` that hands its ctx to the test and finishes when released (a string returns, an Error throws). */
function heldTool(task: Tool['task'] = 'optional'): { tool: Tool; runs: () => number; ctx: Promise<ToolContext>; release: (outcome: string | Error) => void } {
  let runs = 0;
  const ctx = deferred<ToolContext>();
  const outcome = deferred<string | Error>();
  return {
    tool: tool(
      'work',
      async (_args, x) => {
        runs += 1;
        ctx.resolve(x);
        const o = await outcome.promise;
        if (o instanceof Error) throw o;
        return o;
      },
      task,
    ),
    runs: () => runs,
    ctx: withTimeout(ctx.promise, 2_000, 'the handler to start'),
    release: outcome.resolve,
  };
}

/** A frame round-trips, so anything the client would have sent by now has been. */
async function settle(peer: FakePeer): Promise<void> {
  await peer.ask('ping');
}

describe('tasks: the declaration', () => {
  test('a task tool declares execution.taskSupport, others declare none, and initialize carries capabilities.tasks', async () => {
    const edge = new FakeEdge();
    client(edge, [tool('scan', undefined, 'optional'), tool('pay', undefined, 'required'), tool('look')]);
    const peer = await edge.peer(0);
    const { initialize, tools } = await peer.handshake();
    const capabilities = (initialize['result'] as Frame)['capabilities'];
    assert.deepEqual(capabilities, { tools: { listChanged: true }, tasks: TASKS_CAPABILITY });
    assert.deepEqual(tools.map((t) => [t['name'], t['execution']]), [
      ['scan', { taskSupport: 'optional' }],
      ['pay', { taskSupport: 'required' }],
      ['look', undefined],
    ]);
    assert.ok(!('execution' in (tools[2] as Frame)), 'absent (forbidden), not null');
  });

  test('without a task tool there is no capabilities.tasks; on MCP 2026-07-28 server/discover carries it like initialize', async () => {
    const plain = new FakeEdge();
    client(plain, [tool('look')]);
    const { initialize } = await (await plain.peer(0)).handshake();
    assert.deepEqual((initialize['result'] as Frame)['capabilities'], { tools: { listChanged: true } });

    const modern = new FakeEdge();
    client(modern, [tool('scan', undefined, 'optional')], { protocolVersion: '2026-07-28' });
    const { discover } = await (await modern.peer(0)).discover();
    assert.deepEqual((discover['result'] as Frame)['capabilities'], { tools: { listChanged: true }, tasks: TASKS_CAPABILITY });
  });

  test('a task option other than optional or required is an invalid_tool at connect and at setTools', async () => {
    const edge = new FakeEdge();
    const bad = { ...tool('x'), task: 'always' } as unknown as Tool;
    assert.throws(() => client(edge, [bad]), (e: unknown) => e instanceof TetherError && e.code === 'invalid_tool' && /task must be/.test(e.message));
    const c = client(edge, [tool('x')]);
    assert.throws(() => c.setTools([bad]), (e: unknown) => e instanceof TetherError && e.code === 'invalid_tool');
    assert.deepEqual(c.toolNames, ['x']);
  });
});

describe('tasks: a call made as a task', () => {
  test('is answered at once with the Task; tasks/result blocks until the handler finishes, then answers its result with the related-task meta', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, [work.tool]);
    const starts: CallStart[] = [];
    c.on('callStart', (e) => starts.push(e));
    const peer = await edge.peer(0);
    await peer.handshake();
    peer.deliver(call('t1', 'work', { ttl: 60_000 }));
    const task = createdTask(await peer.response('t1'), 60_000);
    const taskId = task['taskId'] as string;
    const ctx = await work.ctx;
    assert.equal(ctx.taskId, taskId);
    assert.equal(ctx.signal.aborted, false);
    assert.deepEqual(starts.map((s) => [s.callId, s.taskId]), [['t1', taskId]]);

    // Two waits for the same task: neither is answered before the task is final.
    peer.deliver(ask('r1', 'tasks/result', taskId));
    peer.deliver(ask('r2', 'tasks/result', taskId));
    await settle(peer);
    assert.deepEqual([...responsesTo(peer, 'r1'), ...responsesTo(peer, 'r2')], [], 'tasks/result blocks while the task works');

    const ended = nextEvent(c, 'callEnd', 2_000);
    work.release('card read');
    const expected = {
      content: [{ type: 'text', text: 'card read' }],
      _meta: { 'tether.dev/seq': 1, [DIGEST]: digestFor([work.tool]), [RELATED]: { taskId } },
    };
    assert.deepEqual((await peer.response('r1'))['result'], expected);
    assert.deepEqual((await peer.response('r2'))['result'], expected);
    const end: CallEnd = await ended;
    assert.deepEqual([end.callId, end.taskId, end.outcome, end.answered], ['t1', taskId, 'ok', true]);

    // Once final, tasks/result answers at once, the same way; the handler ran once.
    assert.deepEqual((await peer.ask('tasks/result', { taskId }))['result'], expected);
    assert.equal(work.runs(), 1);
  });

  test('a status line from the handler, then the final status, go out as notifications/tasks/status with the Task flat', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const created = createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 30_000 } }), 30_000);
    const taskId = created['taskId'] as string;
    const ctx = await work.ctx;
    ctx.status('waiting for the card tap');
    const working = await peer.waitSent((f) => f['method'] === STATUS, 1_000, 'the status line');
    assert.deepEqual(Object.keys(working['params'] as Frame), ['taskId', 'status', 'statusMessage', 'createdAt', 'lastUpdatedAt', 'ttl', 'pollInterval']);
    assert.deepEqual({ ...(working['params'] as Frame), lastUpdatedAt: 'x' }, { ...created, statusMessage: 'waiting for the card tap', lastUpdatedAt: 'x' });
    ctx.status('x'.repeat(300));
    work.release('ok');
    await peer.ask('tasks/result', { taskId });
    await settle(peer);
    const sent = statuses(peer);
    assert.deepEqual(sent.map((s) => [s['status'], s['statusMessage']]), [
      ['working', 'waiting for the card tap'],
      ['working', `${'x'.repeat(255)}…`],
      ['completed', undefined],
    ]);
    assert.equal(sent[2]?.['taskId'], taskId);
    assert.ok(Date.parse(sent[2]?.['lastUpdatedAt'] as string) >= Date.parse(created['createdAt'] as string));
    const last = peer.sent.filter((f) => f['method'] === STATUS).at(-1);
    ctx.status('after the end');
    await settle(peer);
    assert.equal(peer.sent.filter((f) => f['method'] === STATUS).at(-1), last, 'nothing after the task is final');
  });

  test('a handler that throws fails the task; tasks/result answers the error result an inline call would have', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const taskId = createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: {} }), 600_000)['taskId'] as string;
    await work.ctx;
    work.release(new ToolError('card_declined', 'The card was declined.', { retryable: false }));
    const res = (await peer.ask('tasks/result', { taskId }))['result'] as Frame;
    assert.deepEqual(res, {
      content: [{ type: 'text', text: 'The card was declined.' }],
      structuredContent: { code: 'card_declined', retryable: false },
      isError: true,
      _meta: { 'tether.dev/seq': 1, [DIGEST]: digestFor([work.tool]), [RELATED]: { taskId } },
    });
    const got = (await peer.ask('tasks/get', { taskId }))['result'] as Frame;
    assert.equal(got['status'], 'failed');
    assert.equal(got['statusMessage'], 'The card was declined.');
    assert.deepEqual(statuses(peer).map((s) => s['status']), ['failed']);
  });

  test('tasks/get answers the Task as it is now; an unknown task is -32602 for get, result and cancel', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const created = createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 60_000 } }), 60_000);
    const taskId = created['taskId'] as string;
    const ctx = await work.ctx;
    assert.deepEqual((await peer.ask('tasks/get', { taskId }))['result'], created);
    ctx.status('halfway');
    const halfway = (await peer.ask('tasks/get', { taskId }))['result'] as Frame;
    assert.deepEqual([halfway['status'], halfway['statusMessage']], ['working', 'halfway']);
    work.release('done');
    await peer.ask('tasks/result', { taskId });
    const done = (await peer.ask('tasks/get', { taskId }))['result'] as Frame;
    assert.deepEqual([done['status'], done['statusMessage'], done['createdAt'], done['ttl']], ['completed', undefined, created['createdAt'], 60_000]);
    for (const method of ['tasks/get', 'tasks/result', 'tasks/cancel']) {
      const err = (await peer.ask(method, { taskId: 'nope' }))['error'] as Frame;
      assert.equal(err['code'], -32602, method);
      assert.match(err['message'] as string, /unknown task/);
    }
    assert.equal(((await peer.ask('tasks/get', {}))['error'] as Frame)['code'], -32602);
  });

  test('tasks/cancel aborts the handler, answers the cancelled Task, and cancelled is final: the waits get -32800, a second cancel -32602', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const taskId = createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 60_000 } }), 60_000)['taskId'] as string;
    const ctx = await work.ctx;
    peer.deliver(ask('wait', 'tasks/result', taskId));
    const ended = nextEvent(c, 'callEnd', 2_000);
    const cancelled = (await peer.ask('tasks/cancel', { taskId }))['result'] as Frame;
    assert.equal(cancelled['taskId'], taskId);
    assert.equal(cancelled['status'], 'cancelled');
    assert.equal(ctx.signal.aborted, true, "the handler's signal fired");
    assert.equal((ctx.signal.reason as CallAbortedError).why, 'cancelled');
    const waited = (await peer.response('wait'))['error'] as Frame;
    assert.deepEqual([waited['code'], waited['message']], [-32800, 'the task was cancelled']);
    assert.equal((await ended).outcome, 'cancelled');

    // The handler finishing anyway changes nothing.
    work.release('too late');
    await settle(peer);
    assert.equal(((await peer.ask('tasks/get', { taskId }))['result'] as Frame)['status'], 'cancelled');
    assert.equal(((await peer.ask('tasks/result', { taskId }))['error'] as Frame)['code'], -32800);
    assert.equal(((await peer.ask('tasks/cancel', { taskId }))['error'] as Frame)['code'], -32602, 'a final task cannot be cancelled');
    assert.deepEqual(statuses(peer).map((s) => s['status']), ['cancelled']);
  });

  test('a completed task cannot be cancelled (-32602); notifications/cancelled for a tasks/result stops that wait only', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const taskId = createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 60_000 } }), 60_000)['taskId'] as string;
    const ctx = await work.ctx;
    peer.deliver(ask('w1', 'tasks/result', taskId));
    peer.deliver(ask('w2', 'tasks/result', taskId));
    peer.deliver({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'w1' } });
    await settle(peer);
    assert.equal(ctx.signal.aborted, false, 'cancelling a wait does not cancel the task');
    work.release('done');
    assert.ok((await peer.response('w2'))['result']);
    await settle(peer);
    assert.deepEqual(responsesTo(peer, 'w1'), [], 'the cancelled wait gets no answer');
    assert.equal(((await peer.ask('tasks/cancel', { taskId }))['error'] as Frame)['code'], -32602);
  });
});

describe('tasks: calls without a task', () => {
  test('an optional tool called without task runs inline as before: no Task, no status, ctx.status a no-op', async () => {
    const edge = new FakeEdge();
    let seen: ToolContext | undefined;
    const scan = tool(
      'scan',
      (_a, ctx) => {
        seen = ctx;
        ctx.status('ignored inline');
        return 'scanned';
      },
      'optional',
    );
    client(edge, [scan]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const res = await peer.ask('tools/call', { name: 'scan', arguments: {}, _meta: { 'tether.dev/deadline_ms': 7000 } });
    assert.deepEqual(res['result'], { content: [{ type: 'text', text: 'scanned' }], _meta: { 'tether.dev/seq': 1, [DIGEST]: digestFor([scan]) } });
    assert.equal(seen?.taskId, undefined);
    await settle(peer);
    assert.deepEqual(statuses(peer), []);
  });

  test('a required tool called without task is -32601 and does not run; a task-less tool called as a task is -32601 too', async () => {
    const edge = new FakeEdge();
    let runs = 0;
    const c = client(edge, [tool('pay', () => `paid ${++runs}`, 'required'), tool('look', () => `looked ${++runs}`)]);
    const ends: CallEnd[] = [];
    c.on('callEnd', (e) => ends.push(e));
    const peer = await edge.peer(0);
    await peer.handshake();
    const inline = (await peer.ask('tools/call', { name: 'pay', arguments: {} }))['error'] as Frame;
    assert.equal(inline['code'], -32601);
    assert.match(inline['message'] as string, /must be called as a task/);
    const asTask = (await peer.ask('tools/call', { name: 'look', arguments: {}, task: { ttl: 1_000 } }))['error'] as Frame;
    assert.equal(asTask['code'], -32601);
    assert.equal(runs, 0);
    assert.deepEqual(ends.map((e) => [e.name, e.outcome, e.code]), [['pay', 'error', 'task_required'], ['look', 'error', 'task_forbidden']]);
    // Called as a task, the required tool runs.
    createdTask(await peer.ask('tools/call', { name: 'pay', arguments: {}, task: { ttl: 1_000 } }), 1_000);
    await until(() => (runs === 1 ? true : undefined), 1_000, 'the task to run');
  });

  test('a client that declared no tasks ignores task in a call (MCP: process it normally)', async () => {
    const edge = new FakeEdge();
    client(edge, [tool('look')]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const res = (await peer.ask('tools/call', { name: 'look', arguments: {}, task: { ttl: 1_000 } }))['result'] as Frame;
    assert.deepEqual(res['content'], [{ type: 'text', text: 'look done' }]);
  });
});

describe('tasks: across a resume', () => {
  test('a task that finished while disconnected is answered by tasks/result on the new socket; statuses that could not be sent are not sent', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, [work.tool]);
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('t1', 'work', { ttl: 60_000 }));
    const taskId = createdTask(await first.response('t1'), 60_000)['taskId'] as string;
    const ctx = await work.ctx;
    first.deliver(ask('lost-wait', 'tasks/result', taskId));
    await settle(first);
    first.closeFromEdge(1006);
    assert.equal(ctx.signal.aborted, false, 'a task outlives its socket');
    ctx.status('finishing offline');
    work.release('done offline');
    await until(() => (work.runs() === 1 ? true : undefined), 1_000, 'the run');

    const second = await edge.peer(1);
    const back = nextEvent(c, 'online', 2_000);
    await second.handshake('sess-1', { [RESUME]: 'sess-1.bb22' });
    assert.equal((await back).resumed, true);
    assert.equal(((await second.ask('tasks/get', { taskId }))['result'] as Frame)['status'], 'completed');
    const res = (await second.ask('tasks/result', { taskId }))['result'] as Frame;
    assert.deepEqual(res['content'], [{ type: 'text', text: 'done offline' }]);
    assert.deepEqual((res['_meta'] as Frame)[RELATED], { taskId });
    assert.deepEqual(statuses(first), [], 'nothing was sent while the socket was gone');
    assert.deepEqual(statuses(second), [], 'nor replayed afterwards: the edge asks');
    assert.deepEqual(responsesTo(first, 'lost-wait'), [], 'the wait on the lost socket died with it');
    assert.deepEqual(responsesTo(second, 'lost-wait'), []);
  });

  test('a task still working after the resume sends its statuses on the new socket; a re-delivered keyed task call gets the same task', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, [work.tool]);
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    first.deliver(call('t1', 'work', { ttl: 60_000 }, 'turn-1:call-1'));
    const taskId = createdTask(await first.response('t1'), 60_000)['taskId'] as string;
    const ctx = await work.ctx;
    first.closeFromEdge(1006);
    const second = await edge.peer(1);
    await second.handshake('sess-1', { [RESUME]: 'sess-1.bb22' });
    const starts: CallStart[] = [];
    c.on('callStart', (e) => starts.push(e));
    second.deliver(call('t2', 'work', { ttl: 60_000 }, 'turn-1:call-1'));
    assert.equal(((await second.response('t2'))['result'] as Frame)['task'] !== undefined, true);
    assert.equal((((await second.response('t2'))['result'] as Frame)['task'] as Frame)['taskId'], taskId, 'the same task');
    assert.deepEqual(starts.map((s) => [s.callId, s.taskId, s.deduplicated]), [['t2', taskId, true]]);
    ctx.status('on the new socket');
    const status = await second.waitSent((f) => f['method'] === STATUS, 1_000, 'the status on the new socket');
    assert.equal((status['params'] as Frame)['statusMessage'], 'on the new socket');
    work.release('done');
    assert.deepEqual(((await second.ask('tasks/result', { taskId }))['result'] as Frame)['content'], [{ type: 'text', text: 'done' }]);
    assert.equal(work.runs(), 1, 'the handler ran once');
  });

  test('a task session that was not resumed gets no statuses, but its outcome can still be read by id', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    client(edge, [work.tool]);
    const first = await edge.peer(0);
    await first.handshake('sess-1', { [RESUME]: 'sess-1.aa11' });
    const taskId = createdTask(await first.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 60_000 } }), 60_000)['taskId'] as string;
    const ctx = await work.ctx;
    first.closeFromEdge(1006);
    const second = await edge.peer(1);
    await second.handshake('sess-2');
    ctx.status('not for sess-2');
    work.release('done');
    assert.deepEqual(((await second.ask('tasks/result', { taskId }))['result'] as Frame)['content'], [{ type: 'text', text: 'done' }]);
    assert.deepEqual(statuses(second), []);
  });
});

describe('tasks: lifetime and bounds', () => {
  test('a handler still running at the ttl is stopped: the task fails with device_timeout, then is forgotten', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const taskId = createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 150 } }), 150)['taskId'] as string;
    const ctx = await work.ctx;
    const ended = nextEvent(c, 'callEnd', 2_000);
    const res = (await peer.ask('tasks/result', { taskId }, 2_000))['result'] as Frame;
    assert.equal(res['isError'], true);
    assert.deepEqual(res['structuredContent'], { code: 'device_timeout', retryable: true });
    assert.equal((ctx.signal.reason as CallAbortedError).why, 'ceiling');
    assert.deepEqual([(await ended).outcome, (await ended).code], ['timeout', 'device_timeout']);
    assert.deepEqual(statuses(peer).map((s) => s['status']), ['failed']);
    assert.equal(((await peer.ask('tasks/get', { taskId }))['error'] as Frame)['code'], -32602, 'forgotten at its ttl');
  });

  test('a finished task is kept for its ttl from creation, then forgotten', async () => {
    const edge = new FakeEdge();
    client(edge, [tool('quick', () => 'quick', 'optional')]);
    const peer = await edge.peer(0);
    await peer.handshake();
    const taskId = createdTask(await peer.ask('tools/call', { name: 'quick', arguments: {}, task: { ttl: 200 } }), 200)['taskId'] as string;
    assert.deepEqual(((await peer.ask('tasks/result', { taskId }))['result'] as Frame)['content'], [{ type: 'text', text: 'quick' }]);
    await until(async () => ((await peer.ask('tasks/get', { taskId }))['error'] !== undefined ? true : undefined), 2_000, 'the task to be forgotten');
  });

  test(`at most ${MAX_TASKS} tasks: one more is refused while all work, and a read outcome makes room`, async () => {
    const edge = new FakeEdge();
    const gate = deferred<string>();
    let runs = 0;
    client(edge, [tool('hold', () => { runs += 1; return gate.promise; }, 'optional'), tool('quick', () => 'quick', 'optional')]);
    const peer = await edge.peer(0);
    await peer.handshake();
    for (let i = 0; i < MAX_TASKS - 1; i++) peer.deliver(call(`h${i}`, 'hold', { ttl: 60_000 }));
    const quick = createdTask(await peer.ask('tools/call', { name: 'quick', arguments: {}, task: { ttl: 60_000 } }), 60_000)['taskId'] as string;
    const refused = (await peer.ask('tools/call', { name: 'hold', arguments: {}, task: { ttl: 60_000 } }))['error'] as Frame;
    assert.equal(refused['code'], -32603);
    assert.match(refused['message'] as string, new RegExp(`keeps ${MAX_TASKS} tasks`));
    assert.equal(runs, MAX_TASKS - 1);
    // quick is final but unread: it is not dropped to make room.
    assert.ok(((await peer.ask('tools/call', { name: 'hold', arguments: {}, task: {} }))['error']));
    await peer.ask('tasks/result', { taskId: quick });
    createdTask(await peer.ask('tools/call', { name: 'hold', arguments: {}, task: { ttl: 60_000 } }), 60_000);
    assert.equal(((await peer.ask('tasks/get', { taskId: quick }))['error'] as Frame)['code'], -32602, 'the read task made room');
    gate.resolve('released');
  });

  test('close() stops a running task', async () => {
    const edge = new FakeEdge();
    const work = heldTool();
    const c = client(edge, [work.tool]);
    const peer = await edge.peer(0);
    await peer.handshake();
    createdTask(await peer.ask('tools/call', { name: 'work', arguments: {}, task: { ttl: 60_000 } }), 60_000);
    const ctx = await work.ctx;
    await c.close();
    assert.equal((ctx.signal.reason as CallAbortedError).why, 'closed');
  });

  test('on MCP 2026-07-28 the task answers carry resultType complete like every result', async () => {
    const edge = new FakeEdge();
    client(edge, [tool('quick', () => 'quick', 'optional')], { protocolVersion: '2026-07-28' });
    const peer = await edge.peer(0);
    await peer.discover();
    const created = (await peer.ask('tools/call', { name: 'quick', arguments: {}, task: { ttl: 60_000 }, _meta: envelope() }))['result'] as Frame;
    assert.equal(created['resultType'], 'complete');
    const taskId = (created['task'] as Frame)['taskId'] as string;
    const res = (await peer.ask('tasks/result', { taskId, _meta: envelope() }))['result'] as Frame;
    assert.equal(res['resultType'], 'complete');
    assert.deepEqual((res['_meta'] as Frame)[RELATED], { taskId });
  });
});

describe('Tasks', () => {
  const owner = { notify: () => undefined, callEnd: () => undefined, problem: () => undefined };
  const request = (id: string) => ({ id, name: 't', arguments: {}, sessionId: 's', deadlineMs: undefined, idempotencyKey: undefined, progressToken: undefined, trace: undefined });
  const start = (id: string) => ({ callId: id, sessionId: 's', name: 't', arguments: {} });

  test('keeps at most max; a cancelled task makes room, a working or unread one does not', () => {
    const tasks = new Tasks(owner, 2);
    const a = tasks.create(request('a'), start('a'), 60_000);
    const b = tasks.create(request('b'), start('b'), 60_000);
    assert.ok(a !== undefined && b !== undefined);
    assert.equal(tasks.create(request('c'), start('c'), 60_000), undefined);
    tasks.run(a, tool('t', () => new Promise(() => undefined)));
    assert.equal(a.cancel(), true);
    assert.equal(a.cancel(), false);
    const c = tasks.create(request('c'), start('c'), 60_000);
    assert.ok(c !== undefined);
    assert.equal(tasks.find(a.id), undefined);
    assert.equal(tasks.size, 2);
    tasks.closeAll();
    assert.equal(tasks.size, 0);
  });

  test('forgets a final task once its ttl from creation has passed', async () => {
    let now = 1_000;
    const tasks = new Tasks(owner, 8, () => now);
    const t = tasks.create(request('a'), start('a'), 500);
    assert.ok(t !== undefined);
    tasks.run(t, tool('t', () => 'x'));
    await t.done;
    now = 1_499;
    assert.equal(tasks.find(t.id), t);
    now = 1_500;
    assert.equal(tasks.find(t.id), undefined);
  });
});
