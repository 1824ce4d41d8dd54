/**
 * The example page in headless Chromium (Debian's, driven by playwright-core;
 * no browser is downloaded). The page is a device: it declares tools with the
 * SDK's browser build loaded as plain ES modules; the test plays the agent
 * backend through a real edge and reads the DOM.
 */

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { chromium, type Browser, type Page } from 'playwright-core';

import { rpcError, type CallResponse } from '../helpers/backend.js';
import { Fixture } from '../helpers/fixture.js';

const EXAMPLE = resolve(fileURLToPath(import.meta.url), '../../../../../examples/browser');
const CHROMIUM = process.env['CHROMIUM'] ?? '/usr/bin/chromium';

interface StaticServer {
  url: string;
  close(): Promise<void>;
}
type ServeModule = { startServer(o: { port: number; host: string }): Promise<StaticServer> };

/** The edge's view of a task (`_meta["tether.dev/task"]`, `tasks/get`, `tasks/cancel`, `notifications/tasks/status`). */
interface TaskState {
  task: string;
  session: string;
  tool: string;
  status: 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';
  status_message?: string;
  age_ms: number;
  ttl_ms: number;
  poll_interval_ms: number;
}

describe('browser example page', () => {
  let fx: Fixture;
  let server: StaticServer;
  let browser: Browser;
  let page: Page;
  let session: string;
  const pageErrors: string[] = [];

  before(async () => {
    fx = await Fixture.start();
    const serve = (await import(pathToFileURL(join(EXAMPLE, 'serve.mjs')).href)) as ServeModule;
    server = await serve.startServer({ port: 0, host: '127.0.0.1' });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => pageErrors.push(e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') pageErrors.push(m.text());
    });
    const query = new URLSearchParams({ edge: fx.edge.url, token: fx.userToken() });
    await page.goto(`${server.url}/?${query}`);
  });
  after(async () => {
    await browser?.close();
    await server?.close();
    await fx?.dispose();
  });

  test('the page connects, shows it is online and lists its tools under the names the model sees', async () => {
    await page.waitForSelector('#state[data-state="online"]', { timeout: 10_000 });
    session = (await page.textContent('#session')) ?? '';
    assert.match(session, /^[0-9a-f-]{36}$/);
    assert.doesNotMatch(page.url(), /token=/, 'the token is taken out of the address bar');
    await fx.backend.waitForSession(session);
    const m = await fx.backend.tools(session);
    const names = m.tools.map((t) => t.name).sort();
    assert.deepEqual(names, ['client__get_visible_screen', 'client__open_product', 'client__search_products']);
    const shown = await page.$$eval('#tools li', (lis) => lis.map((li) => li.getAttribute('data-tool')));
    assert.deepEqual([...shown].sort(), names);
    assert.equal(m.concept?.['app'], 'Outdoor shop (web)');
    assert.deepEqual(m.context, { pointer: { screen: 'catalog' }, snapshot: { products: 4 } });
  });

  test('calls from the backend run in the page and each one appears in the log with its outcome and latency', async () => {
    const r = await fx.call(session, 'client__search_products', { query: 'shoe' });
    assert.deepEqual(r.result.structuredContent, { products: [{ id: 'P-1', name: 'Trail running shoes', price: 89, stock: 4 }] });
    const row = page.locator('#calls tr[data-tool="searchProducts"]');
    await row.locator('[data-outcome="ok"]').waitFor({ timeout: 5_000 });
    assert.match((await row.locator('.latency').textContent()) ?? '', /^\d+ ms$/);
    assert.match((await row.locator('.args').textContent()) ?? '', /"query":"shoe"/);

    const failed = await fx.call(session, 'client__open_product', { productId: 'P-404' });
    assert.deepEqual(failed.result.structuredContent, { code: 'not_found', retryable: false });
    await page.locator('#calls tr[data-tool="openProduct"] .outcome', { hasText: 'error: not_found' }).waitFor({ timeout: 5_000 });
  });

  test('the agent navigates through a tool: the result brings the new manifest', async () => {
    const r = await fx.call(session, 'client__open_product', { productId: 'P-2' }, { bound_seq: 1 });
    assert.deepEqual(r.manifest?.tools.map((t) => t.name).sort(), ['client__add_to_cart', 'client__get_visible_screen']);
    const add = await fx.call(session, 'client__add_to_cart', { quantity: 1 });
    assert.deepEqual(add.result.structuredContent, { code: 'out_of_stock', retryable: false });
  });

  test('the user navigates mid-turn: the manifest changes and a call to the tool that left gets tool_unavailable listing what is there now', async () => {
    const before = (await fx.backend.tools(session)).seq;
    await page.click('nav button[data-screen="cart"]');
    await fx.backend.notification('notifications/tools/list_changed', (p) => p['session'] === session && Number(p['seq']) > before, 5_000);
    await page.locator('#tools li[data-tool="client__confirm_checkout"]').waitFor({ timeout: 5_000 });
    const err = await rpcError(fx.call(session, 'client__add_to_cart', { quantity: 1 }));
    assert.equal(err.kind, 'tool_unavailable');
    assert.deepEqual([...(err.data['available'] as string[])].sort(), ['client__confirm_checkout', 'client__get_cart', 'client__get_visible_screen', 'client__hold_for_pickup']);
  });

  test('a screenshot of the page for the README', async () => {
    const out = process.env['TETHER_SCREENSHOT'] ?? join(mkdtempSync(join(tmpdir(), 'tether-shot-')), 'screenshot.png');
    await fx.call(session, 'client__get_cart');
    await page.locator('#calls tr[data-tool="getCart"][data-outcome="ok"]').waitFor({ timeout: 5_000 });
    await page.screenshot({ path: out, fullPage: true });
    const png = readFileSync(out);
    assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG file');
    assert.ok(png.length > 10_000, `screenshot is ${png.length} bytes`);
  });

  /** Polls where an approval stands until the shopper has answered. */
  async function decided(approval: string): Promise<string> {
    for (let i = 0; i < 100; i++) {
      const d = await fx.backend.request<{ state: string }>('approvals/decide', {
        session, approval, _meta: { credential: fx.userToken() },
      });
      if (d.state !== 'pending') return d.state;
      await new Promise((r) => setTimeout(r, 50));
    }
    return 'pending';
  }

  for (const [button, state] of [['#confirm-yes', 'granted'], ['#confirm-no', 'declined']] as const) {
    test(`placing the order asks the shopper on the page first; clicking ${button} ${state === 'granted' ? 'runs it once' : 'runs nothing'}`, async () => {
      const asked = await rpcError(fx.call(session, 'client__confirm_checkout'));
      assert.equal(asked.kind, 'approval_required');
      assert.equal(asked.data['asked'], 'device');
      const approval = asked.data['approval'] as string;
      await page.locator('#confirm:not([hidden])').waitFor({ timeout: 5_000 });
      assert.match((await page.textContent('#confirm-text')) ?? '', /Place the order for/);
      await page.click(button);
      assert.equal(await decided(approval), state);
      const meta = { 'tether.dev/approval': approval };
      if (state === 'granted') {
        const done = await fx.call(session, 'client__confirm_checkout', {}, meta);
        assert.equal(done.receipt?.approval?.by, 'device');
        await page.locator('#calls tr[data-tool="confirmCheckout"][data-outcome="ok"]').waitFor({ timeout: 5_000 });
        const again = await rpcError(fx.call(session, 'client__confirm_checkout', {}, meta));
        assert.equal(again.kind, 'approval_expired', 'an approval runs its call once');
      } else {
        const refused = await rpcError(fx.call(session, 'client__confirm_checkout', {}, meta));
        assert.equal(refused.kind, 'approval_declined');
      }
    });
  }

  /** A backend request about one task, on behalf of the tab's user. */
  function aboutTask<T>(method: 'tasks/get' | 'tasks/result' | 'tasks/cancel', task: string): Promise<T> {
    return fx.backend.request<T>(method, { session, task, _meta: { credential: fx.userToken() } });
  }

  /** Polls `tasks/get` until the task's state passes `accept`; the last state read otherwise. */
  async function taskUntil(task: string, accept: (s: TaskState) => boolean): Promise<TaskState> {
    let state = await aboutTask<TaskState>('tasks/get', task);
    for (let i = 0; i < 100 && !accept(state); i++) {
      await new Promise((r) => setTimeout(r, 50));
      state = await aboutTask<TaskState>('tasks/get', task);
    }
    return state;
  }

  /** Calls `client__hold_for_pickup` as a task: the call answers at once, with the task in its `_meta`. */
  async function holdForPickup(): Promise<TaskState> {
    const startedAt = Date.now();
    const r = await fx.call(session, 'client__hold_for_pickup', {}, { 'tether.dev/task': {} });
    assert.ok(Date.now() - startedAt < 2_000, 'the call answers with its task, not when a clerk gets to it');
    const task = r.result._meta?.['tether.dev/task'] as TaskState | undefined;
    assert.ok(task !== undefined, `the result carries its task: ${JSON.stringify(r.result)}`);
    assert.deepEqual([task.session, task.tool, task.status], [session, 'client__hold_for_pickup', 'working']);
    assert.match(JSON.stringify(r.result.content), new RegExp(`tasks/result for task ${task.task}`));
    return task;
  }

  test('holding the cart for pickup runs as a task: the page shows it pending, the task reads working, and the clerk\'s click completes it', async () => {
    const declared = (await fx.backend.tools(session)).tools.find((t) => t.name === 'client__hold_for_pickup') as { execution?: unknown } | undefined;
    assert.deepEqual(declared?.execution, { taskSupport: 'required' });

    const task = await holdForPickup();
    await page.locator('#pickup:not([hidden])').waitFor({ timeout: 5_000 });
    assert.match((await page.textContent('#pickup-text')) ?? '', /for pickup/);
    const row = page.locator(`#calls tr[data-tool="holdForPickup"][data-task]`).first();
    assert.equal(await row.getAttribute('data-outcome'), 'running', 'the call has answered, the task runs on');

    // The line the page says the instant the task begins: not lost to the edge filing the task.
    const working = await taskUntil(task.task, (s) => s.status_message !== undefined);
    assert.deepEqual([working.status, working.status_message], ['working', 'waiting for a clerk']);

    const outcome = aboutTask<CallResponse>('tasks/result', task.task);
    await page.click('#pickup-ready');
    const { result } = await outcome;
    assert.match(String(result.structuredContent?.['pickupCode']), /^PU-\d{4}$/);
    assert.deepEqual(result.structuredContent?.['items'], []);
    assert.notEqual(result.isError, true);
    await page.locator('#pickup').waitFor({ state: 'hidden', timeout: 5_000 });
    await page.locator(`#calls tr[data-tool="holdForPickup"][data-outcome="ok"]`).waitFor({ timeout: 5_000 });

    assert.equal((await taskUntil(task.task, (s) => s.status !== 'working')).status, 'completed');
    await fx.backend.notification('notifications/tasks/status', (p) => p['task'] === task.task && p['status'] === 'completed', 5_000);
  });

  test('a pickup task the backend cancels leaves the page at once and has no result', async () => {
    const task = await holdForPickup();
    await page.locator('#pickup:not([hidden])').waitFor({ timeout: 5_000 });
    const waiting = rpcError(aboutTask('tasks/result', task.task));

    const cancelled = await aboutTask<TaskState>('tasks/cancel', task.task);
    assert.equal(cancelled.status, 'cancelled');
    await page.locator('#pickup').waitFor({ state: 'hidden', timeout: 5_000 });
    await page.locator(`#calls tr[data-tool="holdForPickup"][data-outcome="cancelled"]`).waitFor({ timeout: 5_000 });

    for (const err of [await waiting, await rpcError(aboutTask('tasks/result', task.task))]) {
      assert.equal(err.data['status'], 'cancelled', `${err.kind}: ${err.message}`);
      assert.match(err.message, /cancelled; it has no result/);
    }
    assert.equal((await aboutTask<TaskState>('tasks/get', task.task)).status, 'cancelled');
    const again = await rpcError(aboutTask('tasks/cancel', task.task));
    assert.equal(again.kind, 'invalid_params', 'cancelled is final');
  });

  test('closing the tab while the shopper is being asked ends the session at once', async () => {
    const asked = await rpcError(fx.call(session, 'client__confirm_checkout'));
    assert.equal(asked.kind, 'approval_required');
    await page.locator('#confirm:not([hidden])').waitFor({ timeout: 5_000 });
    const closedAt = Date.now();
    await page.close();
    await fx.backend.notification('notifications/session/closed', (p) => p['session'] === session, 3_000);
    assert.ok(Date.now() - closedAt < 3_000, 'the latch, not a timeout, ended it');
    const err = await rpcError(fx.call(session, 'client__confirm_checkout', {}, { 'tether.dev/approval': asked.data['approval'] as string }));
    assert.equal(err.kind, 'channel_closed', 'a call to the closed tab fails at once');
  });

  test('the page raised no errors', () => {
    assert.deepEqual(pageErrors, []);
  });
});
