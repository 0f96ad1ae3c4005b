"""Approximate dense search for large corpora: FAISS IVF with 4-bit PQ fast-scan, memory-mapped, with exact
re-ranking.

Sizing (dim 384, the defaults): each vector costs ``PQ_M`` = 96 four-bit codes (48 bytes) plus an 8-byte id in
the inverted lists, 56 bytes in all, against 64 + 8 for 8-bit PQ64, 384 + 8 for IVF-SQ8 and 1,536 for the
float32 rows. At 40M vectors that is 2.2 GB of lists, plus 39 MB of coarse centroids (nlist = 4 sqrt(N) ~ 25k)
and 24 KB of PQ codebooks: :func:`estimate` gives the figures for any N.

Fast-scan keeps each list's codes in blocks of 32 vectors laid out for SIMD lookups in registers, so a probed
list is scanned faster than 8-bit PQ codes are, and 96 sub-quantizers of 4 dimensions order candidates better
than 64 of 6 at 8 bits, in fewer bytes a vector (benchmarks/RESULTS.md compares the two). FAISS reads fast-scan
lists into RAM, so the build writes them to a file of their own (``LISTS_FILE``, the layout of FAISS's
``OnDiskInvertedLists``: each list's code blocks, then its ids) and :func:`load` maps it: only the lists a query
probes are read, and the resident set is bounded by the files.

Re-ranking: the PQ candidates (see :func:`candidates`) are re-scored with the exact float32 rows of
``vectors.npy``. Those rows are read with ``pread`` (:class:`RowReader`), not through a memory map: a mapping
would add every touched page to the process's RSS, up to the whole 61 GB file at 40M, whereas ``pread`` copies
~450 KB a query through the page cache, which the kernel reclaims as it needs. The file is flagged
``POSIX_FADV_RANDOM`` so that read-ahead does not pull in neighbouring rows.

``nprobe`` is chosen at build time: the smallest of :data:`NPROBE_LADDER` whose recall@10 against exact search
(same re-ranking as the query path) reaches :data:`RECALL_TARGET`, measured on held-out rows (not in the
training sample) used as queries, each row's own id excluded from both result lists, or on query vectors the
caller gives (``tune_queries``: encoded queries of the kind the index serves). It is stored in ``params.json``
with the recall it reached and the queries it was measured on.

Indexes of the IVF formats before fast-scan (``index_type`` "ivf_pq+rerank" or "ivf_sq8+rerank") are refused with
:class:`IndexFormatError`. faiss is imported lazily: ``import backends.dense`` stays light.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import shutil
import time
import weakref
from pathlib import Path

import numpy as np

from wikiground.errors import BuildError, IndexCorruptError, IndexFormatError
from wikiground.layout import atomic_path

log = logging.getLogger(__name__)

INDEX_TYPE = "ivf_pq4fs+rerank"
IVF_FILE = "ivf_pq4fs.faiss"
LISTS_FILE = "ivf_pq4fs.lists"  # the inverted lists of IVF_FILE, memory-mapped
ALL_FILES = (IVF_FILE, LISTS_FILE)
OLDER_INDEX_TYPES = ("ivf_pq+rerank", "ivf_sq8+rerank")  # the IVF formats before fast-scan: refused by load()
PQ_M = 96  # 4-bit sub-quantizers (4 dimensions each at dim 384); must divide the dimension
PQ_BITS = 4  # fast-scan's code width
BLOCK = 32  # vectors per fast-scan block (FAISS's bbs): a list's codes are stored in whole blocks
ID_BYTES = 8  # FAISS stores an int64 id beside each code
MIN_VECTORS = 64  # below this, exact search (the dense channel's default up to 1M vectors)
TRAIN_PER_LIST = 64  # coarse k-means sample: FAISS needs >= 39 points per centroid
# Candidates re-scored exactly for the top 10, as a multiple of 10: enough to reach RECALL_TARGET with 96 four-bit
# codes (benchmarks/RESULTS.md), few enough that the row reads (1.5 KB each) stay small.
RERANK_FACTOR = 30
MIN_CANDIDATES = 100
RECALL_K = 10
RECALL_TARGET = 0.95
TUNE_QUERIES = 1000
NPROBE_LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
ADD_BLOCK = 65_536
TUNE_BLOCK_ROWS = 16_384  # bounds the (queries x rows) score block of the recall check
RAM_MARGIN = 1.25  # allocator and OS slack over the arrays counted in estimate()


def default_nlist(n: int) -> int:
    """IVF lists: ~4 sqrt(N), with at least 39 training points per centroid (FAISS's minimum)."""
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def estimate(n: int, dim: int = 384, *, m: int = PQ_M, nlist: int | None = None) -> dict[str, int]:
    """Bytes an IVF index of ``n`` vectors takes: on disk, resident at query time, and at peak while built."""
    nlist = nlist or default_nlist(n)
    per_vector = m * PQ_BITS // 8 + ID_BYTES
    lists = (n + nlist * BLOCK // 2) * per_vector  # each list's last block is half empty on average
    index = lists + nlist * dim * 4 + m * (1 << PQ_BITS) * (dim // m) * 4
    train = min(n, TRAIN_PER_LIST * nlist) * dim * 4
    # Build: the lists in RAM (their ids in vectors that may have doubled), the training sample, a block being
    # encoded, and the exact scores of the recall check.
    build = index + n * ID_BYTES + train + ADD_BLOCK * dim * 4 * 2 + min(n, TUNE_QUERIES) * TUNE_BLOCK_ROWS * 16
    return {
        "bytes_per_vector": per_vector,
        "index_bytes": index,
        "query_resident_bytes": index,  # every list touched once; the re-rank reads ~450 KB a query
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
    index = faiss.IndexIVFPQFastScan(faiss.IndexFlatIP(dim), dim, nlist, m, PQ_BITS, faiss.METRIC_INNER_PRODUCT, BLOCK)
    index.cp.seed = index.pq.cp.seed = seed
    if len(rows) < 39 * max(nlist, 1 << PQ_BITS):  # small corpora: FAISS would warn on every sub-quantizer
        index.cp.min_points_per_centroid = index.pq.cp.min_points_per_centroid = 1
    index.train(np.ascontiguousarray(vectors[rows]))
    return index, rows


def _add(index, vectors: np.ndarray) -> None:
    for a in range(0, len(vectors), ADD_BLOCK):
        block = np.ascontiguousarray(vectors[a : a + ADD_BLOCK], dtype=np.float32)
        index.add_with_ids(block, np.arange(a, a + len(block), dtype=np.int64))


def _write_lists(index, out_dir: Path) -> None:
    """Move the index's inverted lists (fast-scan blocks, in RAM) into ``LISTS_FILE``, laid out as FAISS's
    ``OnDiskInvertedLists`` reads them (per list: its code blocks, then one id per slot; lists end to end), and
    point the index at that file. Each list keeps room for its whole last block, which a scan reads."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    blocks = faiss.downcast_InvertedLists(ivf.invlists)
    per_block, block_bytes = blocks.n_per_block, blocks.block_size
    code_size = block_bytes // per_block
    sizes = np.array([blocks.list_size(i) for i in range(ivf.nlist)], dtype=np.uint64)
    slots = (sizes + per_block - 1) // per_block * per_block  # whole blocks
    with atomic_path(Path(out_dir) / LISTS_FILE) as tmp, open(tmp, "wb") as fh:
        for i in range(ivf.nlist):
            n, room = int(sizes[i]), int(slots[i])
            if not n:
                continue
            fh.write(faiss.rev_swig_ptr(blocks.get_codes(i), room * code_size).tobytes())
            ids = np.full(room, -1, dtype=np.int64)
            ids[:n] = faiss.rev_swig_ptr(blocks.get_ids(i), n)
            fh.write(ids.tobytes())
        total = fh.tell()
    lists = faiss.OnDiskInvertedLists(ivf.nlist, code_size, LISTS_FILE)  # the name only: load() gives the folder
    lists.set_all_lists_sizes(faiss.swig_ptr(slots))  # offsets and capacities: whole blocks
    _set_list_sizes(lists, sizes)
    lists.totsize = total
    ivf.replace_invlists(lists, True)
    lists.thisown = False  # the index owns it now


def _set_list_sizes(lists, sizes: np.ndarray) -> None:
    """Each list's size, below its capacity (the empty slots of its last block). FAISS keeps ``(size, capacity,
    offset)`` per list in one array of ``size_t``; its Python binding hands out copies of the elements, so the
    sizes are written into that array by address, and read back through FAISS to check the layout."""
    n = len(sizes)
    address = int(lists.lists.data().this)
    table = np.ctypeslib.as_array((ctypes.c_size_t * (3 * n)).from_address(address)).reshape(n, 3)
    capacity = table[:, 1].copy()
    table[:, 0] = sizes
    check = sorted({0, n // 2, n - 1})
    if any(lists.list_size(i) != int(sizes[i]) or lists.lists.at(i).capacity != int(capacity[i]) for i in check):
        raise BuildError("this FAISS version lays out OnDiskInvertedLists unlike the one wikiground knows")


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
    """IVF-PQ fast-scan over ``vectors_path`` into ``out_dir`` (``IVF_FILE``, ``LISTS_FILE``); returns the
    params.json entries.

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
    if n < MIN_VECTORS:
        raise BuildError(f"{vectors_path}: {n} vectors; an IVF index needs at least {MIN_VECTORS} (use exact search)")
    nlist = nlist or default_nlist(n)
    check_resources(n, dim, Path(out_dir), m=m, nlist=nlist)
    index, train_rows = _train(vectors, nlist, m, seed)
    _add(index, vectors)
    _write_lists(index, out_dir)
    with atomic_path(Path(out_dir) / IVF_FILE) as tmp:
        faiss.write_index(index, tmp)
    build_seconds = time.perf_counter() - t0
    del index
    mapped = load(out_dir, {"index_type": INDEX_TYPE, "count": n})
    t1 = time.perf_counter()
    tuned = tune_nprobe(
        mapped, RowReader(vectors_path), vectors, train_rows, nprobe=nprobe, seed=seed, queries=tune_queries
    )
    tuned["tune_seconds"] = round(time.perf_counter() - t1, 2)
    return {
        "index_type": INDEX_TYPE,
        "ivf_file": IVF_FILE,
        "lists_file": LISTS_FILE,
        "nlist": nlist,
        "pq_m": m,
        "pq_bits": PQ_BITS,
        "bytes_per_vector": m * PQ_BITS // 8 + ID_BYTES,
        "index_bytes": sum((Path(out_dir) / f).stat().st_size for f in (IVF_FILE, LISTS_FILE)),
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


def _map_lists(lists, folder: Path) -> None:
    """Map the lists file of a fast-scan index (``lists``: its inverted lists, read without their data), checked
    to be whole: a mapping past the end of a cut file would crash the process at the first read there."""
    import faiss

    if not isinstance(lists, faiss.OnDiskInvertedLists) or lists.ptr is not None:
        raise IndexCorruptError(f"{folder / IVF_FILE}: its inverted lists are not in {LISTS_FILE}")
    path = folder / LISTS_FILE
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise IndexCorruptError(f"{path}: missing ({exc.strerror})") from exc
    if size != lists.totsize:
        raise IndexCorruptError(f"{path}: {size:,} bytes, the index expects {lists.totsize:,} (cut short?)")
    lists.filename = str(path)
    try:
        lists.do_mmap()
    except RuntimeError as exc:
        raise IndexCorruptError(f"{path}: cannot map it: {exc}") from exc


def load(folder: Path, params: dict):
    """The memory-mapped fast-scan IVF index of a dense folder."""
    import faiss

    folder = Path(folder)
    kind = params.get("index_type")
    if kind in OLDER_INDEX_TYPES:
        raise IndexFormatError(folder, f"format 1 with index_type {kind!r}", f"format 1 with index_type {INDEX_TYPE!r}")
    if kind != INDEX_TYPE:
        raise IndexCorruptError(f"{folder}: unknown dense index_type {kind!r} in params.json")
    path = folder / IVF_FILE
    if not path.is_file():
        raise IndexCorruptError(f"{path}: missing")
    index = _read(path)
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    _map_lists(lists, folder)
    if index.ntotal != params["count"]:
        raise IndexCorruptError(f"{path}: {index.ntotal} vectors, params.json says {params['count']}")
    # Mapped lists come with FAISS's prefetch: up to 32 threads started per search to read the probed lists ahead,
    # which pays for lists on a cold disk and only competes with the scan for them in the page cache.
    lists.prefetch_nthread = 0
    # Not parallel_mode 1 (the probed lists split among the threads for a lone query): it helps a search run alone,
    # but every query runs the encoder in the same process, and FAISS's OpenMP threads then contend with torch's
    # for the cores.
    ivf.nprobe = int(params.get("nprobe", 32))
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
