"""TF-IDF retrieval (scikit-learn, hashed word uni+bigrams, sublinear tf) stored as term-major postings.

Folder layout (``out_dir``): the postings files of tfidf_postings.py (``buckets.npy``, ``idf.npy``,
``indptr.npy``, ``indices.npy``, ``weights.npy``, ``wlo.npy``, ``wstep.npy``), the passage table files (see
passage_table.py) and
``params.json`` (written last). No pickle, no vocabulary: a term is its hash bucket. Every array is
memory-mapped on open, so the query process holds only what queries touch.

A query is hashed with the same HashingVectorizer, weighted with the stored idf and L2-normalised, then scored
by walking its terms' postings into an accumulator. It reads at most ``posting_budget`` postings: short lists
are read whole, and a list longer than its share of what is left (a stop word's, spanning much of the corpus)
is read from its high-weight end only, since postings are impact-ordered.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends import tfidf_postings as postings
from backends.passage_table import FILES as TABLE_FILES
from backends.passage_table import PassageTable, connect, passage_count
from backends.passage_table import write as write_table
from wikiground.errors import BuildError, IndexCorruptError, QueryError
from wikiground.layout import PARAMS_FILE, atomic_write_json, channel_folder, read_params
from wikiground.records import Hit

log = logging.getLogger(__name__)

NAME = "tfidf"
FORMAT_VERSION = 4
MIN_DF_LARGE_CORPUS = 100_000  # from this many passages, n-grams seen once are dropped (min_df=2)
BATCH_ROWS = 20_000  # passages hashed at a time
PARALLEL_MIN_PASSAGES = 50_000  # from this many passages, hashing runs in worker processes
# Postings one query reads at most: it bounds the time a claim of common words takes on a large corpus, and cutting
# the longest lists (the least telling terms) cost no recall on the dev claims (benchmarks/RESULTS.md); a small
# corpus's lists fit it whole.
POSTING_BUDGET = postings.KEEP
BATCH_THREADS = max(1, min(4, os.cpu_count() or 1))
POSTINGS_SHARE = 0.4  # of the build's memory budget: what the passes over the spill may hold
# search_batch scores in the calling thread unless told otherwise: scoring is many small numpy calls, bound by the
# GIL between them, so more threads added CPU time and no speed, over 10k passages and over 1M alike
# (benchmarks/RESULTS.md). A batch gets its second core from the channels and blocks searched beside it.
SEARCH_THREADS = 1
# The vectorizer's settings; the query side rebuilds its hasher from these.
ANALYZER_PARAMS = {
    "lowercase": True,
    "strip_accents": "unicode",
    "ngram_range": [1, 2],
    "token_pattern": r"(?u)\b\w\w+\b",
    "analyzer": "word",
}
_EMPTY = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


def _batches(con, db_path: Path, n: int):
    """The passages' texts (title-prefixed, like the dense index), ``BATCH_ROWS`` at a time, in passage id order.

    One query per id range: an ORDER BY over the whole table would make DuckDB sort every text in memory.
    """
    from backends.encoder import passage_text

    sql = (
        "SELECT passage_id, title, heading_path, text FROM passages "
        "WHERE passage_id >= ? AND passage_id < ? ORDER BY passage_id"
    )
    for lo in range(0, n, BATCH_ROWS):
        hi = min(n, lo + BATCH_ROWS)
        batch = con.sql(sql, params=[lo, hi]).to_arrow_table()
        ids = batch.column(0).to_numpy()
        if len(ids) != hi - lo or (len(ids) and (ids[0] != lo or ids[-1] != hi - 1)):
            raise BuildError(f"{db_path}: passage ids are not dense in {lo}..{hi - 1}")
        cols = (batch.column(1).to_pylist(), batch.column(2).to_pylist(), batch.column(3).to_pylist())
        yield [passage_text(t, h, x) for t, h, x in zip(*cols)]


def _counted(batches, bar):
    """The batches, each counted on the progress bar as it passes."""
    for batch in batches:
        bar.update(len(batch))
        yield batch


def build(
    db_path: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    min_df: int | None = None,
    workers: int | None = None,
    n_features: int = postings.N_FEATURES,
    memory: int | None = None,
) -> dict:
    """Hash every passage's uni+bigrams, weight them and write the postings folder, in bounded memory.

    ``min_df`` defaults to 1 below ``MIN_DF_LARGE_CORPUS`` passages and 2 above, where buckets holding
    only once-seen n-grams would dominate the postings. ``workers`` hashing processes (default: one per core,
    up to 4, from ``PARALLEL_MIN_PASSAGES`` passages on; 1 hashes in this process). ``n_features``: hash
    buckets, a power of two. ``memory``: the build's budget; the passes over the spill hold ``POSTINGS_SHARE`` of
    it (the rest: the store's reads, the hashing processes, the interpreter).
    """
    import sklearn
    from tqdm import tqdm

    t0 = time.perf_counter()
    db_path, out_dir = Path(db_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARAMS_FILE).unlink(missing_ok=True)
    con = connect(db_path)
    try:
        n = passage_count(con, db_path)
        if min_df is None:
            min_df = 1 if n < MIN_DF_LARGE_CORPUS else 2
        if workers is None:
            workers = BATCH_THREADS if n >= PARALLEL_MIN_PASSAGES else 1
        params = dict(ANALYZER_PARAMS, sublinear_tf=True, norm="l2", smooth_idf=True, min_df=min_df, dtype="float32")
        params["n_features"] = int(n_features)
        share = None if memory is None else int(memory * POSTINGS_SHARE)
        with tqdm(total=n, unit="passage", desc="tfidf", disable=not progress) as bar:
            batches = _counted(_batches(con, db_path, n), bar)
            counts = postings.build_postings(
                batches, out_dir, params, n=n, min_df=min_df, workers=workers, keep=POSTING_BUDGET, memory=share
            )
        write_table(con, db_path, out_dir)
    finally:
        con.close()
    meta = _params(n, counts, params, sklearn.__version__, round(time.perf_counter() - t0, 2))
    atomic_write_json(out_dir / PARAMS_FILE, meta, sort_keys=True)
    return {
        "type": NAME,
        "engine": f"scikit-learn {meta['sklearn_version']} HashingVectorizer",
        "params": meta,
        "documents": n,
        "build_seconds": meta["build_seconds"],
    }


def _params(n: int, counts: dict, vectorizer: dict, sklearn_version: str, seconds: float) -> dict:
    """The folder's ``params.json``."""
    return {
        "type": NAME,
        "format_version": FORMAT_VERSION,
        "count": n,
        "terms": counts["terms"],
        "nnz": counts["nnz"],
        "layout": "term-major postings, impact-ordered",
        "postings_per_term": POSTING_BUDGET,
        "id_bits": counts["id_bits"],
        "weight_levels": postings.LEVELS,
        "sklearn_version": sklearn_version,
        "vectorizer": vectorizer,
        "build_seconds": seconds,
    }


def load(index_dir: Path) -> TfidfBackend:
    """Open a built TF-IDF folder (or an index folder holding ``tfidf/``)."""
    return TfidfBackend(channel_folder(index_dir, NAME))


def _load_arrays(folder: Path, bits: int) -> dict[str, np.ndarray]:
    arrays = {}
    for name in postings.FILES:
        try:
            arrays[name[:-4]] = np.load(folder / name, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"{folder / name}: TF-IDF index unreadable: {exc}") from exc
    terms, nnz = len(arrays["buckets"]), len(arrays["weights"])
    per_term = ("idf", "wlo", "wstep")
    if any(len(arrays[a]) != terms for a in per_term) or len(arrays["indptr"]) != terms + 1:
        raise IndexCorruptError(f"{folder}: buckets / idf / wlo / wstep / indptr sizes disagree")
    if len(arrays["indices"]) != postings.packed_words(nnz, bits):
        raise IndexCorruptError(f"{folder}: indices / weights sizes disagree")
    if terms and int(arrays["indptr"][-1]) != nnz:
        raise IndexCorruptError(f"{folder / 'indptr.npy'}: ends at {int(arrays['indptr'][-1])}, not at {nnz}")
    return arrays


def water_fill(lengths: np.ndarray, budget: int) -> np.ndarray:
    """How many postings to read of each list: all when they fit ``budget``, else an equal share of what the
    shorter lists leave, so the longest lists are cut first and the total stays within ``budget``."""
    if int(lengths.sum()) <= budget:
        return lengths
    take = np.zeros_like(lengths)
    left = budget
    order = np.argsort(lengths, kind="stable")
    for i, j in enumerate(order):
        take[j] = min(int(lengths[j]), left // (len(order) - i))
        left -= int(take[j])
    return take


MIN_FEATURES, MAX_FEATURES = 1 << 10, postings.MAX_FEATURES  # the hash space: from a toy index's to what a build allows


def checked_vectorizer(vec: Any, folder: Path, buckets: np.ndarray) -> dict[str, Any]:
    """The vectorizer settings of ``params.json``, checked: the parsing settings (token pattern, analyzer,
    lower-casing, accents, n-grams) are this format's own and are never taken from the file (a token pattern is
    code for the regular expression engine), and ``n_features`` must be a whole number in range that holds every
    bucket the index has. IndexCorruptError naming the file otherwise."""
    where = folder / PARAMS_FILE
    if not isinstance(vec, dict):
        raise IndexCorruptError(f"{where}: 'vectorizer' is not an object")
    for key, fixed in ANALYZER_PARAMS.items():
        if vec.get(key) != fixed:
            raise IndexCorruptError(
                f"{where}: the vectorizer's {key} is {str(vec.get(key))[:60]!r}; this index format fixes it at "
                f"{fixed!r} (the file was edited, or written by another program)"
            )
    n = vec.get("n_features")
    if not isinstance(n, int) or isinstance(n, bool) or not MIN_FEATURES <= n <= MAX_FEATURES:
        raise IndexCorruptError(f"{where}: n_features {str(n)[:40]!r} is not a whole number from 2^10 to 2^30")
    if len(buckets) and int(buckets[-1]) >= n:
        raise IndexCorruptError(f"{where}: n_features {n} is smaller than the index's buckets (up to {buckets[-1]})")
    return {**vec, **ANALYZER_PARAMS}


class TfidfBackend:
    """Cosine between L2-normalised TF-IDF vectors of the query and each passage."""

    name = NAME

    def __init__(self, folder: Path, *, posting_budget: int | None = None):
        self.folder = folder
        self.params = read_params(folder, NAME, FORMAT_VERSION, required=("count", "vectorizer"))
        bits = self.params.get("id_bits")
        if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 32:
            raise IndexCorruptError(f"{folder / PARAMS_FILE}: id_bits {str(bits)[:40]!r} is not a number from 1 to 32")
        self._id_bits = bits
        for name, array in _load_arrays(folder, bits).items():
            setattr(self, name, array)  # buckets, idf, indptr, indices, data: np.memmap
            # A plain ndarray view of the same map for the hot path: memmap's __getitem__ costs more than a lookup.
            setattr(self, f"_{name}", np.asarray(array))
        missing = [f for f in TABLE_FILES if not (folder / f).is_file()]
        if missing:
            raise IndexCorruptError(f"{folder}: missing {', '.join(missing)}")
        self.table = PassageTable(folder)
        for attr in ("page_of", "page_ids", "offsets"):
            setattr(self.table, attr, np.asarray(getattr(self.table, attr)))
        if len(self.table) != self.params["count"]:
            raise IndexCorruptError(f"{folder}: the passage table and params.json count disagree")
        self.posting_budget = POSTING_BUDGET if posting_budget is None else int(posting_budget)
        vec = checked_vectorizer(self.params["vectorizer"], folder, self._buckets)
        self._hasher = postings.hasher(vec)
        self._token_hasher = postings.token_hasher(vec)
        self._sublinear = bool(vec.get("sublinear_tf", True))
        self._local = threading.local()  # one score accumulator per thread
        self._max_idf: float | None = None  # idf_of's score of an unseen term, computed on first use

    def __len__(self) -> int:
        return int(self.params["count"])

    def close(self) -> None:
        """Nothing to release but the memory maps, which go with the last reference."""

    def _term_ids(self, buckets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Term ids of the hash ``buckets`` this index holds, and a mask of those it holds."""
        if not len(self._buckets):
            return np.zeros(len(buckets), dtype=np.int64), np.zeros(len(buckets), dtype=bool)
        # Searched in the table's own dtype: numpy would otherwise cast the whole table (a million entries) per
        # call to a type both fit. Buckets are hash indices, never negative, so the cast keeps their order.
        buckets = np.asarray(buckets).astype(self._buckets.dtype, copy=False)
        pos = np.minimum(np.searchsorted(self._buckets, buckets), len(self._buckets) - 1)
        return pos.astype(np.int64), self._buckets[pos] == buckets

    def _query_vector(self, buckets: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, weights) of one hashed text: sublinear tf x idf, L2-normalised over the held terms."""
        tids, held = self._term_ids(buckets)
        if not held.any():
            return _EMPTY
        tids, tf = tids[held], counts[held].astype(np.float64)
        if self._sublinear:
            tf = 1.0 + np.log(tf)
        w = tf * self._idf[tids]
        order = np.argsort(tids)
        return tids[order], (w[order] / np.sqrt(w @ w)).astype(np.float32)

    def vectorize_many(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`vectorize` of each text (a non-string gets an empty vector)."""
        if not texts:
            return []
        x = self._hasher.transform([t if isinstance(t, str) else "" for t in texts])
        return [self._query_vector(x.indices[a:b], x.data[a:b]) for a, b in zip(x.indptr[:-1], x.indptr[1:])]

    def vectorize(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, weights) of the L2-normalised TF-IDF vector of ``text`` (buckets no passage filled dropped)."""
        return self.vectorize_many([text])[0]

    def _scores(self, tids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Passage ids with a non-zero score and their scores, reading at most ``posting_budget`` postings."""
        ends = self._indptr[tids + 1]
        take = water_fill(ends - self._indptr[tids], self.posting_budget)
        rows_all, weights_all = postings.read_lists(
            self._indices, self._weights, ends, take, self._wlo[tids], self._wstep[tids], self._id_bits
        )
        bounds = np.concatenate([[0], np.cumsum(take)]).tolist()
        lists = (
            (rows_all[a:b], weights_all[a:b], w)
            for a, b, w in zip(bounds[:-1], bounds[1:], weights.tolist())
            if a < b  # the list's high-weight end
        )
        return postings.accumulate(self._local, len(self), lists)

    def _top(self, vector: tuple[np.ndarray, np.ndarray], k: int) -> list[Hit]:
        if not len(vector[0]) or k == 0:
            return []
        ids, scores = self._scores(*vector)
        if len(ids) > k:
            top = np.argpartition(-scores, k - 1)[:k]
            ids, scores = ids[top], scores[top]
        order = np.lexsort((ids, -scores))  # ties by passage id: deterministic
        ids, scores = ids[order], scores[order]
        pages, titles = self.table.pages_and_titles(ids)
        ids, scores = ids.tolist(), scores.tolist()
        return [
            Hit(passage_id=i, page_id=p, score=s, rank=r + 1, channel=NAME, title=t)
            for r, (i, p, s, t) in enumerate(zip(ids, pages, scores, titles))
        ]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        if k < 0:
            raise QueryError(f"k must be >= 0, got {k}")
        if not isinstance(query, str) or k == 0:
            return []
        return self._top(self.vectorize(query), k)

    def search_batch(self, queries: list[str], k: int = 10, *, threads: int | None = None) -> list[list[Hit]]:
        """:meth:`search` of each query, on ``threads`` threads (default ``SEARCH_THREADS``), each with its own
        accumulator; the hits equal those of one search at a time."""
        if k < 0:
            raise QueryError(f"k must be >= 0, got {k}")
        if k == 0 or not queries:
            return [[] for _ in queries]
        return self.search_vectors(self.vectorize_many(queries), k, threads=threads)

    def search_vectors(
        self, vectors: Sequence[tuple[np.ndarray, np.ndarray]], k: int, *, threads: int | None = None
    ) -> list[list[Hit]]:
        """:meth:`search_batch` of queries already vectorized (:meth:`vectorize_many`): for a caller that scores
        the same vectors elsewhere too (the delta part), so that a claim is hashed once."""
        if k <= 0 or not vectors:
            return [[] for _ in vectors]
        threads = min(SEARCH_THREADS if threads is None else threads, len(vectors))
        if threads <= 1:
            return [self._top(v, k) for v in vectors]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads, thread_name_prefix="tfidf") as pool:
            return list(pool.map(lambda v: self._top(v, k), vectors))

    def idf_of(self, terms: Sequence[str]) -> list[float]:
        """The stored idf of each term (a lower-cased word); a term this index never saw counts as the rarest."""
        if self._max_idf is None:
            self._max_idf = float(self.idf.max()) if len(self.idf) else 1.0
        if not terms:
            return []
        tids, held = self._term_ids(self._token_hasher.transform([[t] for t in terms]).indices)
        return [float(self._idf[t]) if h else self._max_idf for t, h in zip(tids.tolist(), held.tolist())]

    def score_texts(self, query: str, texts: list[str]) -> list[float]:
        """Cosine of TF-IDF vectors (this index's hashing and idf) between the query and each text."""
        if not texts:
            return []
        qc, qw = self.vectorize(query) if isinstance(query, str) else _EMPTY
        if not len(qc):
            return [0.0] * len(texts)
        out = []
        for tc, tw in self.vectorize_many(texts):
            _, qi, ti = np.intersect1d(qc, tc, assume_unique=True, return_indices=True)
            out.append(float(qw[qi] @ tw[ti]))
        return out
