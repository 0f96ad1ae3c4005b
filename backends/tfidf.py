"""TF-IDF retrieval (scikit-learn, word uni+bigrams, sublinear tf) stored as plain files.

Folder layout (``out_dir``): ``matrix.npz`` (scipy sparse, CSC, float32, L2-normalised rows;
row = passage id), ``vocabulary.json`` (term -> column), ``idf.npy``, the passage table
files (see passage_table.py) and ``params.json`` (written last). No pickle.

Queries are vectorised with the same scikit-learn analyzer and the stored idf, then scored
by gathering only the query terms' columns (CSC): no dense N-vector, no densified matrix.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from backends.passage_table import FILES as TABLE_FILES
from backends.passage_table import PassageTable, connect, passage_count, save_npy
from backends.passage_table import write as write_table
from wikiground.errors import BuildError, IndexCorruptError, QueryError
from wikiground.layout import PARAMS_FILE, atomic_path, atomic_write_json, channel_folder, read_params
from wikiground.records import Hit

log = logging.getLogger(__name__)

NAME = "tfidf"
FORMAT_VERSION = 1
MIN_DF_LARGE_CORPUS = 100_000  # from this many passages, bigrams seen once are dropped (min_df=2)
BATCH_ROWS = 20_000
# The vectorizer's settings; the query side rebuilds its analyzer from these.
ANALYZER_PARAMS = {
    "lowercase": True,
    "strip_accents": "unicode",
    "ngram_range": [1, 2],
    "token_pattern": r"(?u)\b\w\w+\b",
    "analyzer": "word",
}


def _analyzer(params: dict):
    from sklearn.feature_extraction.text import TfidfVectorizer

    p = dict(params)
    p["ngram_range"] = tuple(p["ngram_range"])
    return TfidfVectorizer(**p).build_analyzer()


def _documents(con, db_path: Path):
    from backends.encoder import passage_text

    reader = con.sql("SELECT passage_id, title, heading_path, text FROM passages ORDER BY passage_id").to_arrow_reader(
        BATCH_ROWS
    )
    expect = 0
    for batch in reader:
        ids = batch.column(0).to_numpy()
        if len(ids) and (ids[0] != expect or ids[-1] != expect + len(ids) - 1):
            raise BuildError(f"{db_path}: passage ids are not dense near {expect}")
        expect += len(ids)
        for title, heading, text in zip(
            batch.column(1).to_pylist(), batch.column(2).to_pylist(), batch.column(3).to_pylist()
        ):
            yield passage_text(title, heading, text)


def _save_npz(path: Path, matrix) -> None:
    import scipy.sparse

    with atomic_path(path, suffix=".part.npz") as tmp:  # save_npz appends .npz to names lacking it
        scipy.sparse.save_npz(tmp, matrix, compressed=False)


def build(
    db_path: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    min_df: int | None = None,
    max_df: float = 1.0,
    max_features: int | None = None,
) -> dict:
    """Fit TF-IDF over every passage (title-prefixed, like the dense index) and write the folder.

    ``min_df`` defaults to 1 below ``MIN_DF_LARGE_CORPUS`` passages and 2 above, where
    once-seen bigrams would dominate the vocabulary.
    """
    t0 = time.perf_counter()
    db_path, out_dir = Path(db_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARAMS_FILE).unlink(missing_ok=True)
    con = connect(db_path)
    try:
        n = passage_count(con, db_path)
        if min_df is None:
            min_df = 1 if n < MIN_DF_LARGE_CORPUS else 2
        params = dict(
            ANALYZER_PARAMS,
            sublinear_tf=True,
            norm="l2",
            min_df=min_df,
            max_df=max_df,
            max_features=max_features,
            dtype="float32",
        )
        matrix, vocab, idf = _fit(con, db_path, n, params, progress=progress)
        write_table(con, db_path, out_dir)
    finally:
        con.close()
    meta = _save(out_dir, matrix, vocab, idf, count=n, params=params, seconds=time.perf_counter() - t0)
    return {
        "type": NAME,
        "engine": f"scikit-learn {meta['sklearn_version']} TfidfVectorizer",
        "params": meta,
        "documents": n,
        "build_seconds": meta["build_seconds"],
    }


def _fit(con, db_path: Path, n: int, params: dict, *, progress: bool):
    """The passage matrix (CSC, float32), the vocabulary (term -> column) and the idf of ``n`` passages."""
    import scipy.sparse
    from sklearn.feature_extraction.text import TfidfVectorizer
    from tqdm import tqdm

    if not n:
        return scipy.sparse.csc_matrix((0, 0), dtype=np.float32), {}, np.zeros(0, dtype=np.float32)
    vec = TfidfVectorizer(**{**params, "ngram_range": tuple(params["ngram_range"]), "dtype": np.float32})
    docs = tqdm(_documents(con, db_path), total=n, unit="passage", desc="tfidf", disable=not progress)
    try:
        matrix = vec.fit_transform(docs)
    except ValueError as exc:  # e.g. "empty vocabulary": every passage is stop words / punctuation
        raise BuildError(f"{db_path}: TF-IDF fit failed: {exc}") from exc
    vocab = {term: int(col) for term, col in vec.vocabulary_.items()}
    return matrix.tocsc().astype(np.float32), vocab, vec.idf_.astype(np.float32)


def _save(out_dir: Path, matrix, vocab: dict, idf, *, count: int, params: dict, seconds: float) -> dict:
    """Write the matrix, vocabulary and idf, then ``params.json`` last; returns the params."""
    import sklearn

    _save_npz(out_dir / "matrix.npz", matrix)
    atomic_write_json(out_dir / "vocabulary.json", vocab, sort_keys=True)
    save_npy(out_dir / "idf.npy", idf)
    meta = {
        "type": NAME,
        "format_version": FORMAT_VERSION,
        "count": count,
        "vocabulary_size": len(vocab),
        "nnz": int(matrix.nnz),
        "layout": "csc",
        "sklearn_version": sklearn.__version__,
        "vectorizer": params,
        "build_seconds": round(seconds, 2),
    }
    atomic_write_json(out_dir / PARAMS_FILE, meta, sort_keys=True)
    return meta


def load(index_dir: Path) -> TfidfBackend:
    """Open a built TF-IDF folder (or an index folder holding ``tfidf/``)."""
    return TfidfBackend(channel_folder(index_dir, NAME))


class TfidfBackend:
    """Cosine between L2-normalised TF-IDF vectors of the query and each passage."""

    name = NAME

    def __init__(self, folder: Path):
        import scipy.sparse

        self.folder = folder
        self.params = read_params(folder, NAME, FORMAT_VERSION)
        try:
            with open(folder / "vocabulary.json", encoding="utf-8") as f:
                self.vocabulary: dict[str, int] = json.load(f)
            self.idf = np.load(folder / "idf.npy", allow_pickle=False)
            self.matrix = scipy.sparse.load_npz(folder / "matrix.npz").tocsc()
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"{folder}: TF-IDF index unreadable: {exc}") from exc
        missing = [f for f in TABLE_FILES if not (folder / f).is_file()]
        if missing:
            raise IndexCorruptError(f"{folder}: missing {', '.join(missing)}")
        self.table = PassageTable(folder)
        n = self.params["count"]
        if self.matrix.shape[0] != n or len(self.table) != n or len(self.idf) != len(self.vocabulary):
            raise IndexCorruptError(f"{folder}: matrix / idf / vocabulary / passage table sizes disagree")
        self._analyze = _analyzer(self.params["vectorizer"]) if n else (lambda text: [])
        self._sublinear = bool(self.params["vectorizer"].get("sublinear_tf", True))
        self._max_idf: float | None = None  # idf_of's score of an unseen term, computed on first use

    def __len__(self) -> int:
        return int(self.params["count"])

    def vectorize(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(columns, weights) of the L2-normalised TF-IDF vector of ``text`` (terms outside the vocabulary dropped)."""
        counts = Counter(t for t in self._analyze(text) if t in self.vocabulary)
        if not counts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        cols = np.fromiter((self.vocabulary[t] for t in counts), dtype=np.int64, count=len(counts))
        tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        if self._sublinear:
            tf = 1.0 + np.log(tf)
        w = tf * self.idf[cols]
        norm = math.sqrt(float(w @ w))
        order = np.argsort(cols)
        return cols[order], (w[order] / norm).astype(np.float32)

    def _scores(self, cols: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Passage ids with a non-zero score and their scores, from the query terms' columns only."""
        m = self.matrix
        starts, ends = m.indptr[cols], m.indptr[cols + 1]
        lengths = ends - starts
        if not lengths.sum():
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        rows = np.concatenate([m.indices[a:b] for a, b in zip(starts, ends)])
        vals = np.concatenate([m.data[a:b] for a, b in zip(starts, ends)]) * np.repeat(weights, lengths)
        ids, inverse = np.unique(rows, return_inverse=True)
        return ids.astype(np.int64), np.bincount(inverse, weights=vals).astype(np.float32)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        if k < 0:
            raise QueryError(f"k must be >= 0, got {k}")
        if not isinstance(query, str) or k == 0:
            return []
        cols, weights = self.vectorize(query)
        if not len(cols):
            return []
        ids, scores = self._scores(cols, weights)
        if len(ids) > k:
            top = np.argpartition(-scores, k - 1)[:k]
            ids, scores = ids[top], scores[top]
        order = np.lexsort((ids, -scores))  # ties by passage id: deterministic
        return [
            Hit(
                passage_id=int(ids[i]),
                page_id=self.table.page_id(int(ids[i])),
                score=float(scores[i]),
                rank=r + 1,
                channel=NAME,
                title=self.table.title(int(ids[i])),
            )
            for r, i in enumerate(order)
        ]

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]

    def idf_of(self, terms: Sequence[str]) -> list[float]:
        """The stored idf of each term (a lower-cased word); a term this index never saw counts as the rarest."""
        if self._max_idf is None:
            self._max_idf = float(self.idf.max()) if len(self.idf) else 1.0
        return [float(self.idf[c]) if (c := self.vocabulary.get(t)) is not None else self._max_idf for t in terms]

    def score_texts(self, query: str, texts: list[str]) -> list[float]:
        """Cosine of TF-IDF vectors (this index's vocabulary and idf) between the query and each text."""
        if not texts:
            return []
        qc, qw = self.vectorize(query) if isinstance(query, str) else (np.zeros(0, np.int64), None)
        if not len(qc):
            return [0.0] * len(texts)
        out = []
        for text in texts:
            tc, tw = self.vectorize(text) if isinstance(text, str) else (np.zeros(0, np.int64), None)
            if not len(tc):
                out.append(0.0)
                continue
            _, qi, ti = np.intersect1d(qc, tc, assume_unique=True, return_indices=True)
            out.append(float(qw[qi] @ tw[ti]))
        return out
