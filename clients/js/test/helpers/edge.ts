/**
 * A real `tether serve` for tests: the built binary (env TETHER_BIN, default
 * <repo>/target/debug/tether) on 127.0.0.1, its own data dir (so its own JWT
 * secret), and tokens minted with that secret. Every process started here is
 * killed by `stop()`, and as a last resort when the test process exits.
 */

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { withTimeout } from './wait.js';

/** clients/js/test-build/helpers → the repository root. */
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
export const TETHER_BIN = process.env['TETHER_BIN'] ?? join(REPO, 'target/debug/tether');

const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/** The environment for tether: ours minus every TETHER_* variable, so a developer's settings cannot leak in. */
function childEnv(dataDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('TETHER_') && k !== 'RUST_LOG') env[k] = v;
  env['TETHER_DATA_DIR'] = dataDir;
  env['RUST_LOG'] = 'warn';
  return env;
}

export interface EdgeOptions {
  /** TOML configuration written to a file and passed with --config. */
  config?: string;
}

export class Edge {
  readonly dataDir: string;
  readonly #configPath: string | undefined;
  #proc: ChildProcess | undefined;
  #port = 0;
  #stderr = '';

  private constructor(dataDir: string, configPath: string | undefined) {
    this.dataDir = dataDir;
    this.#configPath = configPath;
  }

  /** Starts an edge on a free port. */
  static async start(options: EdgeOptions = {}): Promise<Edge> {
    if (!existsSync(TETHER_BIN)) {
      throw new Error(`no tether binary at ${TETHER_BIN}: build it (cargo build) or set TETHER_BIN`);
    }
    const dataDir = mkdtempSync(join(tmpdir(), 'tether-js-'));
    let configPath: string | undefined;
    if (options.config !== undefined) {
      configPath = join(dataDir, 'tether.toml');
      writeFileSync(configPath, options.config);
    }
    const edge = new Edge(dataDir, configPath);
    await edge.#spawn('127.0.0.1:0');
    return edge;
  }

  /** `ws://127.0.0.1:PORT`. */
  get url(): string {
    return `ws://127.0.0.1:${this.#port}`;
  }

  get port(): number {
    return this.#port;
  }

  /** What the edge logged on stderr (for failure messages). */
  get stderr(): string {
    return this.#stderr;
  }

  async #spawn(listen: string): Promise<void> {
    const args = ['serve', '--listen', listen, '--data-dir', this.dataDir];
    if (this.#configPath !== undefined) args.push('--config', this.#configPath);
    const proc = spawn(TETHER_BIN, args, { env: childEnv(this.dataDir), stdio: ['ignore', 'pipe', 'pipe'] });
    live.add(proc);
    proc.once('exit', () => live.delete(proc));
    this.#proc = proc;
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-20_000);
    });
    const lines = createInterface({ input: proc.stdout! });
    const first = new Promise<string>((resolveLine, reject) => {
      lines.once('line', resolveLine);
      proc.once('exit', (code) => reject(new Error(`tether serve exited (${String(code)}) before listening:\n${this.#stderr}`)));
      proc.once('error', reject);
    });
    const line = await withTimeout(first, 10_000, 'tether serve to print its listening line');
    const m = /listening on ws:\/\/[\d.]+:(\d+)/.exec(line);
    if (m === null) throw new Error(`unexpected first line from tether serve: ${line}`);
    this.#port = Number(m[1]);
  }

  /** Mints a token with this edge's secret. */
  token(aud: 'tether-client' | 'tether-backend' | 'tether-operator', options: { sub?: string; ttl?: string } = {}): string {
    const args = ['token', '--sub', options.sub ?? 'mira', '--aud', aud, '--ttl', options.ttl ?? '1h', '--data-dir', this.dataDir];
    const out = spawnSync(TETHER_BIN, args, { env: childEnv(this.dataDir), encoding: 'utf8', timeout: 10_000 });
    if (out.status !== 0) throw new Error(`tether token failed (${String(out.status)}): ${out.stderr}`);
    return out.stdout.trim();
  }

  /** `/metrics` as text. */
  async metrics(): Promise<string> {
    const res = await fetch(`http://127.0.0.1:${this.#port}/metrics`);
    return res.text();
  }

  /** One counter's value from `/metrics` (0 when absent). */
  async counter(name: string): Promise<number> {
    const text = await this.metrics();
    const line = text.split('\n').find((l) => l.startsWith(`${name} `));
    return line === undefined ? 0 : Number(line.split(' ')[1]);
  }

  /** Stops the process (SIGINT: immediate stop, sockets closed with 1001), SIGKILL after 5 s. */
  async stop(): Promise<void> {
    const proc = this.#proc;
    this.#proc = undefined;
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    proc.kill('SIGINT');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }

  /** Stops and starts again on the same port, with the same secret. */
  async restart(): Promise<void> {
    const port = this.#port;
    await this.stop();
    await this.#spawn(`127.0.0.1:${port}`);
  }

  /** Stops and removes the data dir. */
  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}
