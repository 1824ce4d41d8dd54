/**
 * The catalog: validation, seq, and pages that each fit one frame, with a
 * read in progress surviving a navigation.
 */

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Catalog } from '../../dist/catalog.js';
import { DEFAULT_LIMITS } from '../../dist/options.js';
import { complete } from '../../dist/revision.js';
import { TetherError, type Tool } from '../../dist/node.js';

function tool(name: string, descriptionChars = 20): Tool {
  return { name, description: 'd'.repeat(descriptionChars), inputSchema: { type: 'object' }, handler: () => 'ok' };
}
const frameBytes = (result: object, id = 18_446_744_073_709_551_615n): number =>
  Buffer.byteLength(`{"jsonrpc":"2.0","id":${id},"result":${JSON.stringify(result)}}`);

describe('catalog', () => {
  test('a small catalog is one page with the seq and the context', () => {
    const c = new Catalog([tool('a'), tool('b')], { pointer: { screen: 'home' } }, DEFAULT_LIMITS);
    const p = c.page(undefined);
    assert.ok(p.ok);
    assert.deepEqual(p.result, {
      tools: [
        { name: 'a', description: 'dddddddddddddddddddd', inputSchema: { type: 'object' } },
        { name: 'b', description: 'dddddddddddddddddddd', inputSchema: { type: 'object' } },
      ],
      _meta: { 'tether.dev/seq': 1, 'tether.dev/digest': c.stamp.digest, 'tether.dev/context': { pointer: { screen: 'home' } } },
    });
  });

  test('a large catalog is cut into pages that each fit the frame ceiling, in order, context on the first only', () => {
    const tools = Array.from({ length: 32 }, (_, i) => tool(`tool${i}`, 1_800));
    const c = new Catalog(tools, { pointer: 'p', snapshot: 's'.repeat(3_000) }, DEFAULT_LIMITS);
    const names: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const p = c.page(cursor);
      assert.ok(p.ok, p.ok ? '' : p.message);
      pages += 1;
      assert.ok(frameBytes(p.result) <= DEFAULT_LIMITS.frameBytes, `page ${pages} is ${frameBytes(p.result)} bytes`);
      const modern = frameBytes(complete(p.result, true));
      assert.ok(modern <= DEFAULT_LIMITS.frameBytes, `page ${pages} on a 2026-07-28 session is ${modern} bytes`);
      const meta = p.result['_meta'] as Record<string, unknown>;
      assert.equal(meta['tether.dev/seq'], 1);
      assert.equal('tether.dev/context' in meta, pages === 1);
      for (const t of p.result['tools'] as { name: string }[]) names.push(t.name);
      cursor = p.result['nextCursor'] as string | undefined;
    } while (cursor !== undefined);
    assert.ok(pages >= 4, `${pages} pages`);
    assert.deepEqual(names, tools.map((t) => t.name));
  });

  test('a read that began before a navigation finishes on its own seq', () => {
    const c = new Catalog(Array.from({ length: 20 }, (_, i) => tool(`old${i}`, 1_500)), undefined, DEFAULT_LIMITS);
    const first = c.page(undefined);
    assert.ok(first.ok);
    const cursor = first.result['nextCursor'] as string;
    assert.equal(c.update({ tools: [tool('new')] }), 2);
    const second = c.page(cursor);
    assert.ok(second.ok);
    assert.equal((second.result['_meta'] as Record<string, unknown>)['tether.dev/seq'], 1);
    assert.match((second.result['tools'] as { name: string }[])[0]!.name, /^old/);
    const fresh = c.page(undefined);
    assert.ok(fresh.ok);
    assert.deepEqual((fresh.result['tools'] as { name: string }[]).map((t) => t.name), ['new']);
  });

  test('every page carries the digest beside the seq; the same tools and context at another seq keep it', () => {
    const tools = Array.from({ length: 32 }, (_, i) => tool(`tool${i}`, 1_800));
    const context = { pointer: 'p', snapshot: 's'.repeat(3_000) };
    const c = new Catalog(tools, context, DEFAULT_LIMITS);
    const digest = c.stamp.digest;
    assert.match(digest, /^[0-9a-f]{16}$/);
    const digests = (cursor: string | undefined, seq: number): string[] => {
      const seen: string[] = [];
      do {
        const p = c.page(cursor);
        assert.ok(p.ok, p.ok ? '' : p.message);
        const meta = p.result['_meta'] as Record<string, unknown>;
        assert.equal(meta['tether.dev/seq'], seq);
        seen.push(meta['tether.dev/digest'] as string);
        cursor = p.result['nextCursor'] as string | undefined;
      } while (cursor !== undefined);
      return seen;
    };
    const first = digests(undefined, 1);
    assert.ok(first.length >= 4);
    assert.deepEqual(first, first.map(() => digest), 'every page of seq 1');
    // The app re-declares the same catalog (fresh objects, keys in another order): the seq moves, the digest stays.
    const again = tools.map((t) => ({ handler: () => 'other', inputSchema: { type: 'object' }, description: t.description, name: t.name }) as Tool);
    assert.equal(c.update({ tools: again, context: { snapshot: context.snapshot, pointer: 'p' } }), 2);
    assert.deepEqual(c.stamp, { seq: 2, digest });
    assert.deepEqual(digests(undefined, 2), first);
    assert.equal(new Catalog(tools, context, DEFAULT_LIMITS, 40).stamp.digest, digest, 'a fresh catalog at another seq');
  });

  test('the digest changes whenever a tool or the context changes, and comes back with the catalog', () => {
    const base = [tool('a'), tool('b')];
    const c = new Catalog(base, { pointer: { screen: 'home' } }, DEFAULT_LIMITS);
    const start = c.stamp.digest;
    const seen = new Map<string, string>([[start, 'start']]);
    const changes: [string, Parameters<Catalog['update']>[0]][] = [
      ['a tool added', { tools: [...base, tool('c')] }],
      ['a tool removed', { tools: [tool('a')] }],
      ['tools reordered', { tools: [tool('b'), tool('a')] }],
      ['a tool renamed', { tools: [tool('a'), tool('B')] }],
      ['a description', { tools: [tool('a'), tool('b', 21)] }],
      ['a schema', { tools: [tool('a'), { ...tool('b'), inputSchema: { type: 'object', properties: { x: { type: 'string' } } } }] }],
      ['a title', { tools: [tool('a'), { ...tool('b'), title: 'B' }] }],
      ['annotations', { tools: [tool('a'), { ...tool('b'), annotations: { readOnlyHint: true } }] }],
      ['the context', { tools: base, context: { pointer: { screen: 'cart' } } }],
      ['a context holding the same value as a string', { tools: base, context: { pointer: '{"screen":"home"}' } }],
      ['an empty context', { tools: base, context: {} }],
      ['no context', { tools: base, context: undefined }],
    ];
    for (const [what, change] of changes) {
      c.update(change);
      const d = c.stamp.digest;
      assert.ok(!seen.has(d), `${what}: digest ${d} already seen for ${seen.get(d)}`);
      seen.set(d, what);
      const p = c.page(undefined);
      assert.ok(p.ok);
      assert.equal((p.result['_meta'] as Record<string, unknown>)['tether.dev/digest'], d, `${what}: the page carries it`);
    }
    c.update({ tools: base, context: { pointer: { screen: 'home' } } });
    assert.equal(c.stamp.digest, start, 'back to the first catalog, back to its digest');
  });

  test('unknown and expired cursors are refused', () => {
    const c = new Catalog([tool('a')], undefined, DEFAULT_LIMITS);
    for (let i = 0; i < 5; i++) c.update({ tools: [tool(`t${i}`)] });
    for (const cursor of ['garbage', '1:1', '2:0', '99:0']) {
      const p = c.page(cursor);
      assert.equal(p.ok, false, cursor);
    }
  });

  test('invalid declarations throw invalid_tool and change nothing', () => {
    const c = new Catalog([tool('keep')], undefined, DEFAULT_LIMITS);
    const cases: [unknown, RegExp][] = [
      [null, /must be an object/],
      [{ ...tool('x'), name: '' }, /non-empty name/],
      [{ ...tool('x'), description: '' }, /description/],
      [{ ...tool('x'), handler: undefined }, /handler/],
      [{ ...tool('x'), inputSchema: { type: 'string' } }, /object/],
      [{ ...tool('x'), inputSchema: [] }, /inputSchema/],
      [{ ...tool('x'), inputSchema: { type: 'object', default: 1n } }, /not JSON-serializable/],
      [tool('x', 2_100), /2048/],
    ];
    for (const [bad, re] of cases) {
      assert.throws(() => c.update({ tools: [bad as Tool] }), (e: unknown) => e instanceof TetherError && e.code === 'invalid_tool' && re.test(e.message), String(re));
    }
    assert.equal(c.seq, 1);
    assert.deepEqual(c.names(), ['keep']);
  });

  test('a context that leaves no room for a tool is refused', () => {
    const c = new Catalog([tool('a', 1_900)], undefined, DEFAULT_LIMITS);
    assert.throws(
      () => c.update({ context: { snapshot: 'x'.repeat(14_000) } }),
      (e: unknown) => e instanceof TetherError && e.code === 'invalid_context',
    );
    assert.equal(c.seq, 1);
  });
});
