"""The TF-IDF and dense channels' delta parts (``backends.delta_parts``): the delta's passages scored as the base
scores its own. TF-IDF: the base's hashing and idf (a term no base passage holds has no weight, as in the base).
Dense: the base's encoder, the same query vector as the base's search; only the pages' lead passages where the
base embedded only leads."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np

from backends import tfidf_postings
from backends.delta_corpus import DeltaCorpus, merge_floor, top_hits

KEY_BYTES = 12  # a passage text's blake2b digest: the dense part's key of a vector it need not compute again


def _texts(corpus: DeltaCorpus, rows: np.ndarray) -> list[str]:
    from backends.encoder import passage_text

    return [passage_text(corpus.titles[r], corpus.headings[r], corpus.texts[r]) for r in rows.tolist()]


VECTORIZE_SLICE = 20_000  # delta passages hashed into terms at once while the TF-IDF part is made


class TfidfPart:
    """The delta's passages as postings of the base's TF-IDF terms: for each base term id the delta holds, its
    passages by ascending weight (sublinear tf x the base's idf, L2-normalised over the terms the base holds, rounded
    to the base list's steps), built in bulk: a vector per passage through :meth:`vectorize_many` took minutes for
    tens of thousands of passages over a base of millions.

    A query reads of each term's delta list what the base reads of its own: the base reads at most its posting
    budget, cutting its longest lists (``backends.tfidf.water_fill``) and keeping their high-weight ends, so the delta
    list is read down to the weight where the base's read stops (all of it where the base reads its list whole).
    A delta passage then counts a term where a base passage of the same weight does, and a claim of common words
    does not read every delta passage holding "the". The lists are walked into an
    accumulator as the base walks its own, in the same order and precision, so a passage scores as in the base."""

    ARRAYS = ("columns", "indptr", "rows", "weights")

    def __init__(self, base: Any, corpus: DeltaCorpus, previous: Any = None):
        from backends.tfidf_postings import snap

        n = len(corpus)
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for a in range(0, n, VECTORIZE_SLICE):  # the texts and their float64 terms a slice at a time
            here = np.arange(a, min(n, a + VECTORIZE_SLICE))
            x = base._hasher.transform(_texts(corpus, here))
            local = np.repeat(np.arange(len(here)), np.diff(x.indptr))
            tids, held = base._term_ids(x.indices)
            tf = x.data.astype(np.float64)
            if base._sublinear:
                tf = 1.0 + np.log(tf)
            w = np.where(held, tf * base._idf[tids], 0.0)
            norms = np.sqrt(np.bincount(local, weights=w * w, minlength=len(here)))
            keep = held & (w > 0)
            kept, local = tids[keep], local[keep]
            values = snap((w[keep] / norms[local]).astype(np.float32), base._wlo[kept], base._wstep[kept])
            parts.append((kept, (local + a).astype(np.int32), values))
        kept = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
        rows = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
        values = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.float32)
        del parts
        order = np.lexsort((rows, values, kept))  # by term, then weight, then row
        self.columns, counts = np.unique(kept, return_counts=True)
        self.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.rows, self.weights = rows[order].astype(np.int32), values[order]
        self._attach(base, corpus)

    def _attach(self, base: Any, corpus: DeltaCorpus) -> None:
        self.base, self.corpus = base, corpus
        self._local = threading.local()  # one score accumulator per thread

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What :meth:`restore` reads back (``backends.delta_store``): the postings."""
        return {"passages": len(self.corpus)}, {name: getattr(self, name) for name in self.ARRAYS}

    @classmethod
    def restore(
        cls, base: Any, corpus: DeltaCorpus, params: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> TfidfPart:
        part = cls.__new__(cls)
        for name in cls.ARRAYS:  # plain views of the maps: a slice of a np.memmap costs more per term
            setattr(part, name, np.asarray(arrays[name]))
        if params.get("passages") != len(corpus) or len(part.indptr) != len(part.columns) + 1:
            raise ValueError("TF-IDF delta postings of another corpus")
        if int(part.indptr[-1]) != len(part.rows) or len(part.rows) != len(part.weights):
            raise ValueError("TF-IDF delta postings of different lengths")
        part._attach(base, corpus)
        return part

    def search_batch(self, queries: list[str], k: int) -> list[list]:
        return [self._top(tids, weights, k) for tids, weights in self.base.vectorize_many(queries)]

    def search_with_base(
        self, queries: list[str], k: int, base_k: int, hidden: frozenset[int] = frozenset()
    ) -> tuple[list[list], list[list]]:
        """The base's ``base_k`` best hits and the delta's ``k`` for ``queries``, from one vectorization of them
        (hashing a claim cost about as much as the delta's scoring); the delta's without those that cannot enter
        the ``k`` best once merged with the base's (``hidden``: the pages whose base hits are dropped)."""
        vectors = self.base.vectorize_many(queries)
        base_hits = self.base.search_vectors(vectors, base_k)
        floors = [merge_floor(hits, hidden, k) for hits in base_hits]
        return base_hits, [self._top(t, w, k, floor) for (t, w), floor in zip(vectors, floors, strict=True)]

    def base_cut(self, tids: np.ndarray) -> np.ndarray:
        """Per query term (base term ids, as the base's search sees them): the lowest weight the base reads of its
        list (float32, as the base decodes it), -inf where it reads the whole list and no postings were left out at
        build time, +inf where it reads none of it."""
        from backends.tfidf import water_fill
        from backends.tfidf_postings import KEEP

        b = self.base
        ends = b._indptr[tids + 1]
        lengths = ends - b._indptr[tids]
        take = water_fill(lengths, b.posting_budget)
        cut = np.full(len(tids), -np.inf, dtype=np.float32)
        cut[take == 0] = np.inf
        cutting = np.flatnonzero((take > 0) & ((take < lengths) | (lengths >= KEEP)))
        if len(cutting):
            t, level = tids[cutting], b._weights[(ends - take)[cutting]].astype(np.float32)
            cut[cutting] = np.exp(b._wlo[t] + b._wstep[t] * level)
        return cut

    def _ranges(self, tids: np.ndarray) -> tuple[list[int], list[int]]:
        """Per query term, the part of its delta list to read: [start, end) of the postings."""
        pos = np.minimum(np.searchsorted(self.columns, tids), max(len(self.columns) - 1, 0))
        present = self.columns[pos] == tids if len(self.columns) else np.zeros(len(tids), dtype=bool)
        ends = self.indptr[pos + 1]
        starts = np.where(present, self.indptr[pos], ends)
        cut = self.base_cut(tids)
        for i in np.flatnonzero(present & (cut > -np.inf)).tolist():
            starts[i] += np.searchsorted(self.weights[starts[i] : ends[i]], cut[i], "left")
        return starts.tolist(), ends.tolist()

    def _top(self, tids: np.ndarray, weights: np.ndarray, k: int, floor: float = 0.0) -> list:
        if not len(tids) or not len(self.columns) or k <= 0:
            return []
        starts, ends = self._ranges(tids)
        lists = ((self.rows[a:b], self.weights[a:b], w) for a, b, w in zip(starts, ends, weights.tolist()) if a < b)
        ids, scores = tfidf_postings.accumulate(self._local, len(self.corpus), lists)
        return top_hits(self.corpus, scores, k, self.base.name, ids, floor)


class DensePart:
    """The delta's passages embedded by the base's encoder; a passage's vector is kept while its text is the
    same (a new segment does not embed the unchanged ones again)."""

    def __init__(self, base: Any, corpus: DeltaCorpus, previous: DensePart | None = None):
        self.base = base
        self.corpus = corpus
        self.rows = corpus.leads if getattr(base, "rows", None) is not None else np.arange(len(corpus))
        texts = _texts(corpus, self.rows)
        keys = [hashlib.blake2b(t.encode("utf-8"), digest_size=KEY_BYTES).digest() for t in texts]
        known = previous.cache if previous is not None else {}
        todo = [i for i, key in enumerate(keys) if key not in known]
        if todo:
            fresh = base.encoder.encode([texts[i] for i in todo])
            known = {**known, **{keys[i]: fresh[j] for j, i in enumerate(todo)}}
        dim = int(base.vectors.shape[1])
        self.vectors = np.stack([known[key] for key in keys]) if keys else np.zeros((0, dim), dtype=np.float32)
        self.keys = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), KEY_BYTES)

    @property
    def cache(self) -> dict[bytes, np.ndarray]:
        """A passage text's key -> its vector: what a part built after this one need not embed again."""
        return {bytes(key): vector for key, vector in zip(self.keys, self.vectors)}

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {}, {"rows": self.rows, "vectors": self.vectors, "keys": self.keys}

    @classmethod
    def restore(
        cls, base: Any, corpus: DeltaCorpus, params: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> DensePart:
        part = cls.__new__(cls)
        part.base, part.corpus = base, corpus
        part.rows, part.vectors, part.keys = arrays["rows"], arrays["vectors"], arrays["keys"]
        return part

    def search_with_base(
        self, queries: list[str], k: int, base_k: int, hidden: frozenset[int] = frozenset()
    ) -> tuple[list[list], list[list]]:
        """The base's ``base_k`` best hits and the delta's ``k`` for ``queries``, from one encoding of them (the
        delta's all of its ``k`` best: ``hidden`` is not needed)."""
        live = self.base.searchable(queries)
        if not live or k <= 0:
            return [[] for _ in queries], [[] for _ in queries]
        q = self.base.encoder.encode_queries([queries[i] for i in live])
        # At least twice k, as deep as it was always asked: an approximate search reranks a number of candidates
        # proportional to the depth asked, so its top k depend on that depth, and they stay the hits they were.
        base_hits = self.base.search_encoded(queries, q, max(base_k, k + k))
        delta_hits: list[list] = [[] for _ in queries]
        sims = (self.vectors @ q.T).T if len(self.vectors) else np.zeros((len(live), 0), dtype=np.float32)
        for row, i in enumerate(live):
            delta_hits[i] = top_hits(self.corpus, sims[row], k, self.base.name, self.rows)
        return base_hits, delta_hits
