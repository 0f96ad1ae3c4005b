"""Bounded-memory construction of hashed TF-IDF postings (term-major, impact-ordered) as plain ``.npy`` files.

Features are word uni+bigrams hashed into ``N_FEATURES`` buckets (scikit-learn's HashingVectorizer, as DrQA
does), so no vocabulary is ever held. The build streams the passages three times over bounded pieces:

1. hash each batch of passages and append its (bucket, passage, tf) entries to one of R spill files, chosen by
   bucket range (R grows with the corpus so that one range fits ``SPILL_ENTRIES`` entries);
2. per range: document frequencies of its buckets, then each passage's squared norm contribution;
3. per range: final weights (tf * idf / norm), sorted by (bucket, weight, passage), appended to the output.

Memory: a few batches, one range (with a df counter of its buckets), the kept buckets and their df (8 bytes
each), and a norm per passage (8 bytes each).
Disk: the spill files (``SPILL``: 6 bytes an entry, the bucket's offset in its range packed with the count, and the
passage as its gap from the file's previous entry: a file's passages only grow, and each passage has a few entries in
each range, so the gaps are small; a gap past 16 bits is carried by filler entries of count 0); the last pass deletes
each range's file once read, as it writes that range's postings (a byte and ``id_bits`` bits a kept posting), so the
peak is the spill itself, which is most of a build's peak temporary disk.
Output (``FILES``): ``buckets.npy`` (sorted kept bucket ids = the terms), ``idf.npy``, ``indptr.npy`` (int64,
len V+1), ``indices.npy`` (the passage ids, ``id_bits`` bits each, packed end to end into uint32 words, one
word of padding after them), ``weights.npy`` (uint8: each posting's weight in the L2-normalised
passage row, on a log scale between its term's ``wlo.npy`` and ``wlo + 255 * wstep``, float32 natural logs).
Within a term, postings ascend by weight: the tail of a list holds the passages where the term weighs most. A list
keeps at most ``keep`` postings, its high-weight end: a query reads no more than its posting budget of one list, so
with ``keep`` at that budget the postings left out are ones no query would read.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from wikiground.errors import BuildError
from wikiground.layout import atomic_path

N_FEATURES = 1 << 26
SPILL_ENTRIES = 8_000_000  # entries of one bucket range in RAM at a time (12 bytes each, plus the sort)
ENTRIES_PER_PASSAGE = 200  # a first guess of distinct n-grams per passage, to choose the number of ranges
MAX_RANGES = 1024
MAX_RANGE_WIDTH = 1 << 20
MAX_FEATURES = MAX_RANGES * MAX_RANGE_WIDTH  # a bucket's offset in its range fits COUNT_SHIFT bits
COUNT_SHIFT = 20
MAX_COUNT = (1 << (32 - COUNT_SHIFT)) - 1  # an n-gram's count in one passage saturates here (passages are short)
LEVELS = 255  # weight steps of a posting (uint8)
KEEP = 50_000  # postings a list keeps: the most a query reads of one list (backends.tfidf.POSTING_BUDGET)
FILES = ("buckets.npy", "idf.npy", "indptr.npy", "indices.npy", "weights.npy", "wlo.npy", "wstep.npy")
SPILL = np.dtype([("key", "<u4"), ("gap", "<u2")])  # key: count << COUNT_SHIFT | bucket offset; gap: passages since
MAX_GAP = np.iinfo(np.uint16).max  # the file's previous entry (a filler: key 0, count 0, adds MAX_GAP)
ENTRY = np.dtype([("bucket", "<u4"), ("doc", "<i4"), ("tf", "<f4")])  # a range's entries, decoded


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


def spill(hashed_batches: Iterable[tuple[np.ndarray, ...]], spill_dir: Path, ranges: int, n_features: int) -> int:
    """Pass 1: each hashed batch's (bucket, passage, count) entries into ``ranges`` spill files by bucket range
    (passage ids counted from 0, each written as its gap from the file's previous entry); returns N."""
    shift = max(0, (n_features - 1).bit_length() - (ranges - 1).bit_length())
    files = [open(spill_dir / f"range-{r:04d}.bin", "wb") for r in range(ranges)]  # noqa: SIM115
    last = np.zeros(ranges, dtype=np.int64)  # each file's last passage written
    n = 0
    try:
        for indptr, indices, counts in hashed_batches:
            rows = len(indptr) - 1
            buckets = indices.astype(np.uint32)
            count = np.clip(np.rint(counts), 1, MAX_COUNT).astype(np.uint32)
            key = (count << np.uint32(COUNT_SHIFT)) | (buckets & np.uint32((1 << shift) - 1))
            doc = np.repeat(np.arange(n, n + rows, dtype=np.int64), np.diff(indptr))
            rid = (buckets >> shift).astype(np.uint16)  # < MAX_RANGES: a radix sort
            order = np.argsort(rid, kind="stable")  # stable: within a range the passages still ascend
            key, doc, rid = key[order], doc[order], rid[order]
            cuts = np.searchsorted(rid, np.arange(ranges + 1))
            present = np.flatnonzero(np.diff(cuts))
            prev = np.empty_like(doc)
            prev[1:] = doc[:-1]
            prev[cuts[present]] = last[present]
            last[present] = doc[cuts[present + 1] - 1]
            rec, rid = _with_fillers(key, doc - prev, rid)
            cuts = np.searchsorted(rid, np.arange(ranges + 1))
            for r in present:
                files[r].write(rec[cuts[r] : cuts[r + 1]].tobytes())
            n += rows
    finally:
        for f in files:
            f.close()
    return n


def _with_fillers(key: np.ndarray, gaps: np.ndarray, rid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``SPILL`` records of ``key`` and ``gaps``, each gap past ``MAX_GAP`` preceded by the filler entries that
    carry it; and each record's range."""
    fill = np.maximum(0, (gaps - 1) // MAX_GAP)
    reps = fill + 1
    total = len(key) + int(fill.sum())
    rec = np.empty(total, dtype=SPILL)
    if total == len(key):
        rec["key"], rec["gap"] = key, gaps
        return rec, rid
    ends = np.cumsum(reps) - 1  # where each entry lands, after its fillers
    rec["key"] = 0
    rec["gap"] = MAX_GAP
    rec["key"][ends] = key
    rec["gap"][ends] = gaps - fill * MAX_GAP
    return rec, np.repeat(rid, reps)


def _ranges(
    spill_dir: Path, ranges: int, n_features: int, sublinear: bool, *, consume: bool = False
) -> Iterator[tuple[int, int, np.ndarray]]:
    """(first bucket, width, decoded ``ENTRY`` entries) of each bucket range, in bucket order; ``consume``: each
    spill file is deleted once read (the last pass), so the spill shrinks as the postings grow."""
    width = n_features // ranges
    for r in range(ranges):
        path = spill_dir / f"range-{r:04d}.bin"
        raw = np.fromfile(path, dtype=SPILL)
        if consume:
            path.unlink()
        doc = np.cumsum(raw["gap"], dtype=np.int64)
        real = raw["key"] >> np.uint32(COUNT_SHIFT) != 0  # fillers carry only their gap
        if not real.all():
            raw, doc = raw[real], doc[real]
        rec = np.empty(len(raw), dtype=ENTRY)
        rec["bucket"] = (raw["key"] & np.uint32(width - 1)) + np.uint32(r * width)
        rec["doc"] = doc
        del doc
        count = (raw["key"] >> np.uint32(COUNT_SHIFT)).astype(np.float32)
        rec["tf"] = 1.0 + np.log(count) if sublinear else count
        del raw
        yield r * width, width, rec


def df_and_norms(
    spill_dir: Path, n: int, min_df: int, ranges: int, n_features: int, sublinear: bool
) -> tuple[list, np.ndarray]:
    """Pass 2: per range, its kept buckets and their df (``min_df`` and over); each passage's L2 norm."""
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    sq = np.zeros(n, dtype=np.float64)
    for lo, width, rec in _ranges(spill_dir, ranges, n_features, sublinear):
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


def quantize(w: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uint8 levels, per-list log of the lowest weight, per-list log step) of ``w``, lists of ``lengths`` laid end to
    end, each ascending: a level is ``round((log w - wlo) / wstep)``, so every weight keeps its rank in its list and
    comes back within half a step of its logarithm."""
    logw = np.log(np.maximum(w, np.float32(1e-30))).astype(np.float32)
    ends = np.cumsum(lengths, dtype=np.int64)
    filled = lengths > 0
    wlo = np.zeros(len(lengths), dtype=np.float32)
    whi = np.zeros(len(lengths), dtype=np.float32)
    wlo[filled], whi[filled] = logw[ends[filled] - lengths[filled]], logw[ends[filled] - 1]
    wstep = ((whi - wlo) / LEVELS).astype(np.float32)
    lo, step = np.repeat(wlo, lengths), np.repeat(wstep, lengths)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(step > 0, np.rint((logw - lo) / step), 0)
    return np.clip(level, 0, LEVELS).astype(np.uint8), wlo, wstep


def snap(w: np.ndarray, wlo: np.ndarray, wstep: np.ndarray) -> np.ndarray:
    """Weights ``w`` of terms whose lists have ``wlo`` and ``wstep``, rounded to their lists' steps as a built list
    stores them (past a list's range they keep counting steps): a passage scored outside the lists (the delta's)
    scores as it would inside them."""
    logw = np.log(np.maximum(w, np.float32(1e-30))).astype(np.float32)
    lo, step = wlo.astype(np.float32), wstep.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = np.where(step > 0, np.rint((logw - lo) / step), 0).astype(np.float32)
    return np.where(step > 0, np.exp(lo + step * level), w).astype(np.float32)


def id_bits(n: int) -> int:
    """Bits a passage id of a corpus of ``n`` passages takes."""
    return max(1, (max(n, 1) - 1).bit_length())


def packed_words(count: int, bits: int) -> int:
    """uint32 words holding ``count`` ids of ``bits`` bits, and the padding word that lets any id be read as two."""
    return (count * bits + 31) // 32 + 1


class BitWriter:
    """Unsigned ids of ``bits`` bits each, packed end to end into little-endian uint32 words written to ``out``."""

    def __init__(self, out: Any, bits: int):
        self.out, self.bits, self.count, self.carry, self.words = out, bits, 0, 0, 0

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        v = values.astype(np.uint64)
        pos = (self.count + np.arange(len(v), dtype=np.int64)) * self.bits
        first = (self.count * self.bits) >> 5
        word = (pos >> 5) - first
        off = (pos & 31).astype(np.uint64)
        # Bit fields that do not overlap: summed (exactly, below 2**53) they are OR-ed.
        low = ((v << off) & np.uint64(0xFFFFFFFF)).astype(np.float64)
        high = (v >> (np.uint64(32) - off)).astype(np.float64)
        size = int(word[-1]) + 2
        out = (np.bincount(word, low, size) + np.bincount(word + 1, high, size)).astype(np.uint64)
        out[0] |= np.uint64(self.carry)
        self.count += len(v)
        end = self.count * self.bits
        full = (end >> 5) - first
        self.out.write(out[:full].astype(np.uint32).tobytes())
        self.words += full
        self.carry = int(out[full]) if end & 31 else 0

    def close(self) -> None:
        tail = [self.carry] if (self.count * self.bits) & 31 else []
        self.out.write(np.array([*tail, 0], dtype=np.uint32).tobytes())
        self.words += len(tail) + 1


def read_lists(
    words: np.ndarray,
    levels: np.ndarray,
    ends: np.ndarray,
    take: np.ndarray,
    wlo: np.ndarray,
    wstep: np.ndarray,
    bits: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, weights) of the last ``take`` postings of each list ending at ``ends``, laid end to end in one array
    each: one gather for every list of a query, not a call per list."""
    total = int(take.sum())
    at = np.repeat(ends - np.cumsum(take), take) + np.arange(total, dtype=np.int64)
    pos = at * bits
    w, off = pos >> 5, (pos & 31).astype(np.uint64)
    both = (words[w].astype(np.uint64) >> off) | (words[w + 1].astype(np.uint64) << (np.uint64(32) - off))
    ids = (both & np.uint64((1 << bits) - 1)).astype(np.int64)
    weights = np.exp(np.repeat(wlo, take) + np.repeat(wstep, take) * levels[at].astype(np.float32))
    return ids, weights


def _kept_tail(df: np.ndarray, keep: int) -> tuple[np.ndarray | slice, np.ndarray]:
    """(which of the lists of ``df`` entries laid end to end stay: each list's last ``keep``, kept lengths)."""
    lengths = np.minimum(df, keep).astype(np.int64)
    long = np.flatnonzero(df > keep)
    if not len(long):
        return slice(None), lengths
    ends = np.cumsum(df, dtype=np.int64)
    mask = np.ones(int(ends[-1]), dtype=bool)
    for t in long.tolist():  # the few lists longer than a query's budget
        mask[ends[t] - df[t] : ends[t] - keep] = False
    return mask, lengths


def write_postings(
    spill_dir: Path,
    out_dir: Path,
    kept: list,
    norms: np.ndarray,
    n: int,
    n_features: int,
    *,
    sublinear: bool,
    keep: int,
) -> dict:
    """Pass 3: the term-major, impact-ordered postings files (each written whole, then moved into place)."""
    specs = {"buckets.npy": np.uint32, "idf.npy": np.float32, "indptr.npy": np.int64, "indices.npy": np.uint32}
    specs.update({"weights.npy": np.uint8, "wlo.npy": np.float32, "wstep.npy": np.float32})
    terms = sum(len(b) for b, _ in kept)
    nnz = int(sum(int(np.minimum(d, keep).sum(dtype=np.int64)) for _, d in kept))
    sizes = dict.fromkeys(("buckets.npy", "idf.npy", "wlo.npy", "wstep.npy"), terms)
    bits = id_bits(n)
    sizes.update({"indptr.npy": terms + 1, "indices.npy": packed_words(nnz, bits), "weights.npy": nnz})
    with contextlib.ExitStack() as stack:
        files = {}
        for name, dtype in specs.items():
            files[name] = stack.enter_context(open(stack.enter_context(atomic_path(out_dir / name)), "wb"))
            _npy_header(files[name], dtype, sizes[name])
        files["indptr.npy"].write(np.zeros(1, dtype=np.int64).tobytes())
        written = 0
        ids = BitWriter(files["indices.npy"], bits)
        ranges = _ranges(spill_dir, len(kept), n_features, sublinear, consume=True)
        for (lo, width, rec), (buckets, df_kept) in zip(ranges, kept):
            df = np.zeros(width, dtype=np.int32)
            df[buckets - lo] = df_kept
            rec = rec[df[rec["bucket"] - lo] > 0]
            w = rec["tf"] * smooth_idf(df[rec["bucket"] - lo], n) / norms[rec["doc"]]
            # By bucket, then weight (positive floats sort as their bits); a stable sort keeps the spill's
            # passage order among equal weights.
            key = (rec["bucket"].astype(np.uint64) << np.uint64(32)) | w.astype(np.float32).view(np.uint32)
            order = np.argsort(key, kind="stable")
            tail, lengths = _kept_tail(df_kept, keep)
            order = order[tail]
            levels, wlo, wstep = quantize(w[order].astype(np.float32), lengths)
            ids.add(rec["doc"][order])
            files["weights.npy"].write(levels.tobytes())
            for name, array in (("buckets.npy", buckets), ("idf.npy", smooth_idf(df_kept, n))):
                files[name].write(array.tobytes())
            files["wlo.npy"].write(wlo.tobytes())
            files["wstep.npy"].write(wstep.tobytes())
            files["indptr.npy"].write((written + np.cumsum(lengths, dtype=np.int64)).tobytes())
            written += len(order)
        ids.close()
        if written != nnz or ids.words != sizes["indices.npy"]:
            raise BuildError(f"{out_dir}: wrote {written} postings of {nnz}")
    return {"terms": terms, "nnz": nnz, "id_bits": bits}


def check_disk(out_dir: Path, n: int) -> None:
    """Refuse to start a build whose spill and output files would not fit the free space (a first estimate)."""
    import shutil

    need = n * ENTRIES_PER_PASSAGE * (SPILL.itemsize + 5)
    free = shutil.disk_usage(out_dir).free
    if need > free:
        raise BuildError(
            f"{out_dir}: the TF-IDF build of {n} passages needs about {need / 2**30:.1f} GiB of disk "
            f"(spill files and postings), {free / 2**30:.1f} GiB free"
        )


def build_postings(
    batches: Iterable[list[str]],
    out_dir: Path,
    params: dict,
    *,
    n: int,
    min_df: int,
    workers: int,
    keep: int | None = None,
    spill_entries: int | None = None,
) -> dict:
    """The whole build of the postings files from ``batches`` of passage texts (``n`` passages in all), each
    list cut to its ``keep`` highest weights (default: the query side's posting budget)."""
    import tempfile

    check_disk(out_dir, n)
    n_features = int(params["n_features"])
    if n_features < 2 or n_features & (n_features - 1) or n_features > MAX_FEATURES:
        raise BuildError(f"n_features must be a power of two up to 2**30, got {n_features}")
    with tempfile.TemporaryDirectory(prefix=".spill-", dir=out_dir) as tmp:
        spill_dir = Path(tmp)
        sublinear = bool(params.get("sublinear_tf", True))
        ranges = range_count(n, n_features, SPILL_ENTRIES if spill_entries is None else spill_entries)
        got = spill(hashed(batches, params, workers), spill_dir, ranges, n_features)
        if got != n:
            raise BuildError(f"{out_dir}: read {got} passages where the store counted {n}")
        spilled = sum(os.path.getsize(p) for p in spill_dir.glob("range-*.bin")) // SPILL.itemsize
        kept, norms = df_and_norms(spill_dir, n, min_df, ranges, n_features, sublinear)
        keep = KEEP if keep is None else keep
        counts = write_postings(spill_dir, out_dir, kept, norms, n, n_features, sublinear=sublinear, keep=keep)
    counts["spilled_entries"] = int(spilled)
    return counts
