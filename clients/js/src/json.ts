/**
 * JSON value types. Everything that crosses the socket is one of these, so
 * tool arguments, results and context are typed as JSON rather than `any`.
 */

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | JsonObject;

/** A JSON object. */
export interface JsonObject {
  [key: string]: Json;
}

/** Whether `value` is a plain JSON object (not an array, not null). */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const encoder = new TextEncoder();

/**
 * UTF-8 length of a string. The edge's ceilings count bytes on the wire, not
 * UTF-16 code units, so every size check goes through this.
 */
export function utf8Bytes(text: string): number {
  return encoder.encode(text).length;
}
