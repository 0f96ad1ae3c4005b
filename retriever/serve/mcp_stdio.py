"""The MCP server's stdio transport, answering every request: the mcp package's own transport drops a line it
cannot read (not JSON, a lone surrogate that its validator refuses, not a JSON-RPC message) without a word, and the
agent that sent it waits for ever. Each line is checked here first:

- not JSON: ``-32700`` (Parse error), id null;
- a string holding a lone surrogate (``"\\ud800"``: no Unicode text has one): ``-32602`` (Invalid params) to a
  request, nothing to a notification;
- JSON but no JSON-RPC message: ``-32600`` (Invalid Request) to what carries an id.

Everything else goes to the mcp package's transport as it came.
"""

from __future__ import annotations

import json
import sys
from io import TextIOWrapper
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def _has_lone_surrogate(obj: Any) -> bool:
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(obj, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in obj.items())
    if isinstance(obj, list):
        return any(_has_lone_surrogate(v) for v in obj)
    return False


def _error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def _request_id(obj: Any) -> Any:
    """The id of a request (a JSON-RPC id is a string or a number), else None."""
    if isinstance(obj, dict) and "method" in obj:
        id_ = obj.get("id")
        if isinstance(id_, str | int) and not isinstance(id_, bool) and not _has_lone_surrogate(id_):
            return id_
    return None


def check_line(line: str) -> tuple[bool, dict[str, Any] | None]:
    """(pass the line on, the error answer to send instead or None)."""
    if not line.strip():
        return False, None
    try:
        obj = json.loads(line)
    except ValueError as exc:
        return False, _error(None, PARSE_ERROR, f"Parse error: {exc}")
    if _has_lone_surrogate(obj):
        id_ = _request_id(obj)
        message = "Invalid params: a string holds a lone surrogate (not Unicode text)"
        return False, _error(id_, INVALID_PARAMS, message) if id_ is not None else None
    import mcp_types

    try:
        mcp_types.jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except ValueError as exc:
        id_ = _request_id(obj) if isinstance(obj, dict) else None
        if id_ is None and isinstance(obj, dict) and isinstance(obj.get("id"), str | int):
            id_ = obj["id"]
        first = str(exc).splitlines()[0]
        return False, _error(id_, INVALID_REQUEST, f"Invalid Request: {first}") if id_ is not None else None
    return True, None


class _Output:
    """The transport's stdout, shared with the checker's answers one whole line at a time."""

    def __init__(self, target: Any):
        import anyio

        self.target = target
        self.lock = anyio.Lock()

    async def write(self, text: str) -> None:
        async with self.lock:
            await self.target.write(text)

    async def flush(self) -> None:
        async with self.lock:
            await self.target.flush()


class _CheckedLines:
    """The transport's stdin: the lines :func:`check_line` passes; the answers to the others go out at once."""

    def __init__(self, source: Any, out: _Output):
        self.source, self.out = source, out

    def __aiter__(self) -> Any:
        return self._lines()

    async def _lines(self) -> Any:
        async for line in self.source:
            keep, answer = check_line(line)
            if keep:
                yield line
            elif answer is not None:
                await self.out.write(json.dumps(answer) + "\n")
                await self.out.flush()


def run_stdio(server: Any) -> None:
    """Serve ``server`` (``mcp.server.mcpserver.MCPServer``) over stdin and stdout, every request answered."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def serve() -> None:
        raw_in = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        out = _Output(anyio.wrap_file(TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="replace")))
        async with stdio_server(stdin=_CheckedLines(raw_in, out), stdout=out) as (read_stream, write_stream):
            low = server._lowlevel_server  # the package's run_stdio_async, with these two streams
            await low.run(read_stream, write_stream, low.create_initialization_options())

    anyio.run(serve)
