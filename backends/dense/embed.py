"""Passage embeddings in resumable shards by passage-id range, then one dense index.

The command line is ``python -m indexer.embed --index DIR [--start A --end B] [--assemble]``.

Each shard ``DIR/dense/shards/{A:012d}-{B:012d}.npy`` holds the float32 vectors of passages
[A, B), written atomically, so an existing shard is complete and is skipped on a re-run
(resume). Ranges are independent: run them on several machines, copy the shards into one
folder, then ``--assemble`` checks they cover 0..N-1 and writes the index.

Scope ``leads`` embeds only each page's lead passage (:func:`lead_ids`): shard ranges then count rows of
that id list, and the shards live in a ``leads/`` sub-folder so they never mix with full-scope ones.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

import numpy as np

from backends.passage_table import connect, passage_count
from wikiground.errors import BuildError, InputError
from wikiground.layout import atomic_path, atomic_write, atomic_write_json, save_npy

log = logging.getLogger(__name__)

SHARD_SIZE = 4096
ENCODE_CHUNK = 256  # passages per encoder call: the progress bar's step
MODEL_FILE = "model.json"  # in the shards folder: which model made the vectors
_SHARD_NAME = re.compile(r"^(\d{12})-(\d{12})\.npy$")
SCOPES = ("auto", "all", "leads")
LEADS_DIR = "leads"  # sub-folder of the shards folder for scope "leads"
# "auto" embeds only leads above this many passages (the README states it, with what it costs on CPU).
LEADS_THRESHOLD = 1_000_000
# Passages/s per core for estimates when no build of the folder recorded a rate (bench_encoder measures it).
RATE_PER_CORE = 16.5


def shard_path(shards_dir: Path, start: int, end: int) -> Path:
    return Path(shards_dir) / f"{start:012d}-{end:012d}.npy"


def shard_ranges(start: int, end: int, *, shard_size: int = SHARD_SIZE) -> list[tuple[int, int]]:
    """[start, end) cut at multiples of ``shard_size``, so separate runs agree on shard names."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size}")
    out = []
    a = start
    while a < end:
        b = min(end, (a // shard_size + 1) * shard_size)
        out.append((a, b))
        a = b
    return out


def shard_is_complete(path: Path, rows: int, dim: int) -> bool:
    """A shard is reused only if its header says (rows, dim) float32 (atomic writes make that enough)."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return False
    return arr.shape == (rows, dim) and arr.dtype == np.float32


def check_model(shards_dir: Path, info: dict) -> dict:
    """Record the model in ``shards_dir/model.json``, or check that existing shards came from the same one."""
    import json

    path = Path(shards_dir) / MODEL_FILE
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BuildError(f"{path}: unreadable: {exc}") from exc
        if (old.get("model"), old.get("sha256"), old.get("dim")) != (info["model"], info["sha256"], info["dim"]):
            raise BuildError(
                f"{path}: shards were made by {old.get('model')} ({old.get('sha256')}), "
                f"not {info['model']} ({info['sha256']}); remove {shards_dir} to re-embed"
            )
        return old
    atomic_write_json(path, info, sort_keys=True)
    return info


def _texts(con, start: int, end: int, db_path: Path, ids: np.ndarray | None = None) -> list[str]:
    """Embedded texts of passages [start, end), or of rows [start, end) of ``ids`` (scope leads)."""
    from backends.encoder import passage_text

    want = np.arange(start, end, dtype=np.int64) if ids is None else np.asarray(ids[start:end], dtype=np.int64)
    if not len(want):
        return []
    rows = con.execute(
        "SELECT passage_id, title, heading_path, text FROM passages "
        "WHERE passage_id >= ? AND passage_id <= ? ORDER BY passage_id",
        [int(want[0]), int(want[-1])],
    ).fetchall()
    if ids is not None:
        keep = set(want.tolist())
        rows = [r for r in rows if r[0] in keep]
    if [r[0] for r in rows] != want.tolist():
        raise InputError(
            f"passages {want[0]}..{want[-1]} ({len(want)} wanted) are not all present ({len(rows)} rows)",
            path=str(db_path),
            where="table passages",
        )
    return [passage_text(title, heading, text) for _, title, heading, text in rows]


def read_texts(db_path: Path, start: int, end: int, ids: np.ndarray | None = None) -> tuple[list[str], str]:
    """Texts of shard [start, end) and their digest, from a fresh read-only connection (for remote readers)."""
    con = connect(Path(db_path))
    try:
        texts = _texts(con, start, end, Path(db_path), ids)
    finally:
        con.close()
    return texts, _digest(texts)


def lead_ids(con) -> np.ndarray:
    """Sorted passage ids of each page's lead passage: its first text passage (its first passage if it has none)."""
    rows = con.execute(
        "SELECT min_by(passage_id, (source <> 'text', passage_index, passage_id)) AS pid "
        "FROM passages GROUP BY page_id ORDER BY pid"
    ).fetchnumpy()
    return np.asarray(rows["pid"], dtype=np.int64)


def resolve_scope(scope: str, n: int) -> str:
    """ "all" or "leads": "auto" is "leads" above :data:`LEADS_THRESHOLD` passages."""
    if scope not in SCOPES:
        raise InputError(f"unknown dense scope {scope!r}; expected one of {', '.join(SCOPES)}")
    if scope == "auto":
        return "leads" if n > LEADS_THRESHOLD else "all"
    return scope


def scope_rows(con, scope: str) -> np.ndarray | None:
    """The passage ids the dense rows stand for: None (row = passage id) for "all"."""
    return lead_ids(con) if scope == "leads" else None


def scope_shards_dir(shards_dir: Path, scope: str) -> Path:
    return Path(shards_dir) / LEADS_DIR if scope == "leads" else Path(shards_dir)


def _digest(texts: list[str]) -> str:
    import hashlib

    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


def _digest_path(shards_dir: Path, start: int, end: int) -> Path:
    return shard_path(shards_dir, start, end).with_suffix(".sha256")


def _recorded_digest(shards_dir: Path, start: int, end: int) -> str | None:
    try:
        return _digest_path(shards_dir, start, end).read_text(encoding="ascii").strip()
    except OSError:
        return None


def _write_digest(shards_dir: Path, start: int, end: int, digest: str) -> None:
    atomic_write(_digest_path(shards_dir, start, end), digest + "\n")


def write_shard(shards_dir: Path, start: int, end: int, vecs: np.ndarray, digest: str) -> None:
    """The shard's vectors, then its digest (the seal that makes a re-run keep it); both atomic."""
    save_npy(shard_path(shards_dir, start, end), np.ascontiguousarray(vecs, dtype=np.float32))
    _write_digest(shards_dir, start, end, digest)


def pending_shards(
    con, db_path: Path, shards_dir: Path, start: int, end: int, *, shard_size: int, ids: np.ndarray | None = None
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(all shard ranges of [start, end), those still to encode): complete, current shards are kept."""
    ranges = shard_ranges(start, end, shard_size=shard_size)
    todo = [(a, b) for a, b in ranges if not _shard_is_current(con, db_path, shards_dir, a, b, ids)]
    if len(ranges) > len(todo):
        log.info("resuming: %d complete shards kept in %s", len(ranges) - len(todo), shards_dir)
    return ranges, todo


def check_range(start: int, end: int | None, n: int, db_path: Path) -> int:
    """``end`` clipped to ``n``, or InputError for a bad range."""
    end = n if end is None else min(end, n)
    if start < 0 or start > end:
        raise InputError(f"bad passage range [{start}, {end}) for {n} passages", path=str(db_path))
    return end


def embed_range(
    db_path: Path,
    shards_dir: Path,
    *,
    start: int = 0,
    end: int | None = None,
    shard_size: int = SHARD_SIZE,
    encoder=None,
    backend: str = "auto",
    threads: int | None = None,
    batch_size: int = 32,
    progress: bool = False,
    ids: np.ndarray | None = None,
) -> dict:
    """Encode passages [start, end) into shards under ``shards_dir``, skipping complete ones.

    With ``ids`` (scope leads), [start, end) are rows of ``ids`` and row r holds passage ``ids[r]``.
    """
    db_path, shards_dir = Path(db_path), Path(shards_dir)
    con = connect(db_path)
    try:
        n = passage_count(con, db_path) if ids is None else len(ids)
        end = check_range(start, end, n, db_path)
        shards_dir.mkdir(parents=True, exist_ok=True)
        ranges, todo = pending_shards(con, db_path, shards_dir, start, end, shard_size=shard_size, ids=ids)
        t0 = time.perf_counter()
        if todo:
            from backends.encoder import load_encoder, model_info

            encoder = encoder or load_encoder(backend=backend, threads=threads)
            check_model(shards_dir, model_info(encoder.backend))
        _encode_shards(con, db_path, shards_dir, todo, encoder, batch_size=batch_size, progress=progress, ids=ids)
    finally:
        con.close()
    return run_stats(
        n, ranges, todo, time.perf_counter() - t0, encoder.backend if encoder is not None else None, shards_dir
    )


def run_stats(n: int, ranges: list, todo: list, secs: float, backend: str | None, shards_dir: Path) -> dict:
    encoded = sum(b - a for a, b in todo)
    return {
        "passages": n,
        "encoded": encoded,
        "shards_written": len(todo),
        "shards_skipped": len(ranges) - len(todo),
        "encode_seconds": round(secs, 2),
        "passages_per_s": round(encoded / secs, 1) if encoded and secs > 0 else None,
        "encoder_backend": backend or recorded_backend(shards_dir),
    }


def _shard_is_current(con, db_path: Path, shards_dir: Path, a: int, b: int, ids: np.ndarray | None = None) -> bool:
    """A shard is kept only if complete and made from the same passage texts: the store may have been rebuilt
    from other inputs since (shards outlive a failed build so that it can resume)."""
    from backends.encoder import DIM

    return shard_is_complete(shard_path(shards_dir, a, b), b - a, DIM) and _recorded_digest(
        shards_dir, a, b
    ) == _digest(_texts(con, a, b, db_path, ids))


def encode_texts(encoder, texts: list[str], *, batch_size: int, step=None) -> np.ndarray:
    """One shard's vectors, in ENCODE_CHUNK calls (every engine chunks alike, so vectors match across them)."""
    from backends.encoder import DIM

    vecs = np.empty((len(texts), DIM), dtype=np.float32)
    for i in range(0, len(texts), ENCODE_CHUNK):
        chunk = texts[i : i + ENCODE_CHUNK]
        vecs[i : i + len(chunk)] = encoder.encode(chunk, batch_size=batch_size)
        if step is not None:
            step(len(chunk))
    return vecs


def _encode_shards(
    con,
    db_path: Path,
    shards_dir: Path,
    todo: list[tuple[int, int]],
    encoder,
    *,
    batch_size: int,
    progress: bool,
    ids: np.ndarray | None = None,
) -> None:
    """Encode each passage range of ``todo`` and write its shard, then its digest (the shard's seal)."""
    from tqdm import tqdm

    total = sum(b - a for a, b in todo)
    with tqdm(total=total, unit="passage", desc="embed", disable=not progress, file=sys.stderr) as bar:
        for a, b in todo:
            texts = _texts(con, a, b, db_path, ids)
            vecs = encode_texts(encoder, texts, batch_size=batch_size, step=bar.update)
            write_shard(shards_dir, a, b, vecs, _digest(texts))


def recorded_backend(shards_dir: Path) -> str | None:
    """The encoder backend model.json names (first run that wrote shards)."""
    import json

    try:
        return json.loads((Path(shards_dir) / MODEL_FILE).read_text(encoding="utf-8")).get("encoder_backend")
    except (OSError, ValueError):
        return None


def list_shards(shards_dir: Path) -> list[tuple[int, int, Path]]:
    out = []
    for p in Path(shards_dir).glob("*.npy"):
        m = _SHARD_NAME.match(p.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), p))
    return sorted(out)


def cover(shards_dir: Path, n: int, *, dim: int) -> list[tuple[int, int, Path]]:
    """Shards tiling 0..n-1 in order (longest first where several start at one id), or BuildError naming the gap."""
    by_start: dict[int, list[tuple[int, int, Path]]] = {}
    for a, b, p in list_shards(shards_dir):
        if b <= n:
            by_start.setdefault(a, []).append((a, b, p))
    chain = []
    pos = 0
    while pos < n:
        cands = sorted(by_start.get(pos, []), key=lambda s: -s[1])
        cands = [s for s in cands if shard_is_complete(s[2], s[1] - s[0], dim)]
        if not cands:
            nxt = min((a for a in by_start if a > pos), default=n)
            raise BuildError(
                f"{shards_dir}: no complete shard covers passages [{pos}, {nxt}) of {n}; "
                f"run `python -m indexer.embed --start {pos} --end {nxt}`"
            )
        chain.append(cands[0])
        pos = cands[0][1]
    return chain


def concatenate(shards_dir: Path, target: Path, n: int, *, dim: int) -> Path:
    """Write the (n, dim) float32 matrix of all shards to ``target`` (streamed, atomic)."""
    chain = cover(shards_dir, n, dim=dim)
    with atomic_path(target) as tmp:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, dim))
        for a, b, p in chain:
            out[a:b] = np.load(p, mmap_mode="r", allow_pickle=False)
        out.flush()
        del out
    return target


