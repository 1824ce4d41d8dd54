"""An MCP server on the official Python SDK (`mcp` 2.3.0), for tests/bridge.rs.

It runs over stdio and speaks both eras: 2026-07-28 (stateless, change
notifications on a `subscriptions/listen` stream) and the legacy
`initialize` handshake. It is the server the bridge test drives through a
real edge and the real tether-core:

- `echo` answers at once;
- `trace` answers with the W3C `traceparent` and `tracestate` its request's
  `_meta` carried (what the bridge handed on from the edge);
- `slow` sleeps, and records on stderr and in the `--record` file that it
  was cancelled, so a test can see a cancellation reach the server;
- `enable_extra` adds the tool `extra` at runtime and announces it;
- `reject` fails with a JSON-RPC error (not an `isError` result);
- `fail` fails as a tool error: an `isError` result with text only, no code;
- `abandon` cancels its own call from the server's side, as a misbehaving
  server might, and never answers in time.

With `--oversized` it also declares `huge`, a tool too large for any
`tools/list` frame, and its instructions run past one frame too.

Usage: server.py [--record PATH] [--oversized]
"""

import sys

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

RECORD = None
if "--record" in sys.argv:
    RECORD = sys.argv[sys.argv.index("--record") + 1]

INSTRUCTIONS = (
    "Tether test server on the Python MCP SDK. Call `echo` to hear a message back; "
    "`slow` waits the seconds it is given."
)
OVERSIZED = "--oversized" in sys.argv
if OVERSIZED:
    INSTRUCTIONS += " More." * 4000  # past the edge's 15,360-byte frame

mcp = MCPServer("tether-python-test", version="2.3.0-test", instructions=INSTRUCTIONS)


def note(line: str) -> None:
    """One line on stderr (the bridge logs it) and, with --record, in the record file."""
    print(line, file=sys.stderr, flush=True)
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@mcp.tool()
def echo(message: str) -> str:
    """Echo a message back."""
    return f"Echo: {message}"


@mcp.tool()
def trace(ctx: Context) -> str:
    """The trace context this call arrived with."""
    meta = ctx.request_context.meta or {}
    return f"{meta.get('traceparent')} {meta.get('tracestate')}"


@mcp.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep for `seconds`, then say so. Records a cancellation if it is stopped first."""
    note(f"slow started id={ctx.request_id} seconds={seconds}")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        note(f"slow cancelled id={ctx.request_id}")
        raise
    note(f"slow finished id={ctx.request_id}")
    return f"slept {seconds}s"


@mcp.tool()
async def enable_extra(ctx: Context) -> str:
    """Register the tool `extra` at runtime and announce the change."""

    def extra() -> str:
        """A tool added at runtime."""
        return "extra!"

    mcp.add_tool(extra, name="extra", description="Added at runtime by enable_extra.")
    # 2026-07-28 clients hear it on their subscriptions/listen stream ...
    await ctx.notify_tools_changed()
    # ... legacy (initialize) sessions hear the bare notification.
    if ctx.protocol_version != "2026-07-28":
        await ctx.session.send_tool_list_changed()
    note(f"enable_extra announced a new tool (protocol {ctx.protocol_version})")
    return "extra enabled"


@mcp.tool()
async def abandon(ctx: Context) -> str:
    """Cancel this very call from the server's side (a misbehaving server), then never answer it."""
    request_id = int(ctx.request_id) if str(ctx.request_id).isdigit() else ctx.request_id
    params = types.CancelledNotificationParams(request_id=request_id, reason="the server gave up")
    await ctx.session.send_notification(types.CancelledNotification(params=params))
    note(f"abandon cancelled id={ctx.request_id} from the server side")
    await anyio.sleep(5)
    return "too late"


@mcp.tool()
def fail(reason: str) -> str:
    """Always fails as a tool error: an isError result with text only."""
    raise ToolError(f"the tool failed: {reason}")


@mcp.tool()
def reject(reason: str) -> str:
    """Always fails with a JSON-RPC error."""
    raise MCPError(code=-32603, message=f"the server refused: {reason}")


if OVERSIZED:

    def huge() -> str:
        return "never declared"

    mcp.add_tool(huge, name="huge", description="Too large. " * 2000)


if __name__ == "__main__":
    note("tether python test server starting")
    mcp.run()  # stdio
