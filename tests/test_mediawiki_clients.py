"""The MediaWiki clients people already use, installed from PyPI and unchanged (pymediawiki, wikipedia, mwclient,
pywikibot, Wikipedia-API; read-only calls), against ``/w/api.php`` of a running server over the gensim index; and the raw answers
they rely on (redirects to missing pages, namespaces, totalhits, badinteger, paraminfo)."""

from __future__ import annotations

import os
import re
import warnings

import httpx
import pytest

from retriever import pages as page_lookup
from tests.test_serve import ThreadServer, light_state


@pytest.fixture(scope="module")
def served(gensim_tfidf):
    state = light_state(gensim_tfidf)
    with ThreadServer(state) as url:
        yield url, state.generation.retriever.store


@pytest.fixture(scope="module")
def facts(served):
    """Titles of the index to ask about: a page with sections and categories, a redirect to a stored page and one
    to a page the dump lacks."""
    _, store = served
    page = store.rows(
        "SELECT p.title, p.rev_id FROM pages p JOIN categories c USING (page_id) JOIN sections s USING (page_id) "
        "WHERE p.namespace = 0 AND s.section_index = 1 GROUP BY p.title, p.rev_id ORDER BY count(*) DESC LIMIT 1"
    )[0]
    redirect = store.rows("SELECT source_title, target_title FROM redirects WHERE target_page_id IS NOT NULL LIMIT 1")[
        0
    ]
    dangling = store.rows("SELECT source_title, target_title FROM redirects WHERE target_page_id IS NULL LIMIT 1")[0]
    return {"title": page[0], "rev_id": page[1], "redirect": redirect, "dangling": dangling, "store": store}


def _get(url: str, **params) -> dict:
    return httpx.get(f"{url}/w/api.php", params={"format": "json", **params}, timeout=60).json()


def _first_sentences(store, title: str, n: int) -> str:
    rows = store.rows(
        "SELECT s.text FROM sentences s JOIN passages p USING (passage_id) WHERE p.title = ? AND p.section_index = 0 "
        "AND p.source = 'text' ORDER BY s.page_sentence_index LIMIT ?",
        [title, n],
    )
    return " ".join(r[0] for r in rows)


def test_pymediawiki(served, facts):
    from mediawiki import MediaWiki, PageError

    url, store = served
    wiki = MediaWiki(url=f"{url}/w/api.php", rate_limit=False)  # raised KeyError: 'extensions' before
    assert "TextExtracts" in wiki.extensions
    title = facts["title"]
    page = wiki.page(title, auto_suggest=False)
    assert page.title == title and page.revision_id == facts["rev_id"]
    assert wiki.summary(title, sentences=2, auto_suggest=False) == _first_sentences(store, title, 2)
    assert page.sections and any(page.section(s) for s in page.sections[:3])
    assert page.wikitext.startswith(page.summary[:40]) and page.categories and page.links and page.backlinks
    assert wiki.opensearch(title[:4])[0][0].startswith(title[:4])
    assert all(t.startswith(title[:4]) for t in wiki.prefixsearch(title[:4]))
    assert len(wiki.random(pages=2)) == 2 and title in wiki.search(title)
    source, target = facts["redirect"]
    assert wiki.page(source, auto_suggest=False).title == target
    with pytest.raises(PageError):
        wiki.page("No such page in this index at all", auto_suggest=False)


def test_wikipedia_package(served, facts):
    import wikipedia

    url, store = served
    wikipedia.wikipedia.API_URL = f"{url}/w/api.php"  # its base URL lives here, not in wikipedia.API_URL
    title = facts["title"]
    assert wikipedia.summary(title, sentences=2, auto_suggest=False) == _first_sentences(store, title, 2)
    short = wikipedia.summary(title, chars=80, auto_suggest=False)
    assert len(short) <= 81 and short.endswith("…")
    page = wikipedia.page(title, auto_suggest=False)
    assert page.content and page.links and page.categories and str(page.revision_id) == str(facts["rev_id"])
    assert title in wikipedia.search(title) and len(wikipedia.random(2)) == 2
    misspelt = title[:-2] + title[-1] + title[-2]
    assert wikipedia.suggest(misspelt) == title


def test_mwclient(served, facts):
    import mwclient

    url, _ = served
    host = url.removeprefix("http://")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        site = mwclient.Site(host, scheme="http", path="/w/")
        page = site.pages[facts["title"]]
        whole, first = page.text(), page.text(section=1)
        assert first.startswith("== ") and len(first) < len(whole)  # rvsection: the whole page before
        assert [r["revid"] for r in site.revisions([facts["rev_id"]])] == [facts["rev_id"]]
        assert list(page.templates()) == [] and list(page.images()) == []  # APIError before
        names = [p.name for p in site.allpages(max_items=3)]
        assert names == sorted(names) and len(names) == 3
        assert "world" in site.parse(text="Hello '''world'''")["text"]["*"]
        source, target = facts["redirect"]
        assert site.pages[source].text() == f"#REDIRECT [[{target}]]"
        assert [c.name for c in page.categories()]


