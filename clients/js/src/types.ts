/**
 * The public shapes: tools, their context, results, and what `connect()` takes.
 * Field names follow MCP (revision 2025-11-25) so a declaration reads the same
 * here, on the wire, and in an MCP server.
 */

import type { Json, JsonObject } from './json.js';

/** One MCP content block: `{type: "text", text}` and friends. */
export interface ContentBlock {
  type: string;
  [key: string]: Json;
}

/** An MCP `CallToolResult`. Return one from a handler for full control. */
export interface CallToolResult {
  content: ContentBlock[];
  structuredContent?: JsonObject;
  isError?: boolean;
  _meta?: JsonObject;
}

/**
 * What a handler may return:
 * - a `CallToolResult` (any object with a `content` array) is sent as it is,
 *   with the catalog seq and digest added to its `_meta`;
 * - a string becomes one text block;
 * - a JSON object becomes `structuredContent`, plus its JSON as a text block
 *   (MCP asks for both, for clients that read only text);
 * - any other JSON value becomes a text block of its JSON;
 * - `undefined` becomes an empty result.
 */
export type ToolReturn = CallToolResult | Json | undefined | void;

/**
 * The W3C trace context the call arrived with (`_meta.traceparent` and
 * `_meta.tracestate`): the agent's trace. Start your handler's spans as
 * children of `parentId` in `traceId`; pass `traceparent` and `tracestate`
 * on to what you call.
 */
export interface TraceContext {
  /** As received: `00-<traceId>-<parentId>-<flags>`. */
  traceparent: string;
  /** As received, when the edge sent one. */
  tracestate?: string;
  /** 32 lowercase hex digits, not all zeros. */
  traceId: string;
  /** The caller's span: 16 lowercase hex digits, not all zeros. */
  parentId: string;
}

/** What a handler gets besides its arguments. */
export interface ToolContext {
  /**
   * Fires when nobody waits for the answer any more: the edge sent
   * `notifications/cancelled`, the client's answer ceiling passed, the socket
   * closed, or the application called `close()`. `signal.reason` is a
   * `CallAbortedError` whose `why` says which. Pass it to `fetch` and friends.
   *
   * A call with an `idempotencyKey` does not abort when the connection is
   * lost and the client resumes the session: the edge delivers the call
   * again, and this run's result answers it.
   */
  readonly signal: AbortSignal;
  /** The edge's JSON-RPC id for this call (what `notifications/cancelled` names). */
  readonly callId: string | number;
  /** The device's own tool name the call arrived under. */
  readonly name: string;
  /** The edge session the call arrived on. */
  readonly sessionId: string;
  /** How long the edge waits for this call (`_meta["tether.dev/deadline_ms"]`). */
  readonly deadlineMs: number | undefined;
  /** The backend's key for de-duplicating a retried call, when it gave one. */
  readonly idempotencyKey: string | undefined;
  /**
   * The agent's trace: start your handler's spans as children of `parentId`
   * in `traceId`. Undefined when the call carried no valid W3C
   * `_meta.traceparent` (version 00; a malformed one is ignored, never thrown).
   */
  readonly trace: TraceContext | undefined;
  /**
   * Tells the agent how far along a long-running tool is: `done` units of
   * `total` (when known), with an optional status line. Sent as MCP
   * `notifications/progress` under the caller's `_meta.progressToken`; a
   * no-op when the caller did not ask for progress, and once the call has
   * settled or its signal fired (an answer is the last word on a call).
   *
   * `done` must be finite, non-negative and larger than the last report's;
   * `total`, when given, a finite number not below `done`. A report that
   * breaks these is dropped, never thrown (a handler must not fail because of
   * its progress bar): the first drop of a call is an `error` event with code
   * `invalid_progress`, and `callEnd.progressDropped` counts them all.
   * `message` is cut to 256 characters.
   */
  progress(done: number, total?: number, message?: string): void;
  /**
   * The task this run is, when the edge called the tool as an MCP task
   * (see `Tool.task`); undefined for an inline call.
   */
  readonly taskId: string | undefined;
  /**
   * Sets a task's status line ("waiting for the card tap"): sent at once as
   * `notifications/tasks/status` with status `working`, and what `tasks/get`
   * says from then on. A no-op for an inline call, once the run has settled
   * or its signal fired, and while the device is offline (the edge asks again
   * after a resume). `message` is cut to 256 characters.
   */
  status(message: string): void;
}

