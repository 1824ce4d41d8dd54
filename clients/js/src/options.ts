/**
 * Resolving and checking `connect()` options once, up front, so a mistake is
 * a thrown `TetherError` at the call site rather than a mysterious refusal
 * from the edge later.
 */

import { resolveBackoff } from './backoff.js';
import { TetherError } from './errors.js';
import { isJsonObject, utf8Bytes, type JsonObject } from './json.js';
import { CLIENT_PATH, MCP_PROTOCOL_VERSION, Meta, RESUME_QUERY } from './jsonrpc.js';
import { DEFAULT_PROTOCOL_VERSION, discoverResult, PROTOCOL_VERSIONS } from './revision.js';
import { withTasks } from './tasks.js';
import type { ApprovalHook, BackoffOptions, ConnectOptions, HeartbeatOptions, Limits, ProtocolVersion } from './types.js';

export const DEFAULT_LIMITS: Limits = {
  frameBytes: 15_360,
  resultBytes: 12_288,
  declarationBytes: 2_048,
  answerCeilingMs: 2_000,
};

export const DEFAULT_HEARTBEAT: HeartbeatOptions = { intervalMs: 25_000, timeoutMs: 10_000 };

export interface Resolved {
  url: string;
  limits: Limits;
  backoff: BackoffOptions;
  heartbeat: HeartbeatOptions;
  handshakeTimeoutMs: number;
  tokenRefreshLeadMs: number | undefined;
  /** The revision announced at the upgrade. */
  protocolVersion: ProtocolVersion;
  initializeResult: JsonObject;
  /** The `server/discover` answer (2026-07-28): the same identity as `initializeResult`. */
  discoverResult: JsonObject;
  /** Both answers with `capabilities.tasks`, for a catalog with a task-capable tool. */
  taskInitializeResult: JsonObject;
  taskDiscoverResult: JsonObject;
  /** Asks the device's user about a write; when set, both answers declare `tether.dev/approvals`. */
  onApproval: ApprovalHook | undefined;
}

function invalid(message: string): TetherError {
  return new TetherError('invalid_options', message);
}

/**
 * The client-link URL for what the application gave: `ws://host:port`,
 * `http(s)://…` (mapped to `ws(s)://`), or a URL that already ends in
 * `/v1/client`. A path prefix (a proxy mount) is kept.
 */
export function clientUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw invalid(`url ${JSON.stringify(raw)} is not a URL; expected ws://host:port`);
  }
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') throw invalid(`url must be ws:// or wss:// (got ${u.protocol})`);
  if (u.searchParams.has('access_token')) throw invalid('put the token in `token` or `getToken`, not in the url');
  // A resume token is single-use and the client's own to present; one fixed in the url would be presented on every dial.
  if (u.searchParams.has(RESUME_QUERY)) throw invalid(`the client adds \`${RESUME_QUERY}\` itself when it reconnects; remove it from the url`);
  const path = u.pathname.replace(/\/+$/, '');
  if (!path.endsWith(CLIENT_PATH)) u.pathname = path + CLIENT_PATH;
  return u.toString();
}

function positive(name: string, v: number): void {
  if (!(Number.isFinite(v) && v > 0)) throw invalid(`${name} must be a positive number (got ${String(v)})`);
}

/** The `initialize` answer: who the application is, its concept, and whether it asks its user to approve writes. */
function initializeResult(options: ConnectOptions, limits: Limits): JsonObject {
  const { info, concept } = options;
  if (!isJsonObject(info) || typeof info.name !== 'string' || info.name === '' || typeof info.version !== 'string' || info.version === '') {
    throw invalid('info needs a non-empty name and version, e.g. {name: "shop-web", version: "1.4.0"}');
  }
  const result: JsonObject = {
    protocolVersion: MCP_PROTOCOL_VERSION,
    serverInfo: { name: info.name, version: info.version },
    capabilities: { tools: { listChanged: true } },
  };
  if (concept !== undefined) {
    const { instructions, ...structured } = concept;
    if (instructions !== undefined) {
      if (typeof instructions !== 'string') throw invalid('concept.instructions must be a string');
      result['instructions'] = instructions;
    }
    let copy: unknown;
    try {
      copy = JSON.parse(JSON.stringify(structured));
    } catch (err) {
      throw new TetherError('concept_too_large', `concept is not JSON-serializable: ${(err as Error).message}`);
    }
    if (isJsonObject(copy) && Object.keys(copy).length > 0) result['_meta'] = { [Meta.concept]: copy };
  }
  // Declared only when there is a hook: a device that says it asks its user and then cannot leaves every approval to time out.
  if (options.onApproval !== undefined) {
    const meta = isJsonObject(result['_meta']) ? result['_meta'] : {};
    result['_meta'] = { ...meta, [Meta.approvals]: true };
  }
  fitsFrame(result, 'initialize', limits);
  return result;
}

