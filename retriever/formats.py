"""Output formats that the field's scorers read, made from the output lines of a search (``{id, query, status,
evidence: [...]}``): ``jsonl`` (the lines themselves), ``trec`` (run files: ``qid Q0 docid rank score tag``),
``kilt`` (KILT's ``output[0].provenance``), ``fever`` (``predicted_evidence: [[page, line], ...]``) and ``hotpot``
(``supporting_facts: [[title, sent_id], ...]``, as HotpotQA and HoVer write them).

The sentence formats (``fever``, ``hotpot``) rank the sentences of the returned passages: by the number of the
claim's distinct content words a sentence holds (its page's title words count too, as FEVER's sentence retrievers
use the page name), ties in the order of the passages' ranks, then in page order. The passages' sentences are found
again by the indexer's own splitter on the evidence text; where it disagrees with the stored count of sentences, the
passage's sentences rank in page order alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from wikiground.errors import QueryError
from wikiground.text import words

__all__ = [
    "DOCIDS",
    "FEVER_SENTENCES",
    "FORMATS",
    "check_format",
    "fever_title",
    "ranked_pages",
    "ranked_sentences",
    "render_all",
    "renderer",
    "trec_title",
]

FORMATS = ("jsonl", "trec", "kilt", "fever", "hotpot")
DOCIDS = ("title", "page_id", "passage_id")
DEFAULT_RUN_TAG = "wikiground"
FEVER_SENTENCES = 5  # FEVER's scorer reads the first five predicted sentences
SENTENCES_OUT = 20  # sentence pairs written per claim in the sentence formats (scorers read the first few)
SCORE_STEP = 1e-6  # how far a tied TREC score is lowered, so scorers that sort by score keep the rank order
_STOP = frozenset(
    "a an and are as at be by for from has have he her his in is it its of on or she that the their they this to "
    "was were which who with".split()
)
# FEVER's page names: Wikipedia titles with underscores and these brackets spelled out.
_FEVER_BRACKETS = {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-", ":": "-COLON-"}


def trec_title(title: str) -> str:
    """A title as one TREC column: underscores for spaces (as Wikipedia's URLs and FEVER write it)."""
    return re.sub(r"\s", "_", title.strip())


def fever_title(title: str) -> str:
    """A title as FEVER's wiki-pages name it: underscores for spaces, brackets and colons spelled out."""
    return "".join(_FEVER_BRACKETS.get(ch, ch) for ch in trec_title(title))


def ranked_pages(line: dict[str, Any]) -> list[dict[str, Any]]:
    """The line's evidence with each page once, at its first (best) rank."""
    seen: set[Any] = set()
    out = []
    for e in line.get("evidence") or []:
        key = e.get("page_id") if e.get("page_id") is not None else e.get("title")
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in _STOP}


def _passage_sentences(e: dict[str, Any]) -> list[tuple[int, str]]:
    """(page sentence index, text) of one evidence passage; text empty where the split disagrees with the store."""
    ids = list(e.get("sentence_ids") or [])
    if not ids:
        return []
    from indexer.chunking import split_sentences

    text = e.get("evidence_text") or ""
    spans = split_sentences(text)
    if len(spans) != len(ids):
        return [(sid, "") for sid in ids]
    return [(sid, text[a:b]) for sid, (a, b) in zip(ids, spans)]


def ranked_sentences(line: dict[str, Any], limit: int = SENTENCES_OUT) -> list[tuple[str, int]]:
    """(title, page sentence index) of the line's passages, best first (the module's rule), at most ``limit``."""
    claim = _content_words(line.get("query") or "")
    scored = []
    seen: set[tuple[str, int]] = set()
    for rank, e in enumerate(line.get("evidence") or []):
        title = e.get("title") or ""
        title_hits = len(claim & _content_words(title))
        for pos, (sid, text) in enumerate(_passage_sentences(e)):
            if (title, sid) in seen:
                continue
            seen.add((title, sid))
            hits = len(claim & _content_words(text)) + title_hits if text else 0
            scored.append((-hits, rank, pos, title, sid))
    scored.sort()
    return [(title, sid) for _, _, _, title, sid in scored[:limit]]


def _id(line: dict[str, Any]) -> Any:
    return line.get("id")


def _trec(line: dict[str, Any], *, run_tag: str, docid: str) -> str:
    items = ranked_pages(line) if docid != "passage_id" else list(line.get("evidence") or [])
    rows = []
    last = None
    qid = trec_title(str(_id(line)))
    for rank, e in enumerate(items, 1):
        score = float(e.get("page_score", e.get("score", 0.0)) if docid != "passage_id" else e.get("score", 0.0))
        if last is not None and score >= last:
            score = last - SCORE_STEP
        last = score
        doc = trec_title(e["title"]) if docid == "title" else str(e.get(docid))
        rows.append(f"{qid} Q0 {doc} {rank} {score:.6f} {run_tag}\n")
    return "".join(rows)


def _kilt(line: dict[str, Any]) -> str:
    provenance = [
        {"wikipedia_id": str(e.get("page_id")), "wikipedia_title": e.get("title")} for e in ranked_pages(line)
    ]
    obj = {"id": _id(line), "input": line.get("query"), "output": [{"provenance": provenance}]}
    return _json(obj)


def _fever(line: dict[str, Any]) -> str:
    pages = [fever_title(e["title"]) for e in ranked_pages(line)]
    evidence = [[fever_title(t), sid] for t, sid in ranked_sentences(line)]
    return _json(
        {"id": _id(line), "claim": line.get("query"), "predicted_pages": pages, "predicted_evidence": evidence}
    )


def _hotpot(line: dict[str, Any]) -> str:
    facts = [[t, sid] for t, sid in ranked_sentences(line)]
    return _json({"_id": _id(line), "question": line.get("query"), "supporting_facts": facts})


def _json(obj: Any) -> str:
    from wikiground.text import clean_surrogates

    return clean_surrogates(json.dumps(obj, ensure_ascii=False, allow_nan=False)) + "\n"


def renderer(fmt: str, *, run_tag: str = DEFAULT_RUN_TAG, docid: str = "title") -> Callable[[dict[str, Any]], str]:
    """``render(line) -> text``: the text of one query in ``fmt`` (one line, or a TREC run's rows); a QueryError
    for an unknown format or docid, or a run tag with spaces."""
    check_format(fmt, run_tag=run_tag, docid=docid)
    if fmt == "trec":
        return lambda line: _trec(line, run_tag=run_tag, docid=docid)
    return {"jsonl": _json, "kilt": _kilt, "fever": _fever, "hotpot": _hotpot}[fmt]


def check_format(fmt: str, *, run_tag: str = DEFAULT_RUN_TAG, docid: str = "title") -> None:
    if fmt not in FORMATS:
        raise QueryError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if docid not in DOCIDS:
        raise QueryError(f"unknown docid {docid!r}; choose from {', '.join(DOCIDS)}")
    if not run_tag or any(ch.isspace() for ch in run_tag):
        raise QueryError(f"the run tag must be one word (no spaces): {run_tag!r}")


def render_all(lines: Sequence[dict[str, Any]], fmt: str, **kw: Any) -> str:
    """Every line in ``fmt`` (``jsonl``: the lines as they are)."""
    render = renderer(fmt, **kw)
    return "".join(render(line) for line in lines)
