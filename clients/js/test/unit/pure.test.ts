/**
 * The pure pieces: backoff, token expiry, names, failures and results,
 * option checks, the catalog digest.
 */

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';

import { backoffDelay, DEFAULT_BACKOFF, resolveBackoff } from '../../dist/backoff.js';
import { canonicalJson, hash64 } from '../../dist/digest.js';
import { classifyEnd } from '../../dist/ending.js';
import { failureOf, ToolError } from '../../dist/errors.js';
import { namespacedNames, slug } from '../../dist/names.js';
import { clientUrl, resolveOptions } from '../../dist/options.js';
import { resultOf } from '../../dist/results.js';
import type { SessionEnd } from '../../dist/session.js';
import { refreshDelay, tokenExpiry } from '../../dist/token.js';
import { withAccessToken } from '../../dist/transport-browser.js';
import { TetherError } from '../../dist/node.js';

function b64url(s: string): string {
  return Buffer.from(s).toString('base64').replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}
function jwt(claims: object): string {
  return `${b64url('{"alg":"HS256","typ":"JWT"}')}.${b64url(JSON.stringify(claims))}.sig`;
}

describe('backoff', () => {
  test('each delay lies in [cap/2, cap], cap doubling from initialMs up to maxMs', () => {
    const o = { ...DEFAULT_BACKOFF, initialMs: 100, maxMs: 1_000 };
    assert.equal(backoffDelay(0, o, () => 0), 50);
    assert.equal(backoffDelay(0, o, () => 1), 100);
    assert.equal(backoffDelay(3, o, () => 0), 400);
    assert.equal(backoffDelay(3, o, () => 1), 800);
    assert.equal(backoffDelay(10, o, () => 1), 1_000);
    assert.equal(backoffDelay(10_000, o, () => 0), 500, 'huge attempt counts stay finite and capped');
    for (let i = 0; i < 200; i++) {
      const d = backoffDelay(2, o);
      assert.ok(d >= 200 && d <= 400, String(d));
    }
  });
  test('nonsense options are refused', () => {
    assert.throws(() => resolveBackoff({ initialMs: 0 }), RangeError);
    assert.throws(() => resolveBackoff({ initialMs: 500, maxMs: 100 }), RangeError);
    assert.throws(() => resolveBackoff({ multiplier: 0.5 }), RangeError);
  });
});

describe('token', () => {
  test('exp is read without verification; anything else gives undefined', () => {
    assert.equal(tokenExpiry(jwt({ sub: 'mira', exp: 1_800_000_000 })), 1_800_000_000_000);
    assert.equal(tokenExpiry(jwt({ sub: 'mira' })), undefined);
    assert.equal(tokenExpiry('opaque-token'), undefined);
    assert.equal(tokenExpiry('a.!!!.c'), undefined);
    assert.equal(tokenExpiry(`x.${b64url('"str"')}.y`), undefined);
    // base64url characters that plain atob would reject must decode
    assert.equal(tokenExpiry(jwt({ sub: '>>>???', exp: 5 })), 5_000);
  });
  test('refresh happens a fifth of the life before expiry, clamped to [1 s, 60 s] and at most half the life', () => {
    const now = 1_000_000;
    assert.equal(refreshDelay(now + 3_600_000, now), 3_540_000);
    assert.equal(refreshDelay(now + 100_000, now), 80_000);
    assert.equal(refreshDelay(now + 5_000, now), 4_000);
    assert.equal(refreshDelay(now + 1_000, now), 500);
    assert.equal(refreshDelay(now - 10, now), 0);
    assert.equal(refreshDelay(now + 10_000, now, 3_000), 7_000);
  });
});

