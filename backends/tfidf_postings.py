"""Bounded-memory construction of hashed TF-IDF postings (term-major, impact-ordered) as plain ``.npy`` files.

Features are word uni+bigrams hashed into ``N_FEATURES`` buckets (scikit-learn's HashingVectorizer, as DrQA
does), so no vocabulary is ever held. The build streams the passages three times over bounded pieces:

1. hash each batch of passages and append its (bucket, passage, tf) entries to one of R spill files, chosen by
   bucket range (R grows with the corpus so that one range fits ``SPILL_ENTRIES`` entries);
2. per range: document frequencies of its buckets, then each passage's squared norm contribution;
3. per range: final weights (tf * idf / norm), sorted by (bucket, weight, passage), appended to the output.

Memory: a few batches, one range (with a df counter of its buckets), the kept buckets and their df (8 bytes
each), and a norm per passage (8 bytes each).
Disk: the spill files (12 bytes an entry) beside the output (8 bytes an entry) until the build ends.
Output (``FILES``): ``buckets.npy`` (sorted kept bucket ids = the terms), ``idf.npy``, ``indptr.npy`` (int64,
len V+1), ``indices.npy`` (int32 passage ids) and ``data.npy`` (float32 weights of L2-normalised passage rows).
Within a term, postings ascend by weight: the tail of a list holds the passages where the term weighs most.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from wikiground.errors import BuildError
from wikiground.layout import atomic_path

N_FEATURES = 1 << 26
SPILL_ENTRIES = 8_000_000  # entries of one bucket range in RAM at a time (12 bytes each, plus the sort)
ENTRIES_PER_PASSAGE = 200  # a first guess of distinct n-grams per passage, to choose the number of ranges
MAX_RANGES = 1024
MAX_RANGE_WIDTH = 1 << 20
FILES = ("buckets.npy", "idf.npy", "indptr.npy", "indices.npy", "data.npy")
SPILL = np.dtype([("bucket", "<u4"), ("doc", "<i4"), ("tf", "<f4")])


def hasher(params: dict):
    """The HashingVectorizer (raw counts, no sign, no norm) of vectorizer ``params``: builds and queries share it."""
    from sklearn.feature_extraction.text import HashingVectorizer

    keys = ("lowercase", "strip_accents", "token_pattern", "analyzer")
    return HashingVectorizer(
        n_features=int(params["n_features"]),
        ngram_range=tuple(params["ngram_range"]),
        alternate_sign=False,
        norm=None,
        dtype=np.float32,
        **{k: params[k] for k in keys},
    )


def token_hasher(params: dict):
    """A FeatureHasher giving single tokens the buckets the HashingVectorizer gives them."""
    from sklearn.feature_extraction import FeatureHasher

    return FeatureHasher(n_features=int(params["n_features"]), input_type="string", alternate_sign=False)


def smooth_idf(df: np.ndarray, n: int) -> np.ndarray:
    """scikit-learn's smoothed idf: ln((1 + n) / (1 + df)) + 1."""
    return (np.log((1.0 + n) / (1.0 + df.astype(np.float64))) + 1.0).astype(np.float32)


