"""Gold files as they come: FEVER (JSONL, ``evidence`` groups of ``[annotation, id, page, line]``), HoVer and
HotpotQA (a JSON array, ``supporting_facts`` of ``[title, sent_id]``), KILT (JSONL, ``output[].provenance[]``) and
the project's claim files (``{id, gold_titles}``, with ``evidence_sets_fever2017`` where they have it).

Each claim becomes a :class:`Gold`: its evidence sets of pages (one per FEVER group or KILT output; HotpotQA and
HoVer have one), and of sentences where the file has lines. Titles are compared by :func:`title_key`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wikiground.errors import InputError
from wikiground.text import canonical_title

__all__ = ["Gold", "read_gold", "read_json_records", "title_key"]

_FEVER_SPELLED = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "-COLON-": ":",
}
NOT_VERIFIABLE = "NOT ENOUGH INFO"

Sentence = tuple[str, int]


def title_key(title: Any) -> str:
    """The form titles are compared in: FEVER's spelled brackets decoded, underscores as spaces, MediaWiki's
    canonical form (first letter upper), NFC."""
    text = str(title)
    for spelled, ch in _FEVER_SPELLED.items():
        text = text.replace(spelled, ch)
    return canonical_title(unicodedata.normalize("NFC", text))


@dataclass(frozen=True, slots=True)
class Gold:
    """One claim's gold: ``sets`` of page keys; ``sentence_sets`` of (page key, line) where the file has lines;
    ``verifiable`` False for FEVER's NOT ENOUGH INFO claims (no evidence to find)."""

    id: str
    sets: tuple[tuple[str, ...], ...]
    sentence_sets: tuple[tuple[Sentence, ...], ...] = ()
    verifiable: bool = True

    @property
    def pages(self) -> tuple[str, ...]:
        """Every gold page once, in the order the sets name them."""
        return tuple(dict.fromkeys(p for s in self.sets for p in s))


def read_json_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(``file:line`` or ``file[item]``, record) of a JSONL file or of a JSON array (HotpotQA, HoVer)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise InputError(f"{path}: not JSON: {exc}") from exc
        for n, item in enumerate(items):
            yield f"{path}[{n}]", item
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield f"{path}:{lineno}", json.loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{lineno}: not JSON: {exc}") from exc


def read_gold(path: Path) -> dict[str, Gold]:
    """The claims of a gold file by id (as a string); an InputError names the place of a record it cannot read."""
    out: dict[str, Gold] = {}
    for where, rec in read_json_records(path):
        if not isinstance(rec, dict):
            raise InputError(f"{where}: expected a JSON object")
        try:
            gold = _gold_of(rec)
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            raise InputError(f"{where}: malformed gold record ({type(exc).__name__}: {exc})") from exc
        if gold is None:
            keys = ", ".join(list(rec)[:8])
            raise InputError(
                f"{where}: not a FEVER, HoVer, HotpotQA, KILT or claims record (keys: {keys}); expected 'evidence', "
                "'supporting_facts', 'output' or 'gold_titles'"
            )
        out[gold.id] = gold
    return out


def _id_of(rec: dict[str, Any]) -> str:
    for key in ("id", "_id", "uid"):
        if key in rec:
            return str(rec[key])
    raise KeyError("no 'id', '_id' or 'uid'")


def _gold_of(rec: dict[str, Any]) -> Gold | None:
    qid = _id_of(rec)
    if "gold_titles" in rec:
        groups = rec.get("evidence_sets_fever2017")
        if groups:
            return _sentence_gold(qid, [[(t, int(line)) for t, line in g] for g in groups])
        return Gold(qid, (tuple(title_key(t) for t in rec["gold_titles"]),))
    if "supporting_facts" in rec:
        return _sentence_gold(qid, [[(t, int(line)) for t, line in rec["supporting_facts"]]])
    if "evidence" in rec and "label" in rec:
        groups = [[(e[2], int(e[3])) for e in g if e[2] is not None] for g in rec["evidence"]]
        gold = _sentence_gold(qid, [g for g in groups if g])
        return Gold(qid, gold.sets, gold.sentence_sets, rec["label"] != NOT_VERIFIABLE and bool(gold.sets))
    if "output" in rec:
        sets = []
        for out in rec["output"]:
            titles = [p.get("title") or p.get("wikipedia_title") for p in out.get("provenance") or []]
            if titles:
                sets.append(tuple(dict.fromkeys(title_key(t) for t in titles if t)))
        return Gold(qid, tuple(s for s in sets if s))
    return None


def _sentence_gold(qid: str, groups: list[list[tuple[str, int]]]) -> Gold:
    sentence_sets = tuple(tuple(dict.fromkeys((title_key(t), line) for t, line in g)) for g in groups)
    sets = tuple(tuple(dict.fromkeys(t for t, _ in g)) for g in sentence_sets)
    return Gold(qid, sets, sentence_sets)
