"""LiveFallback's attempts against FakeWiki serving real Wikipedia leads (vital articles)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from fallback.client import WikiApi
from fallback.live import STATUS_FAILED, STATUS_FOUND, LiveFallback, chunk_text
from fallback.relevance import FunctionScorer
from fallback.settings import FallbackSettings
from tests.support.clock import FakeClock
from tests.support.fakewiki import FakePage, FakeWiki, pages_from_vital, stable_id

CONTACT = "tests@example.org"


@pytest.fixture(scope="module")
def corpus(data_dir) -> dict[str, FakePage]:
    pages = pages_from_vital(data_dir / "corpora" / "vital_articles_summaries.json")
    pages["Mercury"] = FakePage(
        "Mercury",
        stable_id("Mercury"),
        11,
        "Mercury commonly refers to:",
        is_disambiguation=True,
        options=("Mercury (element)", "Mercury (planet)"),
    )
    # Intro alone lacks the claim's detail; the rest of the real lead is served as a later section.
    sentences = pages["Mogadishu"].intro.split(". ")
    pages["Mogadishu"] = replace(
        pages["Mogadishu"], intro=sentences[0] + ".", sections=(("History", ". ".join(sentences[1:])),)
    )
    pages["Aristotle"] = replace(pages["Aristotle"], see_also=("Plato",), categories=("Ancient Greek philosophers",))
    return pages


@pytest.fixture(scope="module")
def wiki(corpus):
    with FakeWiki(corpus) as w:
        yield w


def fallback(wiki, **kw) -> LiveFallback:
    api = WikiApi(
        FallbackSettings(api_url=wiki.api_url, contact=CONTACT, rate=1000, cache_mode="off"), clock=FakeClock()
    )
    return LiveFallback(api, **kw)


def requests_since(wiki, n):
    return wiki.requests[n:]


def test_entity_only_on_the_server_gives_live_evidence(wiki, corpus):
    n = len(wiki.requests)
    result = fallback(wiki).retrieve("There is a capital called Mogadishu.", ["Mogadishu"], k=5)
    assert result.status == STATUS_FOUND and result.attempts == 1
    top = result.evidence[0]
    page = corpus["Mogadishu"]
    assert top.title == "Mogadishu" and top.origin == "live" and top.page_id == page.pageid
    assert top.rev_id == page.revid and top.url == wiki.page_url("Mogadishu") and top.fetched_at
    assert top.attempt == 1 and top.retrieved_for_entity == "Mogadishu" and top.passage_id is None
    assert "capital" in top.evidence_text
    assert result.requests == len(wiki.requests) - n
    d = top.to_dict()
    assert d["origin"] == "live" and d["attempt"] == 1 and json.dumps(result.to_dict())


def test_attempt_two_reads_a_section_chosen_by_overlap(wiki):
    # Claim words ("port", "traders", "Indian Ocean") sit in the "History" section, not the one-sentence intro.
    claim = "Mogadishu was a port for traders across the Indian Ocean."
    result = fallback(wiki).retrieve(claim, ["Mogadishu"], k=5)
    assert result.status == STATUS_FOUND
    from_section = [e for e in result.evidence if e.title == "Mogadishu" and e.section == "History"]
    assert from_section and from_section[0].attempt == 2 and "Indian Ocean" in from_section[0].evidence_text
    page = next(p for p in result.pages if p.title == "Mogadishu")
    assert page.sections and page.sections[0][0] == "History"


def test_disambiguation_follows_the_option_matching_the_claim(wiki):
    n = len(wiki.requests)
    result = fallback(wiki).retrieve("Mercury is the first planet from the Sun.", ["Mercury"], k=3)
    assert result.status == STATUS_FOUND
    assert result.state.disambiguated == {"Mercury": "Mercury (planet)"}
    assert result.evidence[0].title == "Mercury (planet)" and result.evidence[0].retrieved_for_entity == "Mercury"
    # The options and their intros come in one request (generator=links), the first one after the title lookup.
    first, options = requests_since(wiki, n)[:2]
    assert first.params["titles"] == "Mercury" and "generator" not in first.params
    assert options.params["generator"] == "links" and options.params["titles"] == "Mercury"
    assert "Mercury (planet)" not in [t for r in requests_since(wiki, n) for t in r.params.get("titles", "").split("|")]
    chem = fallback(wiki).retrieve("Mercury is a chemical element with the symbol Hg.", ["Mercury"], k=3)
    assert chem.state.disambiguated == {"Mercury": "Mercury (element)"}


def test_attempt_three_follows_see_also(wiki):
    # Only the "See also" target's lead holds these words; the search (all terms) finds nothing for the claim.
    claim = "Aristotle studied under a thinker who founded the foundational dialogue tradition of Classical Athens."
    result = fallback(wiki, max_attempts=3).retrieve(claim, ["Aristotle"], k=5)
    assert "Ancient Greek philosophers" in result.state.categories
    plato = [e for e in result.evidence if e.title == "Plato"]
    assert result.status == STATUS_FOUND and plato and plato[0].attempt == 3


def test_failure_after_max_attempts_and_no_request_repeated(wiki):
    n = len(wiki.requests)
    result = fallback(wiki).retrieve("Zxqvbnm wrplkjh glorbnax exists.", ["Zxqvbnm Wrplkjh"], k=5)
    assert result.status == STATUS_FAILED and result.evidence == () and result.attempts == 3
    assert result.state.attempts == 3 and result.state.search_terms
    assert len(set(result.state.search_terms)) == len(result.state.search_terms)
    sent = [tuple(sorted(r.params.items())) for r in requests_since(wiki, n)]
    assert sent and max(Counter(sent).values()) == 1
    assert result.requests == len(sent)


def test_no_request_repeated_on_a_found_claim_and_top_m_respected(wiki):
    n = len(wiki.requests)
    result = fallback(wiki, search_top_m=2).retrieve("Aristotle spent time in Athens.", ["Aristotle", "Athens"], k=10)
    sent = [tuple(sorted(r.params.items())) for r in requests_since(wiki, n)]
    assert max(Counter(sent).values()) == 1
    assert all(r.params["srlimit"] == "2" for r in requests_since(wiki, n) if r.params.get("list") == "search")
    assert {e.retrieved_for_entity for e in result.evidence} >= {"Aristotle"}
    assert [e.ranks["live"] for e in result.evidence] == list(range(1, len(result.evidence) + 1))
    scores = [e.score for e in result.evidence]
    assert scores == sorted(scores, reverse=True)


def test_pluggable_scorer_is_used(wiki):
    calls = []

    def score_texts(query, texts):
        calls.append(len(texts))
        return [1.0 if "Somalia" in t else 0.0 for t in texts]

    result = fallback(wiki, scorer=FunctionScorer(score_texts), min_relevance=0.9).retrieve(
        "There is a capital called Mogadishu.", ["Mogadishu"], k=3
    )
    assert calls and all("Somalia" in e.evidence_text or e.title == "Somalia" for e in result.evidence)


def test_chunk_text_bounds():
    text = " ".join(f"Sentence number {i} is here." for i in range(100))
    pieces = chunk_text(text, max_words=50)
    assert len(pieces) > 5 and all(len(p.split()) <= 55 for p in pieces)
    assert " ".join(pieces).split() == text.split()


@pytest.fixture(scope="module")
def small_wiki(corpus):
    """A few real leads, so the search's vocabulary (and its suggestions) is that of these pages only."""
    with FakeWiki({t: corpus[t] for t in ("Philip Glass", "Polar bear", "Brown bear", "Johann Sebastian Bach")}) as w:
        yield w


