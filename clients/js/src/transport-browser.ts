/**
 * The browser transport: the global `WebSocket`. Browsers cannot set headers
 * on an upgrade, so the credential goes in the query string as
 * `access_token`, which the edge accepts for exactly this reason (and never
 * logs); an announced MCP revision goes there too, as `mcp_protocol_version`.
 * A refused upgrade is indistinguishable from a network error here:
 * the browser reports only close code 1006.
 */

import { TetherError } from './errors.js';
import { ANNOUNCE_QUERY } from './revision.js';
import type { CloseInfo, Dial, DialRequest, Socket, SocketHandlers } from './transport.js';

/** `url` with `access_token` added to its query. */
export function withAccessToken(url: string, token: string): string {
  const u = new URL(url);
  u.searchParams.set('access_token', token);
  return u.toString();
}

/**
 * The URL a browser dials: the credential, and the announced MCP revision
 * (if any) as `mcp_protocol_version`, both in the query because a browser
 * cannot set headers on an upgrade.
 */
export function upgradeUrl(request: Pick<DialRequest, 'url' | 'token' | 'announce'>): string {
  const u = new URL(withAccessToken(request.url, request.token));
  if (request.announce !== undefined) u.searchParams.set(ANNOUNCE_QUERY, request.announce);
  return u.toString();
}

export const browserDial: Dial = async (request, handlers: SocketHandlers): Promise<Socket> => {
  const Impl = globalThis.WebSocket;
  if (typeof Impl !== 'function') {
    throw new TetherError('transport_unavailable', 'this environment has no global WebSocket; on Node, import the package\'s node entry');
  }
  const ws = new Impl(upgradeUrl(request), request.protocol);
  let done = false;
  const finish = (info: CloseInfo): void => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    handlers.onClose(info);
  };
  const timer = setTimeout(() => {
    if (ws.readyState === Impl.CONNECTING) {
      ws.close();
      finish({ code: 1006, reason: `upgrade did not finish within ${request.timeoutMs} ms` });
    }
  }, request.timeoutMs);
  ws.onopen = () => {
    clearTimeout(timer);
    handlers.onOpen();
  };
  ws.onmessage = (ev: MessageEvent) => {
    if (typeof ev.data === 'string') handlers.onMessage(ev.data);
    else handlers.onBinary();
  };
  ws.onclose = (ev: CloseEvent) => finish({ code: ev.code, reason: ev.reason });
  // An error event is always followed by close; close carries what there is to know.
  ws.onerror = null;
  return {
    send: (text) => ws.send(text),
    close: (code, reason) => {
      if (ws.readyState === Impl.CLOSING || ws.readyState === Impl.CLOSED) return;
      ws.close(code, reason);
      // A half-open socket may take long to confirm; the caller has moved on already.
      finish({ code, reason });
    },
    get isOpen() {
      return !done && ws.readyState === Impl.OPEN;
    },
  };
};
