"""The evidence explorer (the web page at ``/``), in a real headless Chromium against a real server over the gensim
index: the claim view, the page view, the run view with every gold format, the URL state, and its routes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.support.browser import REQUIRE_ENV, chromium, missing_reason
from tests.test_serve import ThreadServer, light_state

CLAIM = "Aristotle tutored Alexander the Great."
KG_CLAIM = "Aristotle was born in Stagira."
CHANNELS = "tfidf,title,kg"


@pytest.fixture(scope="module")
def explorer_index(tmp_path_factory, gensim_dump) -> Path:
    """The gensim dump with TF-IDF and the kg channel: every explorer feature, no JVM and no model."""
    from indexer.build import build_index

    out = tmp_path_factory.mktemp("explorer") / "index"
    build_index([gensim_dump], out, indexes=("tfidf", "kg"))
    return out


@pytest.fixture(scope="module")
def server(explorer_index):
    with ThreadServer(light_state(explorer_index, CHANNELS)) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    reason = missing_reason()
    if reason:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set but {reason}")
        pytest.skip(reason)
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    p.set_default_timeout(60_000)
    p.server = server
    yield p
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


def _answer(server: str, claim: str, **opts) -> dict:
    r = httpx.post(f"{server}/search", json={"claim": claim, **opts}, timeout=60)
    r.raise_for_status()
    return r.json()


def _search_in_form(page, claim: str) -> None:
    page.goto(page.server + "/")
    box = page.get_by_label("Claim or question")
    box.fill(claim)
    box.press("Enter")
    page.wait_for_selector("#claim-results li.ev")


# -- the claim view ----------------------------------------------------------------------------------------------


def test_claim_view_renders_the_fused_list_with_chips_origin_and_marks(page):
    _search_in_form(page, CLAIM)
    want = _answer(page.server, CLAIM, k=10)["evidence"]
    items = page.locator("#claim-results li.ev")
    assert items.count() == len(want) > 1
    for n, e in enumerate(want):
        item = items.nth(n)
        assert item.locator("h3 a").inner_text() == e["title"]
        if e["section"]:
            assert e["section"] in item.locator("h3 .sect").inner_text()
        chips = [c.strip() for c in item.locator(".chips li").all_inner_texts()]
        assert chips == [f"{c} #{r}" for c, r in e["ranks"].items()]
        assert item.locator(".origin").inner_text() == e["origin"] == "local"
        href = item.locator("a.rev").get_attribute("href")
        assert href.endswith(f"oldid={e['rev_id']}") and href.startswith("https://en.wikipedia.org/w/index.php?")
        if e.get("retrieved_for_entity"):
            assert e["retrieved_for_entity"] in item.locator(".ent").inner_text()
        assert f"score {e['score']:.4f}" in item.locator(".scores").inner_text()
    first = items.nth(0)
    marks = {m.lower() for m in first.locator(".text mark").all_inner_texts()}
    assert {"aristotle", "tutored", "alexander", "great"} <= marks
    page.wait_for_function("document.querySelector('time.revdate').textContent.length > 0")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", first.locator("time.revdate").inner_text())
    query = parse_qs(urlsplit(page.url).query)
    assert query["claim"] == [CLAIM] and query["k"] == ["10"]
    assert float(page.locator("#claim-results").get_attribute("data-render-ms")) >= 0


def test_more_passages_open_in_place(page):
    _search_in_form(page, CLAIM)
    e = _answer(page.server, CLAIM, k=10)["evidence"][0]
    button = page.locator("#claim-results li.ev").nth(0).locator("button.more")
    assert button.get_attribute("aria-expanded") == "false"
    button.click()
    page.wait_for_selector("#claim-results li.ev >> nth=0 >> .morelist")
    assert button.get_attribute("aria-expanded") == "true"
    wanted = httpx.get(f"{page.server}/explorer/api/passages", params={"ids": ",".join(map(str, e["more_passages"]))})
    texts = page.locator("#claim-results li.ev >> nth=0 >> .morelist .text").all_inner_texts()
    assert [t.strip() for t in texts] == [p["text"].strip() for p in wanted.json()["passages"]]
    assert len(texts) == len(e["more_passages"])
    button.press("Enter")
    assert button.get_attribute("aria-expanded") == "false"
    assert page.locator("#more-1").is_hidden()


def test_kg_paths_and_multihop_hops(page):
    page.goto(page.server + "/?" + str(httpx.QueryParams({"claim": KG_CLAIM, "k": 5, "indexes": "kg"})))
    page.wait_for_selector("#claim-results li.ev .kg li")
    answer = _answer(page.server, KG_CLAIM, k=5, indexes="kg")
    t = answer["evidence"][0]["triples"][0]
    path = page.locator("#claim-results li.ev").nth(0).locator(".kg li").nth(0).inner_text()
    assert f"{t['subject']} —{t['relation']}→ {t['object']}" in path
    page.goto(page.server + "/?" + str(httpx.QueryParams({"claim": CLAIM, "k": 6, "multihop": 1})))
    page.wait_for_selector("#claim-hops li.hop")
    answer = _answer(page.server, CLAIM, k=6, multihop=True)
    hops = page.locator("#claim-hops li.hop")
    assert hops.count() == len(answer["hops"]) >= 2
    first_query = next(iter(answer["hops"][0]["queries"].values()))[0]["query"]
    assert first_query in hops.nth(0).inner_text()
    assert "hop 1" in page.locator("#claim-results li.ev").nth(0).locator(".hopinfo").inner_text()


# -- the page view -----------------------------------------------------------------------------------------------


def test_page_view_shows_the_stored_page_and_follows_its_links(page):
    view = httpx.get(f"{page.server}/pages/AynRand").json()
    assert view["title"] == "Ayn Rand" and "AynRand" in view["redirects"]
    page.goto(page.server + "/?page=AynRand")
    page.wait_for_selector("#page-title")
    assert page.locator("#page-title").inner_text() == "Ayn Rand"
    assert "redirected from AynRand" in page.locator("#page-body").inner_text()
    assert "AynRand" in page.locator("#pg-redirects + ul").inner_text()
    assert page.locator("#pg-cats + ul li").count() == len(view["categories"]) > 0
    assert page.locator(".infobox").count() == len(view["infobox"])
    assert f"oldid={view['rev_id']}" in page.locator("#page-body a.rev").get_attribute("href")
    target = next(
        link["title"] for link in view["links"] if httpx.get(f"{page.server}/pages/{link['title']}").is_success
    )
    page.locator("#pg-links + ul a", has_text=target).first.click()
    page.wait_for_function("() => document.querySelector('#page-title').textContent !== 'Ayn Rand'")
    assert parse_qs(urlsplit(page.url).query)["page"] == [target]
    page.go_back()
    page.wait_for_function("() => document.querySelector('#page-title').textContent === 'Ayn Rand'")


def test_page_view_lists_a_disambiguation_pages_options(page, explorer_index):
    from retriever.api import Retriever

    with Retriever.open(explorer_index, channels="title") as r:
        rows = r.store.rows("SELECT title FROM pages WHERE is_disambiguation ORDER BY title LIMIT 1")
    assert rows, "the gensim dump has disambiguation pages"
    view = httpx.get(f"{page.server}/pages/{rows[0][0]}").json()
    page.goto(page.server + "/?" + str(httpx.QueryParams({"page": rows[0][0]})))
    page.wait_for_selector("#pg-options")
    assert page.locator("#pg-options + ul li").all_inner_texts() == view["options"]


# -- the run view ------------------------------------------------------------------------------------------------


def _claims(data_dir: Path) -> list[dict]:
    path = data_dir / "claims" / "fever_dev_fixture_dumps.jsonl"
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _batch(server: str, claims: list[dict], k: int) -> list[dict]:
    items = [{"id": c["id"], "claim": c["claim"]} for c in claims]
    r = httpx.post(f"{server}/search/batch", params={"k": k}, json=items, timeout=300)
    r.raise_for_status()
    return [json.loads(line) for line in r.text.splitlines()]


def _expected(run: list[dict], claims: list[dict], k: int) -> tuple[float, int]:
    """Any-gold recall@k in percent and the misses at k, as the page should count them."""
    by_id = {line["id"]: list(dict.fromkeys(e["title"] for e in line["evidence"])) for line in run}
    hits = [any(t in by_id[c["id"]][:k] for t in c["gold_titles"]) for c in claims]
    return 100 * sum(hits) / len(hits), hits.count(False)


def _gold_variants(claims: list[dict]) -> dict[str, str]:
    """The same gold pages written as FEVER, HoVer, HotpotQA and KILT write theirs."""

    def fever_title(t: str) -> str:
        return t.replace(" ", "_").replace("(", "-LRB-").replace(")", "-RRB-")

    fever = [
        {"id": c["id"], "claim": c["claim"], "evidence": [[[0, 0, fever_title(t), 0] for t in c["gold_titles"]]]}
        for c in claims
    ]
    hover = [
        {"uid": c["id"], "claim": c["claim"], "supporting_facts": [[t, 0] for t in c["gold_titles"]]} for c in claims
    ]
    hotpot = [
        {"_id": c["id"], "question": c["claim"], "supporting_facts": [[t, 1] for t in c["gold_titles"]]} for c in claims
    ]
    kilt = [
        {"id": c["id"], "input": c["claim"], "output": [{"provenance": [{"wikipedia_id": "0", "title": t}]}]}
        for c in claims
        for t in c["gold_titles"][:1]
    ]
    lines = "\n".join
    return {
        "fever.jsonl": lines(json.dumps(r) for r in fever),
        "hover.json": json.dumps(hover),
        "hotpot.json": json.dumps(hotpot),
        "kilt.jsonl": lines(json.dumps(r) for r in kilt),
    }


def _load_run(page, run_path: Path, gold_path: Path | None) -> None:
    page.goto(page.server + "/?view=run")
    page.locator("#run-file").set_input_files(str(run_path))
    if gold_path is not None:
        page.locator("#gold-file").set_input_files(str(gold_path))
        page.wait_for_selector("#run-recall")
    page.wait_for_selector("#run-claims")


def _recall_cell(page, k: int) -> str:
    heads = page.locator("#run-recall thead th").all_inner_texts()
    col = heads.index(f"@{k}")
    return page.locator("#run-recall tbody tr").nth(0).locator("th, td").nth(col).inner_text()


def test_run_view_summary_and_misses_filter(page, data_dir, tmp_path):
    claims = _claims(data_dir)
    run = _batch(page.server, claims, 10)
    run_path = tmp_path / "run.jsonl"
    run_path.write_text("".join(json.dumps(line) + "\n" for line in run), "utf-8")
    _load_run(page, run_path, data_dir / "claims" / "fever_dev_fixture_dumps.jsonl")
    assert page.locator("#run-claims").inner_text() == str(len(claims))
    for k in (1, 5, 10):
        recall, _ = _expected(run, claims, k)
        assert _recall_cell(page, k) == f"{recall:.1f}"
    _, misses = _expected(run, claims, 10)
    assert misses > 0, "the gensim index should miss some of these claims"
    page.get_by_label("misses only").check()
    assert page.locator("#run-count").inner_text() == f"{misses} of {len(claims)} claims"
    assert page.locator("#run-rows tr").count() == misses
    assert page.locator("#run-rows tr.missrow").count() == misses
    page.get_by_label("misses only").uncheck()
    assert page.locator("#run-rows tr").count() == len(claims)
    first = page.locator("#run-rows tr").nth(0).locator("td").nth(1).locator("a")
    first.click()
    page.wait_for_selector("#claim-results li.ev")
    assert page.locator("#claim-input").input_value() == run[0]["query"]


def test_run_view_reads_every_gold_format_and_trec_runs(page, data_dir, tmp_path):
    claims = _claims(data_dir)
    run = _batch(page.server, claims, 10)
    run_path = tmp_path / "run.jsonl"
    run_path.write_text("".join(json.dumps(line) + "\n" for line in run), "utf-8")
    recall5, _ = _expected(run, claims, 5)
    for name, text in _gold_variants(claims).items():
        gold = tmp_path / name
        gold.write_text(text, "utf-8")
        _load_run(page, run_path, gold)
        if name != "kilt.jsonl":  # KILT's gold here keeps the first gold page of each claim only
            assert _recall_cell(page, 5) == f"{recall5:.1f}", name
    trec = tmp_path / "run.trec"
    trec.write_text(
        "".join(
            f"{line['id']} Q0 {e['title'].replace(' ', '_')} {n} {e['score']} wikiground\n"
            for line in run
            for n, e in enumerate(line["evidence"], 1)
        ),
        "utf-8",
    )
    _load_run(page, trec, data_dir / "claims" / "fever_dev_fixture_dumps.jsonl")
    assert _recall_cell(page, 5) == f"{recall5:.1f}"


def test_a_large_run_read_in_parallel_slices_counts_the_same(page, data_dir, tmp_path):
    """Past 4 MiB a JSON-lines run is read by workers, a byte slice each: every line is read once, whichever slice
    its bytes fall in, and a bad line is named by its number in the whole file."""
    claims = _claims(data_dir)
    run = _batch(page.server, claims, 10)
    gold_of = {c["id"]: c["gold_titles"] for c in claims}
    lines, golds = [], []
    for n in range(800):
        a = run[n % len(run)]
        lines.append({**a, "id": f"{a['id']}-{n}", "query": a["query"] + " — ευρετήριο"})  # multi-byte characters
        golds.append({"id": f"{a['id']}-{n}", "gold_titles": gold_of[a["id"]]})
    run_path, gold_path = tmp_path / "big.jsonl", tmp_path / "big_gold.jsonl"
    run_path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")
    gold_path.write_text("".join(json.dumps(x) + "\n" for x in golds), "utf-8")
    assert run_path.stat().st_size > 4 << 20
    _load_run(page, run_path, gold_path)
    assert page.locator("#run-claims").inner_text() == "800"
    recall, _ = _expected(lines, [{"id": g["id"], "gold_titles": g["gold_titles"]} for g in golds], 5)
    assert _recall_cell(page, 5) == f"{recall:.1f}"
    page.get_by_label("filter", exact=True).fill("-799")
    page.wait_for_function("() => document.querySelector('#run-count').textContent.startsWith('1 of')")
    assert "ευρετήριο" in page.locator("#run-rows tr").nth(0).inner_text()
    text = run_path.read_text("utf-8").splitlines()
    text[636] = "{broken"
    run_path.write_text("\n".join(text) + "\n", "utf-8")
    page.goto(page.server + "/?view=run")
    page.locator("#run-file").set_input_files(str(run_path))
    page.wait_for_function("() => document.querySelector('#run-status').textContent.includes('line')")
    assert "big.jsonl, line 637: not JSON" in page.locator("#run-status").inner_text()


def test_formats_normalise_titles_and_leave_out_claims_without_gold(page):
    page.goto(page.server + "/?view=run")
    got = page.evaluate(
        """async () => {
          const F = await import('/explorer/static/formats.js');
          const gold = F.parseGold([
            JSON.stringify({id: 1, claim: "a", label: "SUPPORTS",
                            evidence: [[[7, 8, "Bridge_-LRB-structure-RRB-", 0], [7, 9, "Pont_Neuf", 2]]]}),
            JSON.stringify({id: 2, claim: "b", label: "NOT ENOUGH INFO", evidence: [[[7, null, null, null]]]}),
          ].join("\\n"), "g.jsonl");
          const run = F.parseRun([
            JSON.stringify({id: 1, query: "a", evidence: [{title: "Pont Neuf"}, {title: "Pont Neuf"},
                                                          {title: "Bridge (structure)"}]}),
            JSON.stringify({id: 2, query: "b", evidence: [{title: "X"}]}),
          ].join("\\n"), "r.jsonl");
          const rows = F.join(run, gold);
          return {gold: gold.get("1").titles, run: run[0].titles, rows: rows.map(r => [r.first, r.last, r.hasGold]),
                  summary: F.summary(rows, [1, 2]), lower: F.normTitle("iPod_touch")};
        }"""
    )
    assert got["gold"] == ["Bridge (structure)", "Pont Neuf"]
    assert got["run"] == ["Pont Neuf", "Bridge (structure)"]  # one rank per page
    assert got["rows"] == [[1, 2, True], [0, 0, False]]
    s = got["summary"]
    assert s["withGold"] == 1 and s["any"] == {"1": 1, "2": 1} and s["all"] == {"1": 0, "2": 1} and s["mrr"] == 1
    assert got["lower"] == "IPod touch"


def test_run_view_names_the_bad_line(page, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "query": "x", "evidence": []}\n{not json\n', "utf-8")
    page.goto(page.server + "/?view=run")
    page.locator("#run-file").set_input_files(str(bad))
    page.wait_for_function("() => document.querySelector('#run-status').textContent.includes('line 2')")
    assert "bad.jsonl, line 2" in page.locator("#run-status").inner_text()


# -- the URL state and the network -------------------------------------------------------------------------------


def test_url_state_round_trips(page):
    page.goto(page.server + "/")
    page.wait_for_selector("#opt-channels input")
    page.get_by_label("Claim or question").fill(CLAIM)
    page.get_by_label("k", exact=True).fill("3")
    page.locator("#opt-channels input[value=kg]").uncheck()
    page.get_by_role("button", name="Search").click()
    page.wait_for_selector("#claim-results li.ev")
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"claim": [CLAIM], "k": ["3"], "indexes": ["tfidf,title"]}
    assert page.locator("#claim-results li.ev").count() == 3
    shared = page.url
    fresh = page.context.new_page()
    fresh.goto(shared)
    fresh.wait_for_selector("#claim-results li.ev")
    assert fresh.locator("#claim-input").input_value() == CLAIM
    assert fresh.locator("#opt-k").input_value() == "3"
    assert not fresh.locator("#opt-channels input[value=kg]").is_checked()
    assert fresh.locator("#claim-results li.ev").count() == 3
    assert all("kg" not in c for c in fresh.locator("#claim-results .chips li").all_inner_texts())
    fresh.close()
    page.goto(page.server + "/?page=Aristotle")
    page.wait_for_selector("#page-title")
    page.go_back()
    page.wait_for_function("() => !document.querySelector('#view-claim').hidden")
    assert page.locator("#claim-input").input_value() == CLAIM
    page.get_by_label("multi-hop").check()
    page.get_by_role("button", name="Search").click()
    page.wait_for_selector("#claim-hops li.hop")
    assert parse_qs(urlsplit(page.url).query)["multihop"] == ["1"]
    page.reload()
    page.wait_for_selector("#claim-hops li.hop")
    assert page.get_by_label("multi-hop").is_checked() and page.locator("#opt-k").input_value() == "3"
    page.locator("#nav-claim").click()
    page.wait_for_function("() => document.querySelectorAll('#claim-results li').length === 0")
    assert page.locator("#claim-input").input_value() == "" and page.locator("#opt-k").input_value() == "10"
    assert not page.get_by_label("multi-hop").is_checked()


def test_fusion_chosen_in_the_form_goes_into_the_url_and_the_request(page):
    asked: list[dict] = []
    page.on("request", lambda req: asked.append(req.post_data_json) if req.url.endswith("/search") else None)
    page.goto(page.server + "/")
    page.wait_for_selector("#opt-fusion option", state="attached")
    assert page.get_by_label("fusion").input_value() == "rrf"
    assert page.locator("#opt-fusion option").all_inner_texts() == ["rrf", "rrf-plain", "score"]
    page.get_by_label("Claim or question").fill(CLAIM)
    page.get_by_label("fusion").select_option("score")
    page.get_by_role("button", name="Search").click()
    page.wait_for_selector("#claim-results li.ev")
    assert parse_qs(urlsplit(page.url).query)["fusion"] == ["score"]
    assert asked[-1]["fusion"] == "score" and "fused by score" in page.locator("#claim-status").inner_text()
    want = _answer(page.server, CLAIM, k=10, fusion="score")["evidence"][0]
    assert f"score {want['score']:.4f}" in page.locator("#claim-results li.ev .scores").first.inner_text()
    page.reload()
    page.wait_for_selector("#claim-results li.ev")
    assert page.get_by_label("fusion").input_value() == "score" and asked[-1]["fusion"] == "score"
    page.get_by_label("fusion").select_option("rrf")
    page.get_by_role("button", name="Search").click()
    page.wait_for_function("() => !location.search.includes('fusion')")  # the server's default: left out
    page.wait_for_function("() => document.querySelector('#claim-status').textContent.includes('fused by rrf')")
    assert "fusion" not in asked[-1]


def test_every_request_stays_on_the_server_origin(page):
    seen: list[str] = []
    page.on("request", lambda req: seen.append(req.url))
    _search_in_form(page, CLAIM)
    page.locator("button.more").first.click()
    page.wait_for_selector(".morelist")
    page.goto(page.server + "/?page=Aristotle")
    page.wait_for_selector("#page-title")
    assert seen and all(url.startswith(page.server + "/") or url.startswith("data:") for url in seen), seen
    csp = httpx.get(page.server + "/").headers["content-security-policy"]
    assert "connect-src 'self'" in csp and "default-src 'self'" in csp


def _tab_to(page, element_id: str, presses: int = 16) -> list[str]:
    """Press Tab until the element has the focus; the ids (or classes) focused on the way."""
    order = []
    for _ in range(presses):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id || document.activeElement.className"))
        if order[-1] == element_id:
            return order
    raise AssertionError(f"Tab never reached #{element_id}: {order}")


def test_keyboard_reaches_the_views(page):
    page.goto(page.server + "/")
    page.wait_for_selector("#opt-channels input")
    assert "skip" in _tab_to(page, "nav-run")
    page.keyboard.press("Enter")
    page.wait_for_function("() => !document.querySelector('#view-run').hidden")
    assert page.locator("#nav-run").get_attribute("aria-current") == "page"
    page.locator("#nav-claim").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement.id === 'claim-input'")  # the empty claim view asks for one
    page.keyboard.type(CLAIM)
    page.keyboard.press("Enter")
    page.wait_for_selector("#claim-results li.ev")
    _tab_to(page, "claim-go")


# -- the routes (no browser) -------------------------------------------------------------------------------------


def test_fusion_is_a_request_option_of_every_search_route(server):
    """``/search``, ``/search/batch`` and ``/api/search`` each take a fusion; the answer names the one it used, and
    an unknown one is a 400 in the error shape."""
    answers = {f: _answer(server, CLAIM, k=5, fusion=f) for f in ("rrf", "rrf-plain", "score")}
    assert {f: a["fusion"] for f, a in answers.items()} == {"rrf": "rrf", "rrf-plain": "rrf-plain", "score": "score"}
    assert _answer(server, CLAIM, k=5)["fusion"] == "rrf"  # the server's own
    ranked = {f: [(e["title"], e["score"], e["page_score"]) for e in a["evidence"]] for f, a in answers.items()}
    assert len({repr(r) for r in ranked.values()}) == 3
    assert ranked["rrf"][0][2] > ranked["rrf-plain"][0][2]  # the title channel's exact name promotes its page
    lines = httpx.post(
        f"{server}/search/batch", params={"k": 5, "fusion": "score"}, json=[{"id": 1, "claim": CLAIM}], timeout=60
    ).text.splitlines()
    line = json.loads(lines[0])
    assert line["fusion"] == "score" and line["evidence"] == answers["score"]["evidence"]
    colbert = httpx.get(f"{server}/api/search", params={"query": CLAIM, "k": 3, "fusion": "rrf-plain"}).json()
    assert colbert["fusion"] == "rrf-plain" and len(colbert["topk"]) == 3
    posted = httpx.post(f"{server}/api/search", json={"query": CLAIM, "k": 3, "fusion": "score"}).json()
    assert posted["fusion"] == "score" and posted["topk"] != colbert["topk"]
    refused = [
        httpx.post(f"{server}/search", json={"claim": CLAIM, "fusion": "borda"}),
        httpx.post(f"{server}/search/batch", params={"fusion": "borda"}, json=[{"id": 1, "claim": CLAIM}]),
        httpx.get(f"{server}/api/search", params={"query": CLAIM, "fusion": "borda"}),
    ]
    for r in refused:
        body = r.json()
        assert r.status_code == 400 and body["error"]["type"] == "QueryError", body
        assert (
            body["error"]["message"]
            == body["message"]
            == "fusion: unknown fusion 'borda'; choose one of rrf, rrf-plain, score"
        )
    opts = httpx.get(f"{server}/explorer/api/options").json()
    assert opts["fusion"] == "rrf" and opts["fusions"] == ["rrf", "rrf-plain", "score"]


def test_explorer_routes_answer_and_refuse_in_the_error_shape(server):
    opts = httpx.get(f"{server}/explorer/api/options").json()
    assert opts["channels"] == CHANNELS.split(",") and opts["fusion"] == "rrf" and opts["on_the_fly"] is False
    e = _answer(server, CLAIM, k=1)["evidence"][0]
    got = httpx.get(f"{server}/explorer/api/passages", params={"ids": f"{e['passage_id']},999999999"}).json()
    assert [p["passage_id"] for p in got["passages"]] == [e["passage_id"]]
    assert e["evidence_text"] in got["passages"][0]["text"] and got["passages"][0]["title"] == e["title"]
    revs = httpx.get(f"{server}/explorer/api/revisions", params={"page_ids": str(e["page_id"])}).json()["pages"]
    assert revs[str(e["page_id"])]["rev_id"] == e["rev_id"] and revs[str(e["page_id"])]["rev_timestamp"]
    for params in ({"ids": "1,x"}, {"ids": ",".join(["1"] * 201)}, {"ids": "-3"}):
        r = httpx.get(f"{server}/explorer/api/passages", params=params)
        assert r.status_code == 400 and r.json()["error"]["type"] == "QueryError", params
    index = httpx.get(f"{server}/")
    assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/explorer/static/app.js">' in index.text
    for name in (
        "app.js",
        "claim.js",
        "page.js",
        "run.js",
        "formats.js",
        "runworker.js",
        "highlight.js",
        "util.js",
        "explorer.css",
    ):
        assert httpx.get(f"{server}/explorer/static/{name}").status_code == 200, name
