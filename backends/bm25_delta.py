"""The BM25 channel's delta part (``backends.delta_parts``): the delta's passages scored as Lucene would score them
had they been in the base index.

Lucene's BM25 (``BM25Similarity``, as the base searches): a query term ``t`` of field ``f``, asked ``c`` times in the
claim, adds ``w_f * c * idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))`` to a passage holding it ``tf`` times, with
``idf = ln(1 + (N - df + 0.5) / (df + 0.5))``. ``N``, ``df`` and ``avgdl`` are the base's (its reader's document
count, document frequency and total term frequency per field), ``dl`` the passage's field length in tokens as
Lucene stores it (``SmallFloat``'s one-byte encoding), and the tokens those of the base's own analyzer. Scores are
rounded to 4 decimals, as the base's hits are.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from backends.bm25 import prepare_query
from backends.delta_corpus import DeltaCorpus, top_hits

SEPARATOR = "qqxqqxqq"  # a token the analyzer keeps as it is: many passages analysed in one call, split at it
ANALYZE_CHARS = 200_000  # text handed to the analyzer per call


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
                docs = self._tokens(texts.get(field, contents))
                n, total = self._stats[field], self._reader.getSumTotalTermFreq(field)
                avgdl = total / n if n > 0 else 1.0
                stored: dict[int, int] = {}  # a length as Lucene stores it, asked of Java once per length
                lengths = [
                    stored.get(len(d)) or stored.setdefault(len(d), small.byte4ToInt(small.intToByte4(len(d))))
                    for d in docs
                ]
                self.norms[field] = self.k1 * (1 - self.b + self.b * np.asarray(lengths, dtype=np.float64) / avgdl)
                self.postings[field] = _postings(docs)

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
            arrays.update({f"{i}.{k}": v for k, v in SavedPostings.pack(self.postings[field]).items()})
        return {"fields": list(self.fields)}, arrays

    @classmethod
    def restore(cls, base: Any, corpus: DeltaCorpus, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> BM25Part:
        part = cls.__new__(cls)
        part._attach(base, corpus)
        if list(part.fields) != params["fields"]:
            raise ValueError(f"parts of fields {params['fields']}, the base searches {list(part.fields)}")
        part.norms = {field: arrays[f"{i}.norms"] for i, field in enumerate(part.fields)}
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

    def search_batch(self, queries: list[str], k: int) -> list[list]:
        out = []
        for query in queries:
            text = prepare_query(query)
            if not text:
                out.append([])
                continue
            with self.base._lock:
                counts = Counter(self._analyze(self._analyzer, text).toArray())
                ids, scores = self._scores(counts)
            out.append(top_hits(self.corpus, np.round(scores, 4), k, self.base.name, ids))
        return out

    def _scores(self, counts: Counter) -> tuple[np.ndarray, np.ndarray]:
        """The rows the query's terms reach and their scores (only those rows: a pass over every delta passage
        cost as much as the base's search with a large delta)."""
        acc = np.zeros(len(self.corpus), dtype=np.float64)
        fresh = []
        for field, weight in self.fields.items():
            norms, postings = self.norms[field], self.postings[field]
            for term, c in counts.items():
                found = postings.get(term)
                if found is not None:
                    rows, tf = found
                    cur = acc[rows]
                    fresh.append(rows[cur == 0])  # a passage's first term: every term adds more than 0
                    acc[rows] = cur + weight * c * self.idf(field, term) * tf / (tf + norms[rows])
        ids = np.concatenate(fresh) if fresh else np.zeros(0, dtype=np.int64)
        return ids, acc[ids]


def _postings(docs: list[list[str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """term -> (rows holding it, its count in each)."""
    rows: dict[str, list[int]] = {}
    tfs: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        for term, tf in Counter(doc).items():
            rows.setdefault(term, []).append(i)
            tfs.setdefault(term, []).append(tf)
    return {t: (np.asarray(r, dtype=np.int64), np.asarray(tfs[t], dtype=np.float64)) for t, r in rows.items()}


class SavedPostings:
    """A field's postings saved as arrays: the terms (one UTF-8 blob, their end offsets), where each term's rows
    start, the rows and the counts; looked up as the in-memory dict is (the terms' index is made on first use)."""

    ARRAYS = ("terms", "term_ends", "starts", "rows", "tfs")

    def __init__(self, arrays: dict[str, np.ndarray]):
        # Plain views of the mapped files: a slice of a np.memmap is a memmap object, dearer to make per term.
        self._arrays = {k: v.view(np.ndarray) if isinstance(v, np.memmap) else v for k, v in arrays.items()}
        self._index: dict[str, int] | None = None

    @staticmethod
    def pack(postings: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        from backends.delta_corpus import Strings

        terms = sorted(postings)
        blob, ends = Strings.pack(terms)
        sizes = [len(postings[t][0]) for t in terms]
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        rows = np.concatenate([postings[t][0] for t in terms]) if terms else np.zeros(0, dtype=np.int64)
        tfs = np.concatenate([postings[t][1] for t in terms]) if terms else np.zeros(0, dtype=np.float64)
        return {"terms": blob, "term_ends": ends, "starts": starts, "rows": rows, "tfs": tfs}

    def get(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        if self._index is None:
            raw, ends = bytes(self._arrays["terms"]), self._arrays["term_ends"].tolist()
            self._index = {raw[a:b].decode("utf-8"): i for i, (a, b) in enumerate(zip([0, *ends[:-1]], ends))}
        i = self._index.get(term)
        if i is None:
            return None
        a, b = int(self._arrays["starts"][i]), int(self._arrays["starts"][i + 1])
        return self._arrays["rows"][a:b], self._arrays["tfs"][a:b]
