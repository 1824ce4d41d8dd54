/**
 * The client: one long-lived handle over a succession of sessions. It owns
 * the catalog and the credential, dials, re-dials with backoff when a session
 * ends, and moves to a fresh token before the current one expires.
 *
 * Token refresh is make-before-break: the edge has no in-band way to renew a
 * credential (it closes the session with 1008 at `exp`), so before expiry the
 * client fetches a new token, opens a second session, and only when that one
 * is online retires the old one — after the calls still running on it have
 * answered. The state stays `online` throughout.
 *
 * After a lost connection the client asks for its session back: the next
 * dial presents the edge's single-use resume token, and the client's memory
 * of keyed calls answers what the edge delivers again. The edge decides;
 * refused, it simply starts a new session. Tasks (tasks.ts) belong to the
 * client too: they run on through any number of sessions until their ttl.
 */

import { backoffDelay } from './backoff.js';
import { Catalog } from './catalog.js';
import { TetherError } from './errors.js';
import { Emitter } from './emitter.js';
import { KeyedCalls } from './keyed.js';
import { Tasks } from './tasks.js';
import { classifyEnd, type Failure } from './ending.js';
import { resolveOptions, type Resolved } from './options.js';
import { Session, type ResumeTicket, type SessionEnd, type SessionHooks } from './session.js';
import { MIN_TOKEN_LIFE_MS, refreshDelay, tokenExpiry } from './token.js';
import type { Dial } from './transport.js';
import type { AnyTool, AppContext, ClientEvents, ConnectOptions, ConnectionState, OfflineEvent, ProtocolVersion } from './types.js';

