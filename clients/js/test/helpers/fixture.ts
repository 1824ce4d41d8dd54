/**
 * One edge, one backend link and helpers to connect clients to them: the
 * setup every integration file shares. `dispose()` closes every client it
 * made and kills the edge, also when a test failed.
 */

import { connect, type ConnectOptions, type TetherClient } from '../../dist/node.js';
import { Backend, type CallResponse } from './backend.js';
import { Edge, type EdgeOptions } from './edge.js';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export class Fixture {
  readonly edge: Edge;
  readonly backend: Backend;
  readonly #clients: TetherClient[] = [];

  private constructor(edge: Edge, backend: Backend) {
    this.edge = edge;
    this.backend = backend;
  }

  static async start(options: EdgeOptions = {}): Promise<Fixture> {
    const edge = await Edge.start(options);
    try {
      const backend = await Backend.connect(
        edge.url,
        edge.token('tether-backend', { sub: 'agent-backend' }),
        edge.token('tether-operator', { sub: 'test-operator' }),
      );
      return new Fixture(edge, backend);
    } catch (err) {
      await edge.dispose();
      throw err;
    }
  }

  /** The device user's credential, which the backend forwards on every call. */
  userToken(sub = 'mira'): string {
    return this.edge.token('tether-client', { sub });
  }

  /** Connects a client as user `mira` (unless options say otherwise); closed by `dispose()`. */
  client(options: Partial<ConnectOptions> & Pick<ConnectOptions, 'tools'>): TetherClient {
    const base = {
      url: this.edge.url,
      info: { name: 'test-app', version: '1.0.0' },
      ...options,
    };
    const full = (options.getToken === undefined && options.token === undefined ? { ...base, token: this.userToken() } : base) as ConnectOptions;
    const c = connect(full);
    this.#clients.push(c);
    return c;
  }

  /** Connects and waits until the edge lists the session; returns its id. */
  async online(client: TetherClient, ms = 5_000): Promise<string> {
    const sid = await client.ready(ms);
    await this.backend.waitForSession(sid, ms);
    return sid;
  }

  /** A backend `tools/call` with the device user's credential. */
  call(session: string, name: string, args: { [k: string]: Json } = {}, meta: { [k: string]: Json } = {}): Promise<CallResponse> {
    return this.backend.call(session, name, args, { credential: this.userToken(), ...meta });
  }

  async dispose(): Promise<void> {
    await Promise.all(this.#clients.map((c) => c.close()));
    this.backend.close();
    await this.edge.dispose();
  }
}
