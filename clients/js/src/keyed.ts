/**
 * What one client remembers of the calls that carried an idempotency key,
 * across all its sessions. When the connection drops while such a call runs,
 * the edge delivers it again on the resumed session (same name, arguments
 * and key, perhaps a new request id), and a backend may retry a call under
 * the same key: either way the handler must not run twice. The later
 * request is answered with the earlier run's result instead, waiting for it
 * if it is still running.
 *
 * A run that outlives its connection keeps reporting progress: the
 * re-delivery waiting on it follows the reports and sends them under its own
 * progress token on its own socket.
 *
 * The memory is bounded and forgets predictably: the newest `maxKeys` keys
 * by arrival, each for `ttlMs` after its handler finished. A run that ended
 * without a result to repeat (cancelled, aborted by a disconnect or `close()`,
 * or stopped at the answer ceiling) is forgotten at once, so a retry runs the
 * handler again.
 */

import type { AbortWhy } from './errors.js';
import type { JsonObject } from './json.js';
import type { CallOutcome, CallToolResult } from './types.js';

/** How many keys are remembered. */
export const KEYED_MAX_KEYS = 256;
/** How long a finished key is remembered, in ms. */
export const KEYED_TTL_MS = 5 * 60_000;

/** An earlier run's answer, before the session stamps its seq on it. */
export interface Replay {
  result: CallToolResult;
  outcome: Extract<CallOutcome, 'ok' | 'error' | 'timeout'>;
}

/** How a run ended: an answer to repeat, or why there is none. */
export type RunEnd = Replay | AbortWhy;

/** One progress report of a run, without the token it was first sent under. */
export type ProgressReport = JsonObject;

/** What the session running a key's handler tells the memory. */
export interface RunReporter {
  /** A progress report the handler made (passed on to whoever follows the run). */
  progress(report: ProgressReport): void;
  /** How the run ended; called once. */
  end(end: RunEnd): void;
}

/** One key's run. */
export interface KeyedRun {
  /** The device-side tool name it ran; a key reused for another tool is not the same call. */
  readonly name: string;
  /** Settles when the handler's run does. */
  readonly done: Promise<RunEnd>;
  /** The answer, once the run finished with one. */
  readonly replay: Replay | undefined;
  /** Hears the run's progress reports from now on; returns the function that stops it. */
  follow(listener: (report: ProgressReport) => void): () => void;
}

interface Entry extends KeyedRun {
  replay: Replay | undefined;
  finishedAt: number | undefined;
  /** Stops the run; set while it runs. */
  abort: ((why: AbortWhy) => void) | undefined;
  followers: Set<(report: ProgressReport) => void>;
}

export class KeyedCalls {
  readonly #entries = new Map<string, Entry>();
  readonly #maxKeys: number;
  readonly #ttlMs: number;
  readonly #now: () => number;

  constructor(maxKeys = KEYED_MAX_KEYS, ttlMs = KEYED_TTL_MS, now: () => number = () => performance.now()) {
    this.#maxKeys = maxKeys;
    this.#ttlMs = ttlMs;
    this.#now = now;
  }

  /** How many keys are remembered now (running or finished). */
  get size(): number {
    return this.#entries.size;
  }

  /** The run of `key`, running or finished, if it is remembered and was a run of tool `name`. */
  find(key: string, name: string): KeyedRun | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (this.#expired(entry)) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry.name === name ? entry : undefined;
  }

  /**
   * Records that `key`'s handler starts (replacing whatever the key named
   * before). Returns where the run reports its progress and, once, its end.
   */
  start(key: string, name: string, abort: (why: AbortWhy) => void): RunReporter {
    let settle!: (end: RunEnd) => void;
    const done = new Promise<RunEnd>((resolve) => {
      settle = resolve;
    });
    const followers = new Set<(report: ProgressReport) => void>();
    const follow = (listener: (report: ProgressReport) => void): (() => void) => {
      followers.add(listener);
      return () => followers.delete(listener);
    };
    const entry: Entry = { name, done, replay: undefined, finishedAt: undefined, abort, followers, follow };
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    this.#prune();
    return {
      progress: (report) => {
        // A follower that fails (its socket gone) costs neither the others nor the run's own report.
        for (const listener of [...followers]) {
          try {
            listener(report);
          } catch {
            followers.delete(listener);
          }
        }
      },
      end: (end) => {
        entry.abort = undefined;
        followers.clear();
        if (typeof end === 'string' || end.outcome === 'timeout') {
          // Nothing worth repeating: the next request under this key runs the handler again.
          if (this.#entries.get(key) === entry) this.#entries.delete(key);
        } else {
          entry.replay = end;
          entry.finishedAt = this.#now();
        }
        settle(end);
      },
    };
  }

  /** Stops every run still going (the client is closing); what they were is forgotten. */
  abortAll(why: AbortWhy): void {
    for (const entry of [...this.#entries.values()]) entry.abort?.(why);
  }

  #expired(entry: Entry): boolean {
    return entry.finishedAt !== undefined && this.#now() - entry.finishedAt >= this.#ttlMs;
  }

  /** Drops expired keys, then the oldest arrivals beyond the cap. */
  #prune(): void {
    for (const [key, entry] of this.#entries) if (this.#expired(entry)) this.#entries.delete(key);
    for (const key of this.#entries.keys()) {
      if (this.#entries.size <= this.#maxKeys) break;
      this.#entries.delete(key);
    }
  }
}
