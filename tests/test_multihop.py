"""Multi-hop retrieval on the gensim enwiki fragment (a BM25-only build of our own: seconds, not minutes)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import GENSIM_DUMP

# A real bridge in the fragment: "Ayn Rand" says she "was sharply critical of most philosophers ...
# except for Aristotle" and links to [[Aristotle]]; the claim names Rand, never Aristotle.
BRIDGE_CLAIM = "Ayn Rand was sharply critical of most philosophers, with one exception."
FIRST, SECOND = "Ayn Rand", "Aristotle"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("multihop") / "index"
    build_index([GENSIM_DUMP], out, indexes=("bm25",))
    return out


@pytest.fixture(scope="module")
def retriever(index):
    from retriever.api import Retriever

    with Retriever.open(index) as r:
        yield r


def _stable(d: dict) -> dict:
    """The output without wall-clock timings."""
    d = json.loads(json.dumps(d))
    d.pop("timings_ms", None)
    for h in d["hops"]:
        h.pop("ms", None)
    return d


def test_bridge_page_found_through_first_page(retriever):
    from retriever.multihop import MultiHopParams, MultiHopRetriever

    params = MultiHopParams(final_k=5, hops=2)
    single = [e.title for e in retriever.search(BRIDGE_CLAIM, params.final_k).evidence]
    assert FIRST in single and SECOND not in single  # the claim alone does not reach the second page
    res = MultiHopRetriever(retriever, params=params).search(BRIDGE_CLAIM)
    found = {e.title: e for e in res.evidence}
    assert FIRST in found and found[FIRST].hop == 1
    assert SECOND in found and found[SECOND].hop == 2
    assert found[SECOND].extra["via"] == FIRST
    assert res.hops[1]["queries"]["entity"][0]["query"] == SECOND or any(
        q["query"].startswith(SECOND) for qs in res.hops[1]["queries"].values() for q in qs
    )


def test_parameters_bound_queries_and_results(retriever):
    from retriever.multihop import MultiHopParams, MultiHopRetriever

    p = MultiHopParams(
        hops=2,
        semantic_queries=1,
        semantic_k=2,
        entity_queries=1,
        entity_k=1,
        attribute_queries=2,
        attribute_k=1,
        final_k=4,
        claim_k=3,
    )
    res = MultiHopRetriever(retriever, params=p).search(BRIDGE_CLAIM)
    d = res.to_dict("x")
    assert set(d) >= {"id", "query", "status", "evidence", "hops"} and d["id"] == "x"
    assert 0 < len(d["evidence"]) <= 4
    assert len(d["hops"]) <= 2
    total = 0
    for h in d["hops"]:
        for kind, qs in h["queries"].items():
            limit = {"claim": 1, "semantic": 1, "entity": 1, "attribute": 2}[kind]
            assert len(qs) <= limit, (h["hop"], kind)
            k = {"claim": 3, "semantic": 2, "entity": 1, "attribute": 1}[kind]
            assert all(len(q["titles"]) <= k for q in qs)
            total += len(qs)
    assert total == d["queries"] <= p.max_queries
    assert all("hop" in e and e["hop"] in (1, 2) for e in d["evidence"])
    titles = [e["title"] for e in d["evidence"]]
    assert len(titles) == len(set(titles))  # dedup by title


def test_deterministic(retriever):
    from retriever.multihop import MultiHopParams, MultiHopRetriever

    claim = "Apollo 8 was the first manned spacecraft to orbit the Moon, before the mission that landed on it."
    a = MultiHopRetriever(retriever, params=MultiHopParams()).search(claim).to_dict(1)
    b = MultiHopRetriever(retriever, params=MultiHopParams()).search(claim).to_dict(1)
    assert _stable(a) == _stable(b)
    assert len(a["evidence"]) <= 21 and a["status"] == "ok"


def test_bad_params_and_empty_claim(retriever):
    from retriever.multihop import MultiHopParams, MultiHopRetriever
    from wikiground.errors import ConfigError

    with pytest.raises(ConfigError, match="hops"):
        MultiHopParams(hops=0)
    with pytest.raises(ConfigError, match="final_k"):
        MultiHopParams(final_k=0)
    res = MultiHopRetriever(retriever).search("   ")
    assert res.status == "empty_query" and res.evidence == ()


class FakeLM:
    """A planner LM with canned answers; counts calls so the cache's replay can be checked."""

    def __init__(self):
        self.calls: list[str] = []

    def decompose(self, claim, context):
        self.calls.append("decompose")
        return ["Which philosophers did Ayn Rand criticise?"]

    def entity_titles(self, claim, context):
        self.calls.append("entity_titles")
        return [FIRST] if not context else [SECOND]

    def attributes(self, claim, context):
        self.calls.append("attributes")
        return ["Ayn Rand 1957 novel"]

    def gaps(self, claim, context):
        self.calls.append("gaps")
        return ["Who was the one philosopher Rand admired?"]

    def relevance(self, claim, title, text):
        self.calls.append("relevance")
        return 10 if title == SECOND else 2


