/**
 * Reconnect delays: exponential, capped, with jitter so a fleet that lost the
 * same edge does not come back in lockstep.
 */

import type { BackoffOptions } from './types.js';

export const DEFAULT_BACKOFF: BackoffOptions = {
  initialMs: 250,
  maxMs: 30_000,
  multiplier: 2,
  maxAttempts: Number.POSITIVE_INFINITY,
  stableMs: 5_000,
};

/**
 * The delay before reconnect attempt `attempt` (0-based): drawn from
 * [cap/2, cap] with cap = min(maxMs, initialMs · multiplier^attempt).
 * "Equal jitter": the floor keeps a flapping edge from being hammered, the
 * random half spreads the fleet.
 */
export function backoffDelay(attempt: number, options: BackoffOptions, random: () => number = Math.random): number {
  const exp = Math.min(Math.max(attempt, 0), 64);
  const cap = Math.min(options.maxMs, options.initialMs * options.multiplier ** exp);
  return Math.round(cap / 2 + random() * (cap / 2));
}

/** Validated backoff options. */
export function resolveBackoff(partial: Partial<BackoffOptions> | undefined): BackoffOptions {
  const o = { ...DEFAULT_BACKOFF, ...partial };
  if (!(o.initialMs > 0) || !(o.maxMs >= o.initialMs) || !(o.multiplier >= 1) || !(o.maxAttempts >= 1) || !(o.stableMs >= 0)) {
    throw new RangeError(
      `backoff needs initialMs > 0, maxMs >= initialMs, multiplier >= 1, maxAttempts >= 1, stableMs >= 0 (got ${JSON.stringify(o)})`,
    );
  }
  return o;
}
