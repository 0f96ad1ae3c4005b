"""Runs in any of the output formats (retriever/formats.py): the evidence lines (``jsonl``), TREC run files, KILT,
FEVER (``predicted_pages``/``predicted_evidence``) and HotpotQA/HoVer lines (``supporting_facts``), and HotpotQA's
official prediction file (``{"answer": ..., "sp": {id: [[title, sent_id], ...]}}``). Each query becomes a
:class:`Ranking`: its pages in rank order, and its sentences where the format has them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retriever.evaluate.gold import Sentence, read_json_records, title_key
from retriever.formats import ranked_pages, ranked_sentences
from wikiground.errors import InputError

__all__ = ["Ranking", "read_run"]

ALL_SENTENCES = 1000  # of an evidence line's passages, ranked as the sentence formats rank them


@dataclass(frozen=True, slots=True)
class Ranking:
    """One query of a run: page keys (title_key) in rank order, each once; sentences (page key, line) in rank
    order, or None where the format has none (TREC, KILT)."""

    pages: tuple[str, ...]
    sentences: tuple[Sentence, ...] | None = None


def read_run(path: Path) -> dict[str, Ranking]:
    """The run's rankings by query id (a string); the format is found from the file's first line."""
    head = _first_line(path)
    if head.startswith("{") or head.startswith("["):
        return _json_run(path)
    return _trec_run(path)


def _first_line(path: Path) -> str:
    try:
        with path.open(encoding="utf-8-sig") as fh:
            for line in fh:
                if line.strip():
                    return line.strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the run: {getattr(exc, 'strerror', None) or exc}") from exc
    raise InputError(f"{path}: the run is empty")


def _trec_run(path: Path) -> dict[str, Ranking]:
    """``qid Q0 docid rank score tag`` rows; each query's documents sorted as trec_eval sorts them (score
    descending, then docid descending), titles with underscores read as spaces."""
    rows: dict[str, list[tuple[float, str]]] = {}
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, 1):
            cols = line.split()
            if not cols:
                continue
            if len(cols) != 6:
                raise InputError(f"{path}:{lineno}: a TREC run row has 6 columns (qid Q0 docid rank score tag)")
            try:
                score = float(cols[4])
            except ValueError as exc:
                raise InputError(f"{path}:{lineno}: score {cols[4]!r} is not a number") from exc
            rows.setdefault(cols[0], []).append((score, cols[2]))
    out = {}
    for qid, docs in rows.items():
        docs.sort(key=lambda d: (d[0], d[1]), reverse=True)
        out[qid] = Ranking(_unique(title_key(d) for _, d in docs))
    return out


def _unique(keys: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(keys))


def _json_run(path: Path) -> dict[str, Ranking]:
    text = path.read_text(encoding="utf-8-sig").strip()
    if text.startswith("{") and "\n" not in text:
        obj = json.loads(text)
        if isinstance(obj, dict) and isinstance(obj.get("sp"), dict):  # HotpotQA's prediction file
            return {str(q): _facts_ranking(facts) for q, facts in obj["sp"].items()}
    out = {}
    for where, rec in read_json_records(path):
        if not isinstance(rec, dict):
            raise InputError(f"{where}: expected a JSON object")
        try:
            qid, ranking = _ranking_of(rec)
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            raise InputError(f"{where}: malformed run line ({type(exc).__name__}: {exc})") from exc
        if ranking is None:
            raise InputError(
                f"{where}: not a run line (expected 'evidence', 'output', 'predicted_evidence' or 'supporting_facts')"
            )
        out[qid] = ranking
    return out


def _ranking_of(rec: dict[str, Any]) -> tuple[str, Ranking | None]:
    qid = str(rec["id"] if "id" in rec else rec.get("_id", rec.get("uid")))
    if "evidence" in rec and "query" in rec:
        pages = _unique(title_key(e["title"]) for e in ranked_pages(rec))
        sentences = tuple((title_key(t), s) for t, s in ranked_sentences(rec, ALL_SENTENCES))
        return qid, Ranking(pages, sentences)
    if "output" in rec:
        prov = [p for out in rec["output"][:1] for p in out.get("provenance") or []]
        return qid, Ranking(_unique(title_key(p.get("wikipedia_title") or p.get("title")) for p in prov))
    if "predicted_evidence" in rec or "predicted_pages" in rec:
        ranking = _facts_ranking(rec.get("predicted_evidence") or [])
        if rec.get("predicted_pages") is not None:
            ranking = Ranking(_unique(title_key(t) for t in rec["predicted_pages"]), ranking.sentences)
        return qid, ranking
    if "supporting_facts" in rec:
        return qid, _facts_ranking(rec["supporting_facts"])
    return qid, None


def _facts_ranking(facts: list[Any]) -> Ranking:
    sentences = tuple((title_key(t), int(line)) for t, line in facts)
    return Ranking(_unique(t for t, _ in sentences), sentences)
