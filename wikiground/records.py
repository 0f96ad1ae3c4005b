"""Typed immutable records that flow between stages.

Nothing from Lucene, FAISS or DuckDB leaves its module: backends speak in these.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = ["Page", "Passage", "Hit", "Evidence", "Source", "Origin"]

Source = Literal["text", "table", "info", "kb", "kg"]
Origin = Literal["local", "live"]


@dataclass(frozen=True, slots=True)
class Page:
    page_id: int
    title: str
    namespace: int = 0
    rev_id: int | None = None
    rev_timestamp: str | None = None
    is_disambiguation: bool = False
    url: str | None = None
    lead: str = ""


@dataclass(frozen=True, slots=True)
class Passage:
    """A section-aware chunk of about 100 words (or an infobox / table block)."""

    passage_id: int
    page_id: int
    section_index: int
    text: str
    title: str = ""
    heading_path: str = ""  # "History > Early life"; "" for the lead
    source: Source = "text"


@dataclass(frozen=True, slots=True)
class Hit:
    """One backend result: a passage with the channel's score and 1-based rank."""

    passage_id: int
    page_id: int
    score: float
    rank: int
    channel: str
    title: str = ""
    matched: str | None = None  # title channel: the entity string that matched
    # kg channel: the path that led here ({subject, relation, object, hop, score} per fact), and the sentence or
    # infobox row stating its last fact when this passage states it.
    triples: tuple[dict[str, Any], ...] = ()
    stated: str | None = None


@dataclass(frozen=True, slots=True)
class Evidence:
    """One piece of evidence, in the CONVINSE-style JSON the CLI prints."""

    title: str
    page_id: int | None
    passage_id: int | None
    section: str
    evidence_text: str
    source: Source
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    url: str | None = None
    rev_id: int | None = None
    origin: Origin = "local"
    retrieved_for_entity: str | None = None
    fetched_at: str | None = None
    rev_timestamp: str | None = None  # the revision's time (a live page's: when it was fetched)
    attempt: int | None = None
    hop: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The item's JSON object: its fields (containers copied, as ``dataclasses.asdict`` makes them), then its
        ``extra`` keys. Field by field: asdict's generic walk (deep copies, type checks) is slow for the many items a
        search returns."""
        d = {name: _copied(getattr(self, name)) for name in _EVIDENCE_FIELDS}
        # Optional provenance keys are omitted when unset, so local and live items differ only where they must.
        for key in ("fetched_at", "rev_timestamp", "attempt", "hop", "retrieved_for_entity"):
            if d[key] is None:
                d.pop(key)
        d.update(_copied(self.extra))
        return d


_EVIDENCE_FIELDS = tuple(f.name for f in fields(Evidence) if f.name != "extra")


def _copied(value: Any) -> Any:
    """``value`` with its dicts, lists and tuples copied all the way down (the JSON-like values of evidence)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_copied(v) for v in value)
    return value
