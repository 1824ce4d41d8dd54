/**
 * One connection to the edge, from dial to close: the device side of the
 * client link. The edge is the MCP client here and this is the MCP server:
 * it answers `initialize` or `server/discover` (whichever revision the edge
 * starts, see revision.ts), `tools/list`, `tools/call` and `ping`, announces
 * catalog changes with `notifications/tools/list_changed` (on 2026-07-28, on
 * the edge's `subscriptions/listen` stream), and stops a call when the edge
 * sends `notifications/cancelled`. With an `onApproval` hook it also answers
 * `tether.dev/approve`, the edge asking the device's user about a write
 * (approval.ts). A tool declared with `task` may be called as an MCP task
 * (tasks.ts): answered at once with the task, followed with `tasks/get`,
 * `tasks/result` and `tasks/cancel`.
 *
 * A `Session` never reconnects; the client makes a new one. That keeps every
 * per-connection thing (calls in flight, heartbeats, the edge's session id)
 * in one object that dies with its socket. What outlives a socket belongs to
 * the client: the resume token it hands over at its end, the keyed calls
 * (keyed.ts) that keep running through a transport loss, since the edge
 * delivers them again on the resumed session, and the tasks, which outlive
 * any socket.
 */

import { approvalRequestOf, PendingApproval } from './approval.js';
import { RunningCall, type CallRequest, type ProgressToken } from './call.js';
import { stampMeta, type Catalog } from './catalog.js';
import { lostTransport } from './ending.js';
import { TetherError, type AbortWhy } from './errors.js';
import { isJsonObject, utf8Bytes, type Json, type JsonObject } from './json.js';
import * as rpc from './jsonrpc.js';
import { Meta, Method } from './jsonrpc.js';
import { namespacedNames } from './names.js';
import { failureResult, invalidResult, resultOf, timeoutResult, tooLargeResult, unavailableResult } from './results.js';
import { Changes } from './changes.js';
import type { KeyedCalls, KeyedRun, Replay, RunEnd, RunReporter } from './keyed.js';
import { complete, DEFAULT_PROTOCOL_VERSION, MODERN, ModernMeta, ModernMethod } from './revision.js';
import { MAX_TASKS, ttlOf, type Task, type Tasks } from './tasks.js';
import { traceOf } from './trace.js';
import type { CloseInfo, Dial, Socket } from './transport.js';
import type { AnyTool, ApprovalHook, CallEnd, CallOutcome, CallStart, CallToolResult, HeartbeatOptions, Limits, ManifestReport, ProtocolVersion } from './types.js';

/** Close code the client uses when it gives up on a link it believes dead (browsers allow 1000 and 3000–4999). */
const DEAD_LINK = 4000;
/** After the last `tools/list` page, how long to wait for `manifest_applied` before calling the session online anyway. */
const APPLIED_GRACE_MS = 1_000;

/** Why a session ended, beyond the socket's own close info. */
export type EndReason =
  | 'disconnected'
  | 'closed'
  | 'retired'
  | 'heartbeat_timeout'
  | 'handshake_timeout'
  | 'transport_unavailable';

export interface SessionEnd extends CloseInfo {
  why: EndReason;
  /** Whether the session had been online. */
  wasOnline: boolean;
  /** How long it was online, in ms (0 if never). */
  onlineMs: number;
  /** What to present on the next dial: set when the transport was lost and the edge had given a resume token. */
  resume?: ResumeTicket;
}

/** A session's resume token, and the session it resumes. */
export interface ResumeTicket {
  token: string;
  sessionId: string;
}

/** What a session tells its owner. */
export interface SessionHooks {
  online(session: Session): void;
  ended(session: Session, end: SessionEnd): void;
  callStart(e: CallStart): void;
  callEnd(e: CallEnd): void;
  manifest(report: ManifestReport & { sessionId: string }): void;
  problem(err: Error): void;
}

export interface SessionConfig {
  dial: Dial;
  url: string;
  token: string;
  catalog: Catalog;
  /** The revision to announce at the upgrade. */
  protocolVersion: ProtocolVersion;
  /** The `initialize` result, built and size-checked once by the client. */
  initializeResult: JsonObject;
  /** The `server/discover` result (2026-07-28), likewise. */
  discoverResult: JsonObject;
  /** Both results with `capabilities.tasks`, answered while the catalog has a task-capable tool. */
  taskInitializeResult: JsonObject;
  taskDiscoverResult: JsonObject;
  limits: Limits;
  heartbeat: HeartbeatOptions;
  handshakeTimeoutMs: number;
  hooks: SessionHooks;
  /** The client's memory of keyed calls, shared by all its sessions. */
  keyed: KeyedCalls;
  /** The client's tasks, shared by all its sessions. */
  tasks: Tasks;
  /** Presented as `?resume=` at the upgrade, to take the previous session back. */
  resume?: ResumeTicket;
  /** Answers `tether.dev/approve`; without it the method is not served. */
  onApproval?: ApprovalHook;
}