def test_pywikibot(served, facts, tmp_path):
    url, _ = served
    os.environ.setdefault("PYWIKIBOT_DIR", str(tmp_path))
    os.environ.setdefault("PYWIKIBOT_NO_USER_CONFIG", "2")
    import pywikibot
    from pywikibot.family import AutoFamily

    family = AutoFamily("wikiground", f"{url}/w/api.php")
    site = pywikibot.Site(family.code, family)
    page = pywikibot.Page(site, facts["title"])
    assert page.exists() and page.text and page.latest_revision_id == facts["rev_id"]
    assert list(page.categories()) and list(page.linkedPages(total=3))
    assert list(page.templates()) == []
    source, target = facts["redirect"]
    assert pywikibot.Page(site, source).getRedirectTarget().title() == target
    assert [p.title() for p in site.search(facts["title"], total=3)]
    assert len(list(site.allpages(total=3))) == 3 and len(list(site.randompages(total=2))) == 2
    assert not pywikibot.Page(site, "No such page in this index at all").exists()


def _to_server(url: str):
    """An httpx transport that sends every request to ``url`` (Host header too): Wikipedia-API builds
    ``https://en.wikipedia.org/w/api.php`` itself and takes a transport, not a base URL (docs/serving.md)."""
    target = httpx.URL(url)

    class ToServer(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            request.url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            request.headers["Host"] = request.url.netloc.decode()
            return super().handle_request(request)

    return ToServer()


def test_wikipedia_api(served, facts):
    import wikipediaapi

    url, store = served
    wiki = wikipediaapi.Wikipedia(user_agent="wikiground-test (test@example.org)", transport=_to_server(url))
    title = facts["title"]
    view = page_lookup.page_view(store, title)
    page = wiki.page(title)
    assert page.exists() and page.pageid == view["page_id"] and page.lastrevid == facts["rev_id"]
    assert page.displaytitle == title and page.fullurl == view["url"]  # displaytitle was None before
    assert page.summary == view["lead"].strip()
    top = [s["heading"] for s in view["sections"] if s["level"] == 2]
    assert [s.title for s in page.sections] == top
    nested = next(s for s in page.sections if s.sections)
    assert nested.sections[0].title == next(s["heading"] for s in view["sections"] if s["level"] == 3)
    first = next(s for s in view["sections"] if s["level"] == 2 and s["text"])
    assert page.section_by_title(first["heading"]).text == first["text"].strip()
    assert page.summary in page.text and len(page.text) > len(page.summary)
    assert set(page.links) == {link["title"] for link in view["links"]}
    assert {c.removeprefix("Category:") for c in page.categories} == set(view["categories"])
    backlinks = page.backlinks
    assert backlinks and all(
        title in {link["title"] for link in page_lookup.page_view(store, t)["links"]} for t in list(backlinks)[:3]
    )
    source, target = facts["redirect"]
    redirect = wiki.page(source)
    assert redirect.exists() and redirect.title == target
    assert not wiki.page("No such page in this index at all").exists()
    assert title in wiki.search(title).pages


def test_raw_answers_follow_mediawiki(served, facts):
    url, _ = served
    source, target = facts["dangling"]
    body = _get(url, action="query", titles=source, redirects="1")["query"]
    assert body["redirects"] == [{"from": source, "to": target}]
    assert list(body["pages"].values()) == [{"ns": 0, "title": target, "missing": ""}]
    pages = _get(url, action="query", titles="Category:Nothing here|Talk:Nothing here")["query"]["pages"]
    assert sorted(p["ns"] for p in pages.values()) == [1, 14]
    totals = {
        n: _get(url, action="query", list="search", srsearch="Greek", srlimit=n)["query"]["searchinfo"]["totalhits"]
        for n in ("1", "5")
    }
    assert totals["1"] == totals["5"] > 5
    bad = _get(url, action="query", list="search", srsearch="Greek", srlimit="\u0661\u0660")
    assert bad["error"]["code"] == "badinteger"
    info = _get(url, action="paraminfo", modules="main|query+search")["paraminfo"]["modules"]
    assert {"query", "parse", "opensearch", "paraminfo"} <= set(info[0]["parameters"][0]["type"])
    assert info[1]["prefix"] == "sr" and "namespace" in {p["name"] for p in info[1]["parameters"]}
    si = _get(url, action="query", meta="siteinfo", siprop="general|extensions|namespacealiases")
    assert "warnings" not in si and si["query"]["general"]["thumblimits"] and si["query"]["namespacealiases"]
    section = httpx.get(
        f"{url}/w/api.php",
        params={"action": "parse", "page": facts["title"], "section": "1", "prop": "wikitext", "format": "json"},
    ).json()
    assert re.match(r"==+ ", section["parse"]["wikitext"]["*"])