def test_llm_planner_with_fake_lm_records_and_replays(retriever, tmp_path):
    from retriever.multihop import MultiHopParams, MultiHopRetriever
    from retriever.multihop.llm import CachedLM, LLMPlanner
    from wikiground.errors import CacheMissError

    params = MultiHopParams(final_k=5, hops=2)
    fake = FakeLM()
    rec = MultiHopRetriever(retriever, params=params, planner=LLMPlanner(CachedLM(fake, tmp_path, mode="record")))
    first = rec.search(BRIDGE_CLAIM).to_dict(1)
    assert {"decompose", "entity_titles", "attributes", "gaps", "relevance"} <= set(fake.calls)
    hop2 = first["hops"][1]["queries"]
    assert hop2["entity"][0]["query"] == SECOND and hop2["semantic"][0]["query"].startswith("Who was")
    titles = [e["title"] for e in first["evidence"]]
    assert titles[0] == SECOND  # the LM's 10/10 outranks the named page's 2/10

    # Replay: same answers from the cache, no LM at all.
    replay = MultiHopRetriever(retriever, params=params, planner=LLMPlanner(CachedLM(None, tmp_path, mode="replay")))
    assert _stable(replay.search(BRIDGE_CLAIM).to_dict(1)) == _stable(first)
    with pytest.raises(CacheMissError):
        replay.search("Aristotle was a student of Plato.")


def test_cli_multihop(index, capsys):
    from retriever.query import main

    assert main(["--index", str(index), "--multihop", "--hops", "2", "--k", "5", "--json", BRIDGE_CLAIM]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and len(out["evidence"]) <= 5
    assert [h["hop"] for h in out["hops"]] == [1, 2]
    assert {"claim", "semantic", "entity", "attribute"} >= set(out["hops"][0]["queries"])
    assert SECOND in {e["title"] for e in out["evidence"]}


def test_multihop_with_on_the_fly_looks_up_only_what_the_index_lacks(index, data_dir, tmp_path):
    """With ``on_the_fly`` the hops' local evidence is the context of the live fallback: a name the fragment
    lacks ("Socrates") is fetched live; a claim whose entities are all local makes no request."""
    from fallback.settings import FallbackSettings
    from retriever.api import Retriever
    from retriever.multihop import MultiHopParams, MultiHopRetriever
    from tests.support.fakewiki import FakeWiki, pages_from_vital

    pages = pages_from_vital(data_dir / "corpora" / "vital_articles_summaries.json", titles=["Socrates", "Plato"])
    with (
        FakeWiki(pages) as w,
        Retriever.open(
            index,
            on_the_fly=True,
            fallback=FallbackSettings(
                api_url=w.api_url, contact="tests@example.org", cache_dir=tmp_path / "cache", rate=1000
            ),
        ) as r,
    ):
        mh = MultiHopRetriever(r, params=MultiHopParams(final_k=5, hops=2))
        local = mh.search(BRIDGE_CLAIM).to_dict()
        assert local["requests"] == 0 and local["missing_entities"] == [] and not w.requests
        res = mh.search("Socrates taught the teacher of Aristotle.").to_dict()
        server = f"http://127.0.0.1:{w.port}/"
    assert res["missing_entities"] == ["Socrates"] and res["requests"] > 0
    live = [e for e in res["evidence"] if e["origin"] == "live"]
    assert live and live[0]["title"] == "Socrates" and live[0]["url"].startswith(server)
    assert SECOND in {e["title"] for e in res["evidence"] if e["origin"] == "local"}
