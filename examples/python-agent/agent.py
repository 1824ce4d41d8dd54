"""An agent loop over tether's MCP endpoint, with a scripted stand-in for the model.

The agent is an ordinary MCP client (the official `mcp` package over Streamable
HTTP). tether serves the tools of the user's devices at `/mcp`; the bearer
token is the user's, so the agent reaches that user's devices and no one
else's. The "model" here is a script: no LLM and no network besides the
endpoint. It does what a model does with tether:

1. reads the tools and the device's context (the server's instructions);
2. calls two tools;
3. re-plans when a call comes back `isError` (the text is written for it);
4. notices mid-turn that the device's tools changed (`list_changed`) and
   uses the tool that appeared;
5. collects the customer's signature: a tool that takes as long as the
   customer does, so the device runs it as a task. tether's `/mcp` waits for
   it (up to `[budgets] task_wait_ms`); if it still runs then, the result says
   so and names the task in `_meta["tether.dev/task"]`, and the agent calls
   again with that to wait for the same task (the device does not run it twice);
6. submits the work order: a destructive tool, so tether answers that it
   needs the user's approval; the agent asks its user (here `--approve`
   answers for them) and, only if they agree, calls again presenting the
   approval in `_meta["tether.dev/approval"]` — the approval covers exactly
   that call, once.

Run it against `tether serve` and `tether sim-device` (see README.md):

    python agent.py --url http://127.0.0.1:7878/mcp --token "$(tether token --sub mira --aud tether-client)"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@dataclass
class ScriptedModel:
    """Stands in for the LLM: decides the next tool call from what it has seen."""

    tools: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def see_tools(self, names: list[str]) -> None:
        self.tools = names

    def fix_arguments(self, tool: str, arguments: dict[str, Any], error: str) -> dict[str, Any]:
        """What a model does with an `isError` about arguments: read the sentence, fix the call."""
        self.notes.append(f"re-planned {tool} after: {error}")
        if tool == "client__scan_barcode":
            return {**arguments, "symbologies": ["qr", "code128"]}
        return arguments


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content).strip()


async def call(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(name, arguments)
    outcome = "isError" if result.is_error else "ok"
    print(f"call {name} {json.dumps(arguments)} -> {outcome}: {text_of(result)[:160]}")
    return result


def still_running(result: Any) -> str | None:
    """The task a call started when tether stopped waiting for it before it ended."""
    task = (result.meta or {}).get("tether.dev/task")
    return task if isinstance(task, str) and not result.is_error else None


def approval_asked(result: Any) -> str | None:
    """The approval id tether asks for when a call needs the user's approval."""
    error = (result.meta or {}).get("tether.dev/error") or {}
    return error.get("approval") if error.get("kind") == "approval_required" else None


async def run(url: str, token: str, approve: bool) -> int:
    model = ScriptedModel()
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        print(f"connected: MCP {client.protocol_version}")
        context = client.instructions or ""
        print(f"instructions: {len(context)} bytes, device context included: {'<client-context>' in context}")
        listed = await client.list_tools()
        model.see_tools([t.name for t in listed.tools])
        print(f"tools: {len(model.tools)} ({', '.join(model.tools[:3])}, ...)")

        # Changes arrive on a subscription (MCP 2026-07-28): the model's tool list
        # is only as good as the last list_changed it heard.
        async with client.listen(tools_list_changed=True) as changes:
            # Two calls, as a model would make them.
            await call(client, "client__get_visible_screen", {})
            arguments: dict[str, Any] = {"timeoutMs": 1500}
            scanned = await call(client, "client__scan_barcode", arguments)
            if scanned.is_error:
                # The text says what was wrong; the model fixes the call and tries again.
                arguments = model.fix_arguments("client__scan_barcode", arguments, text_of(scanned))
                scanned = await call(client, "client__scan_barcode", arguments)
            if scanned.is_error:
                print("the scan failed twice; giving up", file=sys.stderr)
                return 1

            # Opening a work order navigates the app: its tools change mid-turn.
            await call(client, "client__open_work_order", {"workOrderId": "WO-1182"})
            event = await asyncio.wait_for(anext(changes), timeout=10)
            print(f"mid-turn change: {type(event).__name__}")
            before = set(model.tools)
            listed = await client.list_tools()
            model.see_tools([t.name for t in listed.tools])
            appeared = sorted(set(model.tools) - before)
            print(f"tools now: {len(model.tools)}; new: {', '.join(appeared) or 'none'}")
            if "client__add_work_note" not in model.tools:
                print("expected client__add_work_note once a work order is open", file=sys.stderr)
                return 1
            await call(client, "client__add_work_note", {"text": "Scanned the asset tag; label printed."})

            # Longer than one wait: follow the task until it ends, a bounded number of times.
            signed = await call(client, "client__collect_signature", {})
            for _ in range(10):
                task = still_running(signed)
                if task is None:
                    break
                print(f"task {task} still running; waiting for it again")
                signed = await client.call_tool("client__collect_signature", {}, meta={"tether.dev/task": task})
                outcome = "isError" if signed.is_error else "ok"
                print(f"call client__collect_signature followed -> {outcome}: {text_of(signed)[:160]}")
            if signed.is_error or still_running(signed) is not None:
                print("the signature was not collected", file=sys.stderr)
                return 1

            # A write: tether runs it only with the user's approval of exactly this call.
            form = {"formId": "WO-1182"}
            submitted = await call(client, "client__submit_form", form)
            approval = approval_asked(submitted)
            if approval is None:
                print("expected submit_form to need the user's approval", file=sys.stderr)
                return 1
            print(f"asking the user: submit form WO-1182? -> {'yes' if approve else 'no'}")
            if approve:
                submitted = await client.call_tool("client__submit_form", form, meta={"tether.dev/approval": approval})
                outcome = "isError" if submitted.is_error else "ok"
                print(f"call client__submit_form approved -> {outcome}: {text_of(submitted)[:160]}")
                if submitted.is_error:
                    return 1

        for note in model.notes:
            print(f"model: {note}")
        print("turn complete")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:7878/mcp", help="tether's MCP endpoint")
    parser.add_argument("--token", required=True, help="the user's tether-client token (or the identity provider's)")
    parser.add_argument("--approve", choices=["yes", "no"], default="yes", help="the user's answer when asked to approve a write")
    args = parser.parse_args()
    sys.exit(asyncio.run(run(args.url, args.token, args.approve == "yes")))


if __name__ == "__main__":
    main()
