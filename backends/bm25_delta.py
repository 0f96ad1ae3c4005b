"""The BM25 channel's delta part (``backends.delta_parts``): the delta's passages scored as Lucene would score them
had they been in the base index.

Lucene's BM25 (``BM25Similarity``, as the base searches): a query term ``t`` of field ``f``, asked ``c`` times in the
claim, adds ``w_f * c * idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` to a passage holding it ``tf`` times, with
``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``. ``N``, ``df`` and ``avgdl`` are the base's (its reader's document
count, document frequency and total term frequency per field), ``dl`` the passage's field length in tokens as
Lucene stores it (``SmallFloat``'s one-byte encoding), and the tokens those of the base's own analyzer. Scores are
rounded to 4 decimals, as the base's hits are.

A term's delta postings are kept twice: by row, to score a row, and by impact ``tf / (tf + k1 * (1 - b + b * dl /
avgdl))``, which does not depend on the query, to read a long list only where a row could still reach the k-th best
score (:func:`_scores`). Lucene reads its own lists by such bounds too; a delta of many passages is not scored
whole per query.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.bm25 import prepare_query
from backends.delta_corpus import DeltaCorpus, Strings, merge_floor, top_hits

SEPARATOR = "qqxqqxqq"  # a token the analyzer keeps as it is: many passages analysed in one call, split at it
ANALYZE_CHARS = 200_000  # text handed to the analyzer per call
TOKEN_SLICE = 20_000  # documents whose tokens are Python objects at once while a part is made


class BM25Part:
    def __init__(self, base: Any, corpus: DeltaCorpus, previous: Any = None):
        from jnius import autoclass

        self._attach(base, corpus)
        small = autoclass("org.apache.lucene.util.SmallFloat")
        contents = [
            ". ".join(p for p in (t, h, x) if p) or " " for t, h, x in zip(corpus.titles, corpus.headings, corpus.texts)
        ]
        texts = {"contents": contents, "title": corpus.titles}
        self.postings: dict[str, Any] = {}
        self.norms: dict[str, np.ndarray] = {}
        with base._lock:  # Java from one Python thread at a time (backends.bm25)
            for field in self.fields:
                field_texts = texts.get(field, contents)
                slices = (
                    self._tokens(field_texts[a : a + TOKEN_SLICE]) for a in range(0, len(field_texts), TOKEN_SLICE)
                )
                packed, doc_lengths = _packed_postings(slices)
                n, total = self._stats[field], self._reader.getSumTotalTermFreq(field)
                avgdl = total / n if n > 0 else 1.0
                stored: dict[int, int] = {}  # a length as Lucene stores it, asked of Java once per length
                lengths = [
                    stored.get(d) or stored.setdefault(d, small.byte4ToInt(small.intToByte4(d)))
                    for d in doc_lengths.tolist()
                ]
                self.norms[field] = self.k1 * (1 - self.b + self.b * np.asarray(lengths, dtype=np.float64) / avgdl)
                packed.update(SavedPostings.impacts(packed, self.norms[field]))
                self.postings[field] = SavedPostings(packed)

    def _attach(self, base: Any, corpus: DeltaCorpus) -> None:
        """The base's analyzer, reader and statistics: what scoring asks of Java (built or restored alike)."""
        from jnius import autoclass

        self.base = base
        self.corpus = corpus
        self.k1, self.b = float(base.params["k1"]), float(base.params["b"])
        self.fields = {f: float(w) for f, w in base.params["fields"].items() if float(w) > 0}
        self._analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
        self._term = autoclass("org.apache.lucene.index.Term")
        self._idf: dict[tuple[str, str], float] = {}
        with base._lock:
            self._reader = base._searcher.reader
            self._analyzer = base._topk._analyzer
            self._stats = {field: self._reader.getDocCount(field) for field in self.fields}  # the base's N

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Per field: its passages' length norms and its postings as arrays (``backends.delta_store``)."""
        arrays: dict[str, np.ndarray] = {}
        for i, field in enumerate(self.fields):
            arrays[f"{i}.norms"] = self.norms[field]
            arrays.update({f"{i}.{k}": v for k, v in self.postings[field].arrays().items()})
        return {"fields": list(self.fields)}, arrays

    @classmethod
    def restore(cls, base: Any, corpus: DeltaCorpus, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> BM25Part:
        part = cls.__new__(cls)
        part._attach(base, corpus)
        if list(part.fields) != params["fields"]:
            raise ValueError(f"parts of fields {params['fields']}, the base searches {list(part.fields)}")
        # Plain views of the maps: a np.memmap's slice or gather is a memmap object, dearer to make per term.
        part.norms = {field: np.asarray(arrays[f"{i}.norms"]) for i, field in enumerate(part.fields)}
        part.postings = {
            field: SavedPostings({k: arrays[f"{i}.{k}"] for k in SavedPostings.ARRAYS})
            for i, field in enumerate(part.fields)
        }
        return part

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        """Each text's tokens by the base's analyzer: texts joined by the separator, a call per slice."""
        if self._analyze(self._analyzer, SEPARATOR).toArray() != [SEPARATOR]:
            return [list(self._analyze(self._analyzer, t).toArray()) for t in texts]
        out: list[list[str]] = []
        at = 0
        while at < len(texts):
            end, size = at, 0
            while end < len(texts) and (end == at or size + len(texts[end]) < ANALYZE_CHARS):
                size += len(texts[end]) + len(SEPARATOR) + 2
                end += 1
            tokens = self._analyze(self._analyzer, f" {SEPARATOR} ".join(texts[at:end]) + f" {SEPARATOR}").toArray()
            doc: list[str] = []
            for token in tokens:
                if token == SEPARATOR:
                    out.append(doc)
                    doc = []
                else:
                    doc.append(token)
            at = end
        return out

    def idf(self, field: str, term: str) -> float:
        key = (field, term)
        value = self._idf.get(key)
        if value is None:
            n = self._stats[field]
            df = self._reader.docFreq(self._term(field, term))
            value = self._idf[key] = float(np.log(1 + (n - df + 0.5) / (df + 0.5)))
        return value

    def search_batch(self, queries: list[str], k: int, floors: list[float] | None = None) -> list[list]:
        """The delta's ``k`` best hits of each query; with ``floors``, without those scoring below its floor
        (:func:`backends.delta_corpus.merge_floor`)."""
        out = []
        for query, floor in zip(queries, floors or [0.0] * len(queries), strict=True):
            text = prepare_query(query)
            if not text:
                out.append([])
                continue
            with self.base._lock:
                counts = Counter(self._analyze(self._analyzer, text).toArray())
                lists = self._lists(counts)
            ids, scores = _scores(lists, k, len(self.corpus), floor)
            out.append(top_hits(self.corpus, np.round(scores, 4), k, self.base.name, ids, floor))
        return out

    def search_with_base(
        self, queries: list[str], k: int, base_k: int, hidden: frozenset[int] = frozenset()
    ) -> tuple[list[list], list[list]]:
        """The base's ``base_k`` best hits and the delta's ``k``, the base's first: the k-th best of its hits that
        stay once merged (``hidden``: the pages whose base hits are dropped) bounds from below what a delta row must
        score to be of use, so that fewer rows are scored exactly."""
        base_hits = self.base.search_batch(queries, base_k)
        return base_hits, self.search_batch(queries, k, [merge_floor(hits, hidden, k) for hits in base_hits])

    def _lists(self, counts: Counter) -> list[Terms]:
        """The query's postings lists in the delta, in the order their scores are summed (field, then term)."""
        lists = []
        for field, weight in self.fields.items():
            norms, postings = self.norms[field], self.postings[field]
            for term, c in counts.items():
                found = postings.lists(term)
                if found is not None:
                    lists.append(Terms(weight * c * self.idf(field, term), norms, *found))
        return lists


@dataclass(frozen=True, slots=True)
class Terms:
    """One query term's list in one field: ``q`` (field weight x count in the claim x idf), the field's length
    norms, its rows ascending with their counts, and the same rows by descending impact ``tf / (tf + norm)`` with
    the impacts negated (ascending, for searchsorted), as float32."""

    q: float
    norms: np.ndarray
    rows: np.ndarray
    tfs: np.ndarray
    by_impact: np.ndarray
    neg_impacts: np.ndarray

    def bound(self) -> float:
        """The most this term adds to a passage's score (float32 impacts: a margin over their rounding)."""
        return self.q * -float(self.neg_impacts[0]) * (1 + SLACK) if len(self.rows) else 0.0

    def reaching(self, tau: float) -> int:
        """How many of the rows by impact this term adds at least ``tau`` to (those after add less)."""
        return int(np.searchsorted(self.neg_impacts, -tau / self.q, "right"))


SLACK = 1e-6  # relative margin of every bound over float rounding
ROUNDING = 1e-4  # scores are compared rounded to 4 decimals: a score this much below the k-th best may tie with it
PRUNE_FROM = 20_000  # postings a query's lists hold from which they are not scored whole
SEARCH_FROM = 16  # a list this many times longer than the rows asked is searched for them, not read


def _scores(lists: list[Terms], k: int, n: int, floor: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The rows that may be among the ``k`` best of ``n`` and their exact scores: every row the lists reach when
    they are short; else the rows a bound cannot rule out (MaxScore, over lists ordered by impact): the best ``k``
    of each list give a k-th best score ``theta``; lists whose bounds sum below ``theta`` are read only where a row
    could still reach it. Each row's terms are summed in the lists' order either way, so the scores are those of
    scoring every row (a pass over every delta passage cost as much as the base's search with a large delta).
    ``floor``: a score below which a row is of no use to the caller (the base's k-th best hit once merged); where
    there is one, it is ``theta``, and rows below it may be left out: the best ``k`` of each list need not be
    scored first to find a ``theta``, which cost about as much as scoring the rows the bounds leave."""
    if sum(len(t.rows) for t in lists) <= PRUNE_FROM or k <= 0:
        return _whole(lists, n)
    if floor > ROUNDING:
        reach = _reach(lists, (floor - ROUNDING) * (1 - SLACK))
        ids = _distinct([t.by_impact[:r] for t, r in zip(lists, reach, strict=True)])
        return ids, _exact(lists, ids, n)
    pool = _distinct([t.by_impact[:k] for t in lists])
    scores = _exact(lists, pool, n)
    theta = float(np.partition(scores, len(scores) - k)[len(scores) - k]) - ROUNDING if len(pool) >= k else 0.0
    reach = _reach(lists, theta * (1 - SLACK)) if theta > 0 else [len(t.rows) for t in lists]
    more = [t.by_impact[:r] for t, r in zip(lists, reach, strict=True) if r > k]
    if not more:
        return pool, scores
    ids = _distinct([pool, *more])
    return ids, _exact(lists, ids, n)


def _whole(lists: list[Terms], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row the lists reach, scored through an accumulator over the ``n`` rows."""
    with _scratch("acc", n, np.float64, 0) as acc:
        fresh = []
        for t in lists:
            cur = acc[t.rows]
            fresh.append(t.rows[cur == 0])  # a row's first term: every term adds more than 0
            tf = t.tfs.astype(np.float64)
            acc[t.rows] = cur + t.q * tf / (tf + t.norms[t.rows])
        ids = np.concatenate(fresh) if fresh else np.zeros(0, dtype=np.int64)
        scores = acc[ids]
        acc[ids] = 0  # as found, for the next query
    return ids, scores


_SCRATCH = threading.local()


@contextmanager
def _scratch(name: str, n: int, dtype: Any, fill: Any) -> Iterator[np.ndarray]:
    """The calling thread's array of ``n`` rows filled with ``fill``, which the caller leaves as it found it: made
    once, not per query (a fresh one, megabytes over a large delta, had its pages zeroed and faulted in anew each
    time, which cost more than the scoring). Dropped if the caller fails half-way, so never read dirty."""
    held = getattr(_SCRATCH, name, None)
    if held is None or len(held) != n or held.dtype != dtype:
        held = np.full(n, fill, dtype=dtype)
    setattr(_SCRATCH, name, None)  # taken: a nested or failed use makes a fresh one
    yield held
    setattr(_SCRATCH, name, held)


def _distinct(parts: list[np.ndarray]) -> np.ndarray:
    """The rows of ``parts``, each once, ascending."""
    rows = np.sort(np.concatenate(parts))
    return rows[np.concatenate(([True], rows[1:] != rows[:-1]))] if len(rows) else rows


def _reach(lists: list[Terms], budget: float) -> list[int]:
    """How many rows by impact to read of each list so that a row read in none scores below ``budget``: lists left
    out whole while their bounds fit the budget (the longest first, or the least bounded first, whichever reads
    fewer rows), the next one read down to what the budget leaves, the rest read whole."""
    best: list[int] | None = None
    bounds = [t.bound() for t in lists]
    for order in (sorted(range(len(lists)), key=lambda i: -len(lists[i].rows)), np.argsort(bounds).tolist()):
        reach = [len(t.rows) for t in lists]
        left = budget
        for i in order:
            if bounds[i] <= left:
                reach[i], left = 0, left - bounds[i]
            else:
                reach[i] = lists[i].reaching(left / (1 + SLACK)) if left > 0 else len(lists[i].rows)
                break
        if best is None or sum(reach) < sum(best):
            best = reach
    return best or []


def _exact(lists: list[Terms], ids: np.ndarray, n: int) -> np.ndarray:
    """The scores of rows ``ids`` (ascending, of ``n``), each term's share added in the lists' order, as Lucene
    sums them: a short list is read whole through a map of the rows, a long one searched for them."""
    acc = np.zeros(len(ids), dtype=np.float64)
    short = [len(t.rows) <= SEARCH_FROM * len(ids) for t in lists]
    with _scratch("slot", n, np.int32, -1) as slot:  # row -> its place in ids (-1: not asked)
        slot[ids] = np.arange(len(ids), dtype=np.int32)
        for t, read in zip(lists, short, strict=True):
            if read:
                place = slot[t.rows]
                hit = place >= 0
                at, rows, tf = place[hit], t.rows[hit], t.tfs[hit].astype(np.float64)
            else:
                # ids in the list's dtype: a mixed search would cast the whole list first, what searching avoids
                wanted = ids.astype(t.rows.dtype, copy=False)
                found = np.minimum(np.searchsorted(t.rows, wanted), max(len(t.rows) - 1, 0))
                hit = t.rows[found] == ids if len(t.rows) else np.zeros(len(ids), dtype=bool)
                at, rows, tf = np.flatnonzero(hit), ids[hit], t.tfs[found[hit]].astype(np.float64)
            acc[at] = acc[at] + t.q * tf / (tf + t.norms[rows])
        slot[ids] = -1  # as found, for the next query
    return acc


def _packed_postings(slices: Iterable[list[list[str]]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The postings of the documents ``slices`` yield in turn (each a list of token lists), as
    :class:`SavedPostings` arrays (terms sorted, each term's rows ascending), and each document's length in tokens.
    One slice's tokens at a time are Python objects; the (term, row, count) triples of every slice are flat arrays,
    sorted by term once at the end."""
    vocab: dict[str, int] = {}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    lengths: list[np.ndarray] = []
    row = 0
    for docs in slices:
        terms: list[int] = []
        rows: list[int] = []
        tfs: list[int] = []
        for doc in docs:
            for term, tf in Counter(doc).items():
                terms.append(vocab.setdefault(term, len(vocab)))
                rows.append(row)
                tfs.append(tf)
            row += 1
        parts.append((np.asarray(terms, dtype=np.int32), np.asarray(rows, dtype=np.int32), np.asarray(tfs, np.float32)))
        lengths.append(np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs)))
        del docs  # this slice's tokens freed before the generator makes the next one's
    names = sorted(vocab)
    rank = np.empty(len(vocab), dtype=np.int32)
    rank[np.fromiter((vocab[t] for t in names), dtype=np.int64, count=len(names))] = np.arange(len(names))
    del vocab
    term = rank[np.concatenate([p[0] for p in parts])] if parts else np.zeros(0, dtype=np.int32)
    rows_all = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
    tfs_all = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.float32)
    del parts
    order = np.argsort(term, kind="stable")  # rows ascending within a term: they were made in row order
    blob, ends = Strings.pack(names)
    starts = np.zeros(len(names) + 1, dtype=np.int64)
    np.cumsum(np.bincount(term, minlength=len(names)), out=starts[1:])
    packed = {"terms": blob, "term_ends": ends, "starts": starts, "rows": rows_all[order], "tfs": tfs_all[order]}
    return packed, np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)


class SavedPostings:
    """A field's postings as arrays: the terms (one UTF-8 blob, their end offsets), where each term's rows start,
    the rows (ascending) and their counts, and each list again by descending impact (``by_impact``, and
    ``neg_impacts``: the impacts negated); looked up by term (the terms' index is made on first use)."""

    ARRAYS = ("terms", "term_ends", "starts", "rows", "tfs", "by_impact", "neg_impacts")

    def __init__(self, arrays: dict[str, np.ndarray]):
        # Plain views of the mapped files: a slice of a np.memmap is a memmap object, dearer to make per term.
        self._arrays = {k: v.view(np.ndarray) if isinstance(v, np.memmap) else v for k, v in arrays.items()}
        missing = [name for name in self.ARRAYS if name not in self._arrays]
        if missing:
            raise KeyError(f"BM25 delta postings without {', '.join(missing)}")
        self._index: dict[str, int] | None = None

    def arrays(self) -> dict[str, np.ndarray]:
        return dict(self._arrays)

    @staticmethod
    def impacts(packed: dict[str, np.ndarray], norms: np.ndarray) -> dict[str, np.ndarray]:
        """Each list of ``packed`` by descending impact ``tf / (tf + norm)`` (ties by row): ``by_impact`` and
        ``neg_impacts``."""
        rows, tfs, starts = packed["rows"], packed["tfs"], packed["starts"]
        impact = (tfs / (tfs + norms[rows])).astype(np.float32)
        term = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
        order = np.lexsort((rows, -impact, term))
        return {"by_impact": rows[order], "neg_impacts": -impact[order]}

    def lists(self, term: str) -> tuple[np.ndarray, ...] | None:
        """``term``'s rows, counts, rows by impact and negated impacts (None: no delta passage holds it)."""
        if self._index is None:
            raw, ends = bytes(self._arrays["terms"]), self._arrays["term_ends"].tolist()
            self._index = {raw[a:b].decode("utf-8"): i for i, (a, b) in enumerate(zip([0, *ends[:-1]], ends))}
        i = self._index.get(term)
        if i is None:
            return None
        a, b = int(self._arrays["starts"][i]), int(self._arrays["starts"][i + 1])
        return tuple(self._arrays[name][a:b] for name in ("rows", "tfs", "by_impact", "neg_impacts"))