describe('names', () => {
  test('namespaced names match the edge on the shared fixture', () => {
    const fixture = JSON.parse(readFileSync(new URL('../../../../proto-fixtures/declarations/needs-slugging.json', import.meta.url), 'utf8')) as { cases: [string, string][] };
    const got = namespacedNames(fixture.cases.map(([original]) => original));
    for (const [original, expected] of fixture.cases) assert.equal(got.get(original), expected, original);
  });
  test('slug basics', () => {
    assert.equal(slug('getVisibleScreen'), 'get_visible_screen');
    assert.equal(slug('HTTPServer2Go'), 'httpserver2_go');
    assert.equal(slug('café'), 'cafe');
    assert.equal(slug('cafe\u0301'), 'cafe');
  });
});

describe('failures and results', () => {
  test('ToolError and error-like objects keep their code, retryable and retry-after', () => {
    assert.deepEqual(failureOf(new ToolError('user_declined', 'no')), { code: 'user_declined', retryable: false, message: 'no' });
    assert.deepEqual(failureOf(new ToolError('busy', 'wait', { retryable: true, retryAfterMs: 250.4 })), { code: 'busy', retryable: true, retryAfterMs: 250, message: 'wait' });
    assert.deepEqual(failureOf({ code: 'offline', retryable: true, retry_after_ms: 1000, message: 'no network' }), { code: 'offline', retryable: true, retryAfterMs: 1000, message: 'no network' });
    assert.deepEqual(failureOf('just a string'), { code: 'handler_error', retryable: false, message: 'just a string' });
    assert.deepEqual(failureOf(new Error('')), { code: 'handler_error', retryable: false, message: 'Error' });
    assert.equal(failureOf({ code: 42, message: 'numeric code' }).code, 'handler_error');
    assert.ok(failureOf(new Error('x'.repeat(5_000))).message.length <= 1_001);
  });
  test('return values become CallToolResults', () => {
    assert.deepEqual(resultOf(undefined), { content: [] });
    assert.deepEqual(resultOf('hi'), { content: [{ type: 'text', text: 'hi' }] });
    assert.deepEqual(resultOf({ a: 1 }), { content: [{ type: 'text', text: '{"a":1}' }], structuredContent: { a: 1 } });
    assert.deepEqual(resultOf([1, 2]), { content: [{ type: 'text', text: '[1,2]' }] });
    const full = { content: [{ type: 'text', text: 'raw' }], isError: true, structuredContent: { code: 'x', retryable: false } };
    assert.equal(resultOf(full), full);
  });
});

