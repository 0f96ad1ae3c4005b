"""The TF-IDF and dense channels' delta parts (``backends.delta_parts``): the delta's passages scored as the base
scores its own. TF-IDF: the base's hashing and idf (a term no base passage holds has no weight, as in the base).
Dense: the base's encoder, the same query vector as the base's search; only the pages' lead passages where the
base embedded only leads."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from backends.delta_corpus import DeltaCorpus, top_hits

KEY_BYTES = 12  # a passage text's blake2b digest: the dense part's key of a vector it need not compute again


def _texts(corpus: DeltaCorpus, rows: np.ndarray) -> list[str]:
    from backends.encoder import passage_text

    return [passage_text(corpus.titles[r], corpus.headings[r], corpus.texts[r]) for r in rows.tolist()]


class TfidfPart:
    """The delta's passages as TF-IDF vectors of the base (sublinear tf x the base's idf, L2-normalised over the
    terms the base holds), one sparse matrix over the term ids they use, built in bulk: a vector per passage
    through :meth:`vectorize_many` took minutes for tens of thousands of passages over a base of millions."""

    def __init__(self, base: Any, corpus: DeltaCorpus, previous: Any = None):
        from scipy import sparse

        self.base = base
        self.corpus = corpus
        n = len(corpus)
        x = base._hasher.transform(_texts(corpus, np.arange(n)))
        rows = np.repeat(np.arange(n), np.diff(x.indptr))
        tids, held = base._term_ids(x.indices)
        tf = x.data.astype(np.float64)
        if base._sublinear:
            tf = 1.0 + np.log(tf)
        w = np.where(held, tf * base._idf[tids], 0.0)
        norms = np.sqrt(np.bincount(rows, weights=w * w, minlength=n))
        keep = held & (w > 0)
        self.columns, inverse = np.unique(tids[keep], return_inverse=True)
        from backends.tfidf_postings import snap

        kept = tids[keep]
        values = snap((w[keep] / norms[rows[keep]]).astype(np.float32), base._wlo[kept], base._wstep[kept])
        shape = (n, len(self.columns))
        self.matrix = sparse.csr_matrix((values, (rows[keep], inverse)), shape=shape).tocsc()

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What :meth:`restore` reads back (``backends.delta_store``): the term columns and the sparse matrix."""
        m = self.matrix
        return {"shape": list(m.shape)}, {
            "columns": self.columns,
            "data": m.data,
            "indices": m.indices,
            "indptr": m.indptr,
        }

    @classmethod
    def restore(
        cls, base: Any, corpus: DeltaCorpus, params: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> TfidfPart:
        from scipy import sparse

        part = cls.__new__(cls)
        part.base, part.corpus, part.columns = base, corpus, np.asarray(arrays["columns"])
        matrix = (arrays["data"], arrays["indices"], arrays["indptr"])
        part.matrix = sparse.csc_matrix(matrix, shape=tuple(params["shape"]), copy=False)
        return part

    def search_batch(self, queries: list[str], k: int) -> list[list]:
        out = []
        for tids, weights in self.base.vectorize_many(queries):
            pos = np.minimum(np.searchsorted(self.columns, tids), max(len(self.columns) - 1, 0))
            present = (self.columns[pos] == tids) if len(self.columns) else np.zeros(len(tids), dtype=bool)
            if not present.any():
                out.append([])
                continue
            scores = np.asarray(self.matrix[:, pos[present]] @ weights[present]).ravel().astype(np.float32, copy=False)
            out.append(top_hits(self.corpus, scores, k, self.base.name))
        return out


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

    def search_with_base(self, queries: list[str], k: int) -> tuple[list[list], list[list]]:
        """The base's hits and the delta's for ``queries``, from one encoding of them."""
        live = self.base.searchable(queries)
        if not live or k <= 0:
            return [[] for _ in queries], [[] for _ in queries]
        q = self.base.encoder.encode_queries([queries[i] for i in live])
        base_hits = self.base.search_encoded(queries, q, k)
        delta_hits: list[list] = [[] for _ in queries]
        sims = (self.vectors @ q.T).T if len(self.vectors) else np.zeros((len(live), 0), dtype=np.float32)
        for row, i in enumerate(live):
            delta_hits[i] = top_hits(self.corpus, sims[row], k, self.base.name, self.rows)
        return base_hits, delta_hits
