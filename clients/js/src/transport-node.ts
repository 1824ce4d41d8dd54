/**
 * The Node transport: the `ws` package, loaded on first use so that nothing
 * else in the SDK depends on it. Node presents the credential as an
 * `Authorization: Bearer` header (it never lands in a URL or a log) and can
 * see the HTTP status of a refused upgrade, which tells a bad token (401) from
 * a wrong URL (404) or a draining edge (503). An announced MCP revision is the
 * `MCP-Protocol-Version` header, as for any MCP client over HTTP.
 */

import { TetherError } from './errors.js';
import { ANNOUNCE_HEADER } from './revision.js';
import type { CloseInfo, Dial, Socket, SocketHandlers } from './transport.js';

/** The slice of `ws` this file uses, typed here so `ws`'s types never reach the SDK's public declarations. */
interface WsSocket {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  on(event: 'open', cb: () => void): void;
  on(event: 'message', cb: (data: Uint8Array | ArrayBuffer | Uint8Array[], isBinary: boolean) => void): void;
  on(event: 'close', cb: (code: number, reason: Uint8Array) => void): void;
  on(event: 'error', cb: (err: Error) => void): void;
  on(event: 'unexpected-response', cb: (req: { destroy(): void }, res: { statusCode?: number; resume(): void }) => void): void;
}
type WsConstructor = new (
  url: string,
  protocols: string,
  options: { headers: Record<string, string>; handshakeTimeout: number; perMessageDeflate: boolean },
) => WsSocket;

let loaded: Promise<WsConstructor> | undefined;

function loadWs(): Promise<WsConstructor> {
  loaded ??= import('ws').then(
    (m: { WebSocket?: unknown; default?: unknown }) => (m.WebSocket ?? m.default) as WsConstructor,
    (err: unknown) => {
      loaded = undefined;
      throw new TetherError('transport_unavailable', 'the tether client on Node needs the `ws` package: npm install ws', { cause: err });
    },
  );
  return loaded;
}

const OPEN = 1;
const decoder = new TextDecoder();

export const nodeDial: Dial = async (request, handlers: SocketHandlers): Promise<Socket> => {
  const WebSocket = await loadWs();
  const headers: Record<string, string> = { Authorization: `Bearer ${request.token}` };
  if (request.announce !== undefined) headers[ANNOUNCE_HEADER] = request.announce;
  const ws = new WebSocket(request.url, request.protocol, {
    headers,
    handshakeTimeout: request.timeoutMs,
    perMessageDeflate: false,
  });
  let done = false;
  let httpStatus: number | undefined;
  let error: Error | undefined;
  const finish = (info: CloseInfo): void => {
    if (done) return;
    done = true;
    handlers.onClose(info);
  };
  ws.on('open', () => handlers.onOpen());
  ws.on('message', (data, isBinary) => {
    if (done) return;
    if (isBinary) {
      handlers.onBinary();
      return;
    }
    const bytes = Array.isArray(data) ? Buffer.concat(data) : data instanceof ArrayBuffer ? new Uint8Array(data) : data;
    handlers.onMessage(decoder.decode(bytes));
  });
  ws.on('unexpected-response', (req, res) => {
    httpStatus = res.statusCode;
    res.resume();
    req.destroy();
    finish({ code: 1006, reason: `upgrade refused with HTTP ${String(res.statusCode)}`, ...(httpStatus === undefined ? {} : { httpStatus }) });
  });
  ws.on('error', (err) => {
    error = err;
  });
  ws.on('close', (code, reason) => {
    const info: CloseInfo = { code, reason: decoder.decode(reason) };
    if (error !== undefined) info.error = error;
    finish(info);
  });
  return {
    send: (text) => ws.send(text),
    close: (code, reason) => {
      if (done) return;
      if (ws.readyState === OPEN) ws.close(code, reason);
      else ws.terminate();
      finish({ code, reason });
    },
    get isOpen() {
      return !done && ws.readyState === OPEN;
    },
  };
};
