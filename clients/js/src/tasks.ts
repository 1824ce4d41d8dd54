/**
 * MCP tasks (revision 2025-11-25, experimental) on the device. A tool
 * declared with `task` may be called as a task: the call is answered at once
 * with the task, and its handler goes on in the background. The edge follows
 * it with `notifications/tasks/status` (sent on every change), `tasks/get`,
 * the blocking `tasks/result` and `tasks/cancel`.
 *
 * Tasks belong to the client, not to a session: a task outlives the socket
 * it was made on, so after a resume the edge's `tasks/result` on the new
 * socket gets the outcome, even one that arrived while there was no socket.
 * A status notification goes to the task's session when it is online and is
 * otherwise not sent at all: the edge asks again after the resume.
 *
 * A task lives for its ttl, counted from its creation: a handler still
 * running then is stopped (outcome `device_timeout`), a finished task is
 * forgotten. At most `MAX_TASKS` are kept; when that many are, the oldest
 * finished one whose outcome was fetched (or that was cancelled) makes room,
 * and with none such a new task is refused: an outcome nobody has read is
 * not dropped to make room for more work.
 */

import { capMessage, RunningCall, type CallRequest, type Settled } from './call.js';
import { TetherError } from './errors.js';
import { isJsonObject, type JsonObject } from './json.js';
import { Method } from './jsonrpc.js';
import type { Replay } from './keyed.js';
import { failureResult, invalidResult, resultOf, taskExpiredResult } from './results.js';
import type { AnyTool, CallEnd, CallOutcome, CallStart, CallToolResult, TaskStatus } from './types.js';

/** How many tasks the client keeps, running or finished. */
export const MAX_TASKS = 64;
/** A task's ttl when the edge asks for none: the edge's own default. */
export const DEFAULT_TASK_TTL_MS = 10 * 60_000;
/** The longest ttl taken (the edge's ceiling, a day); longer asks are shortened, as MCP lets a receiver. */
export const MAX_TASK_TTL_MS = 24 * 60 * 60_000;
/** How often the device suggests the edge look (`pollInterval`); the edge mostly waits on `tasks/result` instead. */
export const TASK_POLL_INTERVAL_MS = 1_000;

/** The `initialize` (and `server/discover`) answer of a catalog with a task-capable tool: it declares `capabilities.tasks`. */
export function withTasks(initialize: JsonObject): JsonObject {
  const capabilities = isJsonObject(initialize['capabilities']) ? initialize['capabilities'] : {};
  return { ...initialize, capabilities: { ...capabilities, tasks: { cancel: {}, requests: { tools: { call: {} } } } } };
}

/** The ttl the device takes for a call's `task` params: what the edge asked, within (0, MAX_TASK_TTL_MS]. */
export function ttlOf(task: JsonObject): number {
  const ttl = task['ttl'];
  if (typeof ttl !== 'number' || !Number.isFinite(ttl) || ttl <= 0) return DEFAULT_TASK_TTL_MS;
  return Math.min(Math.ceil(ttl), MAX_TASK_TTL_MS);
}

/** What the client does for its tasks: reach the edge, and report. */
export interface TaskOwner {
  /** Sends a notification on the session `sessionId` names, if one is online now; otherwise drops it. */
  notify(sessionId: string, method: string, params: JsonObject): void;
  callEnd(e: CallEnd): void;
  problem(err: Error): void;
}

