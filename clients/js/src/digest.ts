/**
 * The catalog digest (`_meta["tether.dev/digest"]`): an opaque string the
 * client stamps beside its seq, derived from the tools and context at that
 * seq. When a seq moves under the digest the edge already applied (the app
 * re-declared the same catalog), the edge re-stamps its manifest instead of
 * re-reading it. So the digest must change whenever the declarations or the
 * context do; it need not resist an adversary (the device vouches for its
 * own catalog), so a fast 64-bit non-cryptographic hash serves, computed
 * synchronously once per catalog change, never per call.
 */

import type { Json } from './json.js';

/**
 * JSON text with object keys sorted at every depth, so the same value gives
 * the same text however its objects were built. Arrays keep their order
 * (the order of declared tools is part of the catalog).
 */
export function canonicalJson(value: Json): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k] as Json)}`).join(',')}}`;
}

/**
 * A 64-bit hash of `text` as 16 hex digits: two 32-bit multiply-xor lanes
 * over its UTF-16 code units, cross-mixed at the end (cyrb53's construction,
 * all 64 bits kept). Not cryptographic.
 */
export function hash64(text: string): string {
  let h1 = 0xdeadbeef ^ text.length;
  let h2 = 0x41c6ce57 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (h2 >>> 0).toString(16).padStart(8, '0') + (h1 >>> 0).toString(16).padStart(8, '0');
}

/** The digest of a catalog: its wire declarations, in order, and its context (absent: null). */
export function catalogDigest(declarations: readonly Json[], context: Json | undefined): string {
  return hash64(canonicalJson({ tools: [...declarations], context: context ?? null }));
}
