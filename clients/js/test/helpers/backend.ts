/**
 * The agent backend, played by a test: JSON-RPC over `ws` to `/v1/backend`
 * with a backend token, speaking the backend link of docs/PROTOCOL.md
 * (`sessions/list`, `tools/list`, `tools/call`) and collecting the edge's
 * notifications (`tools/list_changed`, `session/closed`). Reads carry a reader
 * credential (an operator's here): the service token alone reads no session.
 */

import { WebSocket } from 'ws';

import { until, withTimeout } from './wait.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

/** A JSON-RPC error from the edge (`data.kind` names it). */
export class RpcError extends Error {
  readonly code: number;
  readonly data: JsonObject;
  constructor(code: number, message: string, data: JsonObject) {
    super(message);
    this.code = code;
    this.data = data;
  }
  get kind(): string {
    return String(this.data['kind']);
  }
}

/** The `RpcError` a request failed with; fails the test if it succeeded or failed otherwise. */
export async function rpcError(pending: Promise<unknown>): Promise<RpcError> {
  let value: unknown;
  try {
    value = await pending;
  } catch (err) {
    if (err instanceof RpcError) return err;
    throw err;
  }
  throw new Error(`expected an error, got ${JSON.stringify(value)}`);
}

export interface SessionInfo {
  session: string;
  principal: string;
  server_info: JsonObject;
  seq: number;
  tools: number;
  /** The MCP revision the device speaks (`2025-11-25` or `2026-07-28`). */
  protocol_version?: string;
}

export interface ToolDecl {
  name: string;
  description?: string;
  inputSchema: JsonObject;
}

export interface Manifest {
  session: string;
  seq: number;
  tools: ToolDecl[];
  instructions?: string;
  concept?: JsonObject;
  context?: JsonObject;
  dropped?: JsonObject[];
}

export interface CallResult {
  content: JsonObject[];
  structuredContent?: JsonObject;
  isError?: boolean;
  _meta?: JsonObject;
}

export interface CallResponse {
  result: CallResult;
  manifest?: Manifest;
  seq: number;
  /** What an approved or keyed call left behind. */
  receipt?: { key?: string; fingerprint: string; outcome: string; approval?: { id: string; by: string; at_ms: number } };
}

export interface Notification {
  method: string;
  params: JsonObject;
}

export class Backend {
  readonly #ws: WebSocket;
  readonly #reader: string;
  readonly #pending = new Map<number, { resolve: (v: Json) => void; reject: (e: Error) => void }>();
  readonly notifications: Notification[] = [];
  #nextId = 1;

  private constructor(ws: WebSocket, reader: string) {
    this.#ws = ws;
    this.#reader = reader;
    ws.on('message', (data) => this.#onMessage(String(data)));
    ws.on('close', () => {
      for (const p of this.#pending.values()) p.reject(new Error('backend link closed'));
      this.#pending.clear();
    });
  }

  /** `reader`: the credential reads present (a user's sees their sessions, an operator's every one). */
  static async connect(edgeUrl: string, backendToken: string, reader: string): Promise<Backend> {
    const ws = new WebSocket(`${edgeUrl}/v1/backend`, { headers: { Authorization: `Bearer ${backendToken}` } });
    await withTimeout(
      new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      }),
      5_000,
      'the backend link to open',
    );
    return new Backend(ws, reader);
  }

  #onMessage(text: string): void {
    const msg = JSON.parse(text) as JsonObject;
    if (typeof msg['method'] === 'string') {
      this.notifications.push({ method: msg['method'], params: (msg['params'] ?? {}) as JsonObject });
      return;
    }
    const id = msg['id'];
    if (typeof id !== 'number') return;
    const p = this.#pending.get(id);
    if (p === undefined) return;
    this.#pending.delete(id);
    const err = msg['error'] as JsonObject | undefined;
    if (err !== undefined) p.reject(new RpcError(Number(err['code']), String(err['message']), (err['data'] ?? {}) as JsonObject));
    else p.resolve(msg['result'] ?? null);
  }

  /** One request; rejects with `RpcError` on an error response, or after `timeoutMs`. */
  request<T>(method: string, params: JsonObject, timeoutMs = 15_000): Promise<T> {
    const id = this.#nextId++;
    const answer = new Promise<Json>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    this.#ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    return withTimeout(answer, timeoutMs, `the edge's answer to ${method}`) as Promise<T>;
  }

  async sessions(): Promise<SessionInfo[]> {
    const r = await this.request<{ sessions: SessionInfo[] }>('sessions/list', { _meta: { credential: this.#reader } });
    return r.sessions;
  }

  /** Waits until the edge lists `sessionId` (it is listed a moment after the device hears `manifest_applied`). */
  async waitForSession(sessionId: string, ms = 5_000): Promise<SessionInfo> {
    return until(async () => (await this.sessions()).find((s) => s.session === sessionId), ms, `session ${sessionId} in sessions/list`);
  }

  tools(session: string): Promise<Manifest> {
    return this.request<Manifest>('tools/list', { session, _meta: { credential: this.#reader } });
  }

  /** `tools/call` on behalf of the session's user (`credential`: a tether-client token for the same principal). */
  call(session: string, name: string, args: JsonObject, meta: JsonObject & { credential: string }): Promise<CallResponse> {
    return this.request<CallResponse>('tools/call', { session, name, arguments: args, _meta: meta });
  }

  /** The first notification matching, within `ms` (already received ones count). */
  async notification(method: string, match: (params: JsonObject) => boolean, ms: number): Promise<Notification> {
    return until(() => this.notifications.find((n) => n.method === method && match(n.params)), ms, `backend notification ${method}`);
  }

  close(): void {
    this.#ws.close();
  }
}
