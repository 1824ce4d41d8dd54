#!/usr/bin/env node
// A tiny static server for the example page: this folder at /, and the SDK's
// browser build (clients/js/dist) at /sdk/. No bundler, no dependencies.
//
//   node examples/browser/serve.mjs [--port 8080] [--host 127.0.0.1]
//
// The page is then at http://127.0.0.1:8080/?edge=ws://127.0.0.1:7878&token=…

import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = resolve(fileURLToPath(new URL('.', import.meta.url)));
const SDK = resolve(HERE, '../../clients/js/dist');

const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.png': 'image/png',
  '.svg': 'image/svg+xml',
  '.ts': 'text/plain; charset=utf-8',
};

/** The file for a URL path, or undefined if it is outside the served roots. */
function fileFor(pathname) {
  const [root, rest] = pathname.startsWith('/sdk/') ? [SDK, pathname.slice('/sdk/'.length)] : [HERE, pathname.slice(1) || 'index.html'];
  const file = normalize(join(root, decodeURIComponent(rest)));
  return file === root || file.startsWith(root + sep) ? file : undefined;
}

/** Starts the server; resolves with its URL and a close function. Port 0 picks a free port. */
export function startServer({ port = 8080, host = '127.0.0.1' } = {}) {
  const server = createServer((req, res) => {
    const { pathname } = new URL(req.url ?? '/', 'http://x');
    const file = fileFor(pathname);
    let size = -1;
    try {
      if (file !== undefined && statSync(file).isFile()) size = statSync(file).size;
    } catch {
      // not found below
    }
    if (file === undefined || size < 0) {
      const hint = pathname.startsWith('/sdk/') ? ' (build the SDK first: cd clients/js && npm run build)' : '';
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`not found: ${pathname}${hint}\n`);
      return;
    }
    res.writeHead(200, {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'content-length': size,
      'cache-control': 'no-store',
    });
    createReadStream(file).pipe(res);
  });
  return new Promise((resolveStart, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const addr = server.address();
      resolveStart({
        url: `http://${host}:${addr.port}`,
        close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
      });
    });
  });
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(name);
    return i > 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
  };
  const { url } = await startServer({ port: Number(arg('--port', '8080')), host: arg('--host', '127.0.0.1') });
  console.log(`serving ${url}  (SDK from ${SDK})`);
}