/**
 * A request the session has not answered yet: a handler's run, or a request
 * waiting for an earlier run of the same key. `survivesLoss` marks the runs
 * of keyed calls, which keep running when the transport is lost and the
 * client will resume (their result goes to the edge's re-delivery).
 */
interface InFlight {
  abort(why: AbortWhy, detail?: string): void;
  readonly survivesLoss: boolean;
}

/** What `#answer` reports a call's latency and dropped progress from. */
interface Answerable {
  elapsedMs(): number;
  readonly progressDropped: number;
}

type Phase = 'dialing' | 'handshake' | 'online' | 'ended';

function numberOr(v: Json | undefined): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** `_meta.progressToken` when it is one MCP allows (a string or a finite number); anything else asks for no progress. */
function progressTokenOf(v: Json | undefined): ProgressToken | undefined {
  return typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v)) ? v : undefined;
}

/** `url` with the resume token in its query, where both transports present it. */
function withResume(url: string, token: string): string {
  const u = new URL(url);
  u.searchParams.set(rpc.RESUME_QUERY, token);
  return u.toString();
}

/** A call end with its dropped progress reports counted, when there were any. */
function withDropped(end: CallEnd, call: Answerable): CallEnd {
  if (call.progressDropped > 0) end.progressDropped = call.progressDropped;
  return end;
}

export class Session {
  readonly #cfg: SessionConfig;
  #phase: Phase = 'dialing';
  #socket: Socket | undefined;
  #id = '';
  /** The edge's latest resume token for this session, if it gave one. */
  #resumeToken: string | undefined;
  #initialized = false;
  /** Whether this session's handshake answer declared `capabilities.tasks`. */
  #tasksDeclared = false;
  /** The revision the edge started (`initialize` or `server/discover`), not the one announced. */
  #revision: ProtocolVersion | undefined;
  readonly #changes = new Changes();
  #onlineAt = 0;
  #retiring = false;
  readonly #calls = new Map<string, InFlight>();
  /**
   * `tether.dev/approve` requests the user has not decided yet, by request id.
   * Apart from `#calls`: a human's decision is not bounded by the answer
   * ceiling, so a retiring session does not wait for one.
   */
  readonly #approvals = new Map<string, PendingApproval>();
  /**
   * `tasks/result` requests waiting for their task to end, by request id.
   * Apart from `#calls` too: a task is not bounded by the answer ceiling.
   * Stopping a wait stops only the wait; the task goes on.
   */
  readonly #taskWaits = new Map<string, () => void>();
  #handshakeTimer: ReturnType<typeof setTimeout> | undefined;
  #graceTimer: ReturnType<typeof setTimeout> | undefined;
  #heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  #pingTimer: ReturnType<typeof setTimeout> | undefined;
  #retireTimer: ReturnType<typeof setTimeout> | undefined;
  #pingId = 0;
  #pendingPing: string | undefined;

  constructor(cfg: SessionConfig) {
    this.#cfg = cfg;
  }

  /** The session id the edge assigned (empty until `initialize` or `server/discover`). */
  get id(): string {
    return this.#id;
  }

  /** The revision the edge speaks on this session (undefined until it starts one). */
  get protocolVersion(): ProtocolVersion | undefined {
    return this.#revision;
  }

  /** Whether the edge took the session presented with `resume` back (same id) rather than starting a new one. */
  get resumed(): boolean {
    return this.#cfg.resume !== undefined && this.#id === this.#cfg.resume.sessionId;
  }

  get isOnline(): boolean {
    return this.#phase === 'online';
  }

  get isEnded(): boolean {
    return this.#phase === 'ended';
  }

  /** Requests not answered yet: handlers still running, and re-deliveries waiting for one. */
  get inFlight(): number {
    return this.#calls.size;
  }