def plan_scope(db_path: Path, scope: str) -> tuple[str, np.ndarray | None, int]:
    """(scope resolved, the passage ids of the dense rows or None for all, the store's passage count)."""
    con = connect(Path(db_path))
    try:
        n = passage_count(con, Path(db_path))
        resolved = resolve_scope(scope, n)
        return resolved, scope_rows(con, resolved), n
    finally:
        con.close()


LONG_EMBED_SECONDS = 600  # an embed expected to take longer gets the estimate at warning level


def embed_estimate(db_path: Path, scope: str, *, rate: float | None = None, cores: int | None = None) -> dict:
    """What embedding the store would take: passages, lead passages, the scope "auto" resolves to, and seconds
    for each at ``rate`` passages/s (default: RATE_PER_CORE per core)."""
    from backends.encoder import default_threads

    con = connect(Path(db_path))
    try:
        n = passage_count(con, Path(db_path))
        ((leads,),) = con.execute("SELECT count(DISTINCT page_id) FROM passages").fetchall()
    finally:
        con.close()
    measured = rate is not None and rate > 0
    rate = float(rate) if measured else RATE_PER_CORE * (cores or default_threads())
    resolved = resolve_scope(scope, n)
    return {
        "passages": n,
        "leads": int(leads),
        "scope": resolved,
        "rate": rate,
        "rate_source": "recorded" if measured else "estimated",
        "seconds_all": n / rate,
        "seconds_leads": leads / rate,
        "seconds": (leads if resolved == "leads" else n) / rate,
    }


def duration(seconds: float) -> str:
    """4 min, 5.2 h, 14 days: the scale a person plans with."""
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    days = seconds / 86400
    return f"{days:.1f} days" if days < 10 else f"{days:.0f} days"


def estimate_message(est: dict, requested: str) -> str:
    """One line for the user before a long embed, saying what the scope choice costs."""
    all_part = f"{est['passages']:,} passages at ~{est['rate']:.0f}/s ≈ {duration(est['seconds_all'])} here"
    leads_part = f"{est['leads']:,} lead passages ≈ {duration(est['seconds_leads'])}"
    if est["scope"] == "leads" and requested == "auto":
        return (
            f"dense: {all_part}, above {LEADS_THRESHOLD:,} passages: embedding each page's lead passage only "
            f"({leads_part}); --dense-scope all embeds them all, or embed on a cluster with "
            "`python -m indexer.embed --engine ray`"
        )
    if est["scope"] == "leads":
        return f"dense: embedding each page's lead passage only: {leads_part} (all: {all_part})"
    return f"dense: {all_part}; use `python -m indexer.embed --engine ray` or --dense-scope leads ({leads_part})"
