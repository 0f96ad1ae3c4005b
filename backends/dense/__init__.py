"""Dense retrieval: MiniLM passage embeddings, exact or FAISS IVF (4-bit PQ fast-scan) with exact re-ranking.

Folder layout (``out_dir``): ``vectors.npy`` (float32 N x 384, L2-normalised, row = passage id),
the passage table files (see passage_table.py), ``ivf_pq4fs.faiss`` and its lists ``ivf_pq4fs.lists``
(backends/dense/ivf.py) when the corpus has at least ``exact_threshold`` passages, and ``params.json``
(written last: its presence marks a complete index). While building, ``shards/`` holds the resumable
embedding shards (indexer/embed.py).

Exact search is a matrix product over the memory-mapped ``vectors.npy``: numpy's BLAS beats FAISS
IndexFlatIP there, whose wheel runs generic kernels; FAISS is only imported for the approximate index.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from backends.dense import blas
from backends.passage_table import FILES as TABLE_FILES
from backends.passage_table import PassageTable, connect
from backends.passage_table import write as write_table
from wikiground.errors import BuildError, IndexCorruptError, QueryError
from wikiground.layout import PARAMS_FILE, atomic_write_json, channel_folder, read_params, save_npy
from wikiground.records import Hit
from wikiground.text import words

log = logging.getLogger(__name__)

NAME = "dense"
FORMAT_VERSION = 1
EXACT_THRESHOLD = 1_000_000
NPROBE = 32
RERANK_FACTOR = 10  # approximate path: candidates = k * RERANK_FACTOR, re-scored exactly
MIN_CANDIDATES = 100
SCORE_BLOCK_ROWS = 262_144  # bounds the (rows x queries) score block in memory
# The query encoder's threads. A claim is a few dozen tokens, and the retriever already searches its channels side by
# side: a second encoder thread only took a core from Lucene and TF-IDF (the loaded server answered more claims a
# second with one, and idle ones as fast; benchmarks/RESULTS.md). Builds embed passages with every core.
QUERY_THREADS = 1
VECTORS_FILE = "vectors.npy"
SHARDS_DIR = "shards"
IDS_FILE = "ids.npy"  # scope "leads": the passage id of each row of vectors.npy


def default_nlist(n: int) -> int:
    """IVF lists: ~4 sqrt(N), with at least 39 training points per centroid (FAISS's minimum)."""
    from backends.dense import ivf

    return ivf.default_nlist(n)


def read_tune_queries(path: Path) -> list[str]:
    """The texts of a queries file for tuning ``nprobe``: JSON lines with ``claim``, ``query``, ``question`` or
    ``text`` (the ``--queries`` files of ``retriever.query``), or plain lines."""
    import json

    texts: list[str] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BuildError(f"{path}: cannot read the tuning queries: {exc}") from exc
    for no, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BuildError(f"{path}:{no}: not JSON: {exc.msg}") from exc
            text = next(
                (rec[key] for key in ("claim", "query", "question", "text") if isinstance(rec.get(key), str)), None
            )
            if text is None:
                raise BuildError(f"{path}:{no}: no claim, query, question or text")
            line = text
        texts.append(line)
    if not texts:
        raise BuildError(f"{path}: no tuning queries")
    return texts


def _build_ivf(
    out_dir: Path,
    *,
    nlist: int | None,
    nprobe: int | None,
    threads: int | None,
    tune_queries: Path | None = None,
    encoder_backend: str | None = None,
) -> dict:
    """The IVF index over ``out_dir/vectors.npy`` (backends/dense/ivf.py); returns its params.json entries.
    ``nprobe`` is chosen on the encoded ``tune_queries`` when given, else on held-out rows."""
    from backends.dense import ivf

    vectors = None
    if tune_queries is not None:
        from backends.encoder import load_encoder

        texts = read_tune_queries(tune_queries)
        vectors = load_encoder(backend=encoder_backend or "auto", threads=threads).encode(texts)
    params = ivf.build(
        out_dir / VECTORS_FILE, out_dir, nlist=nlist, nprobe=nprobe, threads=threads, tune_queries=vectors
    )
    _remove_ivf(out_dir, keep=(params["ivf_file"], params["lists_file"]))
    return params


def _remove_ivf(out_dir: Path, keep: tuple[str, ...] = ()) -> None:
    from backends.dense import ivf

    for name in set(ivf.ALL_FILES) - set(keep):
        (out_dir / name).unlink(missing_ok=True)


def assemble(
    db_path: Path,
    out_dir: Path,
    *,
    exact_threshold: int = EXACT_THRESHOLD,
    nprobe: int | None = None,
    nlist: int | None = None,
    threads: int | None = None,
    keep_shards: bool = True,
    encoder_backend: str | None = None,
    extra: dict | None = None,
    shards_dir: Path | None = None,
    scope: str = "all",
    tune_queries: Path | None = None,
) -> dict:
    """Shards under ``out_dir/shards`` (or ``shards_dir``) -> vectors.npy (+ IVF above the threshold) + params.json.

    ``scope`` "leads": the shards hold lead passages only (``shards/leads``); ``ids.npy`` maps row -> passage id.
    ``tune_queries``: a file of queries of the kind the index will serve, to choose the IVF's ``nprobe`` on.
    """
    from backends.encoder import model_info

    db_path, out_dir = Path(db_path), Path(out_dir)
    t0 = time.perf_counter()
    shards = Path(shards_dir) if shards_dir is not None else out_dir / SHARDS_DIR
    n, passages, scope = _write_vectors(db_path, out_dir, shards, scope)
    approximate = n >= exact_threshold and n > 0
    params = {
        "type": NAME,
        "format_version": FORMAT_VERSION,
        "count": n,
        "passages": passages,
        "scope": scope,
        "metric": "inner_product",
        "exact_threshold": exact_threshold,
        "index_type": "exact",  # the IVF build sets its own
        "exact_engine": "numpy matmul over mmap vectors.npy",
        **model_info(encoder_backend or "unknown"),
    }
    if approximate:
        params.update(
            _build_ivf(
                out_dir,
                nlist=nlist,
                nprobe=nprobe,
                threads=threads,
                tune_queries=tune_queries,
                encoder_backend=encoder_backend,
            )
        )
    else:
        _remove_ivf(out_dir)
    params["assemble_seconds"] = round(time.perf_counter() - t0, 2)
    params.update(extra or {})
    atomic_write_json(out_dir / PARAMS_FILE, params, sort_keys=True)
    if not keep_shards and shards_dir is None:
        shutil.rmtree(shards, ignore_errors=True)
    return params


def _write_vectors(db_path: Path, out_dir: Path, shards: Path, scope: str) -> tuple[int, int, str]:
    """The passage table, vectors.npy and (scope leads) ids.npy; returns (vectors, passages, scope resolved)."""
    from backends.dense.embed import concatenate, resolve_scope, scope_rows, scope_shards_dir
    from backends.encoder import DIM

    con = connect(db_path)
    try:
        passages = write_table(con, db_path, out_dir)
        scope = resolve_scope(scope, passages)
        rows = scope_rows(con, scope)
    finally:
        con.close()
    n = passages if rows is None else len(rows)
    concatenate(scope_shards_dir(shards, scope), out_dir / VECTORS_FILE, n, dim=DIM)
    if rows is None:
        (out_dir / IDS_FILE).unlink(missing_ok=True)
    else:
        save_npy(out_dir / IDS_FILE, rows)
    return n, passages, scope


def build(
    db_path: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    exact_threshold: int = EXACT_THRESHOLD,
    shard_size: int | None = None,
    encoder_backend: str = "auto",
    threads: int | None = None,
    batch_size: int = 32,
    nprobe: int | None = None,
    nlist: int | None = None,
    keep_shards: bool = False,
    shards_dir: Path | None = None,
    scope: str = "auto",
    tune_queries: Path | None = None,
) -> dict:
    """Embed every passage of the store (resumable shards in ``out_dir/shards``) and write the index.

    ``shards_dir``: keep the shards elsewhere (the index build puts them beside the index folder, so that
    a failed or interrupted build resumes where it stopped); they are left in place for the caller.
    ``scope``: "all", "leads" (each page's lead passage only) or "auto" (leads above LEADS_THRESHOLD passages).
    """
    from backends.dense.embed import SHARD_SIZE, embed_range, plan_scope, scope_shards_dir

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARAMS_FILE).unlink(missing_ok=True)  # an index being rebuilt is not complete
    try:
        shards = Path(shards_dir) if shards_dir is not None else out_dir / SHARDS_DIR
        scope, rows, _ = plan_scope(db_path, scope)
        stats = embed_range(
            db_path,
            scope_shards_dir(shards, scope),
            ids=rows,
            shard_size=shard_size or SHARD_SIZE,
            backend=encoder_backend,
            threads=threads,
            batch_size=batch_size,
            progress=progress,
        )
        params = assemble(
            db_path,
            out_dir,
            exact_threshold=exact_threshold,
            nprobe=nprobe,
            nlist=nlist,
            threads=threads,
            keep_shards=keep_shards,
            encoder_backend=stats["encoder_backend"],
            shards_dir=shards_dir,
            scope=scope,
            tune_queries=tune_queries,
            extra={"encode_seconds": stats["encode_seconds"], "passages_per_s": stats["passages_per_s"]},
        )
        prepare_queries(stats["encoder_backend"])
    except OSError as exc:
        raise BuildError(f"{out_dir}: dense build failed: {exc}") from exc
    return manifest_entry(params, seconds=time.perf_counter() - t0)


