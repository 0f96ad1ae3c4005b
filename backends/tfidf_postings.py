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
from wikiground.layout import atomic_path, write_npy_header

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
KEPT = np.dtype([("bucket", "<u4"), ("df", "<i4")])  # a range's kept buckets and their df, between passes 2 and 3
# What the passes over the spill hold: a peak of about ENTRY_PEAK_BYTES an entry of the range (or run of lists) in
# hand, beside NORM_BYTES a passage (its squared norm, float64, then its norm, float32). A range that holds a common
# word's bucket grows with the corpus, so a range of more than the entries the memory allows is read in pieces.
ENTRY_PEAK_BYTES = 100
NORM_BYTES = 12
MIN_PIECE_ENTRIES = 1 << 20


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


def accumulate(local: Any, size: int, lists: Iterable[tuple[np.ndarray, np.ndarray, float]]):
    """(passages touched, their summed scores) of ``lists``: each a query term's (passages, their weights, the
    term's query weight), summed in the calling thread's accumulator ``local.acc`` of ``size`` passages (made on
    first use, cleaned after, dropped if interrupted half-way)."""
    acc = getattr(local, "acc", None)
    if acc is None:
        acc = local.acc = np.zeros(size, dtype=np.float32)  # zero pages cost nothing until touched
    fresh = []
    try:
        for rows, row_weights, w in lists:
            cur = acc[rows]
            fresh.append(rows[cur == 0])  # a passage's first term: weights are > 0, so 0 means untouched
            acc[rows] = cur + row_weights * np.float32(w)
        ids = np.concatenate(fresh) if fresh else np.zeros(0, dtype=np.int32)
        scores = acc[ids]
        acc[ids] = 0  # clean for the next query
    except BaseException:
        local.acc = None  # never reuse a dirty accumulator
        raise
    return ids.astype(np.int64), scores


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


def _decode(raw: np.ndarray, lo: int, width: int, sublinear: bool, first: int) -> tuple[np.ndarray, int]:
    """(decoded ``ENTRY`` entries of ``raw`` spill records of the range starting at bucket ``lo``, the passage of
    the last record): ``first`` is the passage the records' first gap counts from."""
    doc = np.cumsum(raw["gap"], dtype=np.int64)
    if first:
        doc += first
    last = int(doc[-1]) if len(doc) else first
    real = raw["key"] >> np.uint32(COUNT_SHIFT) != 0  # fillers carry only their gap
    if not real.all():
        raw, doc = raw[real], doc[real]
    rec = np.empty(len(raw), dtype=ENTRY)
    rec["bucket"] = (raw["key"] & np.uint32(width - 1)) + np.uint32(lo)
    rec["doc"] = doc
    del doc
    count = (raw["key"] >> np.uint32(COUNT_SHIFT)).astype(np.float32)
    rec["tf"] = 1.0 + np.log(count) if sublinear else count
    return rec, last


def range_path(spill_dir: Path, r: int, kind: str = "range") -> Path:
    """Range ``r``'s spill file (``range``) or its kept buckets and their df (``kept``, written by pass 2)."""
    return spill_dir / (f"range-{r:04d}.bin" if kind == "range" else f"kept-{r:04d}.npy")


def spilled_entries(path: Path) -> int:
    """Records in a range's spill file (fillers included): whether it is held whole or read in pieces."""
    return os.path.getsize(path) // SPILL.itemsize


def range_entries(path: Path, lo: int, width: int, sublinear: bool, chunk: int) -> Iterator[np.ndarray]:
    """The decoded entries of one range's spill file, at most ``chunk`` at a time (each passage's gap carried from
    the piece before): a range holding a common word's bucket grows with the corpus, so it is never read whole."""
    total = spilled_entries(path)
    if total <= chunk:
        yield _decode(np.fromfile(path, dtype=SPILL), lo, width, sublinear, 0)[0]
        return
    last = 0
    with open(path, "rb") as f:
        for start in range(0, total, chunk):
            rec, last = _decode(
                np.fromfile(f, dtype=SPILL, count=min(chunk, total - start)), lo, width, sublinear, last
            )
            yield rec


def _kept_df(df: np.ndarray, min_df: int) -> np.ndarray:
    df = df.astype(np.int32)
    df[df < min_df] = 0
    return df