def test_a_misspelled_name_is_found_through_the_search_suggestion(small_wiki):
    """No page "Phillip Glass": the name is searched alone, the empty search's suggestion is followed, and
    the top hit titled like the name is kept as its page although its intro shares few words with the claim."""
    n = len(small_wiki.requests)
    result = fallback(small_wiki).retrieve("Phillip Glass has written symphonies.", ["Phillip Glass"], k=5)
    assert result.status == STATUS_FOUND
    assert result.evidence[0].title == "Philip Glass" and result.evidence[0].retrieved_for_entity == "Phillip Glass"
    searches = [r.params.get("srsearch") for r in requests_since(small_wiki, n) if r.params.get("list") == "search"]
    assert searches[:2] == ["Phillip Glass", "philip glass"]


def test_search_folds_plurals_like_cirrussearch(small_wiki):
    result = fallback(small_wiki).retrieve("Polar bears are classified as endangered.", ["Polar bears"], k=5)
    assert "Polar bear" in [e.title for e in result.evidence]


def pages_fetched(data_dir, titles: list[str], claim: str, missing: list[str]) -> list[str]:
    """Titles of the pages a fallback run fetches from a FakeWiki holding these real HotpotQA pages."""
    from tests.support.fakewiki import pages_from_hotpot

    pages = pages_from_hotpot(data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl", titles=titles)
    with FakeWiki(pages) as w:
        return [p.title for p in fallback(w).retrieve(claim, missing, k=5).pages]


def test_bridge_names_in_a_found_intro_are_fetched(data_dir):
    """A bridge claim names one page; the page names the answer ("founded by Henry J. Kaiser"). The names in
    the intro's sentences closest to the claim are resolved in one request; the scorer ranks what they find."""
    from tests.support.fakewiki import pages_from_hotpot

    pages = pages_from_hotpot(
        data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl",
        titles=["Kaiser Ventures", "Henry J. Kaiser", "Korean War", "World War II"],
    )
    claim = (
        "Kaiser Ventures corporation was founded by an American industrialist who became known as the "
        "father of modern American shipbuilding?"
    )
    with FakeWiki(pages) as w:
        result = fallback(w).retrieve(claim, ["Kaiser Ventures"], k=5)
        titles = [e.title for e in result.evidence]
        assert titles[:2] == ["Kaiser Ventures", "Henry J. Kaiser"]  # the page the claim names, then the best
        lookups = [r.params.get("titles", "") for r in w.requests if r.params.get("titles")]
        bridge_lookup = [t for t in lookups if "Henry J. Kaiser" in t.split("|")]
        assert len(bridge_lookup) == 1 and len(bridge_lookup[0].split("|")) > 1  # all names in one request


def test_a_bridge_page_is_evidence_even_when_its_intro_shares_few_words_with_the_claim(data_dir):
    """The second hop answers the part of the question the first page does not: "Kelly Osbourne", named by the
    local page "2014 Young Hollywood Awards" ("Kelly Osbourne hosted the show"), shares only "British
    singer-songwriter" with the question, yet it is the page the question asks for."""
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    local = pages_from_hotpot(corpus, titles=["2014 Young Hollywood Awards"])["2014 Young Hollywood Awards"]
    remote = pages_from_hotpot(corpus, titles=["Kelly Osbourne", "Justin Bieber", "Vanessa Hudgens"])
    claim = "What British singer-songwriter hosted the 16th Annual Young Hollywood Awards?"
    with FakeWiki(remote) as w:
        result = fallback(w).retrieve(
            claim, ["16th Annual Young Hollywood Awards"], k=5, context=[(local.title, local.intro)]
        )
    assert "Kelly Osbourne" in [e.title for e in result.evidence]
    assert result.status == "EVIDENCE_FOUND_WIKIPEDIA"
    found = {e.title: e for e in result.evidence}
    assert found["Kelly Osbourne"].retrieved_for_entity is None  # found for the claim, not for a missing name
    # Every page the hop finds is evidence, ranked by the scorer: the singer-songwriter first.
    assert [e.title for e in result.evidence][0] == "Kelly Osbourne"


def test_bridge_names_in_the_local_context_are_fetched_with_the_same_request(data_dir):
    """When a claim is looked up anyway, the best local evidence is read for bridge names too."""
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    local = pages_from_hotpot(corpus, titles=["Ralph Hefferline"])["Ralph Hefferline"]
    remote = pages_from_hotpot(corpus, titles=["Columbia University"])
    claim = "Ralph Hefferline was a psychology professor at a university that is located in what city?"
    with FakeWiki(remote) as w:
        without = fallback(w).retrieve(claim, ["Muncie"], k=5)
        assert "Columbia University" not in [p.title for p in without.pages]
        n = len(w.requests)
        result = fallback(w).retrieve(claim, ["Muncie"], k=5, context=[(local.title, local.intro)])
        assert "Columbia University" in [p.title for p in result.pages]  # fetched; the scorer judges it
        asked = [
            r.params["titles"].split("|")
            for r in requests_since(w, n)
            if "extracts" in r.params.get("prop", "") and "Columbia University" in r.params.get("titles", "")
        ]
        assert len(asked) == 1 and "Ralph Franklin Hefferline" in asked[0]  # all the bridge names in one request


def test_bridge_name_keeps_the_period_of_jr(data_dir):
    """Wikipedia titles keep the period of "Jr." ("Harry Connick Jr."): the bridge name found in an intro is
    asked for under that title, and the page is fetched."""
    from backends.entities import names_in

    assert (
        names_in("The songs are performed by pianist Harry Connick Jr., who won a Grammy Award.")[0]
        == "Harry Connick Jr."
    )
    assert names_in("Warner Bros. released it in 1990")[0] == "Warner Bros."
    claim = (
        'The songs from the soundtrack to "When Harry Met Sally... (soundtrack)" are performed by a singer '
        "that has had how many top 20 US albums?"
    )
    soundtrack = "When Harry Met Sally... (soundtrack)"
    assert "Harry Connick Jr." in pages_fetched(data_dir, [soundtrack, "Harry Connick Jr."], claim, [soundtrack])


def test_bridge_place_name_is_asked_for_as_town_comma_region(data_dir):
    """Wikipedia titles places "Town, Region": a bridge name written so in an intro is asked for whole (a site
    without a redirect from "Southaven" still answers), and its parts stay names of their own."""
    from backends.entities import names_in

    names = names_in("Based in the Memphis suburb of Southaven, Mississippi, the team plays at the Landers Center.")
    assert names.index("Southaven, Mississippi") < names.index("Southaven")
    assert {"Memphis", "Mississippi", "Landers Center"} <= set(names)
    claim = "The Memphis Hustle are based in a suburb of a city with a population of what in 2010?"
    assert "Southaven, Mississippi" in pages_fetched(
        data_dir, ["Memphis Hustle", "Southaven, Mississippi"], claim, ["Memphis Hustle"]
    )


def test_bridge_names_inside_a_name_are_asked_for_too(data_dir):
    """ "created by Nick Park of Aardman Animations": the person and the company are names of their own, asked for
    in the same request as the whole span; a rank word before a name is dropped ("King George V" -> "George V")."""
    from backends.entities import names_in

    names = names_in("a comedy series created by Nick Park of Aardman Animations.")
    assert names == ["Nick Park of Aardman Animations", "Nick Park", "Aardman Animations"]
    assert names_in("appointments by King George V to various orders") == ["King George V", "George V"]
    assert names_in("at the University of Virginia and the Bank of America Plaza") == [
        "University of Virginia",
        "Bank of America Plaza",
    ]  # one word before "of": one name, not split
    claim = "In which year was the King who made the 1925 Birthday Honours born?"
    assert "George V" in pages_fetched(
        data_dir, ["1925 Birthday Honours", "George V"], claim, ["1925 Birthday Honours"]
    )


def test_bridge_name_in_quotes_is_asked_for_as_one_title(data_dir):
    """A quoted title in an intro ("Read It and Weep") is one bridge name, not the capitalised runs inside it
    ("Read It", "Weep"), and the page under that title is fetched."""
    from backends.entities import names_in

    names = names_in(
        'the Disney films "Stuck in the Suburbs" (2004) and "Read It and Weep" (2006), alongside Kay Panabaker'
    )
    assert names == ["Disney", "Stuck in the Suburbs", "Read It and Weep", "Kay Panabaker"]
    claim = "In which 2006 Disney film did Danielle Panabaker star alongside her younger sister?"
    assert "Read It and Weep" in pages_fetched(
        data_dir, ["Danielle Panabaker", "Read It and Weep"], claim, ["Danielle Panabaker"]
    )


def test_pages_the_claim_names_come_first_among_live_evidence(data_dir):
    """A page the claim names answers the claim's own entity: it comes before search hits that share more words
    with the claim ("Local H", whose intro says "American", after four "United States" pages)."""
    from tests.support.fakewiki import pages_from_hotpot

    titles = [
        "Local H",
        "For Against",
        "United States Army",
        "Conscription in the United States",
        "The Humane Society of the United States",
    ]
    pages = pages_from_hotpot(data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl", titles=titles)
    claim = "Are Local H and For Against both from the United States?"
    with FakeWiki(pages) as w:
        result = fallback(w, min_relevance=0.2).retrieve(claim, ["Local H", "For Against", "United States"], k=4)
    found = [e.title for e in result.evidence]
    assert set(found[:2]) == {"Local H", "For Against"}
    assert len(found) == 4  # the search hits follow


def test_a_bridge_page_already_fetched_by_a_search_is_evidence(data_dir):
    """The local page "SuperMansion" names its stars; the search for "Workaholics" has already fetched one of them,
    "Jillian Bell". Named by the bridge sentence, her page is a bridge page all the same: evidence whatever its score."""
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    local = pages_from_hotpot(corpus, titles=["SuperMansion"])["SuperMansion"]
    remote = pages_from_hotpot(corpus, titles=["Jillian Bell", "Bryan Cranston"])
    claim = "SuperMansion starred the actress who had a recurring role as whom on Workaholics?"
    with FakeWiki(remote) as w:
        result = fallback(w, min_relevance=0.99).retrieve(
            claim, ["Workaholics"], k=5, context=[(local.title, local.intro)]
        )
        asked = [
            t
            for r in w.requests
            if "extracts" in r.params.get("prop", "") and "titles" in r.params
            for t in r.params["titles"].split("|")
        ]
    assert "Jillian Bell" in [e.title for e in result.evidence]
    assert "Jillian Bell" not in asked  # fetched once, with the search's hits, and not asked for again
    assert not [t for t in asked if ", " in t]  # a list of stars is no "Town, Region" pair


def test_the_first_hop_of_a_bridge_is_the_page_the_claim_names(data_dir):
    """The names for the second hop are read from the page the claim names ("127 Hours": "The film stars James
    Franco as Aron Ralston") before search hits that the scorer ranks higher (here: every other page)."""
    from fallback.relevance import FunctionScorer
    from tests.support.fakewiki import pages_from_hotpot

    titles = ["127 Hours", "James Franco", "Academy Award for Best Film Editing", "Danny Boyle"]
    pages = pages_from_hotpot(data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl", titles=titles)
    claim = 'Flyboys stars which actor who was nominated for an Academy Award for "127 Hours"?'
    scorer = FunctionScorer(lambda _claim, texts: [0.1 if t.startswith("127 Hours") else 1.0 for t in texts])
    with FakeWiki(pages) as w:
        result = fallback(w, scorer=scorer, min_relevance=0.5).retrieve(claim, ["Academy Award", "127 Hours"], k=10)
    assert "James Franco" in [p.title for p in result.pages]
    assert "Aron Ralston" in result.state.titles  # asked for: a name from the sentence of "127 Hours"


def test_an_office_before_a_bridge_name_is_dropped(data_dir):
    """ "signed by ... Austrian Prime Minister Engelbert Dollfuss": the person is asked for without the adjective
    of nationality and the office before the name."""
    from backends.entities import names_in

    names = names_in(
        "They were signed by Italian Prime Minister Benito Mussolini, Austrian Prime Minister "
        "Engelbert Dollfuss and Hungarian Prime Minister Gyula Gömbös."
    )
    assert {"Benito Mussolini", "Engelbert Dollfuss", "Gyula Gömbös"} <= set(names)
    assert "Minister Engelbert Dollfuss" not in names
    assert names_in("He met President Obama.") == ["President Obama"]  # one word left: no name of its own
    # Only a short run offers its first pair joined: a place, then its region ("Town, Region, Country").
    assert names_in("It lies in Casino, New South Wales, Australia.")[0] == "Casino, New South Wales"
    claim = "The Rome Protocols were signed by three Prime Ministers one of which was assassinated as part of what?"
    assert "Engelbert Dollfuss" in pages_fetched(
        data_dir, ["Rome Protocols", "Engelbert Dollfuss"], claim, ["Rome Protocols", "Prime Ministers"]
    )


def test_the_best_local_evidence_is_read_for_bridge_names_before_search_hits(data_dir, monkeypatch):
    """When no page the claim names was found ("Back", "Mono"), the best local evidence is the likelier first hop
    than keyword hits: its closest sentence ("The first track, 'To Know Him Is to Love Him' ...") is read before
    the hits' sentences fill the one request's titles."""
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    local = pages_from_hotpot(corpus, titles=["Back to Mono (1958–1969)"])["Back to Mono (1958–1969)"]
    remote = pages_from_hotpot(
        corpus,
        titles=[
            "Back to December",
            "Back Up, Dancer",
            "Back to the Beat (EP)",
            "Motion City Soundtrack",
            "To Know Him Is to Love Him",
        ],
    )
    claim = (
        "Who is the writer of this song that was inspired by words on a tombstone and was the first track on "
        "the box set Back to Mono?"
    )
    # The keyword hits outscore everything else, as they did on the HotpotQA split (TF-IDF scorer), and their
    # sentences hold as many names as the request takes.
    monkeypatch.setattr("fallback.live.BRIDGE_TITLES", 14)
    scorer = FunctionScorer(lambda _claim, texts: [1.0 if t.startswith("Back") else 0.1 for t in texts])
    with FakeWiki(remote) as w:
        result = fallback(w, scorer=scorer, min_relevance=0.5).retrieve(
            claim, ["Back", "Mono"], k=10, context=[(local.title, local.intro)]
        )
    assert "To Know Him Is to Love Him" in [p.title for p in result.pages]


def test_a_second_hop_alone_asks_only_for_names_the_local_index_lacks(data_dir):
    """``bridge`` reads the local evidence's closest sentences; the names ``known`` returns are not asked for, and
    when it knows them all no request is made."""
    from tests.support.fakewiki import pages_from_hotpot

    corpus = data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl"
    local = pages_from_hotpot(corpus, titles=["Ralph Hefferline"])["Ralph Hefferline"]
    claim = "Ralph Hefferline was a psychology professor at a university that is located in what city?"
    with FakeWiki(pages_from_hotpot(corpus, titles=["Columbia University"])) as w:
        result = fallback(w).bridge(claim, [(local.title, local.intro)], known=lambda names: {"Muncie", "Indiana"})
        assert [e.title for e in result.evidence] == ["Columbia University"]
        assert result.requests == 1 and result.status == STATUS_FOUND
        asked = w.requests[-1].params["titles"].split("|")
        assert "Columbia University" in asked and not {"Muncie", "Indiana"} & set(asked)
        n = len(w.requests)
        none = fallback(w).bridge(claim, [(local.title, local.intro)], known=set)
        assert none.requests == 0 and len(w.requests) == n and none.status == STATUS_FAILED


def test_a_joined_name_with_a_page_replaces_its_words(data_dir):
    """ "Wolf and Sheep" is asked for beside "Wolf" and "Sheep" (one request): it has a page, so the words are no
    names of their own, neither kept nor searched for. Without that page, the words are looked up as usual."""
    film = FakePage(
        "Wolf and Sheep",
        stable_id("Wolf and Sheep"),
        5,
        "Wolf and Sheep is a 2016 Afghan drama film directed by Shahrbanoo Sadat.",
    )
    wolf = FakePage("Wolf", stable_id("Wolf"), 6, "The wolf is a large canine native to Eurasia and North America.")
    claim = "Wolf and Sheep was screened at which 2016 film festival?"
    names = ["Wolf and Sheep", "Wolf", "Sheep"]
    with FakeWiki({"Wolf and Sheep": film, "Wolf": wolf}) as w:
        result = fallback(w).retrieve(claim, names, k=5)
        first = w.requests[0].params["titles"].split("|")
        searched = [q.params.get("srsearch") for q in w.requests if "srsearch" in q.params]
    assert first == names
    assert [e.title for e in result.evidence][:1] == ["Wolf and Sheep"] and "Wolf" not in [
        e.title for e in result.evidence
    ]
    assert "Sheep" not in searched and "Wolf and Sheep" not in searched
    with FakeWiki({"Wolf": wolf}) as w:
        result = fallback(w).retrieve(claim, names, k=5)
        searched = [q.params.get("srsearch") for q in w.requests if "srsearch" in q.params]
    assert "Sheep" in searched and "Wolf and Sheep" not in searched  # the joined name has no page: not searched


def test_keyword_planner_asks_for_the_rarest_words_then_those_outside_the_names():
    from fallback.live import ClaimState
    from fallback.planner import KeywordPlanner

    rare = {"silverdale": 9.0, "vocals": 6.0, "project": 5.0, "german": 4.5, "duo": 4.0, "england": 2.0}
    planner = KeywordPlanner(specificity=lambda ws: [rare.get(w, 1.0) for w in ws])
    claim = "Which German project recorded a song that featured vocals by a duo from Silverdale, England?"
    state = ClaimState(claim)
    assert planner.queries(claim, ["Silverdale"], attempt=1, state=state) == ["project vocals silverdale"]
    state.search_terms.append("project vocals silverdale")
    assert "german project vocals" in planner.queries(claim, ["Silverdale"], attempt=2, state=state)
    # Without scores: the claim's first keywords, then their first half.
    plain = KeywordPlanner()
    assert plain.queries(claim, ["Silverdale"], attempt=1, state=ClaimState(claim)) == [
        "german project recorded song featured vocals duo silverdale"
    ]
