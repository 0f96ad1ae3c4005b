"""Retriever + live fallback end to end: a small real local index, the rest only behind FakeWiki."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from backends.entities import Mention, is_quantity, missing_entities
from fallback.settings import FallbackSettings
from retriever.api import Retriever, default_live_scorer
from tests.support.fakewiki import FakeWiki, pages_from_vital

from .conftest import ROOT

CONTACT = "tests@example.org"
LOCAL = ["Aristotle", "Plato", "Athens", "Alexander the Great", "Philosophy", "Ancient Greece"]
REMOTE_CLAIM = "There is a capital called Mogadishu."
LOCAL_CLAIMS = [
    "Aristotle spent time in Athens.",
    "Plato lived in Athens around 400 BC.",
    "Alexander the Great was tutored by Aristotle.",
]


class NoNetwork(httpx.BaseTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"network used in replay: {request.url}")


@pytest.fixture(scope="module")
def vital(data_dir):
    return data_dir / "corpora" / "vital_articles_summaries.json"


@pytest.fixture(scope="module")
def server_pages(vital):
    pages = pages_from_vital(vital, limit=400) | pages_from_vital(vital, titles=["Mogadishu", "Somalia", "Socrates"])
    return {t: p for t, p in pages.items() if t not in LOCAL}


@pytest.fixture
def local_index(vital, tmp_path):
    """A store-only index (title channel) built from a few real vital-article leads."""
    from indexer.build import build_index

    data = json.loads(vital.read_text(encoding="utf-8"))
    src = tmp_path / "local.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        for row in data.values():
            if row["title"] in LOCAL:
                fh.write(json.dumps({"title": row["title"], "text": row["extract"]}) + "\n")
    out = tmp_path / "index"
    build_index([src], out, indexes=())
    return out


@pytest.fixture(scope="module")
def wiki(server_pages):
    with FakeWiki(server_pages) as w:
        yield w


def open_live(index, wiki, cache, **kw) -> Retriever:
    settings = FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=cache, rate=1000)
    return Retriever.open(index, on_the_fly=True, fallback=settings, **kw)


def test_all_local_entities_make_zero_requests(local_index, wiki, tmp_path):
    before = len(wiki.requests)
    with open_live(local_index, wiki, tmp_path / "cache") as r:
        for claim in LOCAL_CLAIMS:
            res = r.search(claim, 5)
            assert res.stats["requests"] == 0, (claim, res.stats["missing_entities"])
            assert res.stats["missing_entities"] == []
            assert all(e.origin == "local" for e in res.evidence)
    assert len(wiki.requests) == before


def test_missing_entity_is_fetched_live_with_provenance(local_index, wiki, tmp_path):
    with open_live(local_index, wiki, tmp_path / "cache") as r:
        res = r.search(REMOTE_CLAIM, 5)
    assert res.stats["missing_entities"] == ["Mogadishu"]
    assert res.stats["requests"] > 0
    live = [e for e in res.evidence if e.origin == "live"]
    assert live and live[0].title == "Mogadishu"
    top = live[0]
    assert top.url and top.url.startswith(f"http://127.0.0.1:{wiki.port}/") and "Mogadishu" in top.url
    assert top.rev_id == wiki.pages["Mogadishu"].revid
    assert top.fetched_at and top.attempt == 1
    assert "Mogadishu" in top.evidence_text


def test_ingest_live_then_found_locally_without_requests(local_index, wiki, tmp_path):
    with open_live(local_index, wiki, tmp_path / "cache", ingest_live=True) as r:
        first = r.search(REMOTE_CLAIM, 5)
        assert first.stats["requests"] > 0 and first.stats["ingested"] >= 1
        second = r.search(REMOTE_CLAIM, 5)
    assert second.stats["requests"] == 0 and second.stats["missing_entities"] == []
    assert "Mogadishu" in [e.title for e in second.evidence]
    # A fresh retriever over the same folder sees the delta store too.
    with open_live(local_index, wiki, tmp_path / "cache2") as r:
        third = r.search(REMOTE_CLAIM, 5)
    assert third.stats["requests"] == 0
    assert any(m["title"] == "Mogadishu" for m in third.to_dict()["entities"])


def _stable(res) -> dict:
    d = res.to_dict()
    d.pop("timings_ms", None)
    return d


def test_replay_gives_identical_json_with_server_stopped(local_index, server_pages, tmp_path):
    cache = tmp_path / "cache"
    with FakeWiki(server_pages) as w, open_live(local_index, w, cache) as r:
        recorded = [_stable(r.search(c, 5)) for c in (REMOTE_CLAIM, *LOCAL_CLAIMS)]
        api_url = w.api_url
    assert recorded[0]["requests"] > 0
    settings = FallbackSettings(api_url=api_url, cache_dir=cache, cache_mode="replay")
    with Retriever.open(
        local_index, on_the_fly=True, fallback=settings, http_client=httpx.Client(transport=NoNetwork())
    ) as r:
        replayed = [_stable(r.search(c, 5)) for c in (REMOTE_CLAIM, *LOCAL_CLAIMS)]
    for a, b in zip(recorded, replayed):
        a.pop("requests"), b.pop("requests"), a.pop("cache_hits"), b.pop("cache_hits")
    assert replayed == recorded


def test_cli_on_the_fly(local_index, wiki, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "retriever.query",
        "--index",
        str(local_index),
        "--k",
        "5",
        "--json",
        "--quiet",
        "--on-the-fly",
        "--api-url",
        wiki.api_url,
        "--contact",
        CONTACT,
        "--cache",
        str(tmp_path / "cache"),
        "--rate",
        "1000",
        REMOTE_CLAIM,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    live = [e for e in out["evidence"] if e["origin"] == "live"]
    assert live and live[0]["title"] == "Mogadishu" and live[0]["rev_id"] and live[0]["fetched_at"]


def test_default_live_scorer_prefers_tfidf_and_falls_back_to_overlap(local_index):
    from fallback.relevance import OverlapScorer

    with Retriever.open(local_index) as r:
        scorer, threshold = default_live_scorer(r)
    assert isinstance(scorer, OverlapScorer) and 0 < threshold <= 1


# -- the missing-entity rule, on mentions alone ------------------------------------------------------------


class _Res:  # a resolution stand-in: only its presence matters to missing_entities
    pass


def m(text: str, resolved: bool = False) -> Mention:
    return Mention(text, 0, len(text), _Res() if resolved else None)  # type: ignore[arg-type]


def test_dates_and_quantities_are_not_entities():
    assert is_quantity("June 12, 1875") and is_quantity("3103 BC") and is_quantity("8th") and is_quantity("1992-93")
    assert not is_quantity("K2") and not is_quantity("Mogadishu")
    assert missing_entities([m("Aleister Crowley", True), m("June 12, 1875")]) == []


def test_named_by_a_top_local_title_is_known():
    covered = [("Big Stone Gap (film)", "A 2014 romantic comedy."), ("Touchscreen", "An input device.")]
    assert missing_entities([m("Big Stone Gap"), m("Touchscreens")], covered=covered) == []
    # ...but only within the covered depth.
    assert missing_entities([m("Touchscreens")], covered=covered, depth=1) == ["Touchscreens"]


def test_text_coverage_needs_a_resolved_anchor():
    covered = [("Somalia", "Somalia's capital and largest city is Mogadishu.")]
    # Nothing in the claim resolves locally: a name mentioned in passing is not its page -> look it up.
    assert missing_entities([m("Mogadishu")], covered=covered) == ["Mogadishu"]
    # The claim's subject is local and its evidence covers the other name -> no lookup.
    assert missing_entities([m("Somalia", True), m("Mogadishu")], covered=covered) == []
    # Pieces of a run across a comma are judged one by one; only the unknown piece is looked up.
    assert missing_entities([m("Somalia", True), m("Mogadishu, Kismayo")], covered=covered) == ["Kismayo"]
    # The numbers in a name count: another address on the same avenue does not cover it.
    covered = [("655 Park Avenue", "655 Park Avenue is a building on Park Avenue, near 7th Avenue.")]
    assert missing_entities([m("Park Avenue", True), m("888 7th Avenue")], covered=covered) == ["888 7th Avenue"]
    assert missing_entities([m("Park Avenue", True), m("655 Park Avenue")], covered=covered) == []
    # ...but a company suffix after the comma is no name of its own.
    assert missing_entities([m("United States v. Paramount Pictures, Inc")]) == ["United States v. Paramount Pictures"]


def at(claim: str, text: str, resolved: bool = False) -> Mention:
    start = claim.index(text)
    return Mention(text, start, start + len(text), _Res() if resolved else None)  # type: ignore[arg-type]


def test_a_local_subject_needs_no_lookup():
    claim = "Naples is near the Palace of Caserta."
    covered = [("Naples", "Naples is the regional capital of Campania."), ("Palace", "A palace is a residence.")]
    ms = [at(claim, "Naples", True), at(claim, "Palace of Caserta")]
    # The claim is about Naples, which is local: the other name is context.
    assert missing_entities(ms, claim=claim, covered=covered) == []
    assert missing_entities(ms, claim=claim, covered=covered, subject_first=False) == ["Palace of Caserta"]
    # Subject missing, object local: the subject is looked up.
    claim = "The Palace of Caserta is near Naples."
    ms = [at(claim, "Palace of Caserta"), at(claim, "Naples", True)]
    assert missing_entities(ms, claim=claim, covered=covered) == ["Palace of Caserta"]


def test_a_top_title_named_in_the_claim_is_a_local_subject():
    claim = "Touchscreens are used in tablet computers by Apple."
    covered = [("Touchscreen", "A touchscreen is an input device."), ("Computer", "A machine.")]
    assert missing_entities([at(claim, "Apple")], claim=claim, covered=covered) == []
    # Without that title among the top evidence, the unknown name is looked up.
    assert missing_entities([at(claim, "Apple")], claim=claim, covered=[("Keyboard", "An input device.")]) == ["Apple"]


def test_a_common_noun_in_lower_case_is_no_local_subject():
    """ "Country" among the top evidence (the title channel's page of the word) does not make "The 16th largest
    country is Libya" a claim about a local page: Libya is still looked up. Capitalised, the word names it."""
    claim = "The 16th largest country is Libya."
    covered = [("Country", "A country is a distinct part of the world."), ("Chad", "Chad is a country.")]
    assert missing_entities([at(claim, "Libya")], claim=claim, covered=covered) == ["Libya"]
    claim = "Deserts cover most of Libya."
    covered = [("Desert", "A desert is a barren area of land.")]
    assert missing_entities([at(claim, "Libya")], claim=claim, covered=covered) == []


def test_a_missing_subject_is_looked_up_even_when_other_pages_mention_it():
    claim = "Advertising is an audio form of marketing communication."
    covered = [("Communication", "Advertising, marketing and other forms of communication."), ("Sound", "...")]
    ms = [at(claim, "Advertising")]
    assert missing_entities(ms, claim=claim, covered=covered) == ["Advertising"]


def test_title_match_is_up_to_the_disambiguator_not_any_subset():
    covered = [("One Hundred Years of Solitude", "A novel."), ("Jamie Harris (actor)", "An English actor.")]
    assert missing_entities([m("Hundred Years")], covered=covered) == ["Hundred Years"]
    assert missing_entities([m("Jamie Harris")], covered=covered) == []


def test_every_entity_a_question_compares_needs_its_own_page():
    # Real HotpotQA question; the local intro of one compared entity mentions the other in passing.
    claim = "Who has won more Grand Slam women's doubles titles, Lisa Raymond or Liezel Huber?"
    covered = [
        (
            "Liezel Huber",
            "Huber has won four Grand Slam titles in women's doubles with partner Cara Black, "
            "one with Lisa Raymond, and two mixed doubles titles with Bob Bryan.",
        )
    ]
    ms = [at(claim, "Grand Slam", True), at(claim, "Lisa Raymond"), at(claim, "Liezel Huber", True)]
    assert missing_entities(ms, claim=claim, covered=covered) == ["Lisa Raymond"]
    # "both" makes "X and Y" a comparison too.
    claim = "Are Liezel Huber and Lisa Raymond both tennis players?"
    ms = [at(claim, "Liezel Huber", True), at(claim, "Lisa Raymond")]
    assert missing_entities(ms, claim=claim, covered=covered) == ["Lisa Raymond"]
    # A coordination that compares nothing is context: the mention in the local intro covers it.
    claim = "Which Grand Slam title did Liezel Huber win with Cara Black and Lisa Raymond?"
    ms = [
        at(claim, "Grand Slam", True),
        at(claim, "Liezel Huber", True),
        at(claim, "Cara Black"),
        at(claim, "Lisa Raymond"),
    ]
    assert missing_entities(ms, claim=claim, covered=covered) == []
    # Quoted titles coordinate like bare names.
    claim = 'Are both "Cooking Light" and "Vibe" magazines?'
    covered = [("Cooking Light", "Cooking Light is an American food magazine, read like Vibe by many.")]
    ms = [at(claim, "Cooking Light", True), at(claim, "Vibe")]
    assert missing_entities(ms, claim=claim, covered=covered) == ["Vibe"]


def test_a_compared_entity_is_not_another_thing_of_its_name():
    """A compared entity whose name matches only a local title qualified as something else ("Marcy Playground
    (album)" for a band) is looked up; a qualifier the question names ("Royal Blood (band)") is its page."""
    claim = "Which band has more members, The Futureheads or Marcy Playground?"
    covered = [("Marcy Playground (album)", "Marcy Playground is the debut album by Marcy Playground.")]
    ms = [at(claim, "The Futureheads"), at(claim, "Marcy Playground")]
    assert missing_entities(ms, claim=claim, covered=covered) == ["The Futureheads", "Marcy Playground"]
    claim = "Which band has more members, Kitchens of Distinction or Royal Blood?"
    covered = [
        ("Royal Blood (band)", "Royal Blood are an English rock duo."),
        ("Kitchens of Distinction", "Kitchens of Distinction are an English band."),
    ]
    ms = [at(claim, "Kitchens of Distinction", True), at(claim, "Royal Blood")]
    assert missing_entities(ms, claim=claim, covered=covered) == []
    # Outside a comparison the qualified title still names the page ("Big Stone Gap" ~ "Big Stone Gap (film)").
    claim = "Who directed Big Stone Gap?"
    covered = [("Big Stone Gap (film)", "Big Stone Gap is a 2014 American romantic comedy film.")]
    assert missing_entities([at(claim, "Big Stone Gap")], claim=claim, covered=covered) == []


def test_a_title_match_keeps_the_function_words_a_name_capitalises():
    covered = [
        ("Camel", "A camel is an even-toed ungulate."),
        ("Tunnels & Trolls", "A role-playing game."),
        ("I'd Come for You", "A single by Nickelback."),
    ]
    # "Up" is part of the name "Camel Up" (a board game): the page "Camel" is not its page.
    assert missing_entities([m("Camel Up")], covered=covered) == ["Camel Up"]
    # Lower-case function words may differ or be missing from the name as written.
    assert missing_entities([m("Tunnels and Trolls"), m("I'd Come")], covered=covered) == []


def test_live_bridges_fetch_the_second_hop_that_the_index_lacks(data_dir, tmp_path):
    """Every entity of the question is local ("Ralph Hefferline"), so plain --on-the-fly asks nothing; with
    live_bridges the names in his page's closest sentence that resolve to no local page ("Columbia University")
    are asked for in one request, and the page found follows the local evidence."""
    from indexer.build import build_index
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    src = tmp_path / "local.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        for page in pages_from_hotpot(corpus, titles=["Ralph Hefferline"]).values():
            fh.write(json.dumps({"title": page.title, "text": page.intro}) + "\n")
    build_index([src], tmp_path / "index", indexes=())
    claim = "Ralph Hefferline was a psychology professor at a university that is located in what city?"
    with FakeWiki(pages_from_hotpot(corpus, titles=["Columbia University"])) as w:
        with open_live(tmp_path / "index", w, tmp_path / "cache") as r:
            plain = r.search(claim, 5)
        with open_live(tmp_path / "index", w, tmp_path / "cache", live_bridges=True) as r:
            bridged = r.search(claim, 5)
        asked = [q.params.get("titles", "").split("|") for q in w.requests]
    assert plain.stats["missing_entities"] == [] and plain.stats["requests"] == 0
    assert bridged.stats["requests"] == 1 and len(asked) == 1
    assert "Columbia University" in asked[0]
    titles = [e.title for e in bridged.evidence]
    assert titles[0] == "Ralph Hefferline" and "Columbia University" in titles
    assert next(e for e in bridged.evidence if e.title == "Columbia University").origin == "live"
    assert bridged.status == plain.status  # the claim's own pages are local: a second hop changes no status


def test_cli_live_bridges_needs_on_the_fly(local_index):
    cmd = [sys.executable, "-m", "retriever.query", "--index", str(local_index), "--live-bridges", "claim"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--live-bridges" in proc.stderr


MANAFORT_CLAIM = (
    "When was the American lawyer, lobbyist and political consultant who was a senior member of the "
    "presidential campaign of Donald Trump born?"
)


@pytest.fixture(scope="module")
def hotpot_split(data_dir, tmp_path_factory):
    """Real HotpotQA pages: 300 in a local TF-IDF index, 300 others, the pages titled after Donald Trump (who has
    no page on either side) and "Paul Manafort" only behind the server."""
    from indexer.build import build_index
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    pages = pages_from_hotpot(corpus, limit=600)
    trump = {t: p for t, p in pages_from_hotpot(corpus).items() if "Donald Trump" in t and t != "Donald Trump"}
    remote = dict(list(pages.items())[300:]) | trump | pages_from_hotpot(corpus, titles=["Paul Manafort"])
    tmp = tmp_path_factory.mktemp("hotpot_split")
    src = tmp / "local.jsonl"
    with src.open("w", encoding="utf-8") as fh:
        for page in list(pages.values())[:300]:
            fh.write(json.dumps({"title": page.title, "text": page.intro}) + "\n")
    build_index([src], tmp / "index", indexes=("tfidf",))
    return tmp / "index", remote


def test_first_search_asks_for_the_claims_rarest_words(hotpot_split, tmp_path):
    """CirrusSearch (and FakeWiki) answer only pages matching every word: the claim's first eight content words
    match no page, while its three words of highest idf in the local TF-IDF index find "Paul Manafort" (a
    search for "Donald Trump" alone finds the pages titled after him)."""
    from fallback.live import ClaimState
    from fallback.planner import KeywordPlanner
    from retriever.api import default_live_planner

    index, remote = hotpot_split
    claim = MANAFORT_CLAIM
    with FakeWiki(remote) as w, open_live(index, w, tmp_path / "cache") as r:
        specific = default_live_planner(r).queries(claim, ["Donald Trump"], attempt=1, state=ClaimState(claim))
        first_words = KeywordPlanner().queries(claim, ["Donald Trump"], attempt=1, state=ClaimState(claim))
        assert len(specific[0].split()) == 3 and "lobbyist" in specific[0].split()
        assert r.fallback.api.search(first_words[0]).hits == ()
        result = r.search(claim, 10)
        searched = [q.params["srsearch"] for q in w.requests if "srsearch" in q.params]
    assert specific[0] in searched
    assert "Paul Manafort" in [e.title for e in result.evidence if e.origin == "live"]


def test_local_evidence_irrelevant_to_the_claim_comes_after_the_live_evidence(hotpot_split, tmp_path):
    """The local pages that a claim about a missing entity brings up are mostly about other things: those the
    live scorer finds irrelevant to the claim follow every live page instead of alternating with them."""
    index, remote = hotpot_split
    with FakeWiki(remote) as w, open_live(index, w, tmp_path / "cache") as r:
        res = r.search(MANAFORT_CLAIM, 10)
        fb = r.fallback
        scores = fb.scorer.score(MANAFORT_CLAIM, [e.evidence_text for e in res.evidence])
    origins = [e.origin for e in res.evidence]
    weak = [i for i, (e, s) in enumerate(zip(res.evidence, scores)) if e.origin == "local" and s < fb.min_relevance]
    assert origins.count("live") >= 2 and weak
    assert "live" not in origins[weak[0] :]


def test_open_takes_fallback_settings(local_index, wiki, tmp_path):
    with Retriever.open(
        local_index,
        on_the_fly=True,
        fallback=FallbackSettings(api_url=wiki.api_url, contact=CONTACT, cache_dir=tmp_path / "a", rate=1000),
    ) as r:
        assert r.fallback.api.api_url == wiki.api_url and r.fallback.api.cache.root == tmp_path / "a"
    with pytest.raises(TypeError, match="api_url"):  # the loose keywords of the first API: settings only now
        Retriever.open(local_index, on_the_fly=True, api_url=wiki.api_url)
    with pytest.raises(TypeError, match="nonsense"):
        Retriever.open(local_index, nonsense=1)
