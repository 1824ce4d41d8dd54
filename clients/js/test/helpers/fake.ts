/**
 * A scripted edge behind a fake transport, for unit tests of the protocol
 * that need no process: the test plays the edge frame by frame (either MCP
 * revision) and reads exactly what the client sent.
 */

import { Catalog } from '../../dist/catalog.js';
import { DEFAULT_LIMITS } from '../../dist/options.js';
import type { AppContext, Tool } from '../../dist/node.js';
import type { Dial, DialRequest, SocketHandlers } from '../../dist/transport.js';
import { until } from './wait.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Frame = { [k: string]: Json };

export const MODERN_METHODS = { discover: 'server/discover', listen: 'subscriptions/listen' } as const;

/** The `_meta` envelope a 2026-07-28 edge puts on every request (crates/edge/src/revision.rs). */
export function envelope(): Frame {
  return {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientInfo': { name: 'tether-edge', version: '0' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
}

/** The `_meta` key of the catalog digest. */
export const DIGEST = 'tether.dev/digest';

/** The digest a client stamps for this catalog, at whatever seq: what a fresh catalog of the same tools and context computes. */
export function digestFor(tools: readonly Tool[], context?: AppContext): string {
  return new Catalog(tools, context, DEFAULT_LIMITS).stamp.digest;
}

/** One socket as the fake edge sees it. */
export class FakePeer {
  readonly request: DialRequest;
  readonly sent: Frame[] = [];
  closedBy: { code: number; reason: string } | undefined;
  readonly #handlers: SocketHandlers;
  #open = false;
  #nextId = 1;

  constructor(request: DialRequest, handlers: SocketHandlers) {
    this.request = request;
    this.#handlers = handlers;
  }

  get isOpen(): boolean {
    return this.#open;
  }

  /** The transport's open event. */
  open(): void {
    this.#open = true;
    this.#handlers.onOpen();
  }

  /** The edge sends a frame. */
  deliver(frame: Frame | string): void {
    this.#handlers.onMessage(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** The edge sends a request; resolves with the client's response to it. */
  async ask(method: string, params: Frame = {}, ms = 2_000): Promise<Frame> {
    const id = this.#nextId++;
    this.deliver({ jsonrpc: '2.0', id, method, params });
    return this.response(id, ms);
  }

  /** The client's response to `id`, within `ms`. */
  response(id: number | string, ms = 2_000): Promise<Frame> {
    return until(() => this.sent.find((f) => f['id'] === id && !('method' in f)), ms, `the client's response to id ${id}`);
  }

  /** The first frame the client sent that passes `match`, within `ms`. */
  waitSent(match: (f: Frame) => boolean, ms = 2_000, what = 'a frame from the client'): Promise<Frame> {
    return until(() => this.sent.find(match), ms, what);
  }

  /**
   * Plays the edge's handshake: initialize, initialized, tools/list (all
   * pages), manifest_applied. `meta` is added to initialize's `_meta` (a
   * resume token, say).
   */
  async handshake(sessionId = 'sess-1', meta: Frame = {}): Promise<{ initialize: Frame; tools: Frame[] }> {
    this.open();
    const initialize = await this.ask('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'fake-edge', version: '0' }, _meta: { 'tether.dev/session': sessionId, ...meta } });
    this.deliver({ jsonrpc: '2.0', method: 'notifications/initialized', params: {} });
    const tools: Frame[] = [];
    let cursor: string | undefined;
    let seq = 0;
    do {
      const page = await this.ask('tools/list', cursor === undefined ? {} : { cursor });
      const result = page['result'] as Frame;
      for (const t of result['tools'] as Frame[]) tools.push(t);
      seq ||= Number((result['_meta'] as Frame)['tether.dev/seq']);
      cursor = result['nextCursor'] as string | undefined;
    } while (cursor !== undefined);
    this.deliver({ jsonrpc: '2.0', method: 'notifications/tether.dev/manifest_applied', params: { seq, kept: tools.length, dropped: [] } });
    return { initialize, tools };
  }

  /**
   * Plays a 2026-07-28 edge's start: `server/discover` and `tools/list` (all
   * pages), each with the envelope in `_meta`, as tests/revisions.rs scripts
   * it. The listen stream and `manifest_applied` are left to the test, whose
   * order is what it checks.
   */
  async discover(sessionId = 'sess-1', meta: Frame = {}): Promise<{ discover: Frame; pages: Frame[] }> {
    this.open();
    const discover = await this.ask(MODERN_METHODS.discover, { _meta: { ...envelope(), 'tether.dev/session': sessionId, ...meta } });
    const pages: Frame[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.ask('tools/list', { ...(cursor === undefined ? {} : { cursor }), _meta: envelope() });
      pages.push(page);
      cursor = (page['result'] as Frame)['nextCursor'] as string | undefined;
    } while (cursor !== undefined);
    return { discover, pages };
  }

  /** The edge opens `subscriptions/listen` (id `id`, never answered) for tool-list changes. */
  listen(id: number): void {
    this.deliver({ jsonrpc: '2.0', id, method: MODERN_METHODS.listen, params: { notifications: { toolsListChanged: true }, _meta: envelope() } });
  }

  /** The socket closes with `code` (1006: the connection dropped without a close frame). */
  closeFromEdge(code: number, reason = ''): void {
    this.#open = false;
    this.#handlers.onClose({ code, reason });
  }

  /** Called by the client through the Socket interface. */
  socket(): { send(text: string): void; close(code: number, reason: string): void; readonly isOpen: boolean } {
    const peer = this;
    return {
      send: (text: string) => {
        peer.sent.push(JSON.parse(text) as Frame);
      },
      close: (code: number, reason: string) => {
        if (peer.closedBy !== undefined) return;
        peer.closedBy = { code, reason };
        peer.#open = false;
        peer.#handlers.onClose({ code, reason });
      },
      get isOpen() {
        return peer.#open;
      },
    };
  }
}

/** A Dial that hands every connection to the test as a `FakePeer`. */
export class FakeEdge {
  readonly peers: FakePeer[] = [];

  readonly dial: Dial = async (request, handlers) => {
    const peer = new FakePeer(request, handlers);
    this.peers.push(peer);
    return peer.socket();
  };

  /** The `n`-th connection (0-based), once dialed. */
  peer(n: number, ms = 2_000): Promise<FakePeer> {
    return until(() => this.peers[n], ms, `connection #${n + 1}`);
  }
}
