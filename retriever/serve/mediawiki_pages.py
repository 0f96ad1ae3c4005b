"""Parts of pages as the MediaWiki API cuts them, for the clients of :mod:`retriever.serve.mediawiki_clients`:
``exsentences``/``exchars`` (TextExtracts, from the stored sentences), a section's text (``rvsection``,
``action=parse&section=N``), ``action=parse`` of given ``text`` and ``prop=wikitext``, revisions by id
(``revids``), a redirect page's own content (``#REDIRECT [[Target]]``), the search suggestion, and ``badinteger``
for integers written in other digits than ASCII ones.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from retriever import pages as page_lookup
from retriever.serve import mediawiki_common as mw
from retriever.serve import mediawiki_extra as extra
from wikiground.records import Page

__all__ = [
    "by_revids",
    "cut_extract",
    "parse_more",
    "redirect_revisions",
    "suggest",
]

EXCHARS_MAX = 1200  # TextExtracts' bound on exchars
EXSENTENCES_MAX = 10  # and on exsentences
SUGGEST_HITS = 5  # hits whose titles may be suggested
SUGGEST_RATIO = 0.75  # how close in spelling (difflib's ratio) a suggested title is to the query


def _lead_sentences(store: Any, page: Page) -> list[str]:
    texts: list[str] = []
    for psg in store.page_passages(page.page_id):
        if psg.section_index != 0 or psg.source != "text":
            continue
        texts.extend(text for _, _, text in store.sentences(psg.passage_id))
    return texts


def cut_extract(store: Any, page: Page, p: Mapping[str, str]) -> str | None:
    """The extract ``exsentences`` (the lead's first N stored sentences) or ``exchars`` (the lead cut at N
    characters, at a word's end, with an ellipsis) asks for; None when neither is asked."""
    if "exsentences" in p:
        n = min(max(mw._int(p["exsentences"], 1), 1), EXSENTENCES_MAX)
        sentences = _lead_sentences(store, page)
        return " ".join(sentences[:n]) if sentences else page.lead
    if "exchars" in p:
        n = min(max(mw._int(p["exchars"], 1), 1), EXCHARS_MAX)
        lead = page.lead
        if len(lead) <= n:
            return lead
        cut = lead[:n]
        if not lead[n].isspace() and " " in cut:
            cut = cut.rsplit(" ", 1)[0]
        return cut.rstrip() + "…"
    return None


def _section_html(store: Any, page: Page, n: int) -> str:
    parts = mw.section_parts(store, page, n)
    out = []
    for s in parts:
        if s["index"] > 0:
            level = min(6, max(2, s["level"]))
            out.append(f"<h{level}>{html.escape(s['heading'])}</h{level}>")
        out.extend(f"<p>{html.escape(x)}</p>" for x in (page.lead if s["index"] == 0 else s["text"]).split("\n") if x)
    return '<div class="mw-parser-output">' + "\n".join(out) + "</div>"


def _text_html(text: str) -> str:
    """Given wikitext as simple HTML: its markup stripped (mwparserfromhell), one paragraph per line."""
    import mwparserfromhell

    plain = mwparserfromhell.parse(text).strip_code()
    paras = "".join(f"<p>{html.escape(x)}</p>" for x in plain.split("\n") if x.strip())
    return f'<div class="mw-parser-output">{paras}</div>'


def parse_more(store: Any, p: Mapping[str, str]) -> dict[str, Any] | None:
    """``action=parse`` of given ``text``, or of a page with ``section=N`` or ``prop=wikitext``; None for what
    :func:`retriever.serve.mediawiki_extra.parse` answers alone."""
    fv2 = p.get("formatversion") in ("2", "latest")
    wanted = mw._values(p, "prop")
    named = any(k in p for k in ("page", "pageid", "oldid"))
    if "text" in p and not named:
        body = _text_html(p["text"])
        return {"parse": {"title": p.get("title") or "API", "pageid": 0, "text": body if fv2 else {"*": body}}}
    if not named or ("section" not in p and "wikitext" not in wanted):
        return None
    rest = {k: v for k, v in p.items() if k != "section"}
    rest["prop"] = "|".join(v for v in wanted if v != "wikitext") or "revid"
    answer = extra.parse(store, rest)
    if "parse" not in answer:
        return answer
    page = store.page(answer["parse"]["pageid"])
    n = mw._int(p.get("section")) if "section" in p else None
    if n is not None and (page is None or not mw.section_parts(store, page, n)):
        return mw.error("nosuchsection", f"There is no section {p['section']} in {answer['parse']['title']}.")
    out = answer["parse"]
    if "wikitext" in wanted:
        source = extra.page_source(store, page) if n is None else mw.section_source(store, page, n)
        out["wikitext"] = source if fv2 else {"*": source}
    if n is not None and "text" in out:
        section = _section_html(store, page, n)
        out["text"] = section if fv2 else {"*": section}
    if n is not None and "sections" in out:
        keep = {str(s["index"]) for s in mw.section_parts(store, page, n)}
        out["sections"] = [s for s in out["sections"] if s["index"] in keep]
    return answer


def by_revids(store: Any, raw: list[str], reply: Any) -> list[mw.Entry]:
    """The pages whose stored revision has one of these ids (the store keeps one revision a page); the other ids
    are listed under ``badrevids``."""
    ids = [int(v) for v in raw if v.isdigit() and len(v) < 19]
    found = page_lookup.rows(
        store, f"SELECT rev_id, page_id FROM pages WHERE rev_id IN ({','.join('?' * len(ids)) or 'NULL'})", ids
    )
    pages = store.pages(int(pid) for _, pid in found)
    by_rev = {int(r): pages[int(pid)] for r, pid in found if int(pid) in pages}
    bad = [v for v in raw if not (v.isdigit() and int(v) in by_rev)]
    if bad:
        reply.query["badrevids"] = {v: {"revid": int(v) if v.isdigit() else v, "missing": reply.flag()} for v in bad}
    return [mw.Entry(page.title, page) for page in dict.fromkeys(by_rev[i] for i in ids if i in by_rev)]


def redirect_revisions(store: Any, p: Mapping[str, str], reply: Any, redirects: list[tuple[dict, str]]) -> None:
    """A redirect page asked for itself: its one revision's content is ``#REDIRECT [[Target]]``."""
    wanted = mw._values(p, "rvprop") if "rvprop" in p else ["ids"]
    for d, title in redirects:
        target = mw.redirect_target(store, title) or ""
        content = f"#REDIRECT [[{target}]]"
        rev: dict[str, Any] = {"revid": 0, "parentid": 0} if "ids" in wanted else {}
        if "timestamp" in wanted:  # the store keeps no redirect's time: the dump's (its newest revision's)
            rev["timestamp"] = _dump_time(store)
        if "content" in wanted:
            body = {
                "contentformat": "text/x-wiki",
                "contentmodel": "wikitext",
                ("content" if reply.fv2 else "*"): content,
            }
            rev.update({"slots": {"main": body}} if "rvslots" in p else body)
        if "size" in wanted:
            rev["size"] = len(content.encode("utf-8"))
        d["revisions"] = [rev]


def _dump_time(store: Any) -> str | None:
    found = page_lookup.rows(store, "SELECT max(rev_timestamp) FROM pages")
    return found[0][0] if found else None


def suggest(reply: Any, text: str, ranked: list[Page]) -> None:
    """CirrusSearch's ``suggestion`` (a spelling correction): the title of one of the first hits that the query
    misspells (close to it in spelling, not equal to it)."""
    from difflib import SequenceMatcher

    asked = text.strip().casefold()
    close = [
        page
        for page in ranked[:SUGGEST_HITS]
        if page.title.casefold() != asked
        and SequenceMatcher(None, page.title.casefold(), asked).ratio() >= SUGGEST_RATIO
    ]
    if close:
        ranked = close
        info = reply.query.setdefault("searchinfo", {})
        info["suggestion"] = ranked[0].title
        info["suggestionsnippet"] = html.escape(ranked[0].title)
