"""Dense retrieval: MiniLM passage embeddings, exact or FAISS IVF-SQ8 with exact re-ranking.

Folder layout (``out_dir``): ``vectors.npy`` (float32 N x 384, L2-normalised, row = passage id),
the passage table files (see passage_table.py), ``ivf_sq8.faiss`` when the corpus has at least
``exact_threshold`` passages, and ``params.json`` (written last: its presence marks a complete
index). While building, ``shards/`` holds the resumable embedding shards (indexer/embed.py).

Exact search is a matrix product over the memory-mapped ``vectors.npy``: numpy's BLAS beats FAISS
IndexFlatIP there, whose wheel runs generic kernels; FAISS is only imported for the approximate index.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np

from backends.passage_table import FILES as TABLE_FILES
from backends.passage_table import PassageTable, connect
from backends.passage_table import write as write_table
from wikiground.errors import BuildError, IndexCorruptError, QueryError
from wikiground.layout import PARAMS_FILE, atomic_path, atomic_write_json, channel_folder, read_params
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
VECTORS_FILE = "vectors.npy"
IVF_FILE = "ivf_sq8.faiss"
SHARDS_DIR = "shards"


def default_nlist(n: int) -> int:
    """IVF lists: ~4 sqrt(N), with at least 39 training points per centroid (FAISS's minimum)."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def _build_ivf(vectors: np.ndarray, target: Path, *, nlist: int, threads: int | None, seed: int = 1234) -> None:
    import faiss

    if threads:
        faiss.omp_set_num_threads(threads)
    n, dim = vectors.shape
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
    )
    # k-means needs only ~256 points per centroid; a fixed-seed sample keeps training cheap and deterministic.
    sample = min(n, 256 * nlist)
    rows = np.sort(np.random.default_rng(seed).choice(n, size=sample, replace=False)) if sample < n else np.arange(n)
    index.train(np.ascontiguousarray(vectors[rows]))
    step = 65_536
    for a in range(0, n, step):
        index.add(np.ascontiguousarray(vectors[a : a + step]))
    with atomic_path(target) as tmp:
        faiss.write_index(index, tmp)


def assemble(
    db_path: Path,
    out_dir: Path,
    *,
    exact_threshold: int = EXACT_THRESHOLD,
    nprobe: int = NPROBE,
    nlist: int | None = None,
    threads: int | None = None,
    keep_shards: bool = True,
    encoder_backend: str | None = None,
    extra: dict | None = None,
    shards_dir: Path | None = None,
) -> dict:
    """Shards under ``out_dir/shards`` (or ``shards_dir``) -> vectors.npy (+ IVF above the threshold) + params.json."""
    from backends.dense.embed import concatenate
    from backends.encoder import DIM, model_info

    db_path, out_dir = Path(db_path), Path(out_dir)
    t0 = time.perf_counter()
    con = connect(db_path)
    try:
        n = write_table(con, db_path, out_dir)
    finally:
        con.close()
    shards = Path(shards_dir) if shards_dir is not None else out_dir / SHARDS_DIR
    concatenate(shards, out_dir / VECTORS_FILE, n, dim=DIM)
    approximate = n >= exact_threshold and n > 0
    params = {
        "type": NAME,
        "format_version": FORMAT_VERSION,
        "count": n,
        "metric": "inner_product",
        "exact_threshold": exact_threshold,
        "index_type": "ivf_sq8+rerank" if approximate else "exact",
        "exact_engine": "numpy matmul over mmap vectors.npy",
        **model_info(encoder_backend or "unknown"),
    }
    if approximate:
        nl = nlist or default_nlist(n)
        _build_ivf(np.load(out_dir / VECTORS_FILE, mmap_mode="r"), out_dir / IVF_FILE, nlist=nl, threads=threads)
        import faiss

        params.update(
            {"nlist": nl, "nprobe": nprobe, "rerank_factor": RERANK_FACTOR, "faiss_version": faiss.__version__}
        )
    else:
        (out_dir / IVF_FILE).unlink(missing_ok=True)
    params["assemble_seconds"] = round(time.perf_counter() - t0, 2)
    params.update(extra or {})
    atomic_write_json(out_dir / PARAMS_FILE, params, sort_keys=True)
    if not keep_shards and shards_dir is None:
        shutil.rmtree(shards, ignore_errors=True)
    return params


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
    nprobe: int = NPROBE,
    nlist: int | None = None,
    keep_shards: bool = False,
    shards_dir: Path | None = None,
) -> dict:
    """Embed every passage of the store (resumable shards in ``out_dir/shards``) and write the index.

    ``shards_dir``: keep the shards elsewhere (the index build puts them beside the index folder, so that
    a failed or interrupted build resumes where it stopped); they are left in place for the caller.
    """
    from backends.dense.embed import SHARD_SIZE, embed_range

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PARAMS_FILE).unlink(missing_ok=True)  # an index being rebuilt is not complete
    try:
        shards = Path(shards_dir) if shards_dir is not None else out_dir / SHARDS_DIR
        stats = embed_range(
            db_path,
            shards,
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
            extra={"encode_seconds": stats["encode_seconds"], "passages_per_s": stats["passages_per_s"]},
        )
    except OSError as exc:
        raise BuildError(f"{out_dir}: dense build failed: {exc}") from exc
    return _manifest_entry(params, seconds=time.perf_counter() - t0)