/** An unguessable id: another tab on the same edge must not be able to name this one's tasks. */
function newTaskId(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The outcome as it will be sent, copied through JSON now: a result that
 * cannot be sent fails the task at once (not when it is fetched), and the
 * handler mutating its object later changes nothing.
 */
function snapshot(name: string, result: CallToolResult): Replay {
  try {
    const copy = JSON.parse(JSON.stringify(result)) as CallToolResult;
    return { result: copy, outcome: copy.isError === true ? 'error' : 'ok' };
  } catch (err) {
    return { result: invalidResult(name, (err as Error).message), outcome: 'error' };
  }
}

/** A failed outcome's first text, as the task's status line. */
function failureLine(result: CallToolResult): string | undefined {
  const first = result.content[0];
  return first !== undefined && first.type === 'text' && typeof first['text'] === 'string' ? capMessage(first['text']) : undefined;
}

/** One task: its handler's run, its state, and its outcome once it has one. */
export class Task {
  readonly id = newTaskId();
  /** The session that made it; a resumed session has the same id. */
  readonly sessionId: string;
  readonly key: string | undefined;
  readonly ttlMs: number;
  readonly createdMs: number;
  /** Settles when the task is final (completed, failed or cancelled). */
  readonly done: Promise<void>;
  readonly #start: CallStart;
  readonly #owner: TaskOwner;
  readonly #now: () => number;
  readonly #call: RunningCall;
  #status: TaskStatus = 'working';
  #message: string | undefined;
  #updatedMs: number;
  #outcome: Replay | undefined;
  #delivered = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #settle!: () => void;

  constructor(request: CallRequest, start: CallStart, ttlMs: number, owner: TaskOwner, now: () => number) {
    this.sessionId = request.sessionId;
    this.key = request.idempotencyKey;
    this.ttlMs = ttlMs;
    this.createdMs = now();
    this.#updatedMs = this.createdMs;
    this.#start = { ...start, taskId: this.id };
    this.#owner = owner;
    this.#now = now;
    this.done = new Promise<void>((resolve) => {
      this.#settle = resolve;
    });
    let dropped = 0;
    this.#call = new RunningCall(
      request,
      undefined,
      {
        send: (progress) => owner.notify(this.sessionId, Method.progress, progress),
        dropped: (why) => {
          dropped += 1;
          if (dropped !== 1) return;
          owner.problem(new TetherError('invalid_progress', `${start.name}: a ctx.progress report was dropped (${why}); further drops on this task are only counted (callEnd.progressDropped)`));
        },
      },
      { id: this.id, status: (message) => this.#setMessage(message) },
    );
  }

  /** What `callStart` reports: the call, with this task's id. */
  get start(): CallStart {
    return this.#start;
  }

  get status(): TaskStatus {
    return this.#status;
  }

  get isFinal(): boolean {
    return this.#status !== 'working';
  }

  /** The handler's outcome, once completed or failed (a cancelled task has none). */
  get outcome(): Replay | undefined {
    return this.#outcome;
  }

  /** Whether it may be forgotten to make room: final, and nothing left unread. */
  get evictable(): boolean {
    return this.#status === 'cancelled' || (this.isFinal && this.#delivered);
  }

  /** MCP's `Task`, flat: what `tasks/get`, `tasks/cancel` and the status notifications carry. */
  view(): JsonObject {
    const task: JsonObject = { taskId: this.id, status: this.#status };
    if (this.#message !== undefined) task['statusMessage'] = this.#message;
    task['createdAt'] = new Date(this.createdMs).toISOString();
    task['lastUpdatedAt'] = new Date(this.#updatedMs).toISOString();
    task['ttl'] = this.ttlMs;
    task['pollInterval'] = TASK_POLL_INTERVAL_MS;
    return task;
  }

  /** Runs the handler; `expired` hears when the ttl has passed. Called once, after the edge was handed the task. */
  run(tool: AnyTool, expired: () => void): void {
    this.#timer = setTimeout(() => {
      this.#expire();
      expired();
    }, Math.max(0, this.createdMs + this.ttlMs - this.#now()));
    void this.#call.run(tool).then((settled) => this.#ran(settled));
  }

  /** The edge has read the outcome (`tasks/result` was answered). */
  delivered(): void {
    this.#delivered = true;
  }

  /** `tasks/cancel`: the handler's signal fires and the task is cancelled for good. False if it was final already. */
  cancel(): boolean {
    if (!this.#finish('cancelled', undefined, 'the edge cancelled the task')) return false;
    this.#call.abort('cancelled', 'tasks/cancel');
    return true;
  }

  /** The client is closing: the handler is stopped, and nothing is sent (there is no socket left). */
  close(): void {
    clearTimeout(this.#timer);
    if (this.isFinal) return;
    this.#status = 'cancelled';
    this.#updatedMs = this.#now();
    this.#settle();
    this.#call.abort('closed');
  }

  #expire(): void {
    if (this.isFinal) return;
    const result = taskExpiredResult(this.#start.name, this.ttlMs);
    this.#finish('failed', { result, outcome: 'timeout' }, failureLine(result));
    this.#call.abort('ceiling', `the task's ${this.ttlMs} ms ttl`);
  }

  #setMessage(message: string): void {
    if (this.isFinal) return;
    this.#message = message;
    this.#updatedMs = this.#now();
    this.#notify();
  }

  /** The one move to a final state: first wins, the edge hears once. */
  #finish(status: Exclude<TaskStatus, 'working'>, outcome: Replay | undefined, message: string | undefined): boolean {
    if (this.isFinal) return false;
    clearTimeout(this.#timer);
    this.#status = status;
    this.#outcome = outcome;
    this.#message = message;
    this.#updatedMs = this.#now();
    this.#settle();
    this.#notify();
    return true;
  }

  #notify(): void {
    try {
      this.#owner.notify(this.sessionId, Method.taskStatus, this.view());
    } catch (err) {
      this.#owner.problem(err instanceof Error ? err : new Error(String(err)));
    }
  }

  #ran(settled: Settled): void {
    let outcome: CallOutcome;
    switch (settled.kind) {
      case 'returned':
      case 'threw': {
        const replay =
          settled.kind === 'returned' ? snapshot(this.#start.name, resultOf(settled.value)) : { result: failureResult(settled.failure), outcome: 'error' as const };
        const ok = replay.outcome === 'ok';
        this.#finish(ok ? 'completed' : 'failed', replay, ok ? undefined : failureLine(replay.result));
        outcome = replay.outcome;
        break;
      }
      case 'aborted':
        // Whoever fired the signal (tasks/cancel, the ttl, close()) has set the final state.
        outcome = settled.why === 'ceiling' ? 'timeout' : settled.why;
        break;
    }
    const end: CallEnd = { ...this.#start, outcome, latencyMs: this.#call.elapsedMs(), answered: true };
    const structured = this.#outcome?.result.structuredContent;
    if (this.#outcome?.result.isError === true && typeof structured?.['code'] === 'string') end.code = structured['code'];
    if (this.#call.progressDropped > 0) end.progressDropped = this.#call.progressDropped;
    this.#owner.callEnd(end);
  }
}

/** The client's tasks, across all its sessions. */
export class Tasks {
  readonly #owner: TaskOwner;
  readonly #max: number;
  readonly #now: () => number;
  readonly #entries = new Map<string, Task>();

  constructor(owner: TaskOwner, max = MAX_TASKS, now: () => number = () => Date.now()) {
    this.#owner = owner;
    this.#max = max;
    this.#now = now;
  }

  /** How many tasks are kept now (running or finished). */
  get size(): number {
    this.#prune();
    return this.#entries.size;
  }

  /** The task with this id, if it is kept. */
  find(id: string): Task | undefined {
    this.#prune();
    return this.#entries.get(id);
  }

  /**
   * The kept task a call under this idempotency key made as tool `name`: the
   * edge delivering a task call again (its answer was lost with the socket)
   * is handed the same task rather than a second run.
   */
  findByKey(key: string, name: string): Task | undefined {
    this.#prune();
    for (const task of this.#entries.values()) if (task.key === key && task.start.name === name) return task;
    return undefined;
  }

  /**
   * A new task for this call, not running yet: the session hands it to the
   * edge first, so the task is the first thing the edge hears of it. Undefined
   * when `MAX_TASKS` are kept and none may make room.
   */
  create(request: CallRequest, start: CallStart, ttlMs: number): Task | undefined {
    this.#prune();
    if (this.#entries.size >= this.#max) {
      const room = [...this.#entries.values()].find((t) => t.evictable);
      if (room === undefined) return undefined;
      this.#entries.delete(room.id);
    }
    const task = new Task(request, start, ttlMs, this.#owner, this.#now);
    this.#entries.set(task.id, task);
    return task;
  }

  /** Starts a created task's handler. */
  run(task: Task, tool: AnyTool): void {
    task.run(tool, () => {
      if (this.#entries.get(task.id) === task) this.#entries.delete(task.id);
    });
  }

  /** Forgets a created task that never ran (the edge was not handed it). */
  discard(task: Task): void {
    if (this.#entries.get(task.id) === task) this.#entries.delete(task.id);
  }

  /** The client is closing: every task's handler is stopped, and all are forgotten. */
  closeAll(): void {
    for (const task of this.#entries.values()) task.close();
    this.#entries.clear();
  }

  /** Forgets the tasks whose ttl has passed (a running one's timer has stopped it already). */
  #prune(): void {
    const now = this.#now();
    for (const [id, task] of this.#entries) if (task.isFinal && now - task.createdMs >= task.ttlMs) this.#entries.delete(id);
  }
}