describe('options', () => {
  const ok = { token: 't', info: { name: 'a', version: '1' } };
  test('the client URL gets /v1/client unless it has it; http maps to ws', () => {
    assert.equal(clientUrl('ws://127.0.0.1:7878'), 'ws://127.0.0.1:7878/v1/client');
    assert.equal(clientUrl('ws://127.0.0.1:7878/'), 'ws://127.0.0.1:7878/v1/client');
    assert.equal(clientUrl('wss://edge.example/v1/client'), 'wss://edge.example/v1/client');
    assert.equal(clientUrl('https://edge.example/tether/'), 'wss://edge.example/tether/v1/client');
  });
  test('bad options throw TetherError invalid_options with a sentence', () => {
    const bad = (o: object, re: RegExp): void =>
      assert.throws(() => resolveOptions({ url: 'ws://h:1', ...ok, ...o } as never), (e: unknown) => e instanceof TetherError && e.code === 'invalid_options' && re.test(e.message));
    bad({ url: 'not a url' }, /not a URL/);
    bad({ url: 'ftp://h' }, /ws:\/\//);
    bad({ url: 'ws://h/?access_token=x' }, /not in the url/);
    bad({ getToken: () => 't' }, /exactly one/);
    bad({ token: undefined }, /exactly one/);
    bad({ info: { name: '' } }, /info needs/);
    bad({ limits: { resultBytes: 20_000 } }, /resultBytes/);
    bad({ limits: { answerCeilingMs: -1 } }, /answerCeilingMs/);
    bad({ backoff: { initialMs: 0 } }, /backoff/);
  });
  test('a concept too large for one frame is refused up front', () => {
    assert.throws(
      () => resolveOptions({ url: 'ws://h:1', ...ok, concept: { instructions: 'i'.repeat(16_000) } }),
      (e: unknown) => e instanceof TetherError && e.code === 'concept_too_large',
    );
  });
  test('browsers carry the token in access_token', () => {
    assert.equal(withAccessToken('ws://h:1/v1/client', 'a.b.c'), 'ws://h:1/v1/client?access_token=a.b.c');
  });
});

describe('why a session ended', () => {
  const end = (o: object): SessionEnd => ({ code: 1006, reason: '', why: 'disconnected', wasOnline: false, onlineMs: 0, ...o }) as SessionEnd;
  const expired = jwt({ sub: 'mira', exp: Math.floor(Date.now() / 1000) - 1 });
  const fresh = jwt({ sub: 'mira', exp: Math.floor(Date.now() / 1000) + 3600 });
  const verdict = (e: SessionEnd, fixed: string | undefined): string => {
    const f = classifyEnd(e, fixed);
    return `${f.reason}${f.fatal === undefined ? '' : `!${f.fatal.code}`}`;
  };
  test('only what retrying cannot fix is fatal', () => {
    assert.equal(verdict(end({ httpStatus: 401 }), fresh), 'http_401!unauthenticated');
    assert.equal(verdict(end({ httpStatus: 401 }), undefined), 'http_401', 'getToken may bring a better token');
    assert.equal(verdict(end({ httpStatus: 404 }), undefined), 'http_404!refused');
    assert.equal(verdict(end({ httpStatus: 403 }), undefined), 'http_403!refused');
    assert.equal(verdict(end({ httpStatus: 429 }), fresh), 'http_429');
    assert.equal(verdict(end({ httpStatus: 503 }), fresh), 'http_503');
    assert.equal(verdict(end({ code: 1008 }), expired), 'token_expired!unauthenticated');
    assert.equal(verdict(end({ code: 1008 }), fresh), 'policy');
    assert.equal(verdict(end({ code: 1008 }), undefined), 'policy');
    assert.equal(verdict(end({ code: 1012 }), fresh), 'edge_draining');
    assert.equal(verdict(end({ code: 1001 }), fresh), 'edge_going_away');
    assert.equal(verdict(end({ code: 1006 }), fresh), 'disconnected');
    assert.equal(verdict(end({ why: 'heartbeat_timeout', code: 4000 }), fresh), 'heartbeat_timeout');
    assert.equal(verdict(end({ why: 'transport_unavailable', reason: 'no ws' }), fresh), 'transport_unavailable!transport_unavailable');
  });
});

describe('catalog digest', () => {
  test('canonical JSON sorts keys at every depth and keeps array order', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [3, { z: null, y: 'é' }], c: true } }), '{"a":{"c":true,"d":[3,{"y":"é","z":null}]},"b":1}');
    assert.equal(canonicalJson({ b: 1, a: 2 }), canonicalJson({ a: 2, b: 1 }));
    assert.notEqual(canonicalJson([1, 2]), canonicalJson([2, 1]));
  });

  test('hash64 is 16 hex digits, the same for the same text, different for a one-character change', () => {
    const text = JSON.stringify({ tools: [{ name: 'a' }], context: null });
    assert.match(hash64(text), /^[0-9a-f]{16}$/);
    assert.equal(hash64(text), hash64(`${text}`));
    assert.match(hash64(''), /^[0-9a-f]{16}$/);
    const edits = new Set<string>([text]);
    for (let i = 0; i < text.length; i++) {
      for (const ch of ['x', 'é', '\u{1F600}']) edits.add(text.slice(0, i) + ch + text.slice(i + 1));
    }
    assert.equal(new Set([...edits].map(hash64)).size, edits.size, 'every edit gives its own digest');
  });
});
