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

        self.base = base
        self.corpus = corpus
        self.k1, self.b = float(base.params["k1"]), float(base.params["b"])
        self.fields = {f: float(w) for f, w in base.params["fields"].items() if float(w) > 0}
        self._analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
        self._term = autoclass("org.apache.lucene.index.Term")
        small = autoclass("org.apache.lucene.util.SmallFloat")
        contents = [
            ". ".join(p for p in (t, h, x) if p) or " " for t, h, x in zip(corpus.titles, corpus.headings, corpus.texts)
        ]
        texts = {"contents": contents, "title": corpus.titles}
        self._idf: dict[tuple[str, str], float] = {}
        self._stats: dict[str, int] = {}  # field -> the base's document count
        self.postings: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self.norms: dict[str, np.ndarray] = {}
        with base._lock:  # Java from one Python thread at a time (backends.bm25)
            self._reader = base._searcher.reader
            self._analyzer = base._topk._analyzer
            for field in self.fields:
                docs = self._tokens(texts.get(field, contents))
                n, total = self._reader.getDocCount(field), self._reader.getSumTotalTermFreq(field)
                avgdl = total / n if n > 0 else 1.0
                stored: dict[int, int] = {}  # a length as Lucene stores it, asked of Java once per length
                lengths = [
                    stored.get(len(d)) or stored.setdefault(len(d), small.byte4ToInt(small.intToByte4(len(d))))
                    for d in docs
                ]
                self.norms[field] = self.k1 * (1 - self.b + self.b * np.asarray(lengths, dtype=np.float64) / avgdl)
                self.postings[field] = _postings(docs)
                self._stats[field] = n

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
            scores = np.zeros(len(self.corpus), dtype=np.float64)
            with self.base._lock:
                counts = Counter(self._analyze(self._analyzer, text).toArray())
                for field, weight in self.fields.items():
                    norms, postings = self.norms[field], self.postings[field]
                    for term, c in counts.items():
                        found = postings.get(term)
                        if found is not None:
                            rows, tf = found
                            scores[rows] += weight * c * self.idf(field, term) * tf / (tf + norms[rows])
            hits = top_hits(self.corpus, np.round(scores, 4), k, self.base.name)
            out.append(hits)
        return out


def _postings(docs: list[list[str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """term -> (rows holding it, its count in each)."""
    rows: dict[str, list[int]] = {}
    tfs: dict[str, list[int]] = {}
    for i, doc in enumerate(docs):
        for term, tf in Counter(doc).items():
            rows.setdefault(term, []).append(i)
            tfs.setdefault(term, []).append(tf)
    return {t: (np.asarray(r, dtype=np.int64), np.asarray(tfs[t], dtype=np.float64)) for t, r in rows.items()}
