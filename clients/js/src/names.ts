/**
 * The names the model sees. The edge renames every declared tool to
 * `client__` + a slug (docs/PROTOCOL.md, "Names"); this is the same
 * transform, so an application can show or log the name a model will use,
 * and an unavailable-tool answer can list names the model can actually call.
 * The edge stays the authority: it assigns names over the tools its caps
 * kept, so a dropped tool can shift a collision suffix.
 */

const PREFIX = 'client__';
const MAX_LEN = 64;
const MAX_SLUG_LEN = MAX_LEN - PREFIX.length;
const RESERVED = ['client__context', 'client__refresh_tools'];
const FALLBACK_SLUG = 'tool';

const isUpper = (c: string): boolean => c >= 'A' && c <= 'Z';
const isLower = (c: string): boolean => c >= 'a' && c <= 'z';
const isDigit = (c: string): boolean => c >= '0' && c <= '9';
const MARK = /^\p{M}$/u;

function bound(s: string, max: number): string {
  return s.slice(0, max).replace(/_+$/, '');
}

/** The slug of one declared name: camelCase split, other characters to `_`, runs collapsed, ends trimmed, bounded. */
export function slug(original: string): string {
  let out = '';
  let prev: string | undefined;
  const sep = (): void => {
    if (out !== '' && !out.endsWith('_')) out += '_';
  };
  for (const c of original.normalize('NFKD')) {
    if (MARK.test(c)) continue;
    if (isUpper(c) && prev !== undefined && (isLower(prev) || isDigit(prev))) sep();
    if (isUpper(c) || isLower(c) || isDigit(c)) out += c.toLowerCase();
    else sep();
    prev = c;
  }
  out = bound(out, MAX_SLUG_LEN);
  return out === '' ? FALLBACK_SLUG : out;
}

const encoder = new TextEncoder();

/** Byte order of UTF-8 encodings, the order the edge visits names in. */
function byteOrder(a: string, b: string): number {
  const x = encoder.encode(a);
  const y = encoder.encode(b);
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

/**
 * The namespaced name of each declared name, assigned as the edge does:
 * originals in byte order, natural slugs first, then `_2`, `_3`, … for
 * collisions; the reserved meta-tool names count as taken.
 */
export function namespacedNames(originals: Iterable<string>): Map<string, string> {
  const sorted = [...new Set(originals)].sort(byteOrder);
  const taken = new Set(RESERVED);
  const out = new Map<string, string>();
  const collided: string[] = [];
  for (const original of sorted) {
    const name = PREFIX + slug(original);
    if (taken.has(name)) {
      collided.push(original);
    } else {
      taken.add(name);
      out.set(original, name);
    }
  }
  for (const original of collided) {
    const base = slug(original);
    let name = PREFIX + FALLBACK_SLUG;
    for (let n = 2; ; n++) {
      const suffix = `_${n}`;
      const candidate = PREFIX + bound(base, MAX_SLUG_LEN - suffix.length) + suffix;
      if (!taken.has(candidate)) {
        name = candidate;
        break;
      }
    }
    taken.add(name);
    out.set(original, name);
  }
  return out;
}