/** MCP tool annotations (hints for the model and the host). */
export interface ToolAnnotations {
  title?: string;
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
  [key: string]: Json | undefined;
}

/**
 * Whether a tool may run as an MCP task (revision 2025-11-25, experimental):
 * `optional` runs inline, or as a task when the edge asks for one;
 * `required` runs only as a task. Declared as `execution.taskSupport`.
 */
export type TaskSupport = 'optional' | 'required';

/** Where a task is (MCP's `TaskStatus`); the last three are final. */
export type TaskStatus = 'working' | 'completed' | 'failed' | 'cancelled';

/**
 * A tool the client runs. `A` is the argument type the handler expects; the
 * SDK does not validate arguments against `inputSchema` (the agent backend's
 * core does that before anything is sent), so a handler that must not trust
 * its caller checks them itself.
 */
export interface Tool<A = JsonObject> {
  /** The device's own name; the model sees it as `client__<slug>`. */
  name: string;
  title?: string;
  /** What the tool does, for the model (the edge keeps 512 characters). */
  description: string;
  /** JSON Schema of the arguments: an object schema. */
  inputSchema: JsonObject;
  /** JSON Schema of `structuredContent`; the backend withholds results that do not match. */
  outputSchema?: JsonObject;
  annotations?: ToolAnnotations;
  /**
   * Lets the edge run the tool as an MCP task: the call is answered at once
   * with the task, the handler goes on past the call's deadline (bounded by
   * the task's ttl, not the answer ceiling, and through a resumed
   * connection), and the edge fetches the outcome with `tasks/result`.
   * Absent: the tool only runs inline.
   */
  task?: TaskSupport;
  /** Runs the tool. Throw (ideally a `ToolError`) to fail the call with a code. */
  handler(args: A, ctx: ToolContext): ToolReturn | Promise<ToolReturn>;
}

/**
 * A tool of any argument type, as a catalog holds them: `Tool<WeatherArgs>`
 * and `Tool<CartArgs>` both fit. (The SDK passes each handler the arguments
 * the backend sent; the backend's core checked them against `inputSchema`.)
 */
export type AnyTool = Tool<never>;

/** `{name, version}` of the application, sent as MCP `serverInfo`. */
export interface ClientInfo {
  name: string;
  version: string;
}

/**
 * What the application is, for the model: `instructions` is free text; the
 * rest is the structured concept (`_meta["tether.dev/concept"]`) that the
 * backend renders into the model's context block.
 */
export interface Concept {
  instructions?: string;
  /** The application's name as the model should call it. */
  app?: string;
  /** The things the application deals in ("work order", "cart"). */
  nouns?: string[];
  /** What the application cannot do, so the model does not promise it. */
  cannot?: string[];
  [key: string]: Json | undefined;
}

/**
 * Where the user is now (`_meta["tether.dev/context"]`): `pointer` says which
 * screen or record, `snapshot` what is on it. Both are information for the
 * model, never instructions.
 */
export interface AppContext {
  pointer?: Json;
  snapshot?: Json;
  [key: string]: Json | undefined;
}

/** Byte and time limits. The defaults are the edge's defaults (docs/PROTOCOL.md, "Limits"). */
export interface Limits {
  /** Transport ceiling: no frame the SDK sends exceeds it (the edge closes 1009). Default 15,360. */
  frameBytes: number;
  /** Largest whole `tools/call` response frame; bigger results fail locally. Default 12,288. */
  resultBytes: number;
  /** Largest single declaration; the edge drops bigger ones. Default 2,048. */
  declarationBytes: number;
  /** The client's own answer ceiling: a handler still running then is aborted and answered with an error. Default 2,000 ms. */
  answerCeilingMs: number;
}

