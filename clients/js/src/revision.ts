/**
 * The two MCP revisions a device may speak to the edge (docs/PROTOCOL.md,
 * "Two MCP revisions"), and the frames that differ between them.
 *
 * 2025-11-25 starts with `initialize`. 2026-07-28 has no handshake: the edge
 * asks `server/discover`, marks every result it reads as complete or not
 * (`resultType`), and opens a `subscriptions/listen` stream on which the
 * device sends `list_changed`. The application picks what to announce at the
 * upgrade, but a session answers whichever lifecycle the edge actually
 * starts: an edge that ignores the announcement still gets a working device.
 */

import { isJsonObject, type JsonObject } from './json.js';
import { Meta } from './jsonrpc.js';
import type { ProtocolVersion } from './types.js';

/** The revision announced when the application names none: the one every tether edge speaks. */
export const DEFAULT_PROTOCOL_VERSION: ProtocolVersion = '2025-11-25';
/** The revision with `server/discover` and listen streams. */
export const MODERN: ProtocolVersion = '2026-07-28';
export const PROTOCOL_VERSIONS: readonly ProtocolVersion[] = ['2025-11-25', '2026-07-28'];

/** The upgrade header Node announces a revision in. */
export const ANNOUNCE_HEADER = 'MCP-Protocol-Version';
/** The query parameter a browser announces it in (browsers cannot set headers on an upgrade). */
export const ANNOUNCE_QUERY = 'mcp_protocol_version';

/** Methods that exist only in 2026-07-28. */
export const ModernMethod = {
  discover: 'server/discover',
  listen: 'subscriptions/listen',
  acknowledged: 'notifications/subscriptions/acknowledged',
} as const;

/** `_meta` keys of 2026-07-28. */
export const ModernMeta = {
  protocolVersion: 'io.modelcontextprotocol/protocolVersion',
  serverInfo: 'io.modelcontextprotocol/serverInfo',
  subscriptionId: 'io.modelcontextprotocol/subscriptionId',
} as const;

/**
 * The `server/discover` answer, built from the `initialize` answer so both
 * revisions describe the application identically. `ttlMs: 0` and
 * `cacheScope: "private"` because the concept is per-user and may change
 * with the next navigation: nobody should cache it. A device that asks its
 * user to approve writes says so here too (`tether.dev/approvals`).
 */
export function discoverResult(initialize: JsonObject): JsonObject {
  const meta: JsonObject = { [ModernMeta.serverInfo]: initialize['serverInfo'] ?? null };
  const initMeta = initialize['_meta'];
  const concept = isJsonObject(initMeta) ? initMeta[Meta.concept] : undefined;
  if (concept !== undefined) meta[Meta.concept] = concept;
  const approvals = isJsonObject(initMeta) ? initMeta[Meta.approvals] : undefined;
  if (approvals === true) meta[Meta.approvals] = true;
  const result: JsonObject = {
    resultType: 'complete',
    supportedVersions: [MODERN],
    capabilities: initialize['capabilities'] ?? { tools: { listChanged: true } },
  };
  if (typeof initialize['instructions'] === 'string') result['instructions'] = initialize['instructions'];
  return { ...result, ttlMs: 0, cacheScope: 'private', _meta: meta };
}

/**
 * A result as 2026-07-28 wants it: `resultType: "complete"` (the device never
 * asks the edge for input: a broker has no user to ask), and for
 * `tools/list` the cache hints, which say "do not cache" because the catalog
 * moves whenever the user navigates.
 */
export function complete(result: JsonObject, cacheHints = false): JsonObject {
  const out: JsonObject = { resultType: 'complete', ...result };
  if (cacheHints) {
    out['ttlMs'] = 0;
    out['cacheScope'] = 'private';
  }
  return out;
}

/** Which notifications a listen request asked for that this device can send (only the tool list ever changes). */
export function listenedFor(params: JsonObject): { toolsListChanged: boolean } {
  const asked = params['notifications'];
  return { toolsListChanged: isJsonObject(asked) && asked['toolsListChanged'] === true };
}
