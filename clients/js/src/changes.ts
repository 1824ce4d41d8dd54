/**
 * How one session tells the edge the catalog moved: the
 * `notifications/tools/list_changed` params, and when they may be sent.
 *
 * On 2025-11-25 a change goes out at once. On 2026-07-28 a notification
 * belongs to a `subscriptions/listen` stream, which the edge opens only after
 * its first catalog read; a change before that is held (later ones coalesce
 * into it) and released when the stream opens, unless the edge's read
 * already saw it. Kept apart from the session so this bookkeeping is testable
 * and the session stays about frames.
 */

import { stampMeta, type Stamp } from './catalog.js';
import type { JsonObject } from './json.js';
import type { Id } from './jsonrpc.js';
import { listenedFor, ModernMeta } from './revision.js';

export class Changes {
  #listenId: Id | undefined;
  #held = false;
  #servedSeq = 0;

  /** The edge finished reading the catalog at `seq` (the last page of a read). */
  served(seq: number): void {
    this.#servedSeq = seq;
  }

  /**
   * The catalog moved to `stamp` (its seq and digest): the params to send
   * now, or undefined when the change must wait for a listen stream
   * (`needsStream`: a 2026-07-28 session).
   */
  changed(stamp: Stamp, needsStream: boolean): JsonObject | undefined {
    if (needsStream && this.#listenId === undefined) {
      this.#held = true;
      return undefined;
    }
    const meta = stampMeta(stamp);
    if (this.#listenId !== undefined) meta[ModernMeta.subscriptionId] = this.#listenId;
    return { _meta: meta };
  }

  /**
   * The edge opened a listen stream (request `id`): the acknowledgement's
   * params, and the held change to send on it now, if the catalog (at
   * `stamp`) is newer than what the edge last read.
   */
  listen(id: Id, params: JsonObject, stamp: Stamp): { ack: JsonObject; release: JsonObject | undefined } {
    const wanted = listenedFor(params);
    const ack: JsonObject = {
      _meta: { [ModernMeta.subscriptionId]: id },
      notifications: wanted.toolsListChanged ? { toolsListChanged: true } : {},
    };
    if (!wanted.toolsListChanged) return { ack, release: undefined };
    this.#listenId = id;
    const held = this.#held;
    this.#held = false;
    return { ack, release: held && stamp.seq > this.#servedSeq ? this.changed(stamp, true) : undefined };
  }
}
