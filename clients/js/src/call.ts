/**
 * One tool call in flight on the client: its abort signal, its answer
 * ceiling, and the race between the handler and everything that can stop it.
 */

import { CallAbortedError, failureOf, type AbortWhy, type Failure } from './errors.js';
import type { JsonObject } from './json.js';
import type { Id } from './jsonrpc.js';
import type { AnyTool, ToolContext, ToolReturn } from './types.js';

/** What the edge asked for. */
export interface CallRequest {
  id: Id;
  name: string;
  arguments: JsonObject;
  sessionId: string;
  deadlineMs: number | undefined;
  idempotencyKey: string | undefined;
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

export class RunningCall {
  readonly request: CallRequest;
  readonly startedAt = performance.now();
  readonly #controller = new AbortController();
  readonly #ceilingMs: number;

  constructor(request: CallRequest, ceilingMs: number) {
    this.request = request;
    this.#ceilingMs = ceilingMs;
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
    };
    return new Promise<Settled>((resolve) => {
      const timer = setTimeout(() => this.abort('ceiling', `${this.#ceilingMs} ms`), this.#ceilingMs);
      const onAbort = (): void => {
        clearTimeout(timer);
        const reason: unknown = signal.reason;
        resolve({ kind: 'aborted', why: reason instanceof CallAbortedError ? reason.why : 'cancelled' });
      };
      signal.addEventListener('abort', onAbort, { once: true });
      const settle = (s: Settled): void => {
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
