"""The MediaWiki Action API subset at ``/w/api.php``: this project's own live client (fallback.client.WikiApi),
pointed at the local server, gets the local index's answers; the raw shapes follow the real API's."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.test_serve import ThreadServer, light_state
from wikiground.text import canonical_title


@pytest.fixture(scope="module")
def served(gensim_index):
    state = light_state(gensim_index)
    with ThreadServer(state) as url:
        yield url, state.generation.retriever


@pytest.fixture(scope="module")
def api_url(served) -> str:
    return served[0] + "/w/api.php"


@pytest.fixture(scope="module")
def retriever(served):
    return served[1]


@pytest.fixture(scope="module")
def wiki(api_url):
    from fallback.client import WikiApi
    from fallback.settings import FallbackSettings

    settings = FallbackSettings(api_url=api_url, contact="test@example.org", cache_mode="off", rate=1000)
    with WikiApi(settings) as api:
        yield api


def _get(api_url: str, **params) -> dict:
    r = httpx.get(api_url, params={"format": "json", **params}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _redirect(store) -> tuple[str, str]:
    return store._all(
        "SELECT r.source_title, r.target_title FROM redirects r JOIN pages p ON p.title = r.target_title "
        "WHERE r.target_fragment IS NULL AND r.source_page_id IS NOT NULL ORDER BY r.source_title LIMIT 1"
    )[0]


def _dab(store) -> str:
    rows = store._all("SELECT title FROM pages WHERE is_disambiguation ORDER BY title LIMIT 1")
    if not rows:
        pytest.skip("no disambiguation page in this index")
    return rows[0][0]


def test_live_client_resolves_titles_as_the_store_does(wiki, retriever):
    store = retriever.store
    source, target = _redirect(store)
    dab = _dab(store)
    lowered = target[:1].lower() + target[1:]
    got = wiki.resolve([source, dab, "No such page here", lowered])
    page = store.page_by_title(target)
    assert (got[source].title, got[source].pageid, got[source].redirected) == (target, page.page_id, True)
    assert got[source].url == page.url and got[source].rev_id == page.rev_id
    assert got[dab].is_disambiguation and not got[source].is_disambiguation
    assert got["No such page here"].missing and got["No such page here"].pageid is None
    assert got[lowered].title == target  # normalised, as MediaWiki does (first letter)


def test_live_client_intros_are_the_local_leads(wiki, retriever):
    store = retriever.store
    titles = [t for (t,) in store._all("SELECT title FROM pages ORDER BY page_id LIMIT 25")]
    got = wiki.intros(titles)  # 20 a request, as the real API allows
    assert set(got) == set(titles)
    for t in titles:
        assert got[t].extract == store.page_by_title(t).lead


def test_live_client_search_is_the_local_fused_search(wiki, retriever):
    query = "philosophy of mind"
    result, intros = wiki.search_intros(query, limit=3)
    want = [retriever.store.page(f.page_id).title for f in retriever.fused_pages(query, k=3)]
    assert [h.title for h in result.hits] == want
    assert set(intros) == set(want)
    nxt = wiki.search(query, limit=3, offset=3)
    assert [h.title for h in nxt.hits] == [
        retriever.store.page(f.page_id).title for f in retriever.fused_pages(query, k=6)[3:]
    ]


def test_live_client_categories_and_links(wiki, retriever):
    store = retriever.store
    titles = [
        t
        for (t,) in store._all(
            "SELECT p.title FROM pages p JOIN categories c USING (page_id) GROUP BY 1 ORDER BY 1 LIMIT 5"
        )
    ]
    got = wiki.categories_of(titles)
    for t in titles:
        assert got[t] == store.categories(store.page_by_title(t).page_id)
    many = store._all(
        "SELECT p.title FROM pages p JOIN links l USING (page_id) GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
    )[0][0]
    want = sorted({canonical_title(t) for t, _ in store.links(store.page_by_title(many).page_id)})
    assert wiki.links(many) == want and len(want) > 10


def test_live_client_linked_intros(wiki, retriever):
    """``generator=links`` (a disambiguation page's options with their intros): the first 20 links by title, the
    ones with a local page answered with its lead."""
    store = retriever.store
    title, pid = store._all(
        "SELECT s.title, s.page_id FROM links l JOIN pages s ON s.page_id = l.page_id JOIN pages t "
        "ON t.title = l.target_title GROUP BY 1, 2 ORDER BY count(*) DESC, 1 LIMIT 1"
    )[0]
    first = sorted({canonical_title(t) for t, _ in store.links(pid)})[:20]
    local = {t: store.page_by_title(t) for t in first if store.resolve_titles([t], loose=False)}
    got = wiki.linked_intros(title, limit=20)
    assert got and set(got) == {p.title for p in local.values()}
    assert all(got[p.title].extract == p.lead for p in local.values())


def test_links_continue_until_complete(api_url, retriever):
    store = retriever.store
    title, pid = store._all(
        "SELECT p.title, p.page_id FROM pages p JOIN links l USING (page_id) GROUP BY 1, 2 ORDER BY count(*) DESC LIMIT 1"
    )[0]
    seen, cont, rounds = [], {}, 0
    while True:
        body = _get(api_url, action="query", titles=title, prop="links", pllimit="150", **cont)
        seen += [x["title"] for x in body["query"]["pages"][str(pid)].get("links", [])]
        rounds += 1
        if "continue" not in body:
            assert "batchcomplete" in body
            break
        assert "batchcomplete" not in body and body["continue"]["continue"] == "||"
        cont = dict(body["continue"])
    assert seen == sorted({canonical_title(t) for t, _ in store.links(pid)}) and rounds > 1


def test_formatversion_1_and_2_shapes(api_url, retriever):
    source, target = _redirect(retriever.store)
    pid = retriever.store.page_by_title(target).page_id
    v1 = _get(api_url, action="query", titles=f"{source}|Nope one|Nope two", redirects="1", prop="info|pageprops")
    assert v1["batchcomplete"] == "" and v1["query"]["redirects"] == [{"from": source, "to": target}]
    assert set(v1["query"]["pages"]) == {str(pid), "-1", "-2"}
    assert v1["query"]["pages"]["-1"] == {"ns": 0, "title": "Nope one", "missing": ""}
    v2 = _get(api_url, action="query", titles=f"{source}|Nope one", redirects="1", formatversion="2")
    assert v2["batchcomplete"] is True
    assert v2["query"]["pages"] == [
        {"pageid": pid, "ns": 0, "title": target},
        {"ns": 0, "title": "Nope one", "missing": True},
    ]
    no_follow = _get(api_url, action="query", titles=source, formatversion="2")
    redirect_page = no_follow["query"]["pages"][0]  # the redirect page itself, as MediaWiki answers
    assert (
        redirect_page["redirect"] is True and redirect_page["title"] == source and "redirects" not in no_follow["query"]
    )
    by_id = _get(api_url, action="query", pageids=f"{pid}|-1", prop="info", inprop="url")
    assert by_id["query"]["pages"][str(pid)]["fullurl"] and by_id["query"]["pages"]["-1"] == {
        "pageid": -1,
        "missing": "",
    }


def test_extracts_whole_page_marks_sections(api_url, retriever):
    store = retriever.store
    title, pid = store._all(
        "SELECT p.title, p.page_id FROM pages p JOIN sections s USING (page_id) WHERE s.level = 2 GROUP BY 1, 2 ORDER BY 2 LIMIT 1"
    )[0]
    heading = store._all(
        "SELECT heading FROM sections WHERE page_id = ? AND level = 2 ORDER BY section_index LIMIT 1", [pid]
    )[0][0]
    body = _get(api_url, action="query", titles=title, prop="extracts", explaintext="1", exsectionformat="wiki")
    text = body["query"]["pages"][str(pid)]["extract"]
    assert text.startswith(store.page(pid).lead[:50]) and f"\n== {heading} ==\n" in text
    two = _get(
        api_url,
        action="query",
        titles=f"{title}|{store.page(pid + 1).title if store.page(pid + 1) else title}",
        prop="extracts",
        explaintext="1",
    )
    if len(two["query"]["pages"]) == 2:  # one whole-page extract a request, as TextExtracts does
        assert "excontinue" in two["continue"]


def test_lists_categorymembers_backlinks_search(api_url, retriever):
    store = retriever.store
    cat, n = store._all("SELECT category, count(*) FROM categories GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1")[0]
    body = _get(api_url, action="query", list="categorymembers", cmtitle=f"Category:{cat}", cmlimit="max")
    assert len(body["query"]["categorymembers"]) == len(
        {p for (p,) in store._all("SELECT page_id FROM categories WHERE category = ?", [cat])}
    )
    target = store._all(
        "SELECT l.target_title FROM links l JOIN pages p ON p.title = l.target_title GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
    )[0][0]
    bl = _get(api_url, action="query", list="backlinks", bltitle=target, bllimit="2")
    assert len(bl["query"]["backlinks"]) == 2 and "blcontinue" in bl["continue"]
    search = _get(api_url, action="query", list="search", srsearch="Greek philosopher", srlimit="2", formatversion="2")
    assert len(search["query"]["search"]) == 2 and search["continue"]["sroffset"] == 2
    assert 'class="searchmatch"' in "".join(h["snippet"] for h in search["query"]["search"])


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"action": "edit"}, "badvalue"),
        ({"action": "feedrecentchanges"}, "badvalue"),
        ({"action": "query", "generator": "geosearch", "titles": "X"}, "badvalue"),
        ({"action": "parse", "page": "No such page here"}, "missingtitle"),
        ({"action": "parse", "oldid": "123456789012345"}, "nosuchrevid"),
        ({}, "missingparam"),
    ],
)
def test_unknown_action_or_module_gets_the_error_shape(api_url, params, code):
    r = httpx.get(api_url, params=params, timeout=30)
    assert r.status_code == 200 and r.json()["error"]["code"] == code and r.json()["error"]["info"]
    assert r.headers["MediaWiki-API-Error"] == code


def test_unserved_prop_list_and_meta_values_are_warnings(api_url, retriever):
    """``prop``, ``list`` and ``meta`` take several values: MediaWiki answers the ones it knows and warns about the
    rest (Wikipedia-API asks ``prop=langlinks``); an error here lost the whole answer."""
    title = retriever.store._all("SELECT title FROM pages ORDER BY page_id LIMIT 1")[0][0]
    body = _get(api_url, action="query", titles=title, prop="info|langlinks", list="geosearch", meta="tokens")
    warned = body["warnings"]["main"]["*"]
    assert 'Unrecognized value for parameter "prop": langlinks.' in warned
    assert 'Unrecognized value for parameter "list": geosearch.' in warned and '"meta": tokens' in warned
    (page,) = body["query"]["pages"].values()
    assert page["title"] == title and page["contentmodel"] == "wikitext" and "langlinks" not in page


def test_unserved_parameters_are_warned_about(api_url, retriever):
    title = retriever.store._all("SELECT title FROM pages LIMIT 1")[0][0]
    body = _get(
        api_url,
        action="query",
        titles=title,
        prop="info",
        inprop="url|watchers|protection",
        rvprop="content",
        formatversion="2",
    )
    assert "watchers|protection" in body["warnings"]["info"]["warnings"]
    assert "Unrecognized parameter: rvprop." in body["warnings"]["main"]["warnings"]
    assert "fullurl" in body["query"]["pages"][0] and "watchers" not in body["query"]["pages"][0]


@pytest.mark.parametrize(
    "params",
    [
        {"action": "query", "titles": "A|" * 80, "prop": "extracts|links|categories", "pllimit": "-3"},
        {"action": "query", "pageids": "x|99999999999999999999|-5", "prop": "info"},
        {"action": "query", "list": "search|backlinks|categorymembers", "srsearch": "\x00\ud7ff", "cmtitle": "Nope"},
        {"action": "query", "titles": "[[bad]]|#", "generator": "links", "gpllimit": "max", "gplcontinue": "zz"},
        {
            "action": "query",
            "generator": "search",
            "gsrsearch": "",
            "prop": "extracts",
            "exlimit": "abc",
            "exintro": "",
        },
    ],
)
def test_garbage_is_never_a_500(api_url, params):
    for method in ("GET", "POST"):
        r = httpx.request(
            method,
            api_url,
            params=params if method == "GET" else None,
            data=params if method == "POST" else None,
            timeout=30,
        )
        assert r.status_code == 200, r.text
        assert "query" in r.json() or "error" in r.json()


def test_on_the_fly_against_the_local_api_shares_one_rate_limit(served, api_url, tmp_path):
    """A second server over an index that lacks the gensim pages, its live fallback pointed at the first one's
    /w/api.php: claims about the missing pages get them live (with the first index's text), and eight concurrent
    claims together keep to the fallback's rate (one live client for the whole server, not one per request)."""
    from concurrent.futures import ThreadPoolExecutor

    from fallback.settings import FallbackSettings
    from indexer.build import build_index
    from retriever.api import Retriever
    from retriever.serve.state import ServerState
    from retriever.service import SearchOptions
    from tests.conftest import DUMPS

    local = tmp_path / "index"
    build_index([DUMPS / "wikibrain-en_test.xml"], local, indexes=())
    rate = 8.0
    settings = FallbackSettings(api_url=api_url, contact="test@example.org", cache_mode="off", rate=rate)
    live = ServerState(
        lambda: Retriever.open(local, channels="title", on_the_fly=True, fallback=settings),
        defaults=SearchOptions(on_the_fly=True),
    )
    live.start()
    first = served[1]
    claims = [
        "Aristotle tutored Alexander the Great.",
        "Anarchism is a political philosophy.",
        "Ayn Rand was a novelist.",
    ]
    with ThreadServer(live, threads=8) as url:
        before = httpx.get(f"{served[0]}/stats", timeout=30).json()["requests"].get("w/api.php", 0)
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            lines = list(
                pool.map(
                    lambda c: httpx.post(f"{url}/search", json={"claim": c, "k": 3}, timeout=120).json(), claims * 3
                )
            )
        elapsed = time.monotonic() - t0
        after = httpx.get(f"{served[0]}/stats", timeout=30).json()["requests"]["w/api.php"]
    sent = after - before
    assert sent > rate  # enough requests for the limit to show
    assert sent <= rate * elapsed + 2, f"{sent} requests in {elapsed:.1f} s at {rate}/s"
    aristotle = next(line for line in lines if line["query"].startswith("Aristotle"))
    top = next(e for e in aristotle["evidence"] if e["title"] == "Aristotle")
    assert top["origin"] == "live" and top["evidence_text"] in first.store.page_by_title("Aristotle").lead


# -- what the common Python clients send (the `wikipedia` package, mwclient), as they send it ---------------------


def test_wikipedia_package_content_reads_extract_and_revision_ids(api_url, retriever):
    """``WikipediaPage.content`` asks ``prop=extracts|revisions&explaintext&rvprop=ids`` and reads the extract,
    ``revisions[0].revid`` and ``parentid``: ``prop=revisions`` was an error, so every ``page.content`` failed."""
    store = retriever.store
    source, target = _redirect(store)
    page = store.page_by_title(target)
    body = _get(api_url, action="query", prop="extracts|revisions", explaintext="", rvprop="ids", titles=target)
    got = body["query"]["pages"][str(page.page_id)]
    assert got["extract"].startswith(page.lead[:50]) and got["revisions"] == [{"revid": page.rev_id, "parentid": 0}]
    # mwclient's page.text(): rvprop=content|timestamp with rvslots=main, in formatversion 2 too.
    for fv, key in (("1", "*"), ("2", "content")):
        body = _get(
            api_url,
            action="query",
            prop="revisions",
            rvprop="content|timestamp",
            rvslots="main",
            titles=source,
            redirects="1",
            formatversion=fv,
        )
        pages = body["query"]["pages"]
        (rev,) = (pages[0] if fv == "2" else pages[str(page.page_id)])["revisions"]
        assert rev["slots"]["main"][key].startswith(page.lead[:50]) and rev["timestamp"] == page.rev_timestamp
        assert "wikitext" in str(body["warnings"]["revisions"])  # says it is the stored text, not wikitext


def test_wikipedia_package_reads_disambiguation_options_from_rvparse_html(api_url, retriever):
    from html.parser import HTMLParser

    from retriever.pages import page_view

    store = retriever.store
    dab = _dab(store)
    pid = store.page_by_title(dab).page_id
    info = _get(api_url, action="query", prop="info|pageprops", inprop="url", ppprop="disambiguation", titles=dab)
    assert info["query"]["pages"][str(pid)]["pageprops"] == {"disambiguation": ""}
    body = _get(api_url, action="query", prop="revisions", rvprop="content", rvparse="", rvlimit="1", titles=dab)
    html = body["query"]["pages"][str(pid)]["revisions"][0]["*"]

    class Anchors(HTMLParser):  # what the package does with BeautifulSoup: the text of each <li>'s <a>
        def __init__(self):
            super().__init__()
            self.options, self.in_li, self.in_a = [], False, False

        def handle_starttag(self, tag, attrs):
            self.in_li = self.in_li or tag == "li"
            self.in_a = self.in_li and tag == "a"

        def handle_endtag(self, tag):
            self.in_a = False if tag == "a" else self.in_a
            self.in_li = False if tag == "li" else self.in_li

        def handle_data(self, data):
            if self.in_a:
                self.options.append(data)

    parser = Anchors()
    parser.feed(html)
    assert parser.options == page_view(store, dab)["options"] and parser.options


def test_parse_sections_text_categories_links(api_url, retriever):
    store = retriever.store
    title, pid = store._all(
        "SELECT p.title, p.page_id FROM pages p JOIN sections s USING (page_id) WHERE s.level = 3 GROUP BY 1, 2 "
        "ORDER BY 2 LIMIT 1"
    )[0]
    heads = store._all(
        "SELECT heading, level FROM sections WHERE page_id = ? AND section_index > 0 ORDER BY section_index", [pid]
    )
    body = _get(api_url, action="parse", page=title, prop="sections|text|categories|links|revid")["parse"]
    assert (body["title"], body["pageid"], body["revid"]) == (title, pid, store.page(pid).rev_id)
    assert [(s["line"], int(s["level"])) for s in body["sections"]] == heads
    assert body["sections"][0]["number"] == "1" and any("." in s["number"] for s in body["sections"])
    assert [c["*"] for c in body["categories"]] == [c.replace(" ", "_") for c in store.categories(pid)]
    assert [x["*"] for x in body["links"]] == sorted({canonical_title(t) for t, _ in store.links(pid)})
    assert body["text"]["*"].startswith('<div class="mw-parser-output">')
    v2 = _get(api_url, action="parse", pageid=str(pid), prop="text|links", formatversion="2")["parse"]
    assert isinstance(v2["text"], str) and all(isinstance(x["exists"], bool) for x in v2["links"])
    # The `wikipedia` package sends titles= to action=parse, which MediaWiki does not read: it parses nothing.
    nothing = _get(api_url, action="parse", prop="sections", titles=title)
    assert nothing["parse"] == {"title": "API", "pageid": 0, "sections": []}
    assert "Unrecognized parameter: titles." in nothing["warnings"]["main"]["*"]


def test_mwclient_site_init_and_generators(api_url, retriever):
    """mwclient asks ``meta=siteinfo|userinfo`` when it connects (and ``userinfo`` with every query), reads
    ``general.generator`` as "MediaWiki X.Y" and the namespaces; a page's categories and backlinks are generators."""
    from retriever.pages import backlinks

    store = retriever.store
    init = _get(
        api_url,
        action="query",
        meta="siteinfo|userinfo",
        siprop="general|namespaces",
        uiprop="groups|rights",
        **{"continue": ""},
    )["query"]
    assert init["general"]["generator"].startswith("MediaWiki 1.")
    assert init["namespaces"]["14"]["*"] == "Category" and init["userinfo"]["anon"] == ""
    title, pid = store._all(
        "SELECT p.title, p.page_id FROM pages p JOIN categories c USING (page_id) GROUP BY 1, 2 "
        "ORDER BY count(*) DESC LIMIT 1"
    )[0]
    cats = _get(api_url, action="query", generator="categories", titles=title, gcllimit="max", prop="info")
    got = sorted(p["title"] for p in cats["query"]["pages"].values())
    assert got == sorted(f"Category:{c}" for c in store.categories(pid))
    assert all(p["ns"] == 14 for p in cats["query"]["pages"].values())
    bl = _get(api_url, action="query", generator="backlinks", gbltitle=title, gbllimit="max", prop="info")
    want = {p.title for p in backlinks(store, title)}
    assert {p["title"] for p in bl.get("query", {}).get("pages", {}).values()} == want
    rnd = _get(api_url, action="query", list="random", rnnamespace="0", rnlimit="3")["query"]["random"]
    assert len(rnd) == 3 and all(store.page_by_title(r["title"]) for r in rnd)
