/**
 * The catalog: the tools and context the client declares now, under a seq
 * that moves every time either changes, cut into `tools/list` pages that each
 * fit one frame.
 *
 * The edge reads a catalog page by page while the application may navigate in
 * between, so every seq keeps its own pages (the last few seqs are kept): a
 * cursor names the seq it belongs to, and a read that began on seq 4 finishes
 * on seq 4. The edge applies seq 4, then re-reads for the newer seq the
 * `list_changed` already announced.
 *
 * Beside each seq rides its digest (digest.ts), computed once per change: the
 * edge told of a seq whose digest it already applied re-stamps, not re-reads.
 */

import { catalogDigest } from './digest.js';
import { TetherError, type TetherErrorCode } from './errors.js';
import { isJsonObject, utf8Bytes, type JsonObject } from './json.js';
import { Meta } from './jsonrpc.js';
import { complete } from './revision.js';
import type { AnyTool, AppContext, Limits } from './types.js';

/** How many past seqs keep their pages for reads still in progress. */
const KEPT_SNAPSHOTS = 4;
/** Room reserved in a page's envelope for the request id and the cursor. */
const ID_ALLOWANCE = 40;
const CURSOR_ALLOWANCE = 40;

/** What names one catalog on the wire: its seq and, beside it, its digest. */
export interface Stamp {
  readonly seq: number;
  readonly digest: string;
}

/** The `_meta` entries for `stamp`. */
export function stampMeta(stamp: Stamp): JsonObject {
  return { [Meta.seq]: stamp.seq, [Meta.digest]: stamp.digest };
}

interface Snapshot {
  stamp: Stamp;
  pages: JsonObject[][];
  context: JsonObject | undefined;
}

/** A `tools/list` answer, or why the request cannot be answered. */
export type PageAnswer = { ok: true; result: JsonObject } | { ok: false; message: string };

/** Copies a value through JSON, so what is measured is exactly what is sent. */
function asJson(value: unknown, what: string, code: TetherErrorCode): JsonObject {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new TetherError(code, `${what} is not JSON-serializable: ${(err as Error).message}`);
  }
  const parsed: unknown = text === undefined ? undefined : JSON.parse(text);
  if (!isJsonObject(parsed)) throw new TetherError(code, `${what} must be a JSON object`);
  return parsed;
}

/** The wire declaration of a tool (everything but the handler), validated. */
export function declarationOf(tool: AnyTool, limits: Limits): JsonObject {
  if (typeof tool !== 'object' || tool === null) throw new TetherError('invalid_tool', `each tool must be an object (got ${String(tool)})`);
  const label = typeof tool.name === 'string' ? `tool "${tool.name}"` : 'a tool';
  if (typeof tool.name !== 'string' || tool.name === '') throw new TetherError('invalid_tool', `${label} needs a non-empty name`);
  if (typeof tool.description !== 'string' || tool.description === '') {
    throw new TetherError('invalid_tool', `${label} needs a description: the model chooses tools by it`);
  }
  if (typeof tool.handler !== 'function') throw new TetherError('invalid_tool', `${label} needs a handler function`);
  if (!isJsonObject(tool.inputSchema)) throw new TetherError('invalid_tool', `${label}: inputSchema must be a JSON Schema object`);
  if (tool.inputSchema['type'] !== undefined && tool.inputSchema['type'] !== 'object') {
    throw new TetherError('invalid_tool', `${label}: inputSchema must describe an object (type "object"), as MCP requires`);
  }
  if (tool.outputSchema !== undefined && !isJsonObject(tool.outputSchema)) {
    throw new TetherError('invalid_tool', `${label}: outputSchema must be a JSON Schema object`);
  }
  const task: unknown = tool.task;
  if (task !== undefined && task !== 'optional' && task !== 'required') {
    throw new TetherError('invalid_tool', `${label}: task must be "optional" or "required" (got ${JSON.stringify(task)}); leave it out for a tool that only runs inline`);
  }
  const decl = asJson(
    {
      name: tool.name,
      title: tool.title,
      description: tool.description,
      inputSchema: tool.inputSchema,
      outputSchema: tool.outputSchema,
      annotations: tool.annotations,
      // MCP 2025-11-25: absent means forbidden, so a tool without `task` declares nothing.
      execution: task === undefined ? undefined : { taskSupport: task },
    },
    label,
    'invalid_tool',
  );
  const bytes = utf8Bytes(JSON.stringify(decl));
  if (bytes > limits.declarationBytes) {
    throw new TetherError(
      'invalid_tool',
      `${label} declares ${bytes} bytes; the edge drops declarations over ${limits.declarationBytes} bytes (limits.declarationBytes). Shorten its description or schemas.`,
    );
  }
  return decl;
}

/**
 * Bytes of a page frame around its tools, with room for any id and cursor,
 * and for the fields a 2026-07-28 session adds (`resultType`, `ttlMs`,
 * `cacheScope`: see revision.ts), so one set of pages serves either revision.
 */
function envelopeBytes(stamp: Stamp, context: JsonObject | undefined): number {
  const meta = stampMeta(stamp);
  if (context !== undefined) meta[Meta.context] = context;
  const result = complete({ tools: [], nextCursor: 'c'.repeat(CURSOR_ALLOWANCE), _meta: meta }, true);
  const frame = { jsonrpc: '2.0', id: 'i'.repeat(ID_ALLOWANCE), result };
  return utf8Bytes(JSON.stringify(frame));
}