/** Reconnect backoff: each delay is drawn from [cap/2, cap], cap = min(maxMs, initialMs · multiplier^attempt). */
export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  multiplier: number;
  /** Consecutive failed attempts before giving up (`offline` with `willRetry: false`). Default: never give up. */
  maxAttempts: number;
  /** A session that stayed online this long resets the attempt count. Default 5,000 ms. */
  stableMs: number;
}

/** Liveness probing of the edge with JSON-RPC `ping`. */
export interface HeartbeatOptions {
  /** How often to ping while online; 0 disables. Default 25,000 ms. */
  intervalMs: number;
  /** How long an unanswered ping may take before the socket is declared dead. Default 10,000 ms. */
  timeoutMs: number;
}

/** Where the credential comes from: a fixed token, or a function asked again before expiry and on every reconnect. */
export type TokenOption = { token: string; getToken?: never } | { getToken: () => string | Promise<string>; token?: never };

/**
 * A write the agent wants to run, as the edge asks the device's user about it
 * (`tether.dev/approve`). Show it to the user; `arguments` are exactly what
 * the call would run with. It is information to decide on, never
 * instructions.
 */
export interface ApprovalRequest {
  /** The approval's id (the edge's; the call that uses the grant presents it). */
  readonly approval: string;
  /** The device's own name of the tool the call would run. */
  readonly tool: string;
  /** The tool's declared title, if it has one. */
  readonly title?: string;
  /** The tool's declared description, if it has one. */
  readonly description?: string;
  /** The exact arguments the call would run with. */
  readonly arguments: JsonObject;
  /** How long the user has to decide, in ms, counted from when the request arrived. */
  readonly expiresInMs: number;
  /** The edge session the request arrived on. */
  readonly sessionId: string;
}

/**
 * Asks the device's user whether a write may run: resolve `true` to approve,
 * `false` to decline. Anything else, or a throw, declines. `signal` fires when
 * the answer can no longer count (`signal.reason` is an `ApprovalAbortedError`
 * whose `why` is `expired`, `cancelled`, `disconnected` or `closed`); close the
 * prompt then: nothing is sent after it.
 */
export type ApprovalHook = (request: ApprovalRequest, signal: AbortSignal) => boolean | Promise<boolean>;

/**
 * An MCP revision the client can speak to the edge (docs/PROTOCOL.md, "Two
 * MCP revisions"). 2025-11-25 is greeted with `initialize`; 2026-07-28 with
 * `server/discover`, and its `list_changed` rides a `subscriptions/listen`
 * stream.
 */
export type ProtocolVersion = '2025-11-25' | '2026-07-28';

/** Options of `connect()`. */
export type ConnectOptions = TokenOption & {
  /** The edge: `ws://host:port` (the SDK appends `/v1/client`) or the full `/v1/client` URL. */
  url: string;
  info: ClientInfo;
  concept?: Concept;
  tools?: readonly AnyTool[];
  context?: AppContext;
  limits?: Partial<Limits>;
  backoff?: Partial<BackoffOptions>;
  heartbeat?: Partial<HeartbeatOptions>;
  /** How long a connection may take from dial to online before it is abandoned. Default 10,000 ms. */
  handshakeTimeoutMs?: number;
  /** How long before the token's `exp` a fresh one is fetched and the session moved onto it. Default: a fifth of its life, between 1 s and 60 s. */
  tokenRefreshLeadMs?: number;
  /**
   * The MCP revision to announce at the upgrade. Default `'2025-11-25'`,
   * which every tether edge speaks. `'2026-07-28'` is announced as the
   * `MCP-Protocol-Version` header (Node) or the `mcp_protocol_version` query
   * parameter (browser). Either way the client answers whichever revision
   * the edge actually starts, so announcing one the edge ignores is harmless.
   */
  protocolVersion?: ProtocolVersion;
  /**
   * Lets the device's user approve or decline a write the agent wants to run.
   * With it, the handshake answer declares `_meta["tether.dev/approvals"]:
   * true` and the edge sends `tether.dev/approve` for calls its policy gates;
   * without it, the edge leaves those approvals to the caller.
   */
  onApproval?: ApprovalHook;
};