  /** Dials. Failures arrive through `hooks.ended`, never as a rejection. */
  async start(): Promise<void> {
    const cfg = this.#cfg;
    this.#handshakeTimer = setTimeout(
      () => this.#end(DEAD_LINK, `not online within ${cfg.handshakeTimeoutMs} ms`, 'handshake_timeout'),
      cfg.handshakeTimeoutMs,
    );
    try {
      const socket = await cfg.dial(
        {
          url: cfg.resume === undefined ? cfg.url : withResume(cfg.url, cfg.resume.token),
          token: cfg.token,
          protocol: rpc.SUBPROTOCOL,
          timeoutMs: cfg.handshakeTimeoutMs,
          ...(cfg.protocolVersion === DEFAULT_PROTOCOL_VERSION ? {} : { announce: cfg.protocolVersion }),
        },
        {
          onOpen: () => {
            if (this.#phase === 'dialing') this.#phase = 'handshake';
          },
          onMessage: (text) => this.#onText(text),
          onBinary: () => cfg.hooks.problem(new TetherError('protocol', 'the edge sent a binary frame; ignored')),
          onClose: (info) => this.#onSocketClosed(info),
        },
      );
      if (this.#phase === 'ended') socket.close(1000, 'client closed');
      else this.#socket = socket;
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      this.#finish({ code: 1006, reason: error.message, error }, 'transport_unavailable');
    }
  }

  /**
   * Sends `notifications/tools/list_changed` for the catalog's current seq,
   * once the edge has started the session (before that, its first read will
   * see the new catalog anyway). On 2026-07-28 a notification belongs to a
   * listen stream, so until the edge opens one (after its first read) the
   * change is held, and changes meanwhile coalesce into one.
   */
  announce(): void {
    if (!this.#initialized || this.#phase === 'ended') return;
    const params = this.#changes.changed(this.#cfg.catalog.stamp, this.#revision === MODERN);
    if (params !== undefined) this.#send(rpc.notification(Method.listChanged, params));
  }

  /**
   * Sends a notification the client's tasks make (a status, a progress
   * report) if this session is online; false when it was not sent.
   */
  notify(method: string, params: JsonObject): boolean {
    if (this.#phase !== 'online') return false;
    return this.#send(rpc.notification(method, params));
  }

  /**
   * Closes now: calls in flight are aborted with `why` (`closed` or
   * `disconnected`) and get no answer.
   */
  close(code: number, reason: string, why: EndReason): void {
    this.#end(code, reason, why);
  }

  /**
   * Closes once the calls in flight have answered (they are bounded by the
   * answer ceiling), so moving to a new session loses no call.
   */
  retire(): void {
    if (this.#phase === 'ended') return;
    this.#retiring = true;
    if (this.#calls.size === 0) {
      this.#end(1000, 'moved to a new session', 'retired');
      return;
    }
    this.#retireTimer = setTimeout(
      () => this.#end(1000, 'moved to a new session', 'retired'),
      this.#cfg.limits.answerCeilingMs + 1_000,
    );
  }

  #end(code: number, reason: string, why: EndReason): void {
    if (this.#phase === 'ended') return;
    const socket = this.#socket;
    this.#finish({ code, reason }, why);
    socket?.close(code, reason);
  }

  #onSocketClosed(info: CloseInfo): void {
    this.#finish(info, 'disconnected');
  }

  /** The one place a session ends: timers stop, calls abort, the owner hears once. */
  #finish(info: CloseInfo, why: EndReason): void {
    if (this.#phase === 'ended') return;
    const wasOnline = this.#phase === 'online';
    this.#phase = 'ended';
    for (const t of [this.#handshakeTimer, this.#graceTimer, this.#pingTimer, this.#retireTimer]) clearTimeout(t);
    clearInterval(this.#heartbeatTimer);
    const end: SessionEnd = { ...info, why, wasOnline, onlineMs: wasOnline ? Math.round(performance.now() - this.#onlineAt) : 0 };
    // Handed to the client, which presents it on its next dial and then forgets it (a token is single-use).
    if (this.#resumeToken !== undefined && lostTransport(end)) end.resume = { token: this.#resumeToken, sessionId: this.#id };
    const abortWhy = why === 'closed' ? 'closed' : 'disconnected';
    for (const call of this.#calls.values()) {
      if (end.resume === undefined || !call.survivesLoss) call.abort(abortWhy);
    }
    // The edge's approval request dies with the socket it was sent on, resumed or not.
    for (const approval of this.#approvals.values()) approval.abort(abortWhy);
    this.#approvals.clear();
    // A tasks/result wait dies with its socket; the task does not (the edge asks again after a resume).
    for (const stop of [...this.#taskWaits.values()]) stop();
    this.#taskWaits.clear();
    this.#cfg.hooks.ended(this, end);
  }

  #goOnline(): void {
    if (this.#phase !== 'handshake') return;
    this.#phase = 'online';
    this.#onlineAt = performance.now();
    clearTimeout(this.#handshakeTimer);
    clearTimeout(this.#graceTimer);
    this.#startHeartbeat();
    this.#cfg.hooks.online(this);
  }

  #startHeartbeat(): void {
    const { intervalMs, timeoutMs } = this.#cfg.heartbeat;
    if (intervalMs <= 0) return;
    this.#heartbeatTimer = setInterval(() => {
      if (this.#pendingPing !== undefined) return;
      this.#pingId += 1;
      const id = `tether-js-ping-${this.#pingId}`;
      this.#pendingPing = id;
      this.#send(rpc.request(id, Method.ping, {}));
      this.#pingTimer = setTimeout(
        () => this.#end(DEAD_LINK, `ping unanswered for ${timeoutMs} ms`, 'heartbeat_timeout'),
        timeoutMs,
      );
    }, intervalMs);
  }

  /** Sends a frame unless it would break the transport ceiling (the edge would close 1009). */
  #send(frame: string): boolean {
    const socket = this.#socket;
    if (socket === undefined || !socket.isOpen) return false;
    const bytes = utf8Bytes(frame);
    if (bytes > this.#cfg.limits.frameBytes) {
      this.#cfg.hooks.problem(
        new TetherError('frame_too_large', `a ${bytes}-byte frame was not sent: over the ${this.#cfg.limits.frameBytes}-byte transport ceiling`),
      );
      return false;
    }
    socket.send(frame);
    return true;
  }

  #onText(text: string): void {
    if (this.#phase === 'ended') return;
    const frame = rpc.parseFrame(text);
    switch (frame.kind) {
      case 'request':
        this.#onRequest(frame.id, frame.method, frame.params);
        return;
      case 'notification':
        this.#onNotification(frame.method, frame.params);
        return;
      case 'response':
        if (frame.id === this.#pendingPing) {
          this.#pendingPing = undefined;
          clearTimeout(this.#pingTimer);
        }
        return;
      case 'invalid':
        this.#cfg.hooks.problem(new TetherError('protocol', `the edge sent a frame that is not JSON-RPC (${frame.why}); ignored`));
        return;
    }
  }

  #onRequest(id: rpc.Id, method: string, params: JsonObject): void {
    const meta = isJsonObject(params['_meta']) ? params['_meta'] : {};
    // An edge that skipped discovery but sends the 2026-07-28 envelope still gets 2026-07-28 results.
    if (this.#revision === undefined && meta[ModernMeta.protocolVersion] === MODERN) this.#revision = MODERN;
    switch (method) {
      case Method.initialize:
      case ModernMethod.discover: {
        const sid = meta[Meta.session];
        if (typeof sid === 'string') this.#id = sid;
        const resume = meta[Meta.resume];
        this.#resumeToken = typeof resume === 'string' && resume !== '' ? resume : undefined;
        this.#revision = method === Method.initialize ? rpc.MCP_PROTOCOL_VERSION : MODERN;
        // Decided by the catalog now: a task tool declared later is offered as a task from the next session on.
        const cfg = this.#cfg;
        this.#tasksDeclared = cfg.catalog.hasTasks;
        const answer = this.#tasksDeclared
          ? { initialize: cfg.taskInitializeResult, discover: cfg.taskDiscoverResult }
          : { initialize: cfg.initializeResult, discover: cfg.discoverResult };
        this.#send(rpc.response(id, method === Method.initialize ? answer.initialize : answer.discover));
        this.#initialized = true;
        return;
      }
      case ModernMethod.listen: {
        // Acknowledged and kept open for the session's life: answering it would end the stream.
        const { ack, release } = this.#changes.listen(id, params, this.#cfg.catalog.stamp);
        this.#send(rpc.notification(ModernMethod.acknowledged, ack));
        if (release !== undefined) this.#send(rpc.notification(Method.listChanged, release));
        return;
      }
      case Method.toolsList: {
        const cursor = params['cursor'];
        const page = this.#cfg.catalog.page(typeof cursor === 'string' ? cursor : undefined);
        if (!page.ok) {
          this.#send(rpc.errorResponse(id, rpc.RpcCode.invalidParams, page.message));
          return;
        }
        this.#sendChecked(id, this.#complete(page.result, true));
        if (page.result['nextCursor'] !== undefined) return;
        const pageMeta = page.result['_meta'];
        const servedSeq = isJsonObject(pageMeta) ? numberOr(pageMeta[Meta.seq]) : undefined;
        if (servedSeq !== undefined) this.#changes.served(servedSeq);
        if (this.#phase === 'handshake' && this.#graceTimer === undefined) {
          // The edge reports the applied manifest; an edge that does not is online anyway.
          this.#graceTimer = setTimeout(() => this.#goOnline(), APPLIED_GRACE_MS);
        }
        return;
      }
      case Method.toolsCall:
        void this.#onCall(id, params);
        return;
      case Method.ping:
        this.#send(rpc.response(id, this.#complete({})));
        return;
      // Served whatever the catalog is now: a task outlives the tool that made it leaving the catalog.
      case Method.tasksGet:
      case Method.tasksCancel: {
        const task = this.#taskOf(id, params);
        if (task === undefined) return;
        if (method === Method.tasksCancel && !task.cancel()) {
          this.#send(rpc.errorResponse(id, rpc.RpcCode.invalidParams, `task ${task.id} is ${task.status} already; only a working task can be cancelled`));
          return;
        }
        this.#send(rpc.response(id, this.#complete(task.view())));
        return;
      }
      case Method.tasksResult: {
        const task = this.#taskOf(id, params);
        if (task !== undefined) void this.#onTaskResult(id, task);
        return;
      }
      case Method.approve: {
        const hook = this.#cfg.onApproval;
        // Without a hook the handshake did not declare approvals: the method is as unknown as any other.
        if (hook === undefined) this.#notServed(id, method);
        else void this.#onApprove(id, params, hook);
        return;
      }
      default:
        this.#notServed(id, method);
    }
  }

  #notServed(id: rpc.Id, method: string): void {
    this.#send(rpc.errorResponse(id, rpc.RpcCode.methodNotFound, `the client does not serve ${method}`));
  }

  /** Asks the application's hook and answers `{approve}`, unless the request was aborted first (then nothing is sent). */
  async #onApprove(id: rpc.Id, params: JsonObject, hook: ApprovalHook): Promise<void> {
    const request = approvalRequestOf(params, this.#id);
    if (typeof request === 'string') {
      this.#send(rpc.errorResponse(id, rpc.RpcCode.invalidParams, request));
      return;
    }
    const key = JSON.stringify(id);
    const pending = new PendingApproval(request);
    this.#approvals.get(key)?.abort('cancelled');
    this.#approvals.set(key, pending);
    const approve = await pending.run(hook, (err) => this.#cfg.hooks.problem(err));
    if (this.#approvals.get(key) === pending) this.#approvals.delete(key);
    if (approve === undefined || this.#phase === 'ended') return;
    this.#send(rpc.response(id, this.#complete({ approve })));
  }

  /** A result as this session's revision wants it: 2026-07-28 marks every result complete. */
  #complete(result: JsonObject, cacheHints = false): JsonObject {
    return this.#revision === MODERN ? complete(result, cacheHints) : result;
  }

  /** Sends a response whose size was planned; if it is over anyway, an error instead of a 1009. */
  #sendChecked(id: rpc.Id, result: JsonObject): void {
    const frame = rpc.response(id, result);
    if (utf8Bytes(frame) > this.#cfg.limits.frameBytes) {
      this.#send(rpc.errorResponse(id, rpc.RpcCode.internal, 'the page does not fit the transport ceiling'));
      return;
    }
    this.#send(frame);
  }

  #onNotification(method: string, params: JsonObject): void {
    switch (method) {
      case Method.cancelled: {
        const requestId = params['requestId'];
        if (typeof requestId !== 'string' && typeof requestId !== 'number') return;
        const reason = params['reason'];
        const key = JSON.stringify(requestId);
        this.#calls.get(key)?.abort('cancelled', typeof reason === 'string' ? reason : undefined);
        this.#approvals.get(key)?.abort('cancelled');
        // Cancelling a tasks/result stops the wait, not the task (that is tasks/cancel).
        this.#taskWaits.get(key)?.();
        return;
      }
      case Method.manifestApplied: {
        const dropped = Array.isArray(params['dropped']) ? params['dropped'] : [];
        const report: ManifestReport & { sessionId: string } = {
          sessionId: this.#id,
          seq: numberOr(params['seq']) ?? 0,
          kept: numberOr(params['kept']) ?? 0,
          dropped: dropped.filter(isJsonObject).map((d) => ({
            name: String(d['name']),
            bytes: numberOr(d['bytes']) ?? 0,
            reason: String(d['reason']),
            ...(typeof d['detail'] === 'string' ? { detail: d['detail'] } : {}),
          })),
        };
        this.#goOnline();
        this.#cfg.hooks.manifest(report);
        return;
      }
      default:
        // notifications/initialized and anything newer: nothing to do.
        return;
    }
  }

  async #onCall(id: rpc.Id, params: JsonObject): Promise<void> {
    const name = params['name'];
    const args = params['arguments'] ?? {};
    if (typeof name !== 'string' || !isJsonObject(args)) {
      this.#send(rpc.errorResponse(id, rpc.RpcCode.invalidParams, 'tools/call needs a string name and object arguments'));
      return;
    }
    const meta = isJsonObject(params['_meta']) ? params['_meta'] : {};
    const rawKey = meta[Meta.idempotencyKey];
    const key = typeof rawKey === 'string' ? rawKey : undefined;
    const request: CallRequest = {
      id,
      name,
      arguments: args,
      sessionId: this.#id,
      deadlineMs: numberOr(meta[Meta.deadlineMs]),
      idempotencyKey: key,
      progressToken: progressTokenOf(meta[Meta.progressToken]),
      trace: traceOf(meta[Meta.traceparent], meta[Meta.tracestate]),
    };
    // A call proves the edge has listed this session.
    this.#goOnline();
    const hooks = this.#cfg.hooks;
    const start: CallStart = { callId: id, sessionId: this.#id, name, arguments: args };
    const tool = this.#cfg.catalog.tool(name);
    const taskParams = isJsonObject(params['task']) ? params['task'] : undefined;
    if (tool?.task !== undefined && taskParams !== undefined) {
      this.#startTask(start, request, tool, taskParams);
      return;
    }
    if (tool !== undefined && this.#refusedByTaskSupport(start, tool, taskParams !== undefined)) return;
    const earlier = key === undefined ? undefined : this.#cfg.keyed.find(key, name);
    if (earlier !== undefined) {
      await this.#repeat(start, earlier, request.progressToken);
      return;
    }
    hooks.callStart(start);
    // Set once the keyed run is recorded; its progress also reaches a re-delivery that waits on it.
    let remember: RunReporter | undefined;
    const call: RunningCall = new RunningCall(request, this.#cfg.limits.answerCeilingMs, {
      send: (progress) => {
        if (remember !== undefined) {
          const { progressToken: _sentUnder, ...report } = progress;
          remember.progress(report);
        }
        this.#send(rpc.notification(Method.progress, progress));
      },
      // The first drop of a call is reported; the rest are counted in callEnd.
      dropped: (why) => {
        if (call.progressDropped !== 1) return;
        hooks.problem(new TetherError('invalid_progress', `${name}: a ctx.progress report was dropped (${why}); further drops on this call are only counted (callEnd.progressDropped)`));
      },
    });
    if (tool === undefined) {
      const names = this.#cfg.catalog.names();
      const namespaced = namespacedNames(names);
      const available = names.map((n) => namespaced.get(n) ?? n);
      this.#answer(start, call, unavailableResult(name, available), 'unavailable');
      return;
    }
    remember = key === undefined ? undefined : this.#cfg.keyed.start(key, name, (why) => call.abort(why));
    const callKey = JSON.stringify(id);
    this.#calls.set(callKey, { abort: (why, detail) => call.abort(why, detail), survivesLoss: key !== undefined });
    const settled = await call.run(tool);
    this.#calls.delete(callKey);
    this.#afterAnswered();
    let replay: Replay;
    switch (settled.kind) {
      case 'returned': {
        const result = resultOf(settled.value);
        replay = { result, outcome: result.isError === true ? 'error' : 'ok' };
        break;
      }
      case 'threw':
        replay = { result: failureResult(settled.failure), outcome: 'error' };
        break;
      case 'aborted':
        if (settled.why !== 'ceiling') {
          remember?.end(settled.why);
          // Cancelled: the edge stopped waiting and MCP says not to answer. Disconnected or closed: there is no socket.
          hooks.callEnd(withDropped({ ...start, outcome: settled.why, latencyMs: call.elapsedMs(), answered: false }, call));
          return;
        }
        replay = { result: timeoutResult(name, this.#cfg.limits.answerCeilingMs), outcome: 'timeout' };
        break;
    }
    // Remembered before it is sent: if this socket is gone, the edge's re-delivery gets it.
    remember?.end(replay);
    this.#answer(start, call, replay.result, replay.outcome);
  }

  /**
   * Answers a task call at once with the task, then runs its handler in the
   * background (tasks.ts). A call under an idempotency key that already made
   * a task (the edge delivering it again after its answer was lost) is handed
   * that task, and nothing runs again.
   */
  #startTask(start: CallStart, request: CallRequest, tool: AnyTool, taskParams: JsonObject): void {
    const { hooks, tasks } = this.#cfg;
    const key = request.idempotencyKey;
    const earlier = key === undefined ? undefined : tasks.findByKey(key, start.name);
    if (earlier !== undefined) {
      hooks.callStart({ ...start, taskId: earlier.id, deduplicated: true });
      const answered = this.#send(rpc.response(start.callId, this.#complete({ task: earlier.view() })));
      hooks.callEnd({ ...start, taskId: earlier.id, deduplicated: true, outcome: answered ? 'ok' : 'disconnected', latencyMs: 0, answered });
      return;
    }
    const task = tasks.create(request, start, ttlOf(taskParams));
    if (task === undefined) {
      hooks.callStart(start);
      const message = `${start.name} cannot start as a task: the client keeps ${MAX_TASKS} tasks already and none has finished and been read; try again later`;
      const answered = this.#send(rpc.errorResponse(start.callId, rpc.RpcCode.internal, message, { reason: 'too_many_tasks', max: MAX_TASKS, retryable: true }));
      hooks.callEnd({ ...start, outcome: 'error', code: 'too_many_tasks', latencyMs: 0, answered });
      return;
    }
    hooks.callStart(task.start);
    if (!this.#send(rpc.response(start.callId, this.#complete({ task: task.view() })))) {
      // Nobody learnt the task's id, so nobody could follow it: it never runs.
      tasks.discard(task);
      hooks.callEnd({ ...task.start, outcome: 'disconnected', latencyMs: 0, answered: false });
      return;
    }
    tasks.run(task, tool);
  }

  /**
   * MCP's tool-level task rules for a call made inline (`asTask` false) or
   * as a task of a tool that has no `task`: a `required` tool must be a
   * task, and a task-less tool of a session that declared tasks refuses one
   * (a session that did not ignores `task`, as MCP asks). Answers -32601 and
   * returns true when it refused.
   */
  #refusedByTaskSupport(start: CallStart, tool: AnyTool, asTask: boolean): boolean {
    let message: string | undefined;
    let code: string | undefined;
    if (!asTask && tool.task === 'required') {
      message = `${start.name} must be called as a task (its execution.taskSupport is "required"): add task to the tools/call params`;
      code = 'task_required';
    } else if (asTask && tool.task === undefined && this.#tasksDeclared) {
      message = `${start.name} does not run as a task (it declares no execution.taskSupport): call it without task`;
      code = 'task_forbidden';
    }
    if (message === undefined || code === undefined) return false;
    const hooks = this.#cfg.hooks;
    hooks.callStart(start);
    const answered = this.#send(rpc.errorResponse(start.callId, rpc.RpcCode.methodNotFound, message));
    hooks.callEnd({ ...start, outcome: 'error', code, latencyMs: 0, answered });
    return true;
  }

  /** The task a `tasks/*` request names; answers -32602 (and returns undefined) when there is none. */
  #taskOf(id: rpc.Id, params: JsonObject): Task | undefined {
    const taskId = params['taskId'];
    if (typeof taskId !== 'string') {
      this.#send(rpc.errorResponse(id, rpc.RpcCode.invalidParams, 'tasks need a string taskId'));
      return undefined;
    }
    const task = this.#cfg.tasks.find(taskId);
    if (task === undefined) this.#send(rpc.errorResponse(id, rpc.RpcCode.invalidParams, `unknown task ${JSON.stringify(taskId)}`));
    return task;
  }

  /**
   * `tasks/result`: waits until the task is final, then answers with exactly
   * what the call inline would have (stamped, capped), marked with the task
   * (`io.modelcontextprotocol/related-task`). A cancelled task has no
   * outcome: -32800. Nothing is sent if the wait stopped first (this socket
   * closed, or the edge cancelled the request).
   */
  async #onTaskResult(id: rpc.Id, task: Task): Promise<void> {
    if (!task.isFinal) {
      const key = JSON.stringify(id);
      this.#taskWaits.get(key)?.();
      let stop!: () => void;
      const ended = await new Promise<boolean>((resolve) => {
        stop = () => resolve(false);
        this.#taskWaits.set(key, stop);
        void task.done.then(() => resolve(true));
      });
      if (this.#taskWaits.get(key) === stop) this.#taskWaits.delete(key);
      if (!ended || this.#phase === 'ended') return;
    }
    const outcome = task.outcome;
    if (outcome === undefined) {
      this.#send(rpc.errorResponse(id, rpc.RpcCode.requestCancelled, 'the task was cancelled', { taskId: task.id }));
      return;
    }
    const { frame } = this.#resultFrame(id, task.start.name, outcome.result, outcome.outcome, { [Meta.relatedTask]: { taskId: task.id } });
    if (this.#send(frame)) task.delivered();
  }

  /**
   * Answers a keyed call whose key already ran (the edge's re-delivery after
   * a resume, or a retry) with that run's result, without running the
   * handler again; waits for the run if it is still going. The answer goes
   * out under this request's id on this socket, never under the old one.
   */
  async #repeat(start: CallStart, earlier: KeyedRun, progressToken: ProgressToken | undefined): Promise<void> {
    const hooks = this.#cfg.hooks;
    hooks.callStart({ ...start, deduplicated: true });
    const arrivedAt = performance.now();
    const timing: Answerable = { elapsedMs: () => Math.round(performance.now() - arrivedAt), progressDropped: 0 };
    let end: RunEnd | undefined = earlier.replay;
    if (end === undefined) {
      // The run's progress from now on goes out under this request's token, on this socket.
      const unfollow =
        progressToken === undefined
          ? () => {}
          : earlier.follow((report) => {
              this.#send(rpc.notification(Method.progress, { ...report, progressToken }));
            });
      // Waiting stops if this request is cancelled or this session ends; the run itself goes on (its ceiling bounds it).
      const callKey = JSON.stringify(start.callId);
      end = await new Promise<RunEnd>((resolve) => {
        this.#calls.set(callKey, { abort: (why) => resolve(why), survivesLoss: false });
        void earlier.done.then(resolve);
      });
      unfollow();
      this.#calls.delete(callKey);
      this.#afterAnswered();
    }
    if (typeof end === 'string') {
      hooks.callEnd({ ...start, deduplicated: true, outcome: end === 'ceiling' ? 'timeout' : end, latencyMs: timing.elapsedMs(), answered: false });
      return;
    }
    this.#answer({ ...start, deduplicated: true }, timing, end.result, end.outcome);
  }

  /** A retiring session closes once its last request has answered. */
  #afterAnswered(): void {
    if (this.#retiring && this.#calls.size === 0) queueMicrotask(() => this.#end(1000, 'moved to a new session', 'retired'));
  }

  /** Stamps the seq and digest, enforces the result cap, sends, and reports the call's end. */
  #answer(start: CallStart, call: Answerable, result: CallToolResult, outcome: CallOutcome): void {
    const { frame, final, outcome: finalOutcome } = this.#resultFrame(start.callId, start.name, result, outcome);
    const answered = this.#send(frame);
    const structured = final.structuredContent;
    const code = final.isError === true && structured !== undefined && typeof structured['code'] === 'string' ? structured['code'] : undefined;
    const end: CallEnd = { ...start, outcome: answered ? finalOutcome : 'disconnected', latencyMs: call.elapsedMs(), answered };
    if (code !== undefined) end.code = code;
    this.#cfg.hooks.callEnd(withDropped(end, call));
  }

  /**
   * The response frame of a call result: stamped with the seq and digest
   * (and `meta`), within the result cap. A result that cannot be sent as it
   * is becomes the error result that says why.
   */
  #resultFrame(id: rpc.Id, name: string, result: CallToolResult, outcome: CallOutcome, meta: JsonObject = {}): { frame: string; final: CallToolResult; outcome: CallOutcome } {
    let frame: string;
    let final = result;
    let finalOutcome = outcome;
    const stamp = (r: CallToolResult): JsonObject => {
      const out: JsonObject = { content: r.content };
      if (r.structuredContent !== undefined) out['structuredContent'] = r.structuredContent;
      if (r.isError === true) out['isError'] = true;
      out['_meta'] = { ...(r._meta ?? {}), ...stampMeta(this.#cfg.catalog.stamp), ...meta };
      return this.#complete(out);
    };
    try {
      frame = rpc.response(id, stamp(result));
    } catch (err) {
      final = invalidResult(name, (err as Error).message);
      finalOutcome = 'error';
      frame = rpc.response(id, stamp(final));
    }
    const bytes = utf8Bytes(frame);
    const limit = this.#cfg.limits.resultBytes;
    if (bytes > limit) {
      final = tooLargeResult(name, bytes, limit);
      finalOutcome = 'too_large';
      frame = rpc.response(id, stamp(final));
      this.#cfg.hooks.problem(new TetherError('frame_too_large', `${name}: a ${bytes}-byte result exceeds the ${limit}-byte result cap; answered with payload_too_large`));
    }
    return { frame, final, outcome: finalOutcome };
  }
}
