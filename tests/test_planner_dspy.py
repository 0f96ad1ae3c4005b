"""The multi-hop DSPy planner under the real ``dspy`` package: DSPy's own DummyLM in-process, and a real
``dspy.LM`` pointed at an OpenAI-compatible server on 127.0.0.1 from the query command (``--planner dspy --lm``),
recorded, then replayed with no LM by the command and by the server's ``/search``."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.conftest import GENSIM_DUMP
from tests.test_serve import ThreadServer

# A real bridge in the fragment: "Ayn Rand" links to [[Aristotle]], the one philosopher she admired.
BRIDGE_CLAIM = "Ayn Rand was sharply critical of most philosophers, with one exception."
FIRST, SECOND = "Ayn Rand", "Aristotle"
CHANNELS = "tfidf,title"  # no JVM, no model: quick to open

# DummyLM answers by the first key found in the prompt's last message (dict order matters).
DUMMY_ANSWERS = {
    f"## title ## ]]\n{SECOND}": {"rating": 10},
    "## title ## ]]": {"rating": 2},
    "## context ## ]]\n[": {"sub_questions": ["Who did Rand admire?"], "titles": [SECOND], "queries": ["Rand admired"]},
    "": {"sub_questions": ["Which philosophers did Ayn Rand criticise?"], "titles": [FIRST], "queries": ["Rand 1957"]},
}


def _stable(d: dict) -> dict:
    """An output line without wall-clock timings."""
    d = json.loads(json.dumps(d))
    d.pop("timings_ms", None)
    for h in d.get("hops", ()):
        h.pop("ms", None)
    return d


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("planner") / "index"
    build_index([GENSIM_DUMP], out, indexes=("tfidf",))
    return out


@pytest.fixture(scope="module")
def retriever(index):
    from retriever.api import Retriever

    with Retriever.open(index, channels=CHANNELS) as r:
        yield r


@pytest.fixture(autouse=True)
def _no_env_settings(monkeypatch):
    for name in ("WIKIGROUND_CACHE_DIR", "WIKIGROUND_CACHE_MODE", "WIKIGROUND_LM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


# -- DSPy's DummyLM ----------------------------------------------------------------------------------------


def test_dspy_lm_reads_every_signature_from_dummy_lm():
    from dspy.utils import DummyLM

    from retriever.multihop.llm import DSPyLM

    lm = DSPyLM(DummyLM(DUMMY_ANSWERS))
    assert lm.name == "dummy"
    assert lm.decompose(BRIDGE_CLAIM, "") == ["Which philosophers did Ayn Rand criticise?"]
    assert lm.entity_titles(BRIDGE_CLAIM, "") == [FIRST]
    assert lm.entity_titles(BRIDGE_CLAIM, f"[{FIRST}] Rand admired Aristotle.") == [SECOND]
    assert lm.attributes(BRIDGE_CLAIM, "") == ["Rand 1957"]
    assert lm.gaps(BRIDGE_CLAIM, "[x] y") == ["Rand admired"]
    assert (lm.relevance(BRIDGE_CLAIM, SECOND, "t"), lm.relevance(BRIDGE_CLAIM, "Plato", "t")) == (10, 2)


def test_an_unreadable_lm_answer_is_a_planner_error():
    from dspy.utils import DummyLM

    from retriever.multihop.llm import DSPyLM, PlannerError

    with pytest.raises(PlannerError, match="planner decompose: the LM dummy failed"):
        DSPyLM(DummyLM({"": {"nonsense": 1}})).decompose(BRIDGE_CLAIM, "")


def test_two_planners_keep_their_own_lm_across_threads():
    """The LM was set with ``dspy.configure``: global, so a second planner's LM replaced the first's, and a planner
    made in another thread (a server's request thread) raised RuntimeError."""
    from dspy.utils import DummyLM

    from retriever.multihop.llm import DSPyLM

    a = DSPyLM(DummyLM({"": {"sub_questions": ["from a"]}}))
    made: dict = {}
    t = threading.Thread(target=lambda: made.update(b=DSPyLM(DummyLM({"": {"sub_questions": ["from b"]}}))))
    t.start()
    t.join()
    assert "b" in made, "building a planner in another thread failed"
    assert a.decompose("c", "") == ["from a"]
    answers: list = []
    t = threading.Thread(target=lambda: answers.append(made["b"].decompose("c", "")))
    t.start()
    t.join()
    assert answers == [["from b"]]


def test_multihop_with_dummy_lm_records_and_replays(retriever, tmp_path):
    from dspy.utils import DummyLM

    from retriever.multihop import MultiHopParams, MultiHopRetriever
    from retriever.multihop.llm import CachedLM, DSPyLM, LLMPlanner
    from wikiground.errors import CacheMissError

    params = MultiHopParams(final_k=5, hops=2)
    recorder = CachedLM(DSPyLM(DummyLM(DUMMY_ANSWERS)), tmp_path, mode="record")
    first = MultiHopRetriever(retriever, params=params, planner=LLMPlanner(recorder)).search(BRIDGE_CLAIM).to_dict(1)
    assert recorder.calls > 0 and first["evidence"][0]["title"] == SECOND  # the LM's 10/10 leads
    assert first["hops"][1]["queries"]["entity"][0]["query"] == SECOND
    replayer = CachedLM(None, tmp_path, mode="replay")  # no LM: the one LM the cache holds ("dummy")
    replay = MultiHopRetriever(retriever, params=params, planner=LLMPlanner(replayer)).search(BRIDGE_CLAIM)
    assert _stable(replay.to_dict(1)) == _stable(first) and replayer.calls == 0
    with pytest.raises(CacheMissError):
        MultiHopRetriever(retriever, params=params, planner=LLMPlanner(replayer)).search("Plato taught Aristotle.")


def test_two_lms_answers_never_mix_in_one_cache(tmp_path):
    from dspy.utils import DummyLM

    from retriever.multihop.llm import CachedLM, DSPyLM
    from wikiground.errors import ConfigError

    for name in ("a", "b"):
        lm = DSPyLM(DummyLM({"": {"titles": [f"from {name}"]}}))
        assert CachedLM(lm, tmp_path, model=name).entity_titles("c", "") == [f"from {name}"]
    with pytest.raises(ConfigError, match="answers of 2 LMs"):
        CachedLM(None, tmp_path, mode="replay")
    assert CachedLM(None, tmp_path, mode="replay", model="a").entity_titles("c", "") == ["from a"]


# -- a real dspy.LM over HTTP, from the command line and the server ---------------------------------------------


def _field(text: str, name: str) -> str:
    head = f"[[ ## {name} ## ]]\n"
    return text.split(head, 1)[1].split("\n\n[[ ##", 1)[0].strip() if head in text else ""


def _completion(system: str, user: str) -> tuple[str, str]:
    """The planner's method (from the signature's instructions) and the answer, in DSPy's chat format."""
    if "Split a multi-hop claim" in system:
        return "decompose", f"[[ ## sub_questions ## ]]\n{json.dumps(['Which philosophers did Ayn Rand criticise?'])}"
    if "exact Wikipedia article titles" in system:
        titles = [SECOND] if _field(user, "context").startswith("[") else [FIRST]
        return "entity_titles", f"[[ ## titles ## ]]\n{json.dumps(titles)}"
    if "temporal or relational qualifier" in system:
        return "attributes", f"[[ ## queries ## ]]\n{json.dumps(['Ayn Rand 1957 novel'])}"
    if "do not yet establish" in system:
        return "gaps", f"[[ ## queries ## ]]\n{json.dumps(['Who was the one philosopher Rand admired?'])}"
    if "How useful this page" in system:
        return "relevance", f"[[ ## rating ## ]]\n{10 if _field(user, 'title') == SECOND else 2}"
    return "unknown", "[[ ## nothing ## ]]\n"


class FakeOpenAI(ThreadingHTTPServer):
    """An OpenAI-compatible chat completions server on 127.0.0.1 that answers the planner's signatures."""

    def __init__(self):
        self.asked: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler) -> None:  # noqa: N802
                body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                msgs = body["messages"]
                system = " ".join(m["content"] for m in msgs if m["role"] == "system")
                method, content = _completion(system, msgs[-1]["content"])
                self.asked.append(method)
                out = {
                    "id": f"c{len(self.asked)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"{content}\n\n[[ ## completed ## ]]"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
                data = json.dumps(out).encode()
                handler.send_response(200 if handler.path.endswith("/chat/completions") else 404)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server_port}/v1"

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def loopback_only(monkeypatch):
    """Any name lookup but the loopback's fails, and is listed (dspy fetched model metadata from GitHub)."""
    tried: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host not in ("127.0.0.1", "localhost", "::1"):
            tried.append(host)
            raise OSError(f"test: no network to {host}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return tried


def _query(index, *extra: str, claim: str = BRIDGE_CLAIM) -> list[str]:
    return ["--index", str(index), "--indexes", CHANNELS, "--multihop", "--hops", "2", "--k", "5", *extra, claim]


def test_cli_records_a_real_dspy_lm_then_replays_without_it(index, tmp_path, capsys, loopback_only):
    from retriever.query import main

    cache = tmp_path / "cache"
    lm_server = FakeOpenAI()
    with lm_server as api_base:
        lm = ["--planner", "dspy", "--lm", "openai/planner-test", "--lm-api-base", api_base]
        assert main(_query(index, *lm, "--cache", str(cache), "--json")) == 0, capsys.readouterr().err
    recorded = json.loads(capsys.readouterr().out)
    assert loopback_only == []
    assert set(lm_server.asked) == {"decompose", "entity_titles", "attributes", "gaps", "relevance"}
    assert recorded["evidence"][0]["title"] == SECOND  # the LM's 10/10 leads: its answers were used
    assert recorded["hops"][1]["queries"]["entity"][0]["query"] == SECOND
    assert json.loads((cache / "planner" / "endpoints.json").read_text()) == ["planner:openai/planner-test"]

    # The LM server is gone: the replay asks nothing, and answers exactly as the recorded run did.
    assert main(_query(index, "--planner", "dspy", "--cache", str(cache), "--cache-mode", "replay", "--json")) == 0
    assert _stable(json.loads(capsys.readouterr().out)) == _stable(recorded)
    other = _query(index, "--planner", "dspy", "--cache", str(cache), "--cache-mode", "replay", claim="Plato.")
    assert main(other) == 2 and "no recorded answer" in capsys.readouterr().err

    # The server, started with the same options in replay, plans /search's multi-hop requests the same way.
    from retriever.serve.__main__ import build_parser, make_state

    args = build_parser().parse_args(
        _query(index, "--planner", "dspy", "--cache", str(cache), "--cache-mode", "replay")[:-1]
    )
    state = make_state(args)
    state.start()
    with ThreadServer(state) as url:
        served = httpx.post(f"{url}/search", json={"claim": BRIDGE_CLAIM}, timeout=60)
        assert served.status_code == 200, served.text
        assert _stable(served.json()) == _stable(recorded)
        plain = httpx.post(f"{url}/search", json={"claim": BRIDGE_CLAIM, "multihop": False}, timeout=60).json()
        assert "hops" not in plain


def test_planner_options_are_checked(index, capsys):
    from retriever.query import main

    bad = [
        (["--planner", "dspy"], "--planner dspy works with --multihop"),
        (["--multihop", "--planner", "dspy"], "--planner dspy needs --lm MODEL"),
        (["--multihop", "--lm", "openai/x"], "--lm and --lm-api-base work with --planner dspy"),
        (["--multihop", "--planner", "dspy", "--cache-mode", "replay"], "needs a cache directory"),
    ]
    for args, message in bad:
        assert main(["--index", str(index), "--indexes", CHANNELS, *args, "Aristotle"]) == 2, args
        assert message in capsys.readouterr().err, args


def test_a_failing_lm_is_a_502_naming_the_planner(index):
    """An LM that cannot answer is the upstream's failure (502 with the planner's message), not a 500."""
    from dspy.utils import DummyLM

    from retriever.api import Retriever
    from retriever.multihop.llm import DSPyLM, LLMPlanner
    from retriever.serve.state import ServerState
    from retriever.service import SearchOptions

    planner = LLMPlanner(DSPyLM(DummyLM({"": {"nonsense": 1}})))
    state = ServerState(
        lambda: Retriever.open(index, channels=CHANNELS),
        defaults=SearchOptions(multihop=True, hops=1, on_the_fly=False),
        planner=planner,
    )
    state.start()
    with ThreadServer(state) as url:
        r = httpx.post(f"{url}/search", json={"claim": BRIDGE_CLAIM, "k": 3}, timeout=60)
        assert r.status_code == 502, r.text
        assert r.json()["error"]["type"] == "PlannerError" and "planner decompose" in r.json()["error"]["message"]
        assert httpx.post(f"{url}/search", json={"claim": BRIDGE_CLAIM, "multihop": False}, timeout=60).is_success