/** Identity answers are sent whole or not at all: one that cannot fit a frame is a mistake to report at `connect()`. */
function fitsFrame(result: JsonObject, what: string, limits: Limits): void {
  const bytes = utf8Bytes(JSON.stringify({ jsonrpc: '2.0', id: 'i'.repeat(40), result }));
  if (bytes > limits.frameBytes) {
    throw new TetherError('concept_too_large', `info and concept take ${bytes} bytes; the ${what} answer must fit a ${limits.frameBytes}-byte frame`);
  }
}

function protocolVersion(v: unknown): ProtocolVersion {
  if (v === undefined) return DEFAULT_PROTOCOL_VERSION;
  const known = PROTOCOL_VERSIONS.find((p) => p === v);
  if (known === undefined) throw invalid(`protocolVersion must be one of ${PROTOCOL_VERSIONS.join(', ')} (got ${JSON.stringify(v)})`);
  return known;
}

export function resolveOptions(options: ConnectOptions): Resolved {
  if (!isJsonObject(options)) throw invalid('connect() needs an options object');
  const hasToken = typeof options.token === 'string';
  const hasGetter = typeof options.getToken === 'function';
  if (hasToken === hasGetter) throw invalid('pass exactly one of `token` (a string) or `getToken` (a function)');
  if (hasToken && options.token === '') throw invalid('token is empty');
  const limits: Limits = { ...DEFAULT_LIMITS, ...options.limits };
  for (const [k, v] of Object.entries(limits)) positive(`limits.${k}`, v);
  if (limits.resultBytes > limits.frameBytes) throw invalid('limits.resultBytes cannot exceed limits.frameBytes');
  const heartbeat: HeartbeatOptions = { ...DEFAULT_HEARTBEAT, ...options.heartbeat };
  if (heartbeat.intervalMs !== 0) positive('heartbeat.intervalMs', heartbeat.intervalMs);
  positive('heartbeat.timeoutMs', heartbeat.timeoutMs);
  const handshakeTimeoutMs = options.handshakeTimeoutMs ?? 10_000;
  positive('handshakeTimeoutMs', handshakeTimeoutMs);
  if (options.tokenRefreshLeadMs !== undefined) positive('tokenRefreshLeadMs', options.tokenRefreshLeadMs);
  if (options.onApproval !== undefined && typeof options.onApproval !== 'function') throw invalid('onApproval must be a function');
  let backoff: BackoffOptions;
  try {
    backoff = resolveBackoff(options.backoff);
  } catch (err) {
    throw invalid((err as Error).message);
  }
  const initialize = initializeResult(options, limits);
  const discover = discoverResult(initialize);
  fitsFrame(discover, 'server/discover', limits);
  // Checked now although they are answered only once a tool may run as a task: a later setTools cannot throw for the concept.
  const taskInitialize = withTasks(initialize);
  const taskDiscover = discoverResult(taskInitialize);
  fitsFrame(taskInitialize, 'initialize', limits);
  fitsFrame(taskDiscover, 'server/discover', limits);
  return {
    url: clientUrl(options.url),
    limits,
    backoff,
    heartbeat,
    handshakeTimeoutMs,
    tokenRefreshLeadMs: options.tokenRefreshLeadMs,
    protocolVersion: protocolVersion(options.protocolVersion),
    initializeResult: initialize,
    discoverResult: discover,
    taskInitializeResult: taskInitialize,
    taskDiscoverResult: taskDiscover,
    onApproval: options.onApproval,
  };
}
