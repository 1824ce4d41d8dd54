/**
 * JSON-RPC 2.0 frames on the client link: classify what arrives, build what
 * leaves. One message per text frame; batches are not used by tether.
 */

import { isJsonObject, type Json, type JsonObject } from './json.js';

export type Id = string | number;

export type Incoming =
  | { kind: 'request'; id: Id; method: string; params: JsonObject }
  | { kind: 'notification'; method: string; params: JsonObject }
  | { kind: 'response'; id: Id; result?: Json; error?: JsonObject }
  | { kind: 'invalid'; why: string };

/** JSON-RPC error codes the device uses (MCP's, which are JSON-RPC's). */
export const RpcCode = {
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  /** The request's work was cancelled (`tasks/result` of a cancelled task); JSON-RPC's reserved range, as LSP uses it. */
  requestCancelled: -32800,
} as const;

/** Classifies one text frame. Never throws. */
export function parseFrame(text: string): Incoming {
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch (err) {
    return { kind: 'invalid', why: `not JSON: ${(err as Error).message}` };
  }
  if (!isJsonObject(msg)) return { kind: 'invalid', why: 'not a JSON-RPC object' };
  if (msg['jsonrpc'] !== '2.0') return { kind: 'invalid', why: 'jsonrpc is not "2.0"' };
  const id = msg['id'];
  const hasId = typeof id === 'string' || typeof id === 'number';
  const method = msg['method'];
  const params = isJsonObject(msg['params']) ? msg['params'] : {};
  if (typeof method === 'string') {
    return hasId ? { kind: 'request', id, method, params } : { kind: 'notification', method, params };
  }
  if (hasId && ('result' in msg || 'error' in msg)) {
    const error = msg['error'];
    return isJsonObject(error) ? { kind: 'response', id, error } : { kind: 'response', id, result: msg['result'] ?? null };
  }
  return { kind: 'invalid', why: 'neither a request, a notification nor a response' };
}

export function response(id: Id, result: Json): string {
  return JSON.stringify({ jsonrpc: '2.0', id, result });
}

export function errorResponse(id: Id, code: number, message: string, data?: JsonObject): string {
  const error: JsonObject = data === undefined ? { code, message } : { code, message, data };
  return JSON.stringify({ jsonrpc: '2.0', id, error });
}

export function request(id: Id, method: string, params: JsonObject): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method, params });
}

export function notification(method: string, params: JsonObject): string {
  return JSON.stringify({ jsonrpc: '2.0', method, params });
}

/** Method names and `_meta` keys of the client link (docs/PROTOCOL.md). */
export const Method = {
  initialize: 'initialize',
  initialized: 'notifications/initialized',
  toolsList: 'tools/list',
  toolsCall: 'tools/call',
  ping: 'ping',
  cancelled: 'notifications/cancelled',
  progress: 'notifications/progress',
  listChanged: 'notifications/tools/list_changed',
  manifestApplied: 'notifications/tether.dev/manifest_applied',
  /** Edge → device: ask the device's user to approve one write (docs/PROTOCOL.md, "Writes: approvals, keys and receipts"). */
  approve: 'tether.dev/approve',
  /** Edge → device, MCP tasks (2025-11-25): a task's status, its outcome (blocking), stopping it. */
  tasksGet: 'tasks/get',
  tasksResult: 'tasks/result',
  tasksCancel: 'tasks/cancel',
  /** Device → edge: a task's status moved (params: the Task, flat). */
  taskStatus: 'notifications/tasks/status',
} as const;

export const Meta = {
  seq: 'tether.dev/seq',
  /** Beside every seq: a hash of the tools and context at that seq, so the edge skips re-reading an unchanged catalog. */
  digest: 'tether.dev/digest',
  context: 'tether.dev/context',
  concept: 'tether.dev/concept',
  session: 'tether.dev/session',
  /** The single-use token that resumes this session after a transport loss (absent when the edge has resume off). */
  resume: 'tether.dev/resume',
  deadlineMs: 'tether.dev/deadline_ms',
  idempotencyKey: 'tether.dev/idempotency_key',
  /** MCP's own key (not namespaced), the same on 2025-11-25 and 2026-07-28. */
  progressToken: 'progressToken',
  /** The W3C trace context (not namespaced, where MCP carries it). */
  traceparent: 'traceparent',
  tracestate: 'tracestate',
  /** In the handshake answer: `true` when the device asks its user to approve writes (`tether.dev/approve`). */
  approvals: 'tether.dev/approvals',
  /** MCP's marker tying a message (the `tasks/result` answer) to its task. */
  relatedTask: 'io.modelcontextprotocol/related-task',
} as const;

/** The MCP revision of the `initialize` handshake (2026-07-28 has none: see revision.ts). */
export const MCP_PROTOCOL_VERSION = '2025-11-25';
/** The WebSocket subprotocol the client offers. */
export const SUBPROTOCOL = 'tether.v1';
/** The client link's path. */
export const CLIENT_PATH = '/v1/client';
/** The query parameter a reconnect presents its resume token in (a browser cannot set headers on an upgrade). */
export const RESUME_QUERY = 'resume';