def _add_squares(sq: np.ndarray, rec: np.ndarray, df: np.ndarray, lo: int, n: int) -> None:
    """Each entry's squared tf-idf weight (``df`` of the range's buckets from ``lo``; 0: not kept) into ``sq``."""
    keep = df[rec["bucket"] - lo] > 0
    w = rec["tf"][keep] * smooth_idf(df[rec["bucket"][keep] - lo], n)
    np.add.at(sq, rec["doc"][keep], np.square(w, dtype=np.float64))


def df_and_norms(
    spill_dir: Path, n: int, min_df: int, ranges: int, n_features: int, sublinear: bool, *, cap: int, keep: int
) -> tuple[np.ndarray, dict]:
    """Pass 2: per range, its kept buckets and their df (``min_df`` and over) into its ``kept`` file; each passage's
    L2 norm; the postings' totals (``terms``, ``nnz`` with every list cut to ``keep``). A range of more than ``cap``
    entries is read in pieces twice (df, then norms) rather than held whole."""
    sq = np.zeros(n, dtype=np.float64)
    width = n_features // ranges
    terms = nnz = 0
    for r in range(ranges):
        lo, path = r * width, range_path(spill_dir, r)
        whole = spilled_entries(path) <= cap
        df, held = np.zeros(width, dtype=np.int64), None
        for rec in range_entries(path, lo, width, sublinear, cap):
            df += np.bincount(rec["bucket"] - lo, minlength=width)
            held = rec if whole else None
        df = _kept_df(df, min_df)
        for rec in [held] if whole else range_entries(path, lo, width, sublinear, cap):
            _add_squares(sq, rec, df, lo, n)
        del held
        buckets = np.flatnonzero(df)
        kept = np.empty(len(buckets), dtype=KEPT)
        kept["bucket"], kept["df"] = buckets + lo, df[buckets]
        np.save(range_path(spill_dir, r, "kept"), kept)
        terms, nnz = terms + len(kept), nnz + int(np.minimum(kept["df"], keep).sum(dtype=np.int64))
    norms = np.sqrt(sq).astype(np.float32)
    del sq
    norms[norms == 0] = 1.0
    return norms, {"terms": terms, "nnz": nnz}


class _PostingsWriter:
    """The files of ``FILES`` for ``terms`` lists of ``nnz`` postings in all, each written whole to a temporary path
    and moved into place as the build's ``ExitStack`` closes; lists are added in bucket order."""

    def __init__(self, stack: contextlib.ExitStack, out_dir: Path, terms: int, nnz: int, bits: int, n: int):
        specs = {"buckets.npy": np.uint32, "idf.npy": np.float32, "indptr.npy": np.int64, "indices.npy": np.uint32}
        specs.update({"weights.npy": np.uint8, "wlo.npy": np.float32, "wstep.npy": np.float32})
        sizes = dict.fromkeys(("buckets.npy", "idf.npy", "wlo.npy", "wstep.npy"), terms)
        sizes.update({"indptr.npy": terms + 1, "indices.npy": packed_words(nnz, bits), "weights.npy": nnz})
        self.files, self.sizes, self.n, self.nnz, self.written = {}, sizes, n, nnz, 0
        for name, dtype in specs.items():
            self.files[name] = stack.enter_context(open(stack.enter_context(atomic_path(out_dir / name)), "wb"))
            write_npy_header(self.files[name], dtype, sizes[name], version=(2, 0))
        self.files["indptr.npy"].write(np.zeros(1, dtype=np.int64).tobytes())
        self.ids = BitWriter(self.files["indices.npy"], bits)

    def add(self, kept: np.ndarray, docs: np.ndarray, w: np.ndarray, lengths: np.ndarray) -> None:
        """The lists of the ``kept`` buckets: ``docs`` and their weights ``w``, each list's ascending, end to end."""
        levels, wlo, wstep = quantize(w, lengths)
        self.ids.add(docs)
        self.files["weights.npy"].write(levels.tobytes())
        self.files["buckets.npy"].write(kept["bucket"].astype(np.uint32).tobytes())
        self.files["idf.npy"].write(smooth_idf(kept["df"], self.n).tobytes())
        self.files["wlo.npy"].write(wlo.tobytes())
        self.files["wstep.npy"].write(wstep.tobytes())
        self.files["indptr.npy"].write((self.written + np.cumsum(lengths, dtype=np.int64)).tobytes())
        self.written += len(docs)

    def close(self, out_dir: Path) -> None:
        self.ids.close()
        if self.written != self.nnz or self.ids.words != self.sizes["indices.npy"]:
            raise BuildError(f"{out_dir}: wrote {self.written} postings of {self.nnz}")


