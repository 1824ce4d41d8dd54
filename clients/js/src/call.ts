/**
 * One tool call in flight on the client: its abort signal, its answer
 * ceiling, its progress reports, and the race between the handler and
 * everything that can stop it.
 */

import { CallAbortedError, failureOf, type AbortWhy, type Failure } from './errors.js';
import type { JsonObject } from './json.js';
import type { Id } from './jsonrpc.js';
import type { AnyTool, ToolContext, ToolReturn, TraceContext } from './types.js';

/** MCP's `progressToken`: what the caller named its progress by. */
export type ProgressToken = string | number;

/**
 * Longest `message` a progress report carries, in UTF-16 code units. A
 * progress message is a status line ("page 3 of 7"), not a result: the edge
 * relays every report to the backend, and a cap keeps a chatty handler's
 * reports small beside the transport ceiling and the model's context.
 */
export const MAX_PROGRESS_MESSAGE_CHARS = 256;

/** What the edge asked for. */
export interface CallRequest {
  id: Id;
  name: string;
  arguments: JsonObject;
  sessionId: string;
  deadlineMs: number | undefined;
  idempotencyKey: string | undefined;
  /** `_meta.progressToken`: present when the caller asked for progress. */
  progressToken: ProgressToken | undefined;
  /** `_meta.traceparent` and `tracestate`, when the traceparent is valid. */
  trace: TraceContext | undefined;
}

/** Where a call's progress goes: the session sends the reports and hears of the dropped ones. */
export interface ProgressSink {
  /** Sends `notifications/progress` with these params. */
  send(params: JsonObject): void;
  /** A report was dropped (`why` says why); the handler was not told. */
  dropped(why: string): void;
}

/** What a task's run offers its handler (`ctx.taskId`, `ctx.status`). */
export interface TaskHooks {
  readonly id: string;
  /** A new status line, already cut to the cap. */
  status(message: string): void;
}

/** How the handler's run ended, as far as the caller is concerned. */
export type Settled =
  | { kind: 'returned'; value: ToolReturn }
  | { kind: 'threw'; failure: Failure }
  | { kind: 'aborted'; why: AbortWhy };

const ABORT_MESSAGES: Record<AbortWhy, string> = {
  cancelled: 'the edge cancelled the call',
  ceiling: "the client's answer ceiling passed",
  disconnected: 'the connection closed',
  closed: 'the client was closed',
};