export class TetherClient {
  readonly #events = new Emitter<ClientEvents>();
  readonly #options: ConnectOptions;
  readonly #cfg: Resolved;
  readonly #dial: Dial;
  readonly #catalog: Catalog;
  readonly #tokens = new WeakMap<Session, string>();
  readonly #retiring = new Set<Session>();
  readonly #keyed = new KeyedCalls();
  readonly #tasks = new Tasks({
    // A task's session, or its resumption (same id), if it is online; otherwise nothing is sent and the edge asks again.
    notify: (sessionId, method, params) => {
      for (const s of [this.#current, this.#next, ...this.#retiring]) {
        if (s !== undefined && s.isOnline && s.id === sessionId) {
          s.notify(method, params);
          return;
        }
      }
    },
    callEnd: (e) => this.#events.emit('callEnd', e),
    problem: (err) => this.#events.emit('error', err),
  });
  /** The lost session's resume token, until the next dial presents it (once). */
  #resume: ResumeTicket | undefined;
  #state: ConnectionState = 'offline';
  #current: Session | undefined;
  #next: Session | undefined;
  #failures = 0;
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  #refreshTimer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  #terminal: OfflineEvent | undefined;
  #announceQueued = false;

  /** Use `connect()`; this constructor validates options and throws `TetherError` on a bad one. */
  constructor(options: ConnectOptions, dial: Dial) {
    this.#cfg = resolveOptions(options);
    this.#options = options;
    this.#dial = dial;
    this.#catalog = new Catalog(options.tools ?? [], options.context, this.#cfg.limits);
    // Start on the next microtask, so listeners attached right after connect() see `connecting`.
    queueMicrotask(() => void this.#connect());
  }

  /** `connecting`, `online` or `offline`. */
  get state(): ConnectionState {
    return this.#state;
  }

  /** The edge's id of the session online now. */
  get sessionId(): string | undefined {
    return this.#state === 'online' ? this.#current?.id : undefined;
  }

  /**
   * The MCP revision the edge speaks on the session online now: what it
   * started (`initialize` or `server/discover`), which may differ from what
   * `protocolVersion` announced if the edge ignored the announcement.
   */
  get protocolVersion(): ProtocolVersion | undefined {
    return this.#state === 'online' ? this.#current?.protocolVersion : undefined;
  }

  /** The catalog's seq: it moves on every `setTools` / `setContext`. */
  get seq(): number {
    return this.#catalog.seq;
  }

  /** The device-side names of the tools declared now. */
  get toolNames(): string[] {
    return this.#catalog.names();
  }

  get context(): AppContext | undefined {
    return this.#catalog.context;
  }

  on<K extends keyof ClientEvents>(event: K, listener: (payload: ClientEvents[K]) => void): () => void {
    return this.#events.on(event, listener);
  }

  once<K extends keyof ClientEvents>(event: K, listener: (payload: ClientEvents[K]) => void): () => void {
    return this.#events.once(event, listener);
  }

  off<K extends keyof ClientEvents>(event: K, listener: (payload: ClientEvents[K]) => void): void {
    this.#events.off(event, listener);
  }

  /**
   * Replaces the declared tools (the app navigated): the seq moves, the edge
   * is told with `list_changed` and re-reads. Throws `TetherError` on an
   * invalid tool, leaving the catalog as it was. Returns the new seq.
   */
  setTools(tools: readonly AnyTool[]): number {
    return this.update({ tools });
  }

  /** Replaces the context (where the user is now); the seq moves like `setTools`. */
  setContext(context: AppContext | undefined): number {
    return this.update({ context });
  }

  /** Replaces tools and context together, as one seq. */
  update(change: { tools?: readonly AnyTool[]; context?: AppContext | undefined }): number {
    const seq = this.#catalog.update(change);
    this.#queueAnnounce();
    return seq;
  }

  /**
   * Resolves with the session id once online (at once if online now).
   * Rejects if the client goes offline for good (a refused credential, a
   * wrong URL, `close()`) or after `timeoutMs`.
   */
  ready(timeoutMs = 10_000): Promise<string> {
    const id = this.sessionId;
    if (id !== undefined) return Promise.resolve(id);
    if (this.#terminal !== undefined) return Promise.reject(this.#terminalError(this.#terminal));
    return new Promise<string>((resolve, reject) => {
      const cleanup = (): void => {
        clearTimeout(timer);
        offOnline();
        offOffline();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new TetherError('not_online', `the client was not online within ${timeoutMs} ms (state: ${this.#state})`));
      }, timeoutMs);
      const offOnline = this.on('online', (e) => {
        cleanup();
        resolve(e.sessionId);
      });
      const offOffline = this.on('offline', (e) => {
        if (e.willRetry) return;
        cleanup();
        reject(this.#terminalError(e));
      });
    });
  }

  /**
   * Closes the connection and stops reconnecting. Handlers still running see
   * their signal abort with `why: "closed"`; their answers are not sent.
   */
  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    clearTimeout(this.#refreshTimer);
    this.#resume = undefined;
    const sessions = [this.#current, this.#next, ...this.#retiring];
    this.#current = this.#next = undefined;
    this.#retiring.clear();
    for (const s of sessions) s?.close(1000, 'client closed', 'closed');
    // Keyed runs that outlived a lost session belong to no session now.
    this.#keyed.abortAll('closed');
    this.#tasks.closeAll();
    this.#goOffline({ reason: 'closed', willRetry: false });
    return Promise.resolve();
  }

  #terminalError(e: OfflineEvent): Error {
    return e.error ?? new TetherError('not_online', `the client is offline for good: ${e.reason}`);
  }

  #setState(state: ConnectionState): void {
    if (this.#state === state) return;
    this.#state = state;
    this.#events.emit('state', { state });
  }

  #goOffline(e: OfflineEvent): void {
    if (!e.willRetry) this.#terminal = e;
    this.#setState('offline');
    this.#events.emit('offline', e);
  }

  #queueAnnounce(): void {
    if (this.#announceQueued) return;
    this.#announceQueued = true;
    // setTools and setContext in one tick become one list_changed.
    queueMicrotask(() => {
      this.#announceQueued = false;
      for (const s of [this.#current, this.#next, ...this.#retiring]) s?.announce();
    });
  }

  /** A usable token: the fixed one if it has not expired, else a fresh one from `getToken`. */
  async #freshToken(): Promise<string> {
    const { token, getToken } = this.#options;
    if (getToken === undefined) {
      const t = token ?? '';
      const exp = tokenExpiry(t);
      if (exp !== undefined && exp - Date.now() < MIN_TOKEN_LIFE_MS) {
        throw new TetherError('unauthenticated', `the token expired at ${new Date(exp).toISOString()}; pass getToken to have fresh ones fetched`);
      }
      return t;
    }
    let t: unknown;
    try {
      t = await getToken();
    } catch (err) {
      throw new TetherError('token_unavailable', `getToken() failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    if (typeof t !== 'string' || t === '') throw new TetherError('token_unavailable', 'getToken() returned no token (expected a non-empty string)');
    const exp = tokenExpiry(t);
    if (exp !== undefined && exp - Date.now() < MIN_TOKEN_LIFE_MS) {
      throw new TetherError('token_unavailable', `getToken() returned a token that expires at ${new Date(exp).toISOString()}`);
    }
    return t;
  }

  async #connect(): Promise<void> {
    this.#retryTimer = undefined;
    if (this.#closed) return;
    this.#setState('connecting');
    this.#events.emit('connecting', { attempt: this.#failures + 1 });
    let token: string;
    try {
      token = await this.#freshToken();
    } catch (err) {
      const error = err as TetherError;
      this.#events.emit('error', error);
      this.#afterFailure({ reason: error.code, error, ...(error.code === 'unauthenticated' ? { fatal: error } : {}) });
      return;
    }
    if (this.#closed) return;
    const resume = this.#resume;
    this.#resume = undefined;
    const session = this.#newSession(token, resume);
    this.#current = session;
    void session.start();
  }

  #newSession(token: string, resume?: ResumeTicket): Session {
    const session = new Session({
      dial: this.#dial,
      url: this.#cfg.url,
      token,
      catalog: this.#catalog,
      protocolVersion: this.#cfg.protocolVersion,
      initializeResult: this.#cfg.initializeResult,
      discoverResult: this.#cfg.discoverResult,
      taskInitializeResult: this.#cfg.taskInitializeResult,
      taskDiscoverResult: this.#cfg.taskDiscoverResult,
      limits: this.#cfg.limits,
      heartbeat: this.#cfg.heartbeat,
      handshakeTimeoutMs: this.#cfg.handshakeTimeoutMs,
      hooks: this.#hooks,
      keyed: this.#keyed,
      tasks: this.#tasks,
      ...(resume === undefined ? {} : { resume }),
      ...(this.#cfg.onApproval === undefined ? {} : { onApproval: this.#cfg.onApproval }),
    });
    this.#tokens.set(session, token);
    return session;
  }

  readonly #hooks: SessionHooks = {
    online: (s) => this.#onOnline(s),
    ended: (s, end) => this.#onEnded(s, end),
    callStart: (e) => this.#events.emit('callStart', e),
    callEnd: (e) => this.#events.emit('callEnd', e),
    manifest: (r) => this.#events.emit('manifest', r),
    problem: (err) => this.#events.emit('error', err),
  };

  #onOnline(s: Session): void {
    if (s === this.#next) {
      const old = this.#current;
      this.#current = s;
      this.#next = undefined;
      if (old !== undefined) {
        this.#retiring.add(old);
        old.retire();
      }
    } else if (s !== this.#current) {
      return;
    }
    this.#setState('online');
    this.#events.emit('online', { sessionId: s.id, seq: this.#catalog.seq, resumed: s.resumed });
    this.#scheduleRefresh(s);
  }

  #onEnded(s: Session, end: SessionEnd): void {
    this.#retiring.delete(s);
    if (this.#closed) return;
    if (s === this.#next) {
      this.#next = undefined;
      this.#events.emit('error', new TetherError('refresh_failed', `moving to a fresh token failed (${end.reason || end.why}); keeping the current session`));
      this.#retryRefresh();
      return;
    }
    if (s !== this.#current) return;
    this.#current = undefined;
    clearTimeout(this.#refreshTimer);
    if (this.#next !== undefined) {
      // The old session died while its successor was dialing: the successor takes over.
      this.#current = this.#next;
      this.#next = undefined;
      this.#setState('connecting');
      return;
    }
    if (end.wasOnline && end.onlineMs >= this.#cfg.backoff.stableMs) this.#failures = 0;
    this.#resume = end.resume;
    this.#afterFailure(classifyEnd(end, this.#options.getToken === undefined ? this.#options.token ?? '' : undefined));
  }

  /** After a failed attempt or a lost session: give up, or go offline and schedule the next attempt. */
  #afterFailure(f: Failure): void {
    if (this.#closed) return;
    const { fatal, ...event } = f;
    if (fatal !== undefined) {
      this.#goOffline({ ...event, error: fatal, willRetry: false });
      return;
    }
    if (this.#failures >= this.#cfg.backoff.maxAttempts) {
      const error = new TetherError('gave_up', `gave up after ${this.#failures} failed attempts; last: ${f.reason}`);
      this.#goOffline({ ...event, error, willRetry: false });
      return;
    }
    const delay = backoffDelay(this.#failures, this.#cfg.backoff);
    this.#failures += 1;
    this.#goOffline({ ...event, willRetry: true, retryInMs: delay });
    this.#retryTimer = setTimeout(() => void this.#connect(), delay);
  }

  #scheduleRefresh(s: Session): void {
    clearTimeout(this.#refreshTimer);
    if (this.#options.getToken === undefined) return;
    const exp = tokenExpiry(this.#tokens.get(s) ?? '');
    if (exp === undefined) return;
    const delay = refreshDelay(exp, Date.now(), this.#cfg.tokenRefreshLeadMs);
    this.#refreshTimer = setTimeout(() => void this.#refresh(), delay);
  }

  /** A failed move gets another try while the current token still has a little life. */
  #retryRefresh(): void {
    const current = this.#current;
    const exp = current === undefined ? undefined : tokenExpiry(this.#tokens.get(current) ?? '');
    if (exp === undefined) return;
    const remaining = exp - Date.now();
    if (remaining < 1_500) return; // the edge will close at exp; the reconnect path takes over
    clearTimeout(this.#refreshTimer);
    this.#refreshTimer = setTimeout(() => void this.#refresh(), Math.min(1_000, remaining / 3));
  }

  async #refresh(): Promise<void> {
    if (this.#closed || this.#next !== undefined || this.#current?.isOnline !== true) return;
    let token: string;
    try {
      token = await this.#freshToken();
    } catch (err) {
      this.#events.emit('error', err as Error);
      this.#retryRefresh();
      return;
    }
    if (this.#closed || this.#next !== undefined || this.#current?.isOnline !== true) return;
    const next = this.#newSession(token);
    this.#next = next;
    void next.start();
  }
}
