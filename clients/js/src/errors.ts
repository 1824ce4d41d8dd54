/**
 * Errors the SDK raises and the error a tool handler may throw.
 *
 * Two families on purpose: a `TetherError` is about the SDK itself (bad
 * options, a refused connection) and reaches the application; a `ToolError`
 * is a tool's own failure and reaches the *model*, as an `isError` result
 * whose `structuredContent` is `{code, retryable, retry_after_ms?}`.
 */

/** Stable codes of SDK-level errors. */
export type TetherErrorCode =
  /** `connect()` options are unusable (URL, token, info). */
  | 'invalid_options'
  /** A tool declaration is unusable or would not fit the edge's limits. */
  | 'invalid_tool'
  /** The context is not a JSON object, or would not fit a `tools/list` frame beside a tool. */
  | 'invalid_context'
  /** The `initialize` answer (info + concept) would not fit a frame. */
  | 'concept_too_large'
  /** No WebSocket implementation (browser without WebSocket, Node without `ws`). */
  | 'transport_unavailable'
  /** The edge refused the credential (HTTP 401), or the token has expired. */
  | 'unauthenticated'
  /** `getToken()` failed or returned something that is not a token. */
  | 'token_unavailable'
  /** Moving to a fresh token failed (the new session did not come online); the old one is kept. */
  | 'refresh_failed'
  /** The edge refused the upgrade for a reason retrying cannot fix (400, 403, 404). */
  | 'refused'
  /** Reconnecting gave up after `backoff.maxAttempts` failures. */
  | 'gave_up'
  /** The edge sent something the SDK could not understand. */
  | 'protocol'
  /** A frame the SDK was about to send exceeded the transport ceiling and was not sent. */
  | 'frame_too_large'
  /** A handler's `ctx.progress` report was invalid (not increasing, not finite, total below done) and was dropped. */
  | 'invalid_progress'
  /** `ready()` did not see the client online in time, or the client was closed. */
  | 'not_online'
  /** The `onApproval` hook threw or returned something other than a boolean; the write was declined. */
  | 'approval_failed';

/** An SDK-level error with a stable `code`. */
export class TetherError extends Error {
  override readonly name = 'TetherError';
  readonly code: TetherErrorCode;

  constructor(code: TetherErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** Options of a `ToolError`. */
export interface ToolErrorOptions {
  /** Whether trying the same call again may work (default false). */
  retryable?: boolean;
  /** How long to wait before retrying. */
  retryAfterMs?: number;
  /** The underlying error, kept for the application's logs (never sent). */
  cause?: unknown;
}

/**
 * Throw this from a handler to fail a call with a code the model can act on,
 * e.g. `throw new ToolError('user_declined', 'The user dismissed the scanner.')`.
 * Any thrown object with a string `code` (and optionally `retryable`,
 * `retry_after_ms` / `retryAfterMs`) is honoured the same way.
 */
export class ToolError extends Error {
  override readonly name = 'ToolError';
  readonly code: string;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;

  constructor(code: string, message: string, options: ToolErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** Why a call's `ctx.signal` fired. */
export type AbortWhy =
  /** The edge sent `notifications/cancelled`: nobody waits for the answer any more. */
  | 'cancelled'
  /** The client's own answer ceiling (2 s by default) passed. */
  | 'ceiling'
  /** The socket the call arrived on closed. */
  | 'disconnected'
  /** The application called `close()`. */
  | 'closed';

/** The `reason` of an aborted `ctx.signal`. */
export class CallAbortedError extends Error {
  override readonly name = 'AbortError';
  readonly why: AbortWhy;

  constructor(why: AbortWhy, message: string) {
    super(message);
    this.why = why;
  }
}

/** Why the `signal` of an `onApproval` hook fired. */
export type ApprovalAbortWhy =
  /** The approval's window (`expiresInMs`) passed: the edge no longer takes the device's answer. */
  | 'expired'
  /** The edge sent `notifications/cancelled` for the request. */
  | 'cancelled'
  /** The socket the request arrived on closed. */
  | 'disconnected'
  /** The application called `close()`. */
  | 'closed';

/** The `reason` of an aborted `onApproval` signal. */
export class ApprovalAbortedError extends Error {
  override readonly name = 'AbortError';
  readonly why: ApprovalAbortWhy;

  constructor(why: ApprovalAbortWhy, message: string) {
    super(message);
    this.why = why;
  }
}

/** A tool failure as it goes on the wire. */
export interface Failure {
  code: string;
  retryable: boolean;
  retryAfterMs?: number;
  message: string;
}

/** Longest failure message sent to the model; the rest stays in the application. */
const MAX_MESSAGE_CHARS = 1000;

/**
 * Reads code / retryable / retry-after from anything a handler threw.
 * Thrown non-errors (a string, a number) become their string form with code
 * `handler_error`.
 */
export function failureOf(thrown: unknown): Failure {
  let code = 'handler_error';
  let retryable = false;
  let retryAfterMs: number | undefined;
  let message: string;
  if (typeof thrown === 'object' && thrown !== null) {
    const o = thrown as Record<string, unknown>;
    if (typeof o['code'] === 'string' && o['code'] !== '') code = o['code'];
    if (typeof o['retryable'] === 'boolean') retryable = o['retryable'];
    const after = o['retryAfterMs'] ?? o['retry_after_ms'];
    if (typeof after === 'number' && Number.isFinite(after) && after >= 0) retryAfterMs = Math.round(after);
    message = typeof o['message'] === 'string' && o['message'] !== '' ? o['message'] : String(thrown);
  } else {
    message = String(thrown);
  }
  if (message.length > MAX_MESSAGE_CHARS) message = `${message.slice(0, MAX_MESSAGE_CHARS)}…`;
  return retryAfterMs === undefined ? { code, retryable, message } : { code, retryable, retryAfterMs, message };
}