/** Cuts a progress or status message to the cap (ending in `…`), never between the halves of a surrogate pair. */
export function capMessage(message: string): string {
  if (message.length <= MAX_PROGRESS_MESSAGE_CHARS) return message;
  let cut = MAX_PROGRESS_MESSAGE_CHARS - 1;
  const last = message.charCodeAt(cut - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut -= 1;
  return `${message.slice(0, cut)}…`;
}

/** A value for a message, without calling its `toString` (which may throw). */
function describe(value: unknown): string {
  return typeof value === 'number' ? String(value) : value === null ? 'null' : `a ${typeof value}`;
}

/** Why a `ctx.progress(done, total)` is not sendable, or undefined when it is. */
function invalidProgress(done: unknown, total: unknown, last: number | undefined): string | undefined {
  if (typeof done !== 'number' || !Number.isFinite(done)) return `done must be a finite number, got ${describe(done)}`;
  if (done < 0) return `done must not be negative, got ${done}`;
  if (last !== undefined && done <= last) return `done must increase with each report, got ${done} after ${last}`;
  if (total === undefined) return undefined;
  if (typeof total !== 'number' || !Number.isFinite(total)) return `total must be a finite number, got ${describe(total)}`;
  if (total < done) return `total must not be below done, got ${done} of ${total}`;
  return undefined;
}

export class RunningCall {
  readonly request: CallRequest;
  readonly startedAt = performance.now();
  readonly #controller = new AbortController();
  /** Undefined for a task's run, which its ttl bounds instead. */
  readonly #ceilingMs: number | undefined;
  readonly #progress: ProgressSink | undefined;
  readonly #task: TaskHooks | undefined;
  /** Set when `run()` settles: nothing the handler reports after that is sent. */
  #settled = false;
  /** The last `done` sent (MCP: progress increases with each notification). */
  #lastProgress: number | undefined;
  #progressDropped = 0;

  constructor(request: CallRequest, ceilingMs: number | undefined, progress?: ProgressSink, task?: TaskHooks) {
    this.request = request;
    this.#ceilingMs = ceilingMs;
    this.#progress = progress;
    this.#task = task;
  }

  /** How many of the handler's progress reports were dropped (invalid, or not sendable). */
  get progressDropped(): number {
    return this.#progressDropped;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Milliseconds since the call arrived. */
  elapsedMs(): number {
    return Math.round(performance.now() - this.startedAt);
  }

  /** Fires the signal (first reason wins); `run()` then settles as aborted. */
  abort(why: AbortWhy, detail?: string): void {
    if (this.#controller.signal.aborted) return;
    const message = detail === undefined ? ABORT_MESSAGES[why] : `${ABORT_MESSAGES[why]}: ${detail}`;
    this.#controller.abort(new CallAbortedError(why, message));
  }

  /**
   * `ctx.progress`: sends `notifications/progress` under the caller's token.
   * Nothing is sent without a token, or once the call has settled or its
   * signal fired (the answer, if any, must be the last word on the call).
   * An invalid report is dropped and counted, never thrown: a handler must
   * not fail because of its progress bar.
   */
  progress(done: number, total?: number, message?: string): void {
    const token = this.request.progressToken;
    const sink = this.#progress;
    if (token === undefined || sink === undefined || this.#settled || this.#controller.signal.aborted) return;
    const invalid = invalidProgress(done, total, this.#lastProgress);
    if (invalid !== undefined) {
      this.#progressDropped += 1;
      sink.dropped(invalid);
      return;
    }
    this.#lastProgress = done;
    const params: JsonObject = { progressToken: token, progress: done };
    if (total !== undefined) params['total'] = total;
    if (typeof message === 'string') params['message'] = capMessage(message);
    try {
      sink.send(params);
    } catch (err) {
      this.#progressDropped += 1;
      sink.dropped(`sending failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /**
   * `ctx.status`: a task's status line. Like progress, nothing once the run
   * has settled or its signal fired, and never a throw.
   */
  status(message: string): void {
    const task = this.#task;
    if (task === undefined || typeof message !== 'string' || this.#settled || this.#controller.signal.aborted) return;
    try {
      task.status(capMessage(message));
    } catch {
      // A status line that cannot be sent is not the handler's failure.
    }
  }

  /**
   * Runs the handler. Settles with whatever comes first: the handler's return
   * or throw, or the signal (ceiling, cancel, disconnect, close). A handler
   * that ignores the signal keeps running, but its late outcome is dropped.
   */
  run(tool: AnyTool): Promise<Settled> {
    const signal = this.#controller.signal;
    const req = this.request;
    const ctx: ToolContext = {
      signal,
      callId: req.id,
      name: req.name,
      sessionId: req.sessionId,
      deadlineMs: req.deadlineMs,
      idempotencyKey: req.idempotencyKey,
      trace: req.trace,
      progress: (done, total, message) => this.progress(done, total, message),
      taskId: this.#task?.id,
      status: (message) => this.status(message),
    };
    return new Promise<Settled>((resolve) => {
      const ceiling = this.#ceilingMs;
      const timer = ceiling === undefined ? undefined : setTimeout(() => this.abort('ceiling', `${ceiling} ms`), ceiling);
      const onAbort = (): void => {
        this.#settled = true;
        clearTimeout(timer);
        const reason: unknown = signal.reason;
        resolve({ kind: 'aborted', why: reason instanceof CallAbortedError ? reason.why : 'cancelled' });
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const settle = (s: Settled): void => {
        this.#settled = true;
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        if (!signal.aborted) resolve(s);
      };
      let pending: ToolReturn | Promise<ToolReturn>;
      try {
        // The handler's argument type is the application's claim; the wire gives JSON.
        pending = tool.handler(req.arguments as never, ctx);
      } catch (err) {
        settle({ kind: 'threw', failure: failureOf(err) });
        return;
      }
      Promise.resolve(pending).then(
        (value) => settle({ kind: 'returned', value }),
        (err: unknown) => settle({ kind: 'threw', failure: failureOf(err) }),
      );
    });
  }
}
