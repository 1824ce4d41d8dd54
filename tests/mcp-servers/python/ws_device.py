"""The test server of server.py, run as a tether device over a WebSocket.

The official Python MCP SDK (`mcp` 2.3.0) serves both eras over any pair of
message streams; this file is only the transport: it dials the edge's
`/v1/client` with a device token and carries one JSON-RPC message per text
frame, both ways. With `--announce 2026-07-28` it tells the edge at the
upgrade (the `MCP-Protocol-Version` header) that it speaks that revision;
without it, the edge greets it with `initialize` and the SDK answers in the
legacy era. For tests/revisions.rs.

Usage: ws_device.py EDGE_URL TOKEN [--announce REVISION]
"""

import sys

import anyio
import mcp_types as types
import websockets
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from server import mcp


async def main(url: str, token: str, announce: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    if announce:
        headers["MCP-Protocol-Version"] = announce
    async with websockets.connect(f"{url}/v1/client", additional_headers=headers, subprotocols=["tether.v1"]) as ws:
        read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
        write_stream, write_reader = create_context_streams[SessionMessage](0)

        async def edge_to_server() -> None:
            async with read_writer:
                async for text in ws:
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                    except Exception as exc:  # a malformed frame goes to the SDK as an error, as stdio does
                        await read_writer.send(exc)
                        continue
                    await read_writer.send(SessionMessage(message))

        async def server_to_edge() -> None:
            async with write_reader:
                async for session_message in write_reader:
                    await ws.send(session_message.message.model_dump_json(by_alias=True, exclude_unset=True))

        async with anyio.create_task_group() as tg:
            tg.start_soon(edge_to_server)
            tg.start_soon(server_to_edge)
            server = mcp._lowlevel_server
            await server.run(read_stream, write_stream, server.create_initialization_options())
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    announce = sys.argv[sys.argv.index("--announce") + 1] if "--announce" in sys.argv else None
    print("ws device starting", file=sys.stderr, flush=True)
    anyio.run(main, sys.argv[1], sys.argv[2], announce)
