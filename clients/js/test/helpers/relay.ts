/**
 * A TCP relay between a client and the edge that a test can cut: both
 * sockets are reset with no WebSocket close frame, which is what a network
 * blip looks like to either side (the client sees 1006, the edge a lost
 * connection). The edge's own close codes never come into it.
 */

import net from 'node:net';

export class Relay {
  readonly #server: net.Server;
  readonly #live = new Set<net.Socket>();

  private constructor(server: net.Server) {
    this.#server = server;
  }

  /** Relays 127.0.0.1:<a free port> to 127.0.0.1:`port`. */
  static async start(port: number): Promise<Relay> {
    const server = net.createServer();
    const relay = new Relay(server);
    server.on('connection', (down) => relay.#pair(down, net.connect(port, '127.0.0.1')));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return relay;
  }

  /** `ws://127.0.0.1:PORT`, to dial instead of the edge. */
  get url(): string {
    return `ws://127.0.0.1:${(this.#server.address() as net.AddressInfo).port}`;
  }

  /** Resets every relayed connection; new ones are relayed as before. */
  cut(): void {
    for (const s of this.#live) s.resetAndDestroy();
  }

  async close(): Promise<void> {
    for (const s of this.#live) s.destroy();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #pair(down: net.Socket, up: net.Socket): void {
    this.#live.add(down).add(up);
    down.pipe(up);
    up.pipe(down);
    const end = (): void => {
      for (const s of [down, up]) {
        s.destroy();
        this.#live.delete(s);
      }
    };
    for (const s of [down, up]) {
      s.on('error', end);
      s.on('close', end);
    }
  }
}