def prepare_queries(encoder_backend: str | None) -> None:
    """Export the graph the queries of an ONNX-built index run on, so that the first query does not."""
    if encoder_backend == "onnx":
        from backends.encoder import prepare_query_graph

        prepare_query_graph()


def manifest_entry(params: dict, *, seconds: float) -> dict:
    engine = "exact numpy" if params["index_type"] == "exact" else "faiss IVF-PQ fast-scan"
    return {
        "type": NAME,
        "engine": f"{params['model']} ({params['encoder_backend']}) + {engine}",
        "model": params["model"],
        "model_version": f"{params['package']}=={params['package_version']}",
        "params": params,
        "documents": params["count"],
        "build_seconds": round(seconds, 2),
    }


def load(index_dir: Path, *, encoder_backend: str = "auto", threads: int | None = None) -> DenseBackend:
    """Open a built dense index folder (or an index folder holding ``dense/``); ``threads``: the query encoder's
    (default ``QUERY_THREADS``)."""
    return DenseBackend(channel_folder(index_dir, NAME), encoder_backend=encoder_backend, threads=threads)


def _row_ids(folder: Path, params: dict) -> np.ndarray | None:
    """ids.npy of a scope-"leads" index (row -> passage id), checked against the vector count."""
    if params.get("scope", "all") != "leads":
        return None
    try:
        rows = np.load(folder / IDS_FILE, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(f"{folder / IDS_FILE}: unreadable: {exc}") from exc
    if rows.shape != (params["count"],):
        raise IndexCorruptError(f"{folder / IDS_FILE}: {rows.shape[0]} ids for {params['count']} vectors")
    return rows


class DenseBackend:
    """Cosine search over MiniLM embeddings; the encoder loads on the first query."""

    name = NAME

    def __init__(self, folder: Path, *, encoder_backend: str = "auto", threads: int | None = None):
        self.folder = folder
        self.params = read_params(folder, NAME, FORMAT_VERSION)
        missing = [f for f in (VECTORS_FILE, *TABLE_FILES) if not (folder / f).is_file()]
        if missing:
            raise IndexCorruptError(f"{folder}: missing {', '.join(missing)}")
        try:
            self.vectors = np.load(folder / VECTORS_FILE, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"{folder / VECTORS_FILE}: unreadable: {exc}") from exc
        self.table = PassageTable(folder)
        self.rows = _row_ids(folder, self.params)  # None: row = passage id
        if self.vectors.shape[0] != self.params["count"] or len(self.table) != self.params.get(
            "passages", self.params["count"]
        ):
            raise IndexCorruptError(f"{folder}: vectors.npy / passage table do not match count {self.params['count']}")
        self.ivf = None
        if self.params["index_type"] != "exact":
            from backends.dense import ivf

            self.ivf = ivf.load(folder, self.params)  # memory-mapped inverted lists
            self._rerank_rows = ivf.RowReader(folder / VECTORS_FILE)  # pread: re-ranking adds nothing to RSS
        self._encoder = None
        self._encoder_backend = encoder_backend
        self._threads = threads
        blas.limit_threads()  # see blas.py: BLAS's helper threads slow the channels searching beside this one

    @property
    def encoder(self):
        if self._encoder is None:
            from backends.encoder import load_encoder

            self._encoder = load_encoder(
                backend=self._encoder_backend, threads=self._threads or QUERY_THREADS, queries=True
            )
        return self._encoder

    def __len__(self) -> int:
        return int(self.params["count"])

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        if k < 0:
            raise QueryError(f"k must be >= 0, got {k}")
        results: list[list[Hit]] = [[] for _ in queries]
        live = self.searchable(queries)
        if not live or k == 0 or len(self) == 0:
            return results
        return self.search_encoded(queries, self.encoder.encode_queries([queries[i] for i in live]), k)

    @staticmethod
    def searchable(queries: Sequence[str]) -> list[int]:
        """Positions of the queries that have words to encode (the others have no hits)."""
        return [i for i, q in enumerate(queries) if isinstance(q, str) and words(q)]

    def search_encoded(self, queries: Sequence[str], q: np.ndarray, k: int) -> list[list[Hit]]:
        """:meth:`search_batch` with the query vectors given: ``q`` holds those of :meth:`searchable` ``queries``
        (the delta part scores its passages against the same vectors)."""
        results: list[list[Hit]] = [[] for _ in queries]
        live = self.searchable(queries)
        if not live or k <= 0 or len(self) == 0:
            return results
        kk = min(k, len(self))
        ids, scores = self._approximate(q, kk) if self.ivf is not None else self._exact(q, kk)
        if self.rows is not None:  # scope leads: rows of vectors.npy -> passage ids
            ids = np.where(ids >= 0, self.rows[np.clip(ids, 0, None)], -1)
        for row, i in enumerate(live):
            keep = ids[row] >= 0
            found = ids[row][keep]
            pages, titles = self.table.pages_and_titles(found)
            pids, sims = found.tolist(), scores[row][keep].tolist()
            results[i] = [
                Hit(passage_id=pid, page_id=page, score=s, rank=r + 1, channel=NAME, title=title)
                for r, (pid, page, s, title) in enumerate(zip(pids, pages, sims, titles))
            ]
        return results

    def _exact(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        best_ids = np.empty((len(q), 0), dtype=np.int64)
        best = np.empty((len(q), 0), dtype=np.float32)
        for a in range(0, len(self), SCORE_BLOCK_ROWS):
            block = (self.vectors[a : a + SCORE_BLOCK_ROWS] @ q.T).T  # (queries, rows)
            kb = min(k, block.shape[1])
            part = np.argpartition(-block, kb - 1, axis=1)[:, :kb]
            best_ids = np.concatenate([best_ids, part + a], axis=1)
            best = np.concatenate([best, np.take_along_axis(block, part, axis=1)], axis=1)
        # Ties broken by passage id, so results are deterministic.
        order = np.lexsort((best_ids, -best), axis=1)[:, :k]
        return np.take_along_axis(best_ids, order, axis=1), np.take_along_axis(best, order, axis=1)

    def _approximate(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        from backends.dense import ivf

        factor = int(self.params.get("rerank_factor", RERANK_FACTOR))
        return ivf.search(self.ivf, self._rerank_rows, q, k, rerank_factor=factor)

    def score_texts(self, query: str, texts: list[str]) -> list[float]:
        """Cosine between the query and each text (0.0 for an empty query or text)."""
        if not texts:
            return []
        if not isinstance(query, str) or not words(query):
            return [0.0] * len(texts)
        keep = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
        out = [0.0] * len(texts)
        if keep:
            vecs = self.encoder.encode([query] + [texts[i] for i in keep])
            sims = vecs[1:] @ vecs[0]
            for i, s in zip(keep, sims):
                out[i] = float(s)
        return out
