"""Passage embeddings in resumable shards by passage-id range, then one dense index.

The command line is ``python -m indexer.embed --index DIR [--start A --end B] [--assemble]``.

Each shard ``DIR/dense/shards/{A:012d}-{B:012d}.npy`` holds the float32 vectors of passages
[A, B), written atomically, so an existing shard is complete and is skipped on a re-run
(resume). Ranges are independent: run them on several machines, copy the shards into one
folder, then ``--assemble`` checks they cover 0..N-1 and writes the index.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from pathlib import Path

import numpy as np

from backends.passage_table import connect, passage_count, save_npy
from wikiground.errors import BuildError, InputError
from wikiground.layout import atomic_path, atomic_write, atomic_write_json

log = logging.getLogger(__name__)

SHARD_SIZE = 4096
ENCODE_CHUNK = 256  # passages per encoder call: the progress bar's step
MODEL_FILE = "model.json"  # in the shards folder: which model made the vectors
_SHARD_NAME = re.compile(r"^(\d{12})-(\d{12})\.npy$")


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


def _texts(con, start: int, end: int, db_path: Path) -> list[str]:
    from backends.encoder import passage_text

    rows = con.execute(
        "SELECT passage_id, title, heading_path, text FROM passages "
        "WHERE passage_id >= ? AND passage_id < ? ORDER BY passage_id",
        [start, end],
    ).fetchall()
    if len(rows) != end - start or (rows and (rows[0][0] != start or rows[-1][0] != end - 1)):
        raise InputError(
            f"passages [{start}, {end}) are not all present ({len(rows)} rows)",
            path=str(db_path),
            where="table passages",
        )
    return [passage_text(title, heading, text) for _, title, heading, text in rows]


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
) -> dict:
    """Encode passages [start, end) into shards under ``shards_dir``, skipping complete ones."""
    db_path, shards_dir = Path(db_path), Path(shards_dir)
    con = connect(db_path)
    try:
        n = passage_count(con, db_path)
        end = n if end is None else min(end, n)
        if start < 0 or start > end:
            raise InputError(f"bad passage range [{start}, {end}) for {n} passages", path=str(db_path))
        shards_dir.mkdir(parents=True, exist_ok=True)
        ranges = shard_ranges(start, end, shard_size=shard_size)
        todo = [(a, b) for a, b in ranges if not _shard_is_current(con, db_path, shards_dir, a, b)]
        if len(ranges) > len(todo):
            log.info("resuming: %d complete shards kept in %s", len(ranges) - len(todo), shards_dir)
        t0 = time.perf_counter()
        if todo:
            from backends.encoder import load_encoder, model_info

            encoder = encoder or load_encoder(backend=backend, threads=threads)
            check_model(shards_dir, model_info(encoder.backend))
        _encode_shards(con, db_path, shards_dir, todo, encoder, batch_size=batch_size, progress=progress)
    finally:
        con.close()
    secs = time.perf_counter() - t0
    encoded = sum(b - a for a, b in todo)
    return {
        "passages": n,
        "encoded": encoded,
        "shards_written": len(todo),
        "shards_skipped": len(ranges) - len(todo),
        "encode_seconds": round(secs, 2),
        "passages_per_s": round(encoded / secs, 1) if encoded and secs > 0 else None,
        "encoder_backend": encoder.backend if encoder is not None else recorded_backend(shards_dir),
    }


def _shard_is_current(con, db_path: Path, shards_dir: Path, a: int, b: int) -> bool:
    """A shard is kept only if complete and made from the same passage texts: the store may have been rebuilt
    from other inputs since (shards outlive a failed build so that it can resume)."""
    from backends.encoder import DIM

    return shard_is_complete(shard_path(shards_dir, a, b), b - a, DIM) and _recorded_digest(
        shards_dir, a, b
    ) == _digest(_texts(con, a, b, db_path))


def _encode_shards(
    con, db_path: Path, shards_dir: Path, todo: list[tuple[int, int]], encoder, *, batch_size: int, progress: bool
) -> None:
    """Encode each passage range of ``todo`` and write its shard, then its digest (the shard's seal)."""
    from tqdm import tqdm

    from backends.encoder import DIM

    total = sum(b - a for a, b in todo)
    with tqdm(total=total, unit="passage", desc="embed", disable=not progress, file=sys.stderr) as bar:
        for a, b in todo:
            texts = _texts(con, a, b, db_path)
            vecs = np.empty((b - a, DIM), dtype=np.float32)
            for i in range(0, len(texts), ENCODE_CHUNK):
                chunk = texts[i : i + ENCODE_CHUNK]
                vecs[i : i + len(chunk)] = encoder.encode(chunk, batch_size=batch_size)
                bar.update(len(chunk))
            save_npy(shard_path(shards_dir, a, b), vecs)
            _write_digest(shards_dir, a, b, _digest(texts))


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
