/**
 * Bounded waiting. No test sleeps and hopes: each waits for a named event or
 * condition and fails with a message saying what it waited for.
 */

import type { ClientEvents, TetherClient } from '../../dist/node.js';

/** Rejects after `ms` with a message naming what was awaited. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The next `event` from `client` whose payload passes `accept`, within `ms`. */
export function nextEvent<K extends keyof ClientEvents>(
  client: TetherClient,
  event: K,
  ms: number,
  accept: (payload: ClientEvents[K]) => boolean = () => true,
): Promise<ClientEvents[K]> {
  let off: (() => void) | undefined;
  const got = new Promise<ClientEvents[K]>((resolve) => {
    off = client.on(event, (payload) => {
      if (accept(payload)) resolve(payload);
    });
  });
  return withTimeout(got, ms, `client event "${String(event)}"`).finally(() => off?.());
}

/** Polls `check` every `everyMs` until it returns a value other than undefined, within `ms`. */
export async function until<T>(check: () => Promise<T | undefined> | T | undefined, ms: number, what: string, everyMs = 25): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** A promise with its resolve exposed, for handlers a test releases by hand. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
