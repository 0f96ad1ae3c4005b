"""The MCP server over stdio against lines an agent should not send (issue 40): every request gets an answer."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue

import pytest

ROOT = Path(__file__).resolve().parents[1]
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


class Agent:
    """``python -m retriever.mcp`` with lines written to its stdin and its stdout's lines read with a timeout."""

    def __init__(self, index: Path, *flags: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retriever.mcp", "--index", str(index), "--indexes", "title", *flags],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lines: Queue = Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True).start()

    def send(self, raw: bytes | dict) -> None:
        data = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 60.0) -> dict:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except Empty:
            raise AssertionError("no answer from the MCP server") from None

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def agent(gensim_store):
    a = Agent(gensim_store)
    a.send(INIT)
    assert a.answer(timeout=120)["id"] == 1
    a.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield a
    a.close()


def call(id_: int, claim: str, **more) -> bytes:
    params = {"name": "search_wikipedia", "arguments": {"claim": claim, "k": 2, **more}}
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}).encode()


def test_a_malformed_line_gets_a_parse_error(agent):
    agent.send(b'{"jsonrpc": "2.0", "id": 2, "method": ')
    reply = agent.answer()
    assert reply["error"]["code"] == -32700 and reply["id"] is None


def test_a_lone_surrogate_gets_invalid_params_and_the_server_goes_on(agent):
    agent.send(call(3, "\ud800 Aristotle"))  # json.dumps writes the lone surrogate as the escape "\ud800"
    reply = agent.answer()
    assert reply["id"] == 3 and reply["error"]["code"] == -32602
    agent.send(call(4, "Aristotle tutored Alexander the Great."))
    reply = agent.answer()
    assert reply["id"] == 4 and "result" in reply


def test_json_that_is_no_request_gets_invalid_request(agent):
    agent.send(b'{"jsonrpc": "2.0", "id": 5, "method": 7}')
    reply = agent.answer()
    assert reply["id"] == 5 and reply["error"]["code"] == -32600


def test_the_fusion_flag_is_the_default_of_calls_that_name_none(gensim_store):
    """``--fusion`` as the HTTP server's: the fusion of a call without one; a call may name its own, an unknown one
    gets an error answer."""
    a = Agent(gensim_store, "--fusion", "score")
    try:
        a.send(INIT)
        assert a.answer(timeout=120)["id"] == 1
        a.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        fusions = []
        for id_, more in ((2, {}), (3, {"fusion": "rrf-plain"})):
            a.send(call(id_, "Aristotle tutored Alexander the Great.", **more))
            reply = a.answer()
            assert reply["id"] == id_ and not reply["result"].get("isError")
            fusions.append(reply["result"]["structuredContent"]["fusion"])
        assert fusions == ["score", "rrf-plain"]
        a.send(call(4, "Aristotle", fusion="borda"))
        reply = a.answer()
        assert reply["id"] == 4 and (reply.get("error") or reply["result"]["isError"])
    finally:
        a.close()
