"""The integrations' server clients when the server is wrong or down (issue 40): a WikigroundError subclass that
names the URL and what answered, never a KeyError, a raw httpx error, or every page "not found"."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from retriever.api import Retriever
from retriever.integrations.source import EvidenceSource
from retriever.serve.state import ServerState
from tests.support.hostile import down_url
from tests.test_server_bounds import Served
from wikiground.errors import ServerAnswerError, WikigroundError


class Other:
    """An HTTP server that is not this project: every GET and POST answers ``body`` with ``content_type``."""

    def __init__(self, body: bytes, content_type: str, status: int = 200):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(outer.status)
                self.send_header("content-type", outer.content_type)
                self.send_header("content-length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            do_GET = do_POST = _answer  # noqa: N815 - the http.server names

        self.body, self.content_type, self.status = body, content_type, status
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Other:
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_server_that_is_down_is_named():
    url = down_url().removesuffix("/w/api.php")
    with pytest.raises(ServerAnswerError, match="cannot be reached") as info:
        EvidenceSource(url=url).search("Aristotle", 3)
    assert url in str(info.value) and isinstance(info.value, WikigroundError)


@pytest.mark.parametrize(
    ("body", "content_type", "status", "words"),
    [
        (json.dumps({"hello": "world"}).encode(), "application/json", 200, "without an 'evidence' list"),
        (b"<html><body>It works!</body></html>", "text/html", 200, r"not JSON \(text/html\)"),
        (json.dumps({"detail": "Not Found"}).encode(), "application/json", 404, "HTTP 404 without a wikiground error"),
    ],
)
def test_a_server_that_is_not_wikiground_is_named(body, content_type, status, words):
    with Other(body, content_type, status) as other:
        with pytest.raises(ServerAnswerError, match=words) as info:
            EvidenceSource(url=other.url).search("Aristotle", 3)
        assert other.url in str(info.value)
        with pytest.raises(ServerAnswerError):
            EvidenceSource(url=other.url).page("Aristotle")


def test_a_wrong_base_path_is_an_error_not_every_page_missing(gensim_store):
    state = ServerState(lambda: Retriever.open(gensim_store))
    state.start()
    with Served(state) as s:
        right = EvidenceSource(url=s.url)
        assert right.page("Aristotle")["title"] == "Aristotle"
        assert right.page("No Such Page Zorblax") is None
        wrong = EvidenceSource(url=s.url + "/wiki")
        with pytest.raises(ServerAnswerError, match="no route") as info:
            wrong.page("Aristotle")
        assert info.value.status == 404 and s.url + "/wiki" in str(info.value)
        with pytest.raises(ServerAnswerError, match="HTTP 404"):
            wrong.search("Aristotle", 3)


def test_langchain_and_dspy_raise_the_same_error():
    url = down_url().removesuffix("/w/api.php")
    langchain = pytest.importorskip("retriever.integrations.langchain")
    with pytest.raises(ServerAnswerError, match="cannot be reached"):
        langchain.WikigroundRetriever(url=url).invoke("Aristotle")
    dspy = pytest.importorskip("retriever.integrations.dspy")
    with pytest.raises(ServerAnswerError, match="cannot be reached"):
        dspy.WikigroundRetrieve(url=url)("Aristotle")