def range_count(n_passages: int, n_features: int, spill_entries: int = SPILL_ENTRIES) -> int:
    """A power of two of bucket ranges, so that one range holds about ``spill_entries`` entries and spans at
    most ``MAX_RANGE_WIDTH`` buckets (its df counter)."""
    want = max(1, math.ceil(n_passages * ENTRIES_PER_PASSAGE / max(1, spill_entries)), n_features // MAX_RANGE_WIDTH)
    return min(MAX_RANGES, 1 << (want - 1).bit_length())


_WORKER_HASHER = None


def _init_worker(params: dict) -> None:
    global _WORKER_HASHER
    _WORKER_HASHER = hasher(params)


def _hash(hv, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = hv.transform(texts)
    return x.indptr, x.indices, x.data


def _hash_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _hash(_WORKER_HASHER, texts)


def hashed(batches: Iterable[list[str]], params: dict, workers: int) -> Iterator[tuple[np.ndarray, ...]]:
    """(indptr, indices, counts) of each batch in order, hashed by ``workers`` processes (the tokenizer is pure
    Python, so processes, not threads); at most two batches per worker are in flight."""
    if workers <= 1:
        hv = hasher(params)
        for texts in batches:
            yield _hash(hv, texts)
        return
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("forkserver")  # as the ingest workers: no fork of DuckDB's threads
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(params,)) as pool:
        window: deque = deque()
        for texts in batches:
            window.append(pool.submit(_hash_in_worker, texts))
            if len(window) >= 2 * workers:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def spill(
    hashed_batches: Iterable[tuple[np.ndarray, ...]], sublinear: bool, spill_dir: Path, ranges: int, n_features: int
) -> int:
    """Pass 1: each hashed batch's (bucket, passage, tf) entries into ``ranges`` spill files by bucket range
    (passage ids counted from 0); returns N."""
    shift = max(0, (n_features - 1).bit_length() - (ranges - 1).bit_length())
    files = [open(spill_dir / f"range-{r:04d}.bin", "wb") for r in range(ranges)]  # noqa: SIM115
    n = 0
    try:
        for indptr, indices, counts in hashed_batches:
            rows = len(indptr) - 1
            rec = np.empty(len(indices), dtype=SPILL)
            rec["bucket"], rec["doc"] = indices, np.repeat(np.arange(n, n + rows, dtype=np.int32), np.diff(indptr))
            rec["tf"] = 1.0 + np.log(counts) if sublinear else counts
            rid = (rec["bucket"] >> shift).astype(np.uint16)  # < MAX_RANGES: a radix sort
            order = np.argsort(rid, kind="stable")
            rec, rid = rec[order], rid[order]
            cuts = np.searchsorted(rid, np.arange(ranges + 1))
            for r in np.flatnonzero(np.diff(cuts)):
                files[r].write(rec[cuts[r] : cuts[r + 1]].tobytes())
            n += rows
    finally:
        for f in files:
            f.close()
    return n


def _ranges(spill_dir: Path, ranges: int, n_features: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """(first bucket, width, entries) of each bucket range, in bucket order."""
    width = n_features // ranges
    for r in range(ranges):
        yield r * width, width, np.fromfile(spill_dir / f"range-{r:04d}.bin", dtype=SPILL)


def df_and_norms(spill_dir: Path, n: int, min_df: int, ranges: int, n_features: int) -> tuple[list, np.ndarray]:
    """Pass 2: per range, its kept buckets and their df (``min_df`` and over); each passage's L2 norm."""
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    sq = np.zeros(n, dtype=np.float64)
    for lo, width, rec in _ranges(spill_dir, ranges, n_features):
        df = np.bincount(rec["bucket"] - lo, minlength=width).astype(np.int32)
        df[df < min_df] = 0
        keep = df[rec["bucket"] - lo] > 0
        w = rec["tf"][keep] * smooth_idf(df[rec["bucket"][keep] - lo], n)
        np.add.at(sq, rec["doc"][keep], np.square(w, dtype=np.float64))
        buckets = np.flatnonzero(df)
        kept.append(((buckets + lo).astype(np.uint32), df[buckets]))
    norms = np.sqrt(sq).astype(np.float32)
    norms[norms == 0] = 1.0
    return kept, norms


def _npy_header(f, dtype, length: int) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    np.lib.format.write_array_header_2_0(f, header)


def write_postings(spill_dir: Path, out_dir: Path, kept: list, norms: np.ndarray, n: int, n_features: int) -> dict:
    """Pass 3: the term-major, impact-ordered postings files (each written whole, then moved into place)."""
    specs = {"buckets.npy": np.uint32, "idf.npy": np.float32, "indptr.npy": np.int64}
    specs.update({"indices.npy": np.int32, "data.npy": np.float32})
    terms = sum(len(b) for b, _ in kept)
    nnz = int(sum(int(d.sum(dtype=np.int64)) for _, d in kept))
    sizes = {"buckets.npy": terms, "idf.npy": terms, "indptr.npy": terms + 1, "indices.npy": nnz, "data.npy": nnz}
    with contextlib.ExitStack() as stack:
        files = {}
        for name, dtype in specs.items():
            files[name] = stack.enter_context(open(stack.enter_context(atomic_path(out_dir / name)), "wb"))
            _npy_header(files[name], dtype, sizes[name])
        files["indptr.npy"].write(np.zeros(1, dtype=np.int64).tobytes())
        written = 0
        for (lo, width, rec), (buckets, df_kept) in zip(_ranges(spill_dir, len(kept), n_features), kept):
            df = np.zeros(width, dtype=np.int32)
            df[buckets - lo] = df_kept
            rec = rec[df[rec["bucket"] - lo] > 0]
            w = rec["tf"] * smooth_idf(df[rec["bucket"] - lo], n) / norms[rec["doc"]]
            # By bucket, then weight (positive floats sort as their bits); a stable sort keeps the spill's
            # passage order among equal weights.
            key = (rec["bucket"].astype(np.uint64) << np.uint64(32)) | w.astype(np.float32).view(np.uint32)
            order = np.argsort(key, kind="stable")
            files["indices.npy"].write(rec["doc"][order].tobytes())
            files["data.npy"].write(w[order].astype(np.float32).tobytes())
            files["buckets.npy"].write(buckets.tobytes())
            files["idf.npy"].write(smooth_idf(df_kept, n).tobytes())
            files["indptr.npy"].write((written + np.cumsum(df_kept, dtype=np.int64)).tobytes())
            written += len(rec)
        if written != nnz:
            raise BuildError(f"{out_dir}: wrote {written} postings of {nnz}")
    return {"terms": terms, "nnz": nnz}


def check_disk(out_dir: Path, n: int) -> None:
    """Refuse to start a build whose spill and output files would not fit the free space (a first estimate)."""
    import shutil

    need = n * ENTRIES_PER_PASSAGE * (SPILL.itemsize + 8)
    free = shutil.disk_usage(out_dir).free
    if need > free:
        raise BuildError(
            f"{out_dir}: the TF-IDF build of {n} passages needs about {need / 2**30:.1f} GiB of disk "
            f"(spill files and postings), {free / 2**30:.1f} GiB free"
        )


def build_postings(
    batches: Iterable[list[str]], out_dir: Path, params: dict, *, n: int, min_df: int, spill_entries: int, workers: int
) -> dict:
    """The whole build of the postings files from ``batches`` of passage texts (``n`` passages in all)."""
    import tempfile

    check_disk(out_dir, n)
    n_features = int(params["n_features"])
    if n_features < 2 or n_features & (n_features - 1) or n_features > 1 << 32:
        raise BuildError(f"n_features must be a power of two up to 2**32, got {n_features}")
    with tempfile.TemporaryDirectory(prefix=".spill-", dir=out_dir) as tmp:
        spill_dir = Path(tmp)
        sublinear = bool(params.get("sublinear_tf", True))
        ranges = range_count(n, n_features, spill_entries)
        got = spill(hashed(batches, params, workers), sublinear, spill_dir, ranges, n_features)
        if got != n:
            raise BuildError(f"{out_dir}: read {got} passages where the store counted {n}")
        spilled = sum(os.path.getsize(p) for p in spill_dir.glob("range-*.bin")) // SPILL.itemsize
        kept, norms = df_and_norms(spill_dir, n, min_df, ranges, n_features)
        counts = write_postings(spill_dir, out_dir, kept, norms, n, n_features)
    counts["spilled_entries"] = int(spilled)
    return counts