def _lists(rec: np.ndarray, kept: np.ndarray, lo: int, width: int, n: int, norms: np.ndarray, keep: int):
    """(passages, weights, lengths) of the ``kept`` buckets' lists from ``rec``, the entries of their range that
    start at bucket ``lo``: final weights (tf * idf / norm), each list ascending by weight, cut to its ``keep``
    highest."""
    df = np.zeros(width, dtype=np.int32)
    df[kept["bucket"] - lo] = kept["df"]
    rec = rec[df[rec["bucket"] - lo] > 0]
    w = rec["tf"] * smooth_idf(df[rec["bucket"] - lo], n) / norms[rec["doc"]]
    # By bucket, then weight (positive floats sort as their bits); a stable sort keeps the spill's passage order
    # among equal weights.
    key = (rec["bucket"].astype(np.uint64) << np.uint64(32)) | w.astype(np.float32).view(np.uint32)
    order = np.argsort(key, kind="stable")
    del key
    tail, lengths = _kept_tail(kept["df"], keep)
    order = order[tail]
    return rec["doc"][order], w[order].astype(np.float32), lengths


def _streamed_list(pieces: Iterable[np.ndarray], kept: np.ndarray, n: int, norms: np.ndarray, keep: int):
    """:func:`_lists` of one bucket too common to hold (``kept`` of one row), its range read in ``pieces``: the
    ``keep`` highest (weight, passage) keys kept as they pass, which is the tail a stable sort by weight keeps."""
    bucket, idf = int(kept["bucket"][0]), smooth_idf(kept["df"], n)[0]
    best = np.zeros(0, dtype=np.uint64)
    for rec in pieces:
        rec = rec[rec["bucket"] == bucket]
        w = rec["tf"] * idf / norms[rec["doc"]]
        keys = (w.astype(np.float32).view(np.uint32).astype(np.uint64) << np.uint64(32)) | rec["doc"].astype(np.uint64)
        best = np.concatenate([best, keys])
        if len(best) > keep:
            best = np.partition(best, len(best) - keep)[len(best) - keep :]
    best.sort()
    w = (best >> np.uint64(32)).astype(np.uint32).view(np.float32)
    return (best & np.uint64(0xFFFFFFFF)).astype(np.int64), w, np.array([len(best)], dtype=np.int64)


def spans(df: np.ndarray, cap: int) -> list[tuple[int, int]]:
    """Runs ``[a, b)`` of consecutive buckets with ``df`` entries each, at most ``cap`` entries a run (a bucket of more
    is a run of its own)."""
    ends = np.cumsum(df, dtype=np.int64)
    out, a = [], 0
    while a < len(df):
        b = max(a + 1, int(np.searchsorted(ends, (int(ends[a - 1]) if a else 0) + cap, side="right")))
        out.append((a, b))
        a = b
    return out


def _range_lists(path: Path, kept: np.ndarray, lo: int, width: int, *, sublinear: bool, cap: int, n, norms, keep):
    """Each run of the range's lists (:func:`spans`): its entries gathered from the range's file, read in pieces."""
    for a, b in spans(kept["df"], cap):
        run = kept[a:b]
        pieces = range_entries(path, lo, width, sublinear, cap)
        if b - a == 1 and int(run["df"][0]) > cap:
            yield run, _streamed_list(pieces, run, n, norms, keep)
            continue
        inside = np.zeros(width, dtype=bool)
        inside[run["bucket"] - lo] = True
        rec = np.concatenate([p[inside[p["bucket"] - lo]] for p in pieces])
        yield run, _lists(rec, run, lo, width, n, norms, keep)


