"""The delta's passages as every delta part of a channel indexes them (``backends.delta_parts``), and the hits of a
part's scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from indexer.store import Store
from wikiground.records import Hit

# The delta passages' text as the base channels index it (title, heading path, text).
CORPUS_SQL = (
    "SELECT passage_id, page_id, title, heading_path, text, passage_index, source FROM passages "
    "ORDER BY page_id, passage_index"
)


@dataclass(frozen=True, slots=True)
class DeltaCorpus:
    """The delta's passages, in one order every part indexes them in (a corpus read back from saved parts has
    no headings or texts: the parts need them only to be built)."""

    passage_ids: np.ndarray
    page_ids: np.ndarray
    titles: Sequence[str]
    headings: Sequence[str]
    texts: Sequence[str]
    leads: np.ndarray  # rows of each page's lead passage (first text passage, else first passage)

    def __len__(self) -> int:
        return len(self.passage_ids)


class Strings(Sequence[str]):
    """Strings saved as one UTF-8 blob and the offsets where each ends (mmap'd arrays), decoded when read."""

    def __init__(self, blob: np.ndarray, ends: np.ndarray):
        self._blob, self._ends = blob, ends

    @staticmethod
    def pack(items: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        raw = [s.encode("utf-8") for s in items]
        ends = np.cumsum([len(b) for b in raw], dtype=np.int64) if raw else np.zeros(0, dtype=np.int64)
        return np.frombuffer(b"".join(raw), dtype=np.uint8).copy(), ends

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i) + len(self) if int(i) < 0 else int(i)
        start = int(self._ends[i - 1]) if i > 0 else 0
        return bytes(self._blob[start : int(self._ends[i])]).decode("utf-8")


def read_corpus(store: Store) -> DeltaCorpus:
    return corpus_from_rows(store.delta_rows(CORPUS_SQL))


def corpus_from_rows(rows: Sequence[tuple]) -> DeltaCorpus:
    """The corpus of :data:`CORPUS_SQL`'s rows."""
    leads: dict[int, tuple[bool, int, int]] = {}
    for i, r in enumerate(rows):
        key = (r[6] != "text", int(r[5]), i)
        if r[1] not in leads or key < leads[r[1]]:
            leads[r[1]] = key
    return DeltaCorpus(
        passage_ids=np.array([r[0] for r in rows], dtype=np.int64),
        page_ids=np.array([r[1] for r in rows], dtype=np.int64),
        titles=[r[2] for r in rows],
        headings=[r[3] for r in rows],
        texts=[r[4] for r in rows],
        leads=np.array(sorted(v[2] for v in leads.values()), dtype=np.int64),
    )


def top_hits(
    corpus: DeltaCorpus, scores: np.ndarray, k: int, channel: str, rows: np.ndarray | None = None, floor: float = 0.0
) -> list:
    """The ``k`` best of ``scores`` (over ``rows`` of the corpus, or all of it) as hits, ties by passage id; zero
    scores left out, and those below ``floor`` (:func:`merge_floor`)."""
    if k <= 0:
        return []
    kept = np.flatnonzero(scores >= max(_floor(scores, k), floor))
    scores, rows = scores[kept], (kept if rows is None else rows[kept])
    if len(scores) > k:  # every score tied with the k-th best kept, so that ties go to the lower passage id
        keep = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
        scores, rows = scores[keep], rows[keep]
    order = np.lexsort((corpus.passage_ids[rows], -scores))[:k]
    return [
        Hit(int(corpus.passage_ids[r]), int(corpus.page_ids[r]), float(s), 0, channel, title=corpus.titles[r])
        for r, s in zip(rows[order].tolist(), scores[order].tolist())
    ]


SAMPLE_STEP = 16  # top_hits' sample: every 16th score


def _floor(scores: np.ndarray, k: int) -> float:
    """A score the ``k`` best of ``scores`` all reach, above 0: the ``k``-th best of every SAMPLE_STEP-th score
    where the sample holds ``k`` (the ``k``-th best of all is no lower), so that only the scores above it are
    ordered, not every delta passage's."""
    sample = scores[::SAMPLE_STEP]
    if len(sample) <= k:
        return np.nextafter(0, 1, dtype=scores.dtype)
    return max(float(np.partition(sample, len(sample) - k)[len(sample) - k]), np.nextafter(0, 1, dtype=scores.dtype))


def merge_floor(base: Sequence[Hit], hidden: frozenset[int], k: int) -> float:
    """The ``k``-th best score of the base's hits ``base`` once those of ``hidden`` pages are dropped, 0 where
    fewer than ``k`` remain: a delta hit scoring below it cannot enter the ``k`` best of the merged list
    (``backends.delta_parts.merge_hits``), so a part need neither score it exactly nor list it."""
    kept = [h.score for h in base if h.page_id not in hidden]
    return float(sorted(kept, reverse=True)[k - 1]) if k > 0 and len(kept) >= k else 0.0
