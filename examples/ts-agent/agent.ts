/**
 * An agent loop over tether's MCP endpoint, with a scripted stand-in for the model.
 *
 * The agent is an ordinary MCP client (the official `@modelcontextprotocol/sdk`
 * over Streamable HTTP). tether serves the tools of the user's devices at
 * `/mcp`; the bearer token is the user's, so the agent reaches that user's
 * devices and no one else's. The "model" here is a script: no LLM and no
 * network besides the endpoint. It does what a model does with tether:
 *
 * 1. reads the tools and the device's context (the server's instructions);
 * 2. calls two tools;
 * 3. re-plans when a call comes back `isError` (the text is written for it);
 * 4. notices mid-turn that the device's tools changed (`list_changed`) and
 *    uses the tool that appeared.
 *
 * Run it against `tether serve` and `tether sim-device` (see README.md):
 *
 *     node dist/agent.js --url http://127.0.0.1:7878/mcp --token "$(tether token --sub mira --aud tether-client)"
 */

import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ToolListChangedNotificationSchema,
  type CallToolResult,
  type ToolListChangedNotification,
} from "@modelcontextprotocol/sdk/types.js";

type Arguments = Record<string, unknown>;

/** Stands in for the LLM: decides the next tool call from what it has seen. */
class ScriptedModel {
  tools: string[] = [];
  readonly notes: string[] = [];

  seeTools(names: string[]): void {
    this.tools = names;
  }

  /** What a model does with an `isError` about arguments: read the sentence, fix the call. */
  fixArguments(tool: string, args: Arguments, error: string): Arguments {
    this.notes.push(`re-planned ${tool} after: ${error}`);
    if (tool === "client__scan_barcode") {
      return { ...args, symbologies: ["qr", "code128"] };
    }
    return args;
  }
}

/**
 * The tools/list_changed notifications heard since it was made, in order.
 * The SDK calls the handler whenever one arrives, possibly before the agent
 * asks for it, so they are queued rather than awaited one at a time.
 */
class ChangeFeed {
  private readonly heard: ToolListChangedNotification[] = [];
  private waiter: ((n: ToolListChangedNotification) => void) | undefined;

  constructor(client: Client) {
    client.setNotificationHandler(ToolListChangedNotificationSchema, (notification) => {
      if (this.waiter) {
        const wake = this.waiter;
        this.waiter = undefined;
        wake(notification);
      } else {
        this.heard.push(notification);
      }
    });
  }

  /** The next change, or an error after `timeoutMs`. */
  next(timeoutMs: number): Promise<ToolListChangedNotification> {
    const queued = this.heard.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        reject(new Error(`no tools/list_changed within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiter = (n) => {
        clearTimeout(timer);
        resolve(n);
      };
    });
  }
}

function textOf(result: CallToolResult): string {
  return result.content
    .map((block) => (block.type === "text" ? block.text : ""))
    .join(" ")
    .trim();
}

async function call(client: Client, name: string, args: Arguments): Promise<CallToolResult> {
  // The SDK's return type also admits the pre-2024-11-05 `toolResult` shape;
  // tether always answers with `content`, which the schema check below asserts.
  const result = (await client.callTool({ name, arguments: args }, undefined, { timeout: 30_000 })) as CallToolResult;
  if (!Array.isArray(result.content)) throw new Error(`${name} answered without content`);
  const outcome = result.isError ? "isError" : "ok";
  console.log(`call ${name} ${JSON.stringify(args)} -> ${outcome}: ${textOf(result).slice(0, 160)}`);
  return result;
}

async function listToolNames(client: Client): Promise<string[]> {
  const listed = await client.listTools();
  return listed.tools.map((t) => t.name);
}

async function run(url: string, token: string): Promise<number> {
  const model = new ScriptedModel();
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "tether-ts-agent", version: "0.1.0" });
  // Registered before connecting: changes can arrive as soon as the session exists.
  const changes = new ChangeFeed(client);
  await client.connect(transport);
  try {
    // The client keeps no negotiated version; the transport does (it sends it as a header).
    console.log(`connected: MCP ${transport.protocolVersion ?? "unknown"}`);
    const context = client.getInstructions() ?? "";
    const bytes = Buffer.byteLength(context, "utf8");
    console.log(`instructions: ${bytes} bytes, device context included: ${context.includes("<client-context>")}`);
    model.seeTools(await listToolNames(client));
    console.log(`tools: ${model.tools.length} (${model.tools.slice(0, 3).join(", ")}, ...)`);

    // Two calls, as a model would make them.
    await call(client, "client__get_visible_screen", {});
    let args: Arguments = { timeoutMs: 1500 };
    let scanned = await call(client, "client__scan_barcode", args);
    if (scanned.isError) {
      // The text says what was wrong; the model fixes the call and tries again.
      args = model.fixArguments("client__scan_barcode", args, textOf(scanned));
      scanned = await call(client, "client__scan_barcode", args);
    }
    if (scanned.isError) {
      console.error("the scan failed twice; giving up");
      return 1;
    }

    // Opening a work order navigates the app: its tools change mid-turn.
    await call(client, "client__open_work_order", { workOrderId: "WO-1182" });
    const event = await changes.next(10_000);
    console.log(`mid-turn change: ${event.method}`);
    const before = new Set(model.tools);
    model.seeTools(await listToolNames(client));
    const appeared = model.tools.filter((name) => !before.has(name)).sort();
    console.log(`tools now: ${model.tools.length}; new: ${appeared.join(", ") || "none"}`);
    if (!model.tools.includes("client__add_work_note")) {
      console.error("expected client__add_work_note once a work order is open");
      return 1;
    }
    const noted = await call(client, "client__add_work_note", { text: "Scanned the asset tag; label printed." });
    if (noted.isError) {
      console.error("the work note was refused");
      return 1;
    }

    for (const note of model.notes) console.log(`model: ${note}`);
    console.log("turn complete");
    return 0;
  } finally {
    // Closing ends the SSE stream the transport holds open, so the process can exit.
    await client.close();
  }
}

function main(): void {
  const { values } = parseArgs({
    options: {
      url: { type: "string", default: "http://127.0.0.1:7878/mcp" },
      token: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log("usage: node dist/agent.js [--url URL] --token TOKEN  (or TETHER_USER_TOKEN in the environment)");
    return;
  }
  const token = values.token ?? process.env["TETHER_USER_TOKEN"];
  if (!token) {
    console.error("agent: --token (or TETHER_USER_TOKEN) is required: the user's tether-client token");
    process.exitCode = 2;
    return;
  }
  run(values.url, token).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      console.error(`agent: ${err instanceof Error ? err.message : String(err)}`);
      process.exitCode = 1;
    },
  );
}

main();
