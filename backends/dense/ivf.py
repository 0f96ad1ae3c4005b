"""Approximate dense search for large corpora: FAISS IVF-PQ, memory-mapped, with exact re-ranking.

Sizing (dim 384, the defaults): each vector costs ``PQ_M`` = 64 bytes of PQ code plus an 8-byte id in the
inverted lists, 72 bytes in all, against 384 + 8 for IVF-SQ8 and 1,536 for the float32 rows. At 40M vectors
that is 2.9 GB of lists, plus 39 MB of coarse centroids (nlist = 4 sqrt(N) ~ 25k) and 0.4 MB of PQ
codebooks: :func:`estimate` gives the figures for any N. The lists are memory-mapped (``IO_FLAG_MMAP``):
only the lists a query probes are read, and the resident set is bounded by the index file.

Re-ranking: the PQ candidates (``rerank_factor`` x k, at least ``MIN_CANDIDATES``) are re-scored with the
exact float32 rows of ``vectors.npy``. Those rows are read with ``pread`` (:class:`RowReader`), not through a
memory map: a mapping would add every touched page to the process's RSS, up to the whole 61 GB file at 40M,
whereas ``pread`` copies ~150 KB a query through the page cache, which the kernel reclaims as it needs. The
file is flagged ``POSIX_FADV_RANDOM`` so that read-ahead does not pull in neighbouring rows.

``nprobe`` is chosen at build time: the smallest of :data:`NPROBE_LADDER` whose recall@10 against exact search
(same re-ranking as the query path) reaches :data:`RECALL_TARGET`, measured on held-out rows (not in the
training sample) used as queries, each row's own id excluded from both result lists, or on query vectors the
caller gives (``tune_queries``: encoded queries of the kind the index serves). It is stored in ``params.json``
with the recall it reached and the queries it was measured on.

Indexes built before IVF-PQ (``index_type`` "ivf_sq8+rerank", file ``ivf_sq8.faiss``) load and search the
same way. faiss is imported lazily: ``import backends.dense`` stays light.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
import weakref
from pathlib import Path

import numpy as np

from wikiground.errors import BuildError, IndexCorruptError
from wikiground.layout import atomic_path

log = logging.getLogger(__name__)

INDEX_TYPE = "ivf_pq+rerank"
IVF_PQ_FILE = "ivf_pq.faiss"
INDEX_FILES = {INDEX_TYPE: IVF_PQ_FILE, "ivf_sq8+rerank": "ivf_sq8.faiss"}
PQ_M = 64  # bytes of code per vector; must divide the dimension
PQ_BITS = 8
ID_BYTES = 8  # FAISS stores an int64 id beside each code
TRAIN_PER_LIST = 64  # coarse k-means sample: FAISS needs >= 39 points per centroid
# PQ codebooks: 256 centroids in each 6-dim subspace. FAISS's k-means is slow at such small dimensions
# (its default 256 points per centroid and 25 iterations take minutes for 64 subspaces); this sample and
# iteration count keep it under a minute, and re-ranking absorbs the small loss in code quality.
PQ_TRAIN_PER_CENTROID = 64
PQ_TRAIN_ITER = 10
# PQ codes of 64 bytes misorder close neighbours: re-scoring 30k candidates exactly (300 rows for k = 10, ~450 KB
# read) kept recall@10 0.95 at 1M vectors where 10k capped it at 0.93, for ~1 ms more a query.
RERANK_FACTOR = 30
MIN_CANDIDATES = 100
RECALL_K = 10
RECALL_TARGET = 0.95
TUNE_QUERIES = 1000
NPROBE_LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
ADD_BLOCK = 65_536
TUNE_BLOCK_ROWS = 16_384  # bounds the (queries x rows) score block of the recall check
RAM_MARGIN = 1.25  # allocator and OS slack over the arrays counted in estimate()


def default_nlist(n: int) -> int:
    """IVF lists: ~4 sqrt(N), with at least 39 training points per centroid (FAISS's minimum)."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def estimate(n: int, dim: int = 384, *, m: int = PQ_M, nlist: int | None = None) -> dict[str, int]:
    """Bytes an IVF-PQ index of ``n`` vectors takes: on disk, resident at query time, and at peak while built."""
    nlist = nlist or default_nlist(n)
    lists = n * (m + ID_BYTES)
    index = lists + nlist * dim * 4 + m * (1 << PQ_BITS) * (dim // m) * 4
    train = min(n, TRAIN_PER_LIST * nlist) * dim * 4
    # Build: the lists (pre-sized, no growth slack), the training sample, one list number per vector,
    # a block being encoded, and the exact scores of the recall check.
    build = index + train + n * 4 + ADD_BLOCK * dim * 4 * 2 + min(n, TUNE_QUERIES) * TUNE_BLOCK_ROWS * 16
    return {
        "bytes_per_vector": m + ID_BYTES,
        "index_bytes": index,
        "query_resident_bytes": index,  # every list touched once; the re-rank reads ~150 KB a query
        "build_ram_bytes": build,
        "train_vectors": min(n, TRAIN_PER_LIST * nlist),
    }


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_resources(n: int, dim: int, out_dir: Path, *, m: int = PQ_M, nlist: int | None = None) -> dict[str, int]:
    """Raise BuildError before a build this machine has no RAM or disk for, with the estimate."""
    est = estimate(n, dim, m=m, nlist=nlist)
    need_ram = int(est["build_ram_bytes"] * RAM_MARGIN)
    free_disk = shutil.disk_usage(out_dir).free
    avail = _mem_available()
    gb = 1 << 30
    if est["index_bytes"] > free_disk:
        raise BuildError(
            f"{out_dir}: the IVF-PQ index of {n:,} vectors needs ~{est['index_bytes'] / gb:.1f} GB of disk, "
            f"{free_disk / gb:.1f} GB free"
        )
    if avail is not None and need_ram > avail:
        raise BuildError(
            f"{out_dir}: building the IVF-PQ index of {n:,} vectors needs ~{need_ram / gb:.1f} GB of RAM, "
            f"{avail / gb:.1f} GB available"
        )
    return est


class RowReader:
    """Rows of a float32 C-order ``.npy`` file by id, read with ``pread`` (thread-safe, not memory-mapped)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                major, _ = np.lib.format.read_magic(fh)
                read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, fortran, dtype = read_header(fh)
                self.offset = fh.tell()
        except (OSError, ValueError) as exc:
            raise IndexCorruptError(f"{self.path}: unreadable: {exc}") from exc
        if dtype != np.float32 or fortran or len(shape) != 2:
            raise IndexCorruptError(f"{self.path}: expected a C-order float32 matrix, got {dtype} {shape}")
        self.shape = shape
        self.row_bytes = shape[1] * 4
        self.fd = os.open(self.path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        rb, off = self.row_bytes, self.offset
        raw = b"".join(os.pread(self.fd, rb, off + int(i) * rb) for i in ids)
        if len(raw) != len(ids) * rb:
            raise IndexCorruptError(f"{self.path}: short read (ids up to {int(max(ids))}, {self.shape[0]} rows)")
        return np.frombuffer(raw, dtype=np.float32).reshape(len(ids), self.shape[1])


def _sample(n: int, size: int, seed: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """``size`` sorted distinct rows of 0..n-1 (fixed seed), avoiding ``exclude`` while enough rows remain."""
    rng = np.random.default_rng(seed)
    if exclude is None or n - len(exclude) < size:
        return np.arange(n) if size >= n else np.sort(rng.choice(n, size=size, replace=False))
    picked = np.empty(0, dtype=np.int64)
    while len(picked) < size:  # rejection sampling: no array of all n rows
        cand = np.concatenate([picked, rng.integers(0, n, size=2 * size)])
        cand = cand[~np.isin(cand, exclude)]
        _, first = np.unique(cand, return_index=True)
        picked = cand[np.sort(first)][:size]  # draw order kept: no bias towards low ids
    return np.sort(picked)


def _train(vectors: np.ndarray, nlist: int, m: int, seed: int):
    import faiss

    n, dim = vectors.shape
    rows = _sample(n, TRAIN_PER_LIST * nlist, seed)
    bits = PQ_BITS if len(rows) >= (1 << PQ_BITS) else max(1, int(math.log2(len(rows))))
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, m, bits, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = index.pq.cp.seed = seed
    index.pq.cp.niter = PQ_TRAIN_ITER
    index.pq.cp.max_points_per_centroid = PQ_TRAIN_PER_CENTROID
    if len(rows) < 39 * max(nlist, 1 << bits):  # small corpora: FAISS would warn on every sub-quantizer
        index.cp.min_points_per_centroid = index.pq.cp.min_points_per_centroid = 1
    index.train(np.ascontiguousarray(vectors[rows]))
    return index, rows


def _add(index, vectors: np.ndarray) -> None:
    """Add every row, the lists sized exactly first: growing them one block at a time would leave up to
    twice their size allocated (std::vector doubling) at the peak of the build."""
    import faiss

    n = len(vectors)
    assign = np.empty(n, dtype=np.int32)
    for a in range(0, n, ADD_BLOCK):
        _, lists = index.quantizer.search(np.ascontiguousarray(vectors[a : a + ADD_BLOCK]), 1)
        assign[a : a + ADD_BLOCK] = lists[:, 0]
    invlists = faiss.downcast_InvertedLists(index.invlists)
    for list_no, size in enumerate(np.bincount(assign, minlength=index.nlist)):
        invlists.resize(list_no, int(size))
        invlists.resize(list_no, 0)  # keeps the capacity
    for a in range(0, n, ADD_BLOCK):
        block = np.ascontiguousarray(vectors[a : a + ADD_BLOCK], dtype=np.float32)
        ids = np.arange(a, a + len(block), dtype=np.int64)
        pre = assign[a : a + len(block)].astype(np.int64)
        index.add_core(len(block), faiss.swig_ptr(block), faiss.swig_ptr(ids), faiss.swig_ptr(pre))


def build(
    vectors_path: Path,
    out_dir: Path,
    *,
    nlist: int | None = None,
    nprobe: int | None = None,
    m: int = PQ_M,
    threads: int | None = None,
    seed: int = 1234,
    tune_queries: np.ndarray | None = None,
) -> dict:
    """IVF-PQ over ``vectors_path`` into ``out_dir/ivf_pq.faiss``; returns the params.json entries.

    ``nprobe`` None: chosen for recall@10 >= RECALL_TARGET; a given value is kept and its recall measured.
    ``tune_queries``: query vectors to choose it on (encoded queries of the kind the index will serve), in place
    of held-out rows."""
    import faiss

    if threads:
        faiss.omp_set_num_threads(threads)
    t0 = time.perf_counter()
    vectors = np.load(vectors_path, mmap_mode="r", allow_pickle=False)
    n, dim = vectors.shape
    if dim % m:
        raise BuildError(f"{vectors_path}: PQ with {m} sub-quantizers needs a dimension divisible by {m}, got {dim}")
    nlist = nlist or default_nlist(n)
    check_resources(n, dim, Path(out_dir), m=m, nlist=nlist)
    index, train_rows = _train(vectors, nlist, m, seed)
    _add(index, vectors)
    with atomic_path(Path(out_dir) / IVF_PQ_FILE) as tmp:
        faiss.write_index(index, tmp)
    build_seconds = time.perf_counter() - t0
    del index
    mapped = _read(Path(out_dir) / IVF_PQ_FILE)
    t1 = time.perf_counter()
    tuned = tune_nprobe(
        mapped, RowReader(vectors_path), vectors, train_rows, nprobe=nprobe, seed=seed, queries=tune_queries
    )
    tuned["tune_seconds"] = round(time.perf_counter() - t1, 2)
    return {
        "index_type": INDEX_TYPE,
        "ivf_file": IVF_PQ_FILE,
        "nlist": nlist,
        "pq_m": m,
        "pq_bits": int(mapped.pq.nbits),
        "bytes_per_vector": int(mapped.code_size) + ID_BYTES,
        "index_bytes": (Path(out_dir) / IVF_PQ_FILE).stat().st_size,
        "train_vectors": len(train_rows),
        "rerank_factor": RERANK_FACTOR,
        "ivf_build_seconds": round(build_seconds, 2),
        "faiss_version": faiss.__version__,
        **tuned,
    }


def _read(path: Path):
    import faiss

    flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY | faiss.IO_FLAG_PQ_SKIP_SDC_TABLE
    try:
        return faiss.read_index(str(path), flags)
    except RuntimeError as exc:
        raise IndexCorruptError(f"{path}: unreadable FAISS index: {exc}") from exc


def load(folder: Path, params: dict):
    """The memory-mapped IVF index of a dense folder (IVF-PQ, or the IVF-SQ8 of older builds)."""
    import faiss

    kind = params.get("index_type")
    name = params.get("ivf_file") or INDEX_FILES.get(kind)
    if name is None:
        raise IndexCorruptError(f"{folder}: unknown dense index_type {kind!r} in params.json")
    path = Path(folder) / name
    if not path.is_file():
        raise IndexCorruptError(f"{path}: missing")
    index = _read(path)
    if index.ntotal != params["count"]:
        raise IndexCorruptError(f"{path}: {index.ntotal} vectors, params.json says {params['count']}")
    # Not parallel_mode 1 (the probed lists split among the threads for a lone query): 10.1 -> 8.0 ms p50 at 1M
    # vectors searched alone, but with the encoder running in the same process (as every query does) no faster at
    # p50 and 40 ms at p95, FAISS's OpenMP threads and torch's contending for the two cores.
    faiss.extract_index_ivf(index).nprobe = int(params.get("nprobe", 32))
    return index


def candidates(k: int, rerank_factor: int = RERANK_FACTOR) -> int:
    """PQ candidates re-scored exactly for a top ``k``: ``rerank_factor`` x 10 (the recall@10 that nprobe is tuned
    for), plus k beyond the tenth, at least MIN_CANDIDATES. The fused search asks each channel for 50: x 30 would
    read 1,500 rows (2.3 MB) a claim for the ranks that fusion weighs least."""
    return max(rerank_factor * min(k, RECALL_K) + max(0, k - RECALL_K), MIN_CANDIDATES)


def search(
    index, rows, q: np.ndarray, k: int, *, rerank_factor: int = RERANK_FACTOR, nprobe: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` ids and exact scores per query: IVF candidates re-scored with ``rows(ids)`` (exact vectors).

    Missing results are id -1. Ties are broken by id, so results are deterministic."""
    import faiss

    q = np.ascontiguousarray(q, dtype=np.float32)
    cand_k = min(index.ntotal, candidates(k, rerank_factor))
    opts = {} if nprobe is None else {"params": faiss.SearchParametersIVF(nprobe=int(nprobe))}
    _, cands = index.search(q, cand_k, **opts)
    ids = np.full((len(q), k), -1, dtype=np.int64)
    scores = np.zeros((len(q), k), dtype=np.float32)
    for row in range(len(q)):
        c = np.unique(cands[row][cands[row] >= 0])  # sorted ids: reads in file order
        if not len(c):
            continue
        exact = rows(c) @ q[row]
        order = np.lexsort((c, -exact))[:k]
        ids[row, : len(order)] = c[order]
        scores[row, : len(order)] = exact[order]
    return ids, scores


def exact_top(vectors: np.ndarray, q: np.ndarray, k: int, *, block_rows: int = TUNE_BLOCK_ROWS) -> np.ndarray:
    """Exact top-``k`` ids per query (blocked matmul over the rows), best first, ties by id."""
    best_ids = np.empty((len(q), 0), dtype=np.int64)
    best = np.empty((len(q), 0), dtype=np.float32)
    for a in range(0, len(vectors), block_rows):
        block = (np.asarray(vectors[a : a + block_rows]) @ q.T).T
        kb = min(k, block.shape[1])
        part = np.argpartition(-block, kb - 1, axis=1)[:, :kb]
        cat_ids = np.concatenate([best_ids, part + a], axis=1)
        cat = np.concatenate([best, np.take_along_axis(block, part, axis=1)], axis=1)
        order = np.lexsort((cat_ids, -cat), axis=1)[:, :k]  # keep the running top k: memory stays O(k)
        best_ids, best = np.take_along_axis(cat_ids, order, axis=1), np.take_along_axis(cat, order, axis=1)
    return best_ids


def recall_at(found: np.ndarray, truth: np.ndarray, k: int, exclude: np.ndarray | None = None) -> float:
    """Mean share of each query's true top-``k`` found in its top-``k`` (``exclude``: a query's own id)."""
    hits = []
    for row in range(len(truth)):
        drop = set() if exclude is None else {int(exclude[row])}
        t = [int(i) for i in truth[row] if int(i) not in drop][:k]
        f = [int(i) for i in found[row] if i >= 0 and int(i) not in drop][:k]
        hits.append(len(set(f) & set(t)) / max(1, len(t)))
    return float(np.mean(hits)) if hits else 1.0


def tune_nprobe(
    index, rows, vectors, train_rows, *, nprobe: int | None = None, seed: int = 1234, queries: np.ndarray | None = None
) -> dict:
    """Smallest ladder nprobe with recall@10 >= RECALL_TARGET on held-out rows, or on ``queries`` when given (or
    measure a given nprobe)."""
    n = len(vectors)
    if queries is not None and len(queries):
        held = None
        q = np.ascontiguousarray(queries, dtype=np.float32)
        k = min(RECALL_K, n)
        extra = 0
        source = f"{len(q)} given queries"
    else:
        held = _sample(n, TUNE_QUERIES, seed + 1, exclude=train_rows)
        q = np.ascontiguousarray(vectors[held], dtype=np.float32)
        k = min(RECALL_K, n - 1) if n > 1 else 1
        extra = 1  # each row finds itself: one more, excluded
        source = "held-out indexed rows, own id excluded"
    truth = exact_top(vectors, q, k + extra)
    nlist = index.nlist
    ladder = [nprobe] if nprobe else [p for p in NPROBE_LADDER if p < nlist] + [nlist]
    curve = {}
    for p in ladder:
        found, _ = search(index, rows, q, k + extra, nprobe=p)
        curve[str(p)] = round(recall_at(found, truth, k, exclude=held), 4)
        if curve[str(p)] >= RECALL_TARGET:
            break
    chosen = int(ladder[len(curve) - 1])
    if curve[str(chosen)] < RECALL_TARGET:
        log.warning("IVF recall@%d %.3f < %.2f even at nprobe %d", k, curve[str(chosen)], RECALL_TARGET, chosen)
    import faiss

    faiss.extract_index_ivf(index).nprobe = chosen
    return {
        "nprobe": chosen,
        "recall_at_10": curve[str(chosen)],
        "recall_target": RECALL_TARGET,
        "recall_queries": len(q),
        "recall_query_source": source,
        "nprobe_recall": curve,
    }
