/**
 * Turning what a handler returned or threw into an MCP `CallToolResult`, and
 * the fixed error results the SDK answers with on its own (timeout, too
 * large, unavailable). Error results always carry `structuredContent:
 * {code, retryable, retry_after_ms?}` — the shape docs/PROTOCOL.md gives a
 * device-side failure, which the backend turns into a `client_error`.
 */

import type { Failure } from './errors.js';
import { isJsonObject, type JsonObject } from './json.js';
import type { CallToolResult, ContentBlock, ToolReturn } from './types.js';

function isCallToolResult(value: unknown): value is CallToolResult {
  return isJsonObject(value) && Array.isArray(value['content']);
}

function text(t: string): ContentBlock {
  return { type: 'text', text: t };
}

/** The result for a handler's return value (see `ToolReturn`). */
export function resultOf(value: ToolReturn): CallToolResult {
  if (value === undefined || value === null) return { content: [] };
  if (isCallToolResult(value)) return value;
  if (typeof value === 'string') return { content: [text(value)] };
  if (isJsonObject(value)) return { content: [text(JSON.stringify(value))], structuredContent: value };
  return { content: [text(JSON.stringify(value))] };
}

/** An `isError` result for a failure. */
export function failureResult(f: Failure, extra: JsonObject = {}): CallToolResult {
  const structured: JsonObject = { code: f.code, retryable: f.retryable };
  if (f.retryAfterMs !== undefined) structured['retry_after_ms'] = f.retryAfterMs;
  return { content: [text(f.message)], structuredContent: { ...structured, ...extra }, isError: true };
}

/** The answer when a handler outlived the client's answer ceiling. */
export function timeoutResult(name: string, ceilingMs: number): CallToolResult {
  return failureResult({
    code: 'device_timeout',
    retryable: true,
    message: `${name} did not finish within the client's ${ceilingMs} ms answer ceiling and was stopped; whether it took effect is unknown, so check before trying again.`,
  });
}

/** The answer when a result would exceed the result cap: never a truncated result. */
export function tooLargeResult(name: string, bytes: number, limit: number): CallToolResult {
  return failureResult(
    {
      code: 'payload_too_large',
      retryable: false,
      message: `${name} produced a ${bytes}-byte result, over the ${limit}-byte limit, so nothing of it was sent; ask for less (narrower arguments, fewer items).`,
    },
    { bytes, limit },
  );
}

/** The answer for a tool that is not in the catalog now (the app navigated meanwhile). */
export function unavailableResult(name: string, available: string[]): CallToolResult {
  const list = available.length === 0 ? 'none' : available.join(', ');
  return failureResult(
    {
      code: 'tool_unavailable',
      retryable: false,
      message: `${name} is not available on the client right now; the client's tools now are: ${list}.`,
    },
    { available },
  );
}

/** The answer when a handler returned something that is not JSON. */
export function invalidResult(name: string, why: string): CallToolResult {
  return failureResult({ code: 'invalid_result', retryable: false, message: `${name} returned a result that cannot be sent: ${why}` });
}

/** The outcome of a task whose ttl passed while its handler still ran: stopped, with its effect unknown. */
export function taskExpiredResult(name: string, ttlMs: number): CallToolResult {
  return failureResult({
    code: 'device_timeout',
    retryable: true,
    message: `${name} did not finish within its task's ${ttlMs} ms time to live and was stopped; whether it took effect is unknown, so check before trying again.`,
  });
}
