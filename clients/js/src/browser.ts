/**
 * Browser entry: uses the global `WebSocket` and passes the token as
 * `?access_token=` (browsers cannot set an Authorization header on an
 * upgrade). Imports nothing outside this package, so it loads as plain ES
 * modules with no bundler.
 */

import { TetherClient } from './client.js';
import { browserDial } from './transport-browser.js';
import type { ConnectOptions } from './types.js';

export * from './core.js';

/** Connects a client; it keeps itself connected until `close()`. Throws `TetherError` on invalid options. */
export function connect(options: ConnectOptions): TetherClient {
  return new TetherClient(options, browserDial);
}
