/**
 * The W3C trace context of a call (https://www.w3.org/TR/trace-context/):
 * the edge puts the agent's `traceparent` and `tracestate` in the call's
 * `_meta`, and the handler gets them as `ctx.trace`.
 */

import type { Json } from './json.js';
import type { TraceContext } from './types.js';

/**
 * Version 00: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, all
 * lowercase. Other versions are not read (their layout may differ).
 */
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;
const ZERO_TRACE_ID = '0'.repeat(32);
const ZERO_PARENT_ID = '0'.repeat(16);

/**
 * The trace context from `_meta.traceparent` and `_meta.tracestate`, or
 * undefined when there is no valid traceparent (missing, not a string,
 * malformed, or an all-zero id). Never throws. `tracestate` rides along only
 * beside a valid traceparent, and only when it is a non-empty string.
 */
export function traceOf(traceparent: Json | undefined, tracestate: Json | undefined): TraceContext | undefined {
  if (typeof traceparent !== 'string') return undefined;
  const m = TRACEPARENT.exec(traceparent);
  const traceId = m?.[1];
  const parentId = m?.[2];
  if (traceId === undefined || parentId === undefined || traceId === ZERO_TRACE_ID || parentId === ZERO_PARENT_ID) return undefined;
  const trace: TraceContext = { traceparent, traceId, parentId };
  if (typeof tracestate === 'string' && tracestate !== '') trace.tracestate = tracestate;
  return trace;
}
