/**
 * The seam between the protocol and a WebSocket implementation: the browser's
 * global `WebSocket` and Node's `ws` differ in how a credential and an MCP
 * revision are presented and in what a refused upgrade tells you, and
 * nothing else.
 */

/** What to dial. */
export interface DialRequest {
  /** The full `/v1/client` URL, without the credential. */
  url: string;
  token: string;
  /** The subprotocol to offer (`tether.v1`). */
  protocol: string;
  /** Abandon the upgrade after this long. */
  timeoutMs: number;
  /**
   * An MCP revision to announce at the upgrade, if the application chose one
   * other than the default (a default-speaking device announces nothing, as
   * before revisions existed).
   */
  announce?: string;
}

/** How a socket ended. */
export interface CloseInfo {
  code: number;
  reason: string;
  /** The HTTP status of a refused upgrade, when the implementation exposes it (Node). */
  httpStatus?: number;
  /** A transport error that preceded the close. */
  error?: Error;
}

/** Callbacks of one socket. `onClose` runs exactly once, and nothing runs after it. */
export interface SocketHandlers {
  onOpen(): void;
  onMessage(text: string): void;
  /** A binary frame arrived; tether never sends one. */
  onBinary(): void;
  onClose(info: CloseInfo): void;
}

/** One open (or opening) socket. */
export interface Socket {
  send(text: string): void;
  /** Starts a close handshake; `onClose` follows. */
  close(code: number, reason: string): void;
  /** Whether `send` would reach the wire now. */
  readonly isOpen: boolean;
}

/** Opens a socket. Rejects only when no socket can be made at all (no implementation). */
export type Dial = (request: DialRequest, handlers: SocketHandlers) => Promise<Socket>;
