"""Scenario runner for tests/mcp_endpoint.rs: the official Python `mcp` client
against tether's MCP endpoint, printing one JSON line of what it observed.

    python client_checks.py MODE SCENARIO URL TOKEN [ARG...]

MODE is `legacy` (the 2025-11-25 initialize handshake) or `auto` (discover,
then 2026-07-28). TOKEN "" sends no Authorization header. Scenarios match
tests/mcp-servers/ts_client.mjs: list, call, connect, list_changed, cancel,
progress; `approve` (Python only) answers tether's approval elicitation. Exit 0 whenever an observation was printed, failures included.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content).strip()


STATUSES: list[int] = []
"""Every HTTP status the client's transport saw (the SDK's errors do not carry it)."""


async def record_status(response: httpx2.Response) -> None:
    STATUSES.append(response.status_code)


def client(url: str, token: str, mode: str, **kwargs: Any) -> tuple[httpx2.AsyncClient, Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [record_status]})
    return http, Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=30, **kwargs)


async def scenario(mode: str, name: str, url: str, token: str, args: list[str]) -> dict[str, Any]:
    if name == "connect":
        http, c = client(url, token, mode)
        try:
            async with http, c:
                return {"ok": True}
        except BaseException as err:  # the SDK wraps transport failures in groups
            return {"ok": False, "error": repr(err), "code": None, "statuses": STATUSES}

    if name == "list":
        http, c = client(url, token, mode)
        async with http, c:
            listed = await c.list_tools()
            tools = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed.tools]
            return {"protocol": c.protocol_version, "instructions": c.instructions, "tools": tools}

    if name == "call":
        tool, arguments = args[0], json.loads(args[1])
        http, c = client(url, token, mode)
        async with http, c:
            started = time.monotonic()
            result = await c.call_tool(tool, arguments)
            ms = int((time.monotonic() - started) * 1000)
            return {"isError": bool(result.is_error), "text": text_of(result), "structuredContent": result.structured_content, "ms": ms}

    if name == "approve":
        # The user answers tether's elicitation/create with ANSWER (accept or decline).
        tool, arguments, answer = args[0], json.loads(args[1]), args[2]
        asked: list[str] = []

        async def on_elicit(ctx: Any, params: Any) -> Any:
            asked.append(getattr(params, "message", ""))
            if answer == "accept":
                return types.ElicitResult(action="accept", content={"approve": True})
            return types.ElicitResult(action="decline")

        http, c = client(url, token, mode, elicitation_callback=on_elicit)
        async with http, c:
            result = await c.call_tool(tool, arguments)
            meta = result.meta or {}
            return {"isError": bool(result.is_error), "text": text_of(result), "asked": asked,
                    "receipt": meta.get("tether.dev/receipt")}

    if name == "list_changed":
        tool, arguments = args[0], json.loads(args[1])
        heard = asyncio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                heard.set()

        http, c = client(url, token, mode, message_handler=on_message)
        async with http, c:
            if c.protocol_version >= "2026-07-28":
                async with c.listen(tools_list_changed=True) as changes:
                    await c.call_tool(tool, arguments)
                    try:
                        await asyncio.wait_for(anext(changes), timeout=10)
                        heard.set()
                    except (asyncio.TimeoutError, StopAsyncIteration):
                        pass
            else:
                await c.call_tool(tool, arguments)
                try:
                    await asyncio.wait_for(heard.wait(), timeout=10)
                except asyncio.TimeoutError:
                    pass
            listed = await c.list_tools()
            return {"notified": heard.is_set(), "tools": [t.name for t in listed.tools]}

    if name == "cancel":
        tool, arguments, wait_ms = args[0], json.loads(args[1]), int(args[2])
        http, c = client(url, token, mode)
        async with http, c:
            task = asyncio.create_task(c.call_tool(tool, arguments))
            await asyncio.sleep(wait_ms / 1000)
            task.cancel()  # the SDK sends notifications/cancelled for a cancelled request
            try:
                await task
                aborted, error = False, ""
            except asyncio.CancelledError as err:
                aborted, error = True, repr(err)
            await asyncio.sleep(0.3)
            return {"aborted": aborted, "error": error}

    if name == "progress":
        tool, arguments = args[0], json.loads(args[1])
        seen: list[dict[str, Any]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append({"progress": progress, "total": total, "message": message})

        http, c = client(url, token, mode)
        async with http, c:
            result = await c.call_tool(tool, arguments, progress_callback=on_progress)
            return {"isError": bool(result.is_error), "progress": seen}

    raise SystemExit(f"unknown scenario {name}")


def main() -> None:
    mode, name, url, token, *args = sys.argv[1:]
    observed = asyncio.run(scenario(mode, name, url, token, args))
    print(json.dumps(observed))


if __name__ == "__main__":
    main()