def write_postings(
    spill_dir: Path,
    out_dir: Path,
    totals: dict,
    norms: np.ndarray,
    n: int,
    n_features: int,
    ranges: int,
    *,
    sublinear: bool,
    keep: int,
    cap: int,
) -> dict:
    """Pass 3: the term-major, impact-ordered postings files; each range's spill file is deleted once read, and a
    range of more than ``cap`` entries is written a run of its lists at a time."""
    bits, width = id_bits(n), n_features // ranges
    with contextlib.ExitStack() as stack:
        out = _PostingsWriter(stack, out_dir, totals["terms"], totals["nnz"], bits, n)
        for r in range(ranges):
            lo, path, kept_path = r * width, range_path(spill_dir, r), range_path(spill_dir, r, "kept")
            kept = np.load(kept_path)
            if spilled_entries(path) <= cap:
                (rec,) = range_entries(path, lo, width, sublinear, cap)
                path.unlink()
                out.add(kept, *_lists(rec, kept, lo, width, n, norms, keep))
                del rec
            else:
                for run, lists in _range_lists(
                    path, kept, lo, width, sublinear=sublinear, cap=cap, n=n, norms=norms, keep=keep
                ):
                    out.add(run, *lists)
                path.unlink()
            kept_path.unlink()
        out.close(out_dir)
    return {"terms": totals["terms"], "nnz": totals["nnz"], "id_bits": bits}


def check_disk(out_dir: Path, n: int) -> None:
    """Refuse to start a build whose spill would not fit the free space (a first estimate). The postings are
    written as the spill is read, each range's spill file deleted once its lists are out, and they are smaller than
    the spill (min_df and the list cap drop entries; 4 bytes an entry against 6): the peak is the spill's."""
    import shutil

    need = n * ENTRIES_PER_PASSAGE * SPILL.itemsize
    free = shutil.disk_usage(out_dir).free
    if need > free:
        raise BuildError(
            f"{out_dir}: the TF-IDF build of {n} passages needs about {need / 2**30:.1f} GiB of disk "
            f"(spill files and postings), {free / 2**30:.1f} GiB free"
        )


def piece_entries(n: int, memory: int | None) -> int:
    """Entries of a range held at once (a range of more is read in pieces): ``SPILL_ENTRIES``, or fewer where
    ``memory`` (the bytes the postings' passes may hold) less the passages' norms leaves less room."""
    if memory is None:
        return SPILL_ENTRIES
    room = int(memory) - n * NORM_BYTES
    return int(min(SPILL_ENTRIES, max(MIN_PIECE_ENTRIES, room // ENTRY_PEAK_BYTES)))


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
    memory: int | None = None,
    piece: int | None = None,
) -> dict:
    """The whole build of the postings files from ``batches`` of passage texts (``n`` passages in all), each
    list cut to its ``keep`` highest weights (default: the query side's posting budget). ``memory``: the bytes
    the passes over the spill may hold (:func:`piece_entries`); ``spill_entries`` (entries a range is sized for)
    and ``piece`` (entries held at once) override what it gives."""
    import tempfile

    check_disk(out_dir, n)
    n_features = int(params["n_features"])
    if n_features < 2 or n_features & (n_features - 1) or n_features > MAX_FEATURES:
        raise BuildError(f"n_features must be a power of two up to 2**30, got {n_features}")
    cap = piece_entries(n, memory)
    ranges = range_count(n, n_features, cap if spill_entries is None else spill_entries)
    cap = cap if piece is None else int(piece)
    keep = KEEP if keep is None else keep
    with tempfile.TemporaryDirectory(prefix=".spill-", dir=out_dir) as tmp:
        spill_dir = Path(tmp)
        sublinear = bool(params.get("sublinear_tf", True))
        got = spill(hashed(batches, params, workers), spill_dir, ranges, n_features)
        if got != n:
            raise BuildError(f"{out_dir}: read {got} passages where the store counted {n}")
        spilled = sum(os.path.getsize(p) for p in spill_dir.glob("range-*.bin")) // SPILL.itemsize
        norms, totals = df_and_norms(spill_dir, n, min_df, ranges, n_features, sublinear, cap=cap, keep=keep)
        counts = write_postings(
            spill_dir, out_dir, totals, norms, n, n_features, ranges, sublinear=sublinear, keep=keep, cap=cap
        )
    counts["spilled_entries"] = int(spilled)
    return counts
