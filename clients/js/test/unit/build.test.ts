/**
 * The browser build loads as plain ES modules with no bundler: every module
 * reachable from dist/browser.js imports only relative paths (no `ws`, no
 * `node:` builtins), and no public declaration mentions `ws`.
 */

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { test } from 'node:test';

const dist = new URL('../../dist/', import.meta.url);
const IMPORT = /(?:\bfrom\s*|\bimport\s*\(?\s*)['"]([^'"]+)['"]/g;

test('everything the browser entry reaches is relative imports only', () => {
  const seen = new Set<string>();
  const queue = ['browser.js'];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const text = readFileSync(new URL(file, dist), 'utf8');
    for (const m of text.matchAll(IMPORT)) {
      const spec = m[1]!;
      assert.ok(spec.startsWith('./'), `${file} imports ${spec}: the browser build must not need a bundler`);
      queue.push(spec.slice(2));
    }
  }
  assert.ok(seen.has('client.js') && seen.has('transport-browser.js'));
  assert.ok(!seen.has('transport-node.js'), 'the Node transport is not in the browser graph');
});

test('public declarations do not depend on ws or Node types', () => {
  for (const f of readdirSync(dist).filter((n) => n.endsWith('.d.ts'))) {
    const text = readFileSync(new URL(f, dist), 'utf8');
    assert.doesNotMatch(text, /from ['"]ws['"]|NodeJS\.|reference types="node"/, f);
  }
});