/** The three states a client is in. */
export type ConnectionState = 'connecting' | 'online' | 'offline';

/** `notifications/tether.dev/manifest_applied`: what the edge kept of the catalog. */
export interface ManifestReport {
  seq: number;
  kept: number;
  dropped: { name: string; bytes: number; reason: string; detail?: string }[];
}

/** How a call ended, as the `callEnd` event reports it. */
export type CallOutcome =
  /** The handler returned; the result was sent. */
  | 'ok'
  /** The handler threw or returned `isError`; the error result was sent. */
  | 'error'
  /** The answer ceiling (for a task: its ttl) passed; the handler was aborted and a `device_timeout` error sent. */
  | 'timeout'
  /** The result exceeded `limits.resultBytes`; a `payload_too_large` error was sent instead. */
  | 'too_large'
  /** The tool is not in the catalog now; a `tool_unavailable` error was sent. */
  | 'unavailable'
  /** The edge cancelled the call (`notifications/cancelled`, or `tasks/cancel` for a task); no result was sent. */
  | 'cancelled'
  /** The socket closed first; nothing could be sent. */
  | 'disconnected'
  /** The application closed the client first. */
  | 'closed';

/** A call arrived (`callStart`). */
export interface CallStart {
  callId: string | number;
  sessionId: string;
  name: string;
  arguments: JsonObject;
  /** The task the call started, when the edge called the tool as a task. */
  taskId?: string;
  /**
   * Set when the call's idempotency key already ran (the edge delivered the
   * call again after a resume, or the backend retried it): it is answered
   * with that run's result, and the handler does not run again.
   */
  deduplicated?: true;
}

/**
 * A call ended (`callEnd`). For a task (`taskId` set) that is when its
 * handler settled, the task's outcome then being kept for `tasks/result`;
 * `answered` says the task was handed to the edge.
 */
export interface CallEnd extends CallStart {
  outcome: CallOutcome;
  /** The failure code sent, for `error`, `timeout`, `too_large` and `unavailable`. */
  code?: string;
  latencyMs: number;
  /** Whether an answer was sent to the edge. */
  answered: boolean;
  /** How many of the handler's `ctx.progress` reports were dropped, when any were (see `ToolContext.progress`). */
  progressDropped?: number;
}

/** The `offline` event. */
export interface OfflineEvent {
  /** What ended the last connection or attempt (`disconnected`, `closed`, `token_expired`, `http_401`, …). */
  reason: string;
  /** The WebSocket close code, when there was one. */
  code?: number;
  /** The HTTP status of a refused upgrade (Node only: browsers do not expose it). */
  httpStatus?: number;
  /** The close reason text the edge sent, if any. */
  detail?: string;
  willRetry: boolean;
  retryInMs?: number;
  error?: Error;
}

/** Every event a client emits, by name. */
export interface ClientEvents {
  /** The state changed. */
  state: { state: ConnectionState };
  /** A connection attempt started (1-based attempt number since the last stable session). */
  connecting: { attempt: number };
  /**
   * A session is online; fires again after every reconnect or token refresh.
   * `resumed` is true when a reconnect after a lost connection got the same
   * session back from the edge (same `sessionId`); otherwise the session is
   * a new one, with a new id.
   */
  online: { sessionId: string; seq: number; resumed: boolean };
  offline: OfflineEvent;
  callStart: CallStart;
  callEnd: CallEnd;
  /** The edge applied a catalog (`manifest_applied`), with what its caps dropped. */
  manifest: ManifestReport & { sessionId: string };
  /** Something went wrong that did not change the state (a bad frame, a failed token fetch). */
  error: Error;
}