/**
 * Packs declarations into pages, in declaration order, each page's frame at
 * most `frameBytes`. The context rides on the first page only (the edge keeps
 * the first context it reads), so later pages have room for more tools.
 */
function paginate(decls: JsonObject[], stamp: Stamp, context: JsonObject | undefined, frameBytes: number): JsonObject[][] {
  const firstRoom = frameBytes - envelopeBytes(stamp, context);
  const laterRoom = frameBytes - envelopeBytes(stamp, undefined);
  if (firstRoom < 2) {
    throw new TetherError('invalid_context', `the context leaves no room for tools in a ${frameBytes}-byte frame; send a smaller snapshot`);
  }
  const pages: JsonObject[][] = [[]];
  let used = 0;
  for (const decl of decls) {
    const bytes = utf8Bytes(JSON.stringify(decl));
    let page = pages[pages.length - 1] ?? [];
    let room = pages.length === 1 ? firstRoom : laterRoom;
    const needed = page.length === 0 ? bytes : bytes + 1;
    if (used + needed > room && page.length > 0) {
      page = [];
      pages.push(page);
      used = 0;
      room = laterRoom;
    }
    if (page.length === 0 && bytes > room) {
      const why = pages.length === 1 ? ' beside the context' : '';
      throw new TetherError(
        pages.length === 1 ? 'invalid_context' : 'invalid_tool',
        `tool "${String(decl['name'])}" (${bytes} bytes) does not fit a ${frameBytes}-byte frame${why}`,
      );
    }
    used += page.length === 0 ? bytes : bytes + 1;
    page.push(decl);
  }
  return pages;
}

export class Catalog {
  readonly #limits: Limits;
  #stamp: Stamp;
  #tools = new Map<string, AnyTool>();
  #context: AppContext | undefined;
  #hasTasks = false;
  readonly #snapshots = new Map<number, Snapshot>();

  constructor(tools: readonly AnyTool[], context: AppContext | undefined, limits: Limits, seq = 1) {
    this.#limits = limits;
    this.#stamp = { seq: seq - 1, digest: '' };
    this.update({ tools, context });
  }

  /** The current seq. */
  get seq(): number {
    return this.#stamp.seq;
  }

  /** The current seq and digest, to stamp on what the client sends. */
  get stamp(): Stamp {
    return this.#stamp;
  }

  /** The current context. */
  get context(): AppContext | undefined {
    return this.#context;
  }

  /** The tool with this device-side name in the current catalog. */
  tool(name: string): AnyTool | undefined {
    return this.#tools.get(name);
  }

  /** Whether a tool of the current catalog may run as a task (the handshake then declares `capabilities.tasks`). */
  get hasTasks(): boolean {
    return this.#hasTasks;
  }

  /** The device-side names in the current catalog, in declaration order. */
  names(): string[] {
    return [...this.#tools.keys()];
  }

  /**
   * Replaces the tools and/or the context and moves the seq. Validates first:
   * on a throw nothing changed.
   */
  update(change: { tools?: readonly AnyTool[] | undefined; context?: AppContext | undefined }): number {
    const tools = change.tools ?? [...this.#tools.values()];
    const context = 'context' in change ? change.context : this.#context;
    if (!Array.isArray(tools)) throw new TetherError('invalid_tool', 'tools must be an array');
    const byName = new Map<string, AnyTool>();
    const decls: JsonObject[] = [];
    for (const tool of tools) {
      const decl = declarationOf(tool, this.#limits);
      if (byName.has(tool.name)) throw new TetherError('invalid_tool', `two tools are named "${tool.name}"; names must be unique`);
      byName.set(tool.name, tool);
      decls.push(decl);
    }
    let contextJson: JsonObject | undefined;
    if (context !== undefined) contextJson = asJson(context, 'the context', 'invalid_context');
    const seq = this.#stamp.seq + 1;
    const stamp: Stamp = { seq, digest: catalogDigest(decls, contextJson) };
    const pages = paginate(decls, stamp, contextJson, this.#limits.frameBytes);
    this.#stamp = stamp;
    this.#tools = byName;
    this.#hasTasks = [...byName.values()].some((t) => t.task !== undefined);
    this.#context = context;
    this.#snapshots.set(seq, { stamp, pages, context: contextJson });
    for (const old of this.#snapshots.keys()) {
      if (old <= seq - KEPT_SNAPSHOTS) this.#snapshots.delete(old);
    }
    return seq;
  }

  /**
   * The `tools/list` result for `cursor` (absent: the first page of the
   * current seq). Cursors are `seq:page`.
   */
  page(cursor: string | undefined): PageAnswer {
    let seq = this.#stamp.seq;
    let index = 0;
    if (cursor !== undefined) {
      const m = /^(\d+):(\d+)$/.exec(cursor);
      if (m === null) return { ok: false, message: `unknown cursor ${JSON.stringify(cursor)}` };
      seq = Number(m[1]);
      index = Number(m[2]);
    }
    const snap = this.#snapshots.get(seq);
    const page = snap?.pages[index];
    if (snap === undefined || page === undefined) {
      return { ok: false, message: `cursor ${JSON.stringify(cursor)} is no longer valid; list again from the start` };
    }
    const meta = stampMeta(snap.stamp);
    if (index === 0 && snap.context !== undefined) meta[Meta.context] = snap.context;
    const result: JsonObject = { tools: page };
    if (index + 1 < snap.pages.length) result['nextCursor'] = `${snap.stamp.seq}:${index + 1}`;
    result['_meta'] = meta;
    return { ok: true, result };
  }
}
