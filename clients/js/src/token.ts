/**
 * Reading a JWT's `exp` without verifying it. The client cannot verify its own
 * token (it does not hold the edge's secret) and does not need to: it only
 * needs to know when the edge will close the session (1008 at `exp`) so it can
 * move to a fresh token first.
 */

/** The token's `exp` in epoch milliseconds, or undefined when it has none or is not a JWT. */
export function tokenExpiry(token: string): number | undefined {
  const payload = token.split('.')[1];
  if (payload === undefined || payload === '') return undefined;
  try {
    const b64 = payload.replace(/-/g, '+').replace(/_/g, '/');
    const padded = b64 + '='.repeat((4 - (b64.length % 4)) % 4);
    const binary = atob(padded);
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const claims: unknown = JSON.parse(new TextDecoder().decode(bytes));
    if (typeof claims !== 'object' || claims === null) return undefined;
    const exp = (claims as Record<string, unknown>)['exp'];
    return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** A token whose remaining life is below this is treated as already expired. */
export const MIN_TOKEN_LIFE_MS = 500;

/**
 * How long from `now` until a token expiring at `expiresAt` should be replaced:
 * `lead` before expiry, where `lead` defaults to a fifth of the remaining life,
 * clamped to [1 s, 60 s], and never more than half the remaining life (so a
 * short token is still used for a while before it is replaced).
 */
export function refreshDelay(expiresAt: number, now: number, leadMs?: number): number {
  const remaining = expiresAt - now;
  const lead = Math.min(leadMs ?? Math.min(60_000, Math.max(1_000, remaining / 5)), remaining / 2);
  return Math.max(0, Math.round(remaining - lead));
}
