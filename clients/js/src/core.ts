/**
 * Everything both entry points export. The entries differ only in the
 * transport they hand to `TetherClient`.
 */

export { TetherClient } from './client.js';
export {
  TetherError,
  ToolError,
  CallAbortedError,
  ApprovalAbortedError,
  type TetherErrorCode,
  type ToolErrorOptions,
  type AbortWhy,
  type ApprovalAbortWhy,
} from './errors.js';
export { namespacedNames, slug } from './names.js';
export { tokenExpiry } from './token.js';
export { DEFAULT_LIMITS, DEFAULT_HEARTBEAT } from './options.js';
export { DEFAULT_BACKOFF } from './backoff.js';
export { MCP_PROTOCOL_VERSION, SUBPROTOCOL, CLIENT_PATH } from './jsonrpc.js';
export { MAX_PROGRESS_MESSAGE_CHARS } from './call.js';
export { MAX_TASKS, DEFAULT_TASK_TTL_MS, MAX_TASK_TTL_MS, TASK_POLL_INTERVAL_MS } from './tasks.js';
export type { Json, JsonObject } from './json.js';
export type * from './types.js';
