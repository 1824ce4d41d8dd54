/**
 * Node entry (Node ≥ 20): uses the `ws` package, loaded on first dial, and
 * presents the token as an `Authorization: Bearer` header.
 */

import { TetherClient } from './client.js';
import { nodeDial } from './transport-node.js';
import type { ConnectOptions } from './types.js';

export * from './core.js';

/** Connects a client; it keeps itself connected until `close()`. Throws `TetherError` on invalid options. */
export function connect(options: ConnectOptions): TetherClient {
  return new TetherClient(options, nodeDial);
}
