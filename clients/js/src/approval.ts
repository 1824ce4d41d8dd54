/**
 * One `tether.dev/approve` request in flight on the client: the edge asks the
 * device's user whether a write may run (docs/PROTOCOL.md, "Writes:
 * approvals, keys and receipts"), and the application's `onApproval` hook
 * decides. A human may take a while, so the hook gets a signal that fires
 * when the answer can no longer count: the approval's window passed, the edge
 * cancelled, the socket closed, or the application closed the client.
 *
 * Every request that is not aborted gets exactly one answer: `true` only
 * when the hook said `true`; a throw, a rejection or any other value
 * declines. An aborted request gets none (the edge has stopped waiting).
 */

import { ApprovalAbortedError, TetherError, type ApprovalAbortWhy } from './errors.js';
import { isJsonObject, type JsonObject } from './json.js';
import type { ApprovalHook, ApprovalRequest } from './types.js';

/** Longest delay `setTimeout` keeps (longer ones fire at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

const ABORT_MESSAGES: Record<ApprovalAbortWhy, string> = {
  expired: "the approval's window passed",
  cancelled: 'the edge cancelled the approval request',
  disconnected: 'the connection closed',
  closed: 'the client was closed',
};

/** The request the hook sees, from the edge's params; a string says what is wrong with them. */
export function approvalRequestOf(params: JsonObject, sessionId: string): ApprovalRequest | string {
  const { approval, tool, title, description, arguments: args, expires_in_ms: expires } = params;
  if (typeof approval !== 'string' || approval === '') return 'tether.dev/approve needs a non-empty string approval';
  if (typeof tool !== 'string' || tool === '') return 'tether.dev/approve needs a non-empty string tool';
  if (!isJsonObject(args)) return 'tether.dev/approve needs object arguments';
  if (typeof expires !== 'number' || !Number.isFinite(expires) || expires < 0) return 'tether.dev/approve needs a non-negative expires_in_ms';
  return {
    approval,
    tool,
    ...(typeof title === 'string' ? { title } : {}),
    ...(typeof description === 'string' ? { description } : {}),
    arguments: args,
    expiresInMs: expires,
    sessionId,
  };
}

/** A value for a message, without calling its `toString` (which may throw). */
function describe(value: unknown): string {
  return value === null ? 'null' : typeof value === 'object' ? 'an object' : `${typeof value} ${String(value)}`;
}

export class PendingApproval {
  readonly #request: ApprovalRequest;
  readonly #controller = new AbortController();
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(request: ApprovalRequest) {
    this.#request = request;
  }

  get aborted(): boolean {
    return this.#controller.signal.aborted;
  }

  /** Fires the hook's signal (once); the request will get no answer. */
  abort(why: ApprovalAbortWhy): void {
    if (this.aborted) return;
    clearTimeout(this.#timer);
    this.#controller.abort(new ApprovalAbortedError(why, ABORT_MESSAGES[why]));
  }

  /**
   * Runs the hook. Resolves with the answer to send, or `undefined` when the
   * request was aborted first. Never rejects: a failing hook declines, and
   * `problem` hears why.
   */
  async run(hook: ApprovalHook, problem: (err: Error) => void): Promise<boolean | undefined> {
    const { tool } = this.#request;
    this.#timer = setTimeout(() => this.abort('expired'), Math.min(this.#request.expiresInMs, MAX_TIMER_MS));
    let approve = false;
    try {
      const decided: unknown = await hook(this.#request, this.#controller.signal);
      if (typeof decided === 'boolean') approve = decided;
      else if (!this.aborted) problem(new TetherError('approval_failed', `onApproval for ${tool} returned ${describe(decided)}, not a boolean; declined`));
    } catch (err) {
      if (!this.aborted) {
        const why = err instanceof Error ? err.message : describe(err);
        problem(new TetherError('approval_failed', `onApproval for ${tool} threw (${why}); declined`, { cause: err }));
      }
    }
    clearTimeout(this.#timer);
    return this.aborted ? undefined : approve;
  }
}