def _manifest_entry(params: dict, *, seconds: float) -> dict:
    engine = "faiss IVF-SQ8" if params["index_type"] != "exact" else "exact numpy"
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
    """Open a built dense index folder (or an index folder holding ``dense/``)."""
    return DenseBackend(channel_folder(index_dir, NAME), encoder_backend=encoder_backend, threads=threads)


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
        if self.vectors.shape[0] != self.params["count"] or len(self.table) != self.params["count"]:
            raise IndexCorruptError(f"{folder}: vectors.npy / passage table do not match count {self.params['count']}")
        self.ivf = None
        if self.params["index_type"] != "exact":
            import faiss

            path = folder / IVF_FILE
            if not path.is_file():
                raise IndexCorruptError(f"{path}: missing")
            # MMAP_IFC maps flat code arrays instead of copying them; READ_ONLY as nothing is added at query time.
            self.ivf = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
            faiss.extract_index_ivf(self.ivf).nprobe = int(self.params.get("nprobe", NPROBE))
        self._encoder = None
        self._encoder_backend = encoder_backend
        self._threads = threads

    @property
    def encoder(self):
        if self._encoder is None:
            from backends.encoder import load_encoder

            self._encoder = load_encoder(backend=self._encoder_backend, threads=self._threads)
        return self._encoder

    def __len__(self) -> int:
        return int(self.params["count"])

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        if k < 0:
            raise QueryError(f"k must be >= 0, got {k}")
        results: list[list[Hit]] = [[] for _ in queries]
        live = [i for i, q in enumerate(queries) if isinstance(q, str) and words(q)]
        if not live or k == 0 or len(self) == 0:
            return results
        q = self.encoder.encode([queries[i] for i in live])
        kk = min(k, len(self))
        ids, scores = self._approximate(q, kk) if self.ivf is not None else self._exact(q, kk)
        for row, i in enumerate(live):
            results[i] = [
                Hit(
                    passage_id=int(pid),
                    page_id=self.table.page_id(int(pid)),
                    score=float(s),
                    rank=r + 1,
                    channel=NAME,
                    title=self.table.title(int(pid)),
                )
                for r, (pid, s) in enumerate(zip(ids[row], scores[row]))
                if pid >= 0
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
        cand_k = min(len(self), max(k * int(self.params.get("rerank_factor", RERANK_FACTOR)), MIN_CANDIDATES))
        _, cands = self.ivf.search(np.ascontiguousarray(q, dtype=np.float32), cand_k)
        ids = np.full((len(q), k), -1, dtype=np.int64)
        scores = np.zeros((len(q), k), dtype=np.float32)
        for row in range(len(q)):
            c = np.unique(cands[row][cands[row] >= 0])  # sorted ids: sequential reads of the mmap
            if not len(c):
                continue
            exact = self.vectors[c] @ q[row]
            order = np.lexsort((c, -exact))[:k]
            ids[row, : len(order)] = c[order]
            scores[row, : len(order)] = exact[order]
        return ids, scores

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
