// Drives tether's /mcp endpoint with the official TypeScript MCP SDK's client,
// so the Rust tests can check what a client nobody here wrote observes.
//
//   node tests/mcp-servers/ts_client.mjs SCENARIO URL TOKEN [ARG...]
//
// TOKEN "" sends no Authorization header. Prints exactly one JSON line on
// stdout and exits 0, also when what it observed is a failure; a non-zero exit
// means the script itself broke. Scenarios and what they print:
//
//   list                          {protocol, instructions, tools: [{name, description, inputSchema, outputSchema}]}
//   call NAME ARGS_JSON           {isError, text, structuredContent, ms}
//   connect                       {ok: true} | {ok: false, error, code}
//   list_changed NAME ARGS_JSON   {notified, isError, tools: [names after the call]}
//   cancel NAME ARGS_JSON WAIT_MS {aborted, error}
//   progress NAME ARGS_JSON       {isError, progress: [{progress, total, message}]}
//
// Except in `connect`, a thrown error (refused connection, JSON-RPC error,
// timeout) prints what was observed so far plus {error, code}, where code is
// the SDK's: the HTTP status for StreamableHTTPError, the JSON-RPC code for
// McpError. `call` and `progress` list the tools first, as a real client
// would, which also turns on the SDK's check of structuredContent against
// each tool's outputSchema.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const REQUEST = { timeout: 30_000 }; // per request, so no call can hang the test
const LIST_CHANGED_WAIT_MS = 10_000;
const CANCEL_FLUSH_MS = 300;
const DEADLINE_MS = 38_000; // the whole script, connect and close included

// stdout carries the one JSON line; anything the SDK might log goes to stderr.
const write = process.stdout.write.bind(process.stdout);
console.log = console.error;
console.info = console.error;
let printed = false;
function emit(observation) {
  if (printed) return;
  printed = true;
  write(JSON.stringify(observation) + "\n");
}

// If anything keeps the process alive past the deadline, that is the observation.
setTimeout(() => {
  emit({ error: `the scenario did not finish within ${DEADLINE_MS} ms`, code: null });
  process.exit(0);
}, DEADLINE_MS).unref();

const [scenario, url, token, ...args] = process.argv.slice(2);
if (!scenario || !url || token === undefined) {
  console.error("usage: ts_client.mjs SCENARIO URL TOKEN [ARG...]");
  process.exit(2);
}

// A malformed argument is the test's mistake, not an observation: exit 2.
function usage(message) {
  console.error(`ts_client: ${message}`);
  process.exit(2);
}
function parseJson(text, what) {
  try {
    return JSON.parse(text ?? "");
  } catch {
    usage(`${what} is not JSON: ${text}`);
  }
}

const errorCode = (err) => (err && typeof err === "object" && "code" in err ? err.code ?? null : null);
const textOf = (result) =>
  (result.content ?? [])
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join(" ");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: token === "" ? {} : { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "tether-test-ts-client", version: "0.0.0" });

// Heard from before connecting, so a change during the first call is not missed.
let notifyListChanged = () => {};
let listChangedCount = 0;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  listChangedCount += 1;
  notifyListChanged();
});
function listChanged(timeoutMs) {
  if (listChangedCount > 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    notifyListChanged = () => {
      clearTimeout(timer);
      resolve(true);
    };
  });
}

// What a scenario observed so far; on a thrown error it is printed with the error.
const seen = {};

const scenarios = {
  async list() {
    await client.connect(transport, REQUEST);
    // The client keeps no negotiated version; the transport does (it sends it as a header).
    seen.protocol = transport.protocolVersion ?? null;
    seen.instructions = client.getInstructions() ?? null;
    const { tools } = await client.listTools(undefined, REQUEST);
    seen.tools = tools.map((t) => ({
      name: t.name,
      description: t.description ?? null,
      inputSchema: t.inputSchema,
      outputSchema: t.outputSchema ?? null,
    }));
  },

  async call(name, argsJson) {
    const params = { name, arguments: parseJson(argsJson, "ARGS_JSON") };
    await client.connect(transport, REQUEST);
    await client.listTools(undefined, REQUEST);
    const started = performance.now();
    try {
      const result = await client.callTool(params, undefined, REQUEST);
      seen.isError = result.isError === true;
      seen.text = textOf(result);
      seen.structuredContent = result.structuredContent ?? null;
    } finally {
      seen.ms = Math.round(performance.now() - started);
    }
  },

  async connect() {
    try {
      await client.connect(transport, REQUEST);
      seen.ok = true;
    } catch (err) {
      seen.ok = false;
      seen.error = String(err);
      seen.code = errorCode(err);
    }
  },

  async list_changed(name, argsJson) {
    const params = { name, arguments: parseJson(argsJson, "ARGS_JSON") };
    await client.connect(transport, REQUEST);
    const result = await client.callTool(params, undefined, REQUEST);
    seen.isError = result.isError === true;
    seen.notified = await listChanged(LIST_CHANGED_WAIT_MS);
    const { tools } = await client.listTools(undefined, REQUEST);
    seen.tools = tools.map((t) => t.name);
  },

  async cancel(name, argsJson, waitMs) {
    const params = { name, arguments: parseJson(argsJson, "ARGS_JSON") };
    const wait = Number(waitMs ?? "0");
    if (!Number.isFinite(wait) || wait < 0) usage(`WAIT_MS is not a number: ${waitMs}`);
    await client.connect(transport, REQUEST);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), wait);
    try {
      await client.callTool(params, undefined, { ...REQUEST, signal: controller.signal });
      seen.aborted = false; // the answer came first
      seen.error = null;
    } catch (err) {
      // The SDK rejects an aborted request with McpError(RequestTimeout, String(signal.reason)).
      seen.aborted = controller.signal.aborted;
      seen.error = String(err);
    } finally {
      clearTimeout(timer);
    }
    // The SDK sends notifications/cancelled without awaiting it; give the POST time to land.
    await sleep(CANCEL_FLUSH_MS);
  },

  async progress(name, argsJson) {
    const params = { name, arguments: parseJson(argsJson, "ARGS_JSON") };
    seen.progress = [];
    await client.connect(transport, REQUEST);
    await client.listTools(undefined, REQUEST);
    const onprogress = (p) => {
      seen.progress.push({ progress: p.progress, total: p.total ?? null, message: p.message ?? null });
    };
    const result = await client.callTool(params, undefined, { ...REQUEST, onprogress });
    seen.isError = result.isError === true;
  },
};

const run = scenarios[scenario];
if (!run) usage(`unknown scenario ${scenario}; one of ${Object.keys(scenarios).join(", ")}`);

try {
  await run(...args);
  emit(seen);
} catch (err) {
  emit({ ...seen, error: String(err), code: errorCode(err) });
}
try {
  await client.close();
} catch (err) {
  console.error(`ts_client: close failed: ${err}`);
}
