/**
 * Why a session ended, named for the `offline` event, and whether retrying
 * can help. Only what retrying cannot fix is fatal: a fixed token that is
 * expired or refused, an upgrade refused for a wrong URL, subprotocol or
 * origin, no WebSocket implementation. Everything else (the edge restarting,
 * draining, a dropped or silent socket, a 429 or 503) is retried with backoff.
 */

import { TetherError } from './errors.js';
import type { SessionEnd } from './session.js';
import { MIN_TOKEN_LIFE_MS, tokenExpiry } from './token.js';
import type { OfflineEvent } from './types.js';

/** An `offline` event before the retry decision, with the error that makes it final, if any. */
export type Failure = Omit<OfflineEvent, 'willRetry' | 'retryInMs'> & { fatal?: TetherError };

/**
 * Whether a session ended because the transport was lost rather than by
 * anyone's choice: the socket dropped with no close frame (1006), the edge
 * went away (1001: its idle deadline, a restart, a proxy closing; it refuses
 * what it cannot resume), or the edge fell silent (heartbeat). Only these
 * are resumed. A close frame the edge sent on
 * purpose (1008 policy or token expiry, 1012 drain, 1002/1003/1007/1009
 * protocol errors), a refused upgrade, a retired session or `close()` start
 * afresh.
 */
export function lostTransport(end: Pick<SessionEnd, 'why' | 'code' | 'httpStatus'>): boolean {
  if (end.why === 'heartbeat_timeout') return true;
  return end.why === 'disconnected' && end.httpStatus === undefined && (end.code === 1006 || end.code === 1001);
}

/**
 * `fixedToken` is the application's token when it gave one (undefined with
 * `getToken`, whose tokens are renewed on reconnect).
 */
export function classifyEnd(end: SessionEnd, fixedToken: string | undefined): Failure {
  const base = {
    code: end.code,
    ...(end.httpStatus === undefined ? {} : { httpStatus: end.httpStatus }),
    ...(end.reason === '' ? {} : { detail: end.reason }),
    ...(end.error === undefined ? {} : { error: end.error }),
  };
  if (end.why === 'transport_unavailable') {
    const fatal = end.error instanceof TetherError ? end.error : new TetherError('transport_unavailable', end.reason);
    return { ...base, reason: end.why, fatal, error: fatal };
  }
  if (end.why !== 'disconnected') return { ...base, reason: end.why };
  const status = end.httpStatus;
  if (status !== undefined) {
    const reason = `http_${status}`;
    if (status === 401 && fixedToken !== undefined) {
      const fatal = new TetherError('unauthenticated', `the edge refused the token (HTTP 401: ${end.reason}); pass getToken to have fresh ones fetched`);
      return { ...base, reason, fatal, error: fatal };
    }
    if (status === 400 || status === 403 || status === 404) {
      const fatal = new TetherError('refused', `the edge refused the connection with HTTP ${status} (${end.reason}); check the url, subprotocol and allowed origins`);
      return { ...base, reason, fatal, error: fatal };
    }
    return { ...base, reason };
  }
  switch (end.code) {
    case 1008: {
      // The edge closes at the token's expiry; a fixed token cannot be renewed, so retrying would only loop.
      const exp = fixedToken === undefined ? undefined : tokenExpiry(fixedToken);
      if (exp !== undefined && exp - Date.now() < MIN_TOKEN_LIFE_MS) {
        const fatal = new TetherError('unauthenticated', `the token expired at ${new Date(exp).toISOString()} and the edge closed the session; pass getToken to have fresh ones fetched`);
        return { ...base, reason: 'token_expired', fatal, error: fatal };
      }
      return { ...base, reason: 'policy' };
    }
    case 1012:
      return { ...base, reason: 'edge_draining' };
    case 1001:
      return { ...base, reason: 'edge_going_away' };
    default:
      return { ...base, reason: 'disconnected' };
  }
}
