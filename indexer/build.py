"""Build an index folder: inputs -> ``wiki.duckdb`` -> search indexes -> ``manifest.json``, atomically.

The main process only decompresses and cuts dumps at ``</page>`` into chunks of whole pages (JSONL:
batches of :data:`BATCH_PAGES` pages); a process pool parses the chunks with mwxml, cleans and chunks
the pages, and returns Arrow tables. Multistream bz2 is decompressed by the pool too, a group of
streams per task. Results come back in input order (so the store is identical for any worker count)
and are bulk-loaded by :class:`~indexer.store_writer.StoreWriter`. Everything is written into a
temp folder next to ``out`` that replaces ``out`` only when complete.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import backends
from indexer.manifest import write_manifest
from indexer.readers import GroupDecompressor, InputReader, RawPage, XmlChunk, decompress_group, expand_inputs
from indexer.store_writer import (
    DEFAULT_MAX_PAGE_CHARS,
    DEFAULT_PASSAGE_WORDS,
    RowBatch,
    StoreWriter,
    process_batch,
    process_xml_chunk,
    usable_cpus,
)
from wikiground import __version__
from wikiground.errors import BuildError, ConfigError, InputError, WikigroundError
from wikiground.layout import BUILT_CHANNELS, MANIFEST_FILE, STORE_FILE, swap_folder

logger = logging.getLogger(__name__)

BATCH_PAGES = 64
WARM_POOL_BYTES = 4 << 20  # inputs at least this large start the worker pool before the first task
INFLIGHT_PER_WORKER = 4  # tasks queued per worker: keeps workers busy, memory bounded
DECOMPRESS_AHEAD_PER_WORKER = 2  # multistream bz2 stream groups decompressed ahead per worker
# Imported once in the fork server, inherited by every worker. pandas: pyarrow imports it on the first
# pa.array call (to recognise pandas inputs), ~0.2 CPU-s that each worker would otherwise pay.
_WORKER_PRELOAD = [
    "indexer.store_writer",
    "indexer.readers",
    "indexer.wikitext",
    "indexer.chunking",
    "mwxml",
    "pyarrow",
    "pandas",
]


def build_index(
    inputs: Sequence[str | Path] | str | Path,
    out: str | Path,
    *,
    indexes: Sequence[str] = BUILT_CHANNELS,
    namespaces: Sequence[int] = (0,),
    workers: int | None = None,
    progress: bool = False,
    index_options: Mapping[str, Mapping] | None = None,
    max_page_chars: int = DEFAULT_MAX_PAGE_CHARS,
    passage_words: int = DEFAULT_PASSAGE_WORDS,
) -> dict[str, Any]:
    """Ingest dumps / JSONL corpora into ``out`` (store + chosen indexes) and return the manifest.

    ``workers``: cleaner processes (default: the usable CPUs; 1 = in-process). On any failure the
    partial build is removed, an existing ``out`` is left untouched and the error is raised.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A worker process is importing the caller's main module, which calls build_index at its top level:
        # stop here, before any folder is made (the caller's own build reports the dead worker).
        raise ConfigError(
            'build_index called while a worker process starts: call it under `if __name__ == "__main__":`'
        )
    started = time.time()
    indexes = _check_indexes(indexes)
    namespaces = sorted({int(n) for n in namespaces})
    if not namespaces:
        raise ConfigError("namespaces: give at least one namespace number")
    workers = usable_cpus() if workers is None else int(workers)
    if max_page_chars < 1 or passage_words < 1:
        raise ConfigError("max_page_chars and passage_words must be positive")
    index_options = {name: dict(opts) for name, opts in (index_options or {}).items()}
    paths = expand_inputs(inputs)
    out = Path(out).absolute()
    _check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)

    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        ingest = _ingest(
            paths,
            tmp / STORE_FILE,
            namespaces=namespaces,
            workers=workers,
            progress=progress,
            max_page_chars=max_page_chars,
            passage_words=passage_words,
        )
        ingest_seconds = time.time() - started
        built: dict[str, Any] = {}
        for name in indexes:
            opts = dict(index_options.get(name, {}))
            if name == "dense":
                # Embedding shards live beside the index, outside the temporary folder: a failed or
                # interrupted build resumes from them (each shard is checked against its passages' text).
                opts.setdefault("shards_dir", _dense_shards_dir(out))
            built[name] = _build_one(name, tmp, progress=progress, options=opts)
        finished = time.time()
        readers = ingest.pop("readers")
        sites = [r.stats.siteinfo for r in readers if r.stats.siteinfo]
        stamps = [r.stats.newest_rev_timestamp for r in readers if r.stats.newest_rev_timestamp]
        manifest = {
            "schema_version": _schema_version(),
            "tool": "wikiground",
            "tool_version": __version__,
            "store": STORE_FILE,
            "inputs": [r.stats.to_dict() for r in readers],
            "siteinfo": sites[0] if sites else {},
            "newest_rev_timestamp": max(stamps) if stamps else None,
            **ingest,
            "parameters": {
                "indexes": list(indexes),
                "namespaces": namespaces,
                "workers": workers,
                "max_page_chars": max_page_chars,
                "passage_words": passage_words,
                "index_options": _jsonable(index_options),
            },
            "build": {
                "started": _iso(started),
                "finished": _iso(finished),
                "seconds": round(finished - started, 3),
                "ingest_seconds": round(ingest_seconds, 3),
            },
            "indexes": built,
        }
        write_manifest(tmp, manifest)
        swap_folder(tmp, out)
        if "dense" in indexes and "shards_dir" not in index_options.get("dense", {}):
            shutil.rmtree(_dense_shards_dir(out), ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, (WikigroundError, KeyboardInterrupt, SystemExit)) or not isinstance(exc, Exception):
            raise
        raise BuildError(f"building {out} failed: {type(exc).__name__}: {exc}{_hint(exc)}") from exc
    counts = manifest["counts"]
    logger.info(
        "built %s: %d pages, %d redirects, %d passages in %.1fs",
        out,
        counts["pages"],
        counts["redirects"],
        counts["passages"],
        finished - started,
    )
    return manifest


def _ingest(
    paths: list[Path],
    db_path: Path,
    *,
    namespaces: list[int],
    workers: int,
    progress: bool,
    max_page_chars: int,
    passage_words: int,
) -> dict[str, Any]:
    """Read every input into the store; returns the writer's counts plus the readers (for their stats)."""
    from tqdm import tqdm

    readers: list[InputReader] = []
    total_bytes = sum(p.stat().st_size for p in paths if p.is_file())
    bar = tqdm(
        total=total_bytes,
        unit="B",
        unit_scale=True,
        desc="ingest",
        disable=not progress,
        dynamic_ncols=True,
        smoothing=0.1,
    )
    writer = StoreWriter(db_path)
    pool = _LazyPool(workers)
    if workers > 1 and total_bytes >= WARM_POOL_BYTES:
        pool.start()
    try:
        work = _work(paths, namespaces, readers, decompress=_pool_decompressor(pool) if workers > 1 else None)
        done = 0
        start = time.time()
        for reader, batch in _processed(work, pool=pool, max_page_chars=max_page_chars, passage_words=passage_words):
            if batch.read is not None:
                reader.add_chunk_stats(batch.read)
            writer.add_batch(batch)
            done += batch.pages
            if progress:
                read = sum(r.bytes_read for r in readers)
                bar.update(read - bar.n)
                bar.set_postfix_str(
                    f"{done:,} pages, {done / max(time.time() - start, 1e-9):,.0f} pages/s", refresh=False
                )
        bar.update(total_bytes - bar.n)
        result = writer.finish()
    except BaseException:
        writer.close()
        raise
    finally:
        pool.close()
        bar.close()
    if result["counts"]["pages"] == 0 and result["counts"]["redirects"] == 0:
        raise InputError(f"no pages found in namespace(s) {namespaces}", path=", ".join(str(p) for p in paths))
    result["readers"] = readers
    return result


_Task = tuple[InputReader, Callable[..., RowBatch], tuple]


def _work(
    paths: list[Path], namespaces: list[int], readers: list[InputReader], *, decompress: GroupDecompressor | None
) -> Iterator[_Task]:
    """Worker tasks in input order: XML chunks as they are cut, other pages in batches of BATCH_PAGES."""
    next_id = 1  # synthetic ids of JSONL pages run on across inputs
    for path in paths:
        reader = InputReader(path, namespaces=namespaces, next_page_id=next_id)
        readers.append(reader)
        batch: list[RawPage] = []
        for item in reader.items(decompress=decompress):
            if isinstance(item, XmlChunk):
                if batch:
                    yield reader, process_batch, (batch,)
                    batch = []
                yield reader, process_xml_chunk, (item,)
                continue
            batch.append(item)
            if len(batch) >= BATCH_PAGES:
                yield reader, process_batch, (batch,)
                batch = []
        if batch:
            yield reader, process_batch, (batch,)
        next_id = reader.next_page_id


def _processed(
    work: Iterator[_Task], *, pool: _LazyPool, max_page_chars: int, passage_words: int
) -> Iterator[tuple[InputReader, RowBatch]]:
    """Row batches in input order; the pool does the parsing and cleaning once there is more than one task."""
    first = next(work, None)
    if first is None:
        return
    second = next(work, None)
    if pool.workers <= 1 or second is None:
        for reader, fn, args in itertools.chain([first], [second] if second else [], work):
            yield reader, fn(*args, max_page_chars, passage_words)
        return
    # A bounded queue of futures, not map(): map drains the whole input into memory.
    pending: deque = deque()
    for reader, fn, args in itertools.chain([first, second], work):
        pending.append((reader, pool.submit(fn, *args, max_page_chars, passage_words)))
        while len(pending) >= pool.workers * INFLIGHT_PER_WORKER:
            reader, result = pending.popleft()
            yield reader, result.result()
    while pending:
        reader, result = pending.popleft()
        yield reader, result.result()


def _pool_decompressor(pool: _LazyPool) -> GroupDecompressor:
    """Multistream bz2: stream groups decompressed by the pool, read ahead a little, returned in order."""

    def decompress(groups: Iterator[tuple[int, bytes]], path: str, size: int) -> Iterator[bytes]:
        pending: deque = deque()
        for offset, data in groups:
            pending.append(pool.submit(decompress_group, path, offset, data, size))
            while len(pending) >= pool.workers * DECOMPRESS_AHEAD_PER_WORKER:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    return decompress


class _LazyPool:
    """A forkserver process pool started on first use (small inputs never pay for it).

    concurrent.futures rather than multiprocessing.Pool: a worker that dies (OOM killer) raises
    BrokenProcessPool instead of hanging the build.
    """

    def __init__(self, workers: int):
        self.workers = workers
        self._pool = None
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        """Start the fork server and the workers in the background (~0.3 s), while the first pages are read."""

        def spawn() -> None:
            try:
                for _ in range(self.workers):
                    self.submit(int)  # the executor spawns a worker per task while none is idle
            except Exception:  # noqa: BLE001 - the first real task raises the same error
                logger.debug("starting the worker pool early failed", exc_info=True)

        threading.Thread(target=spawn, name="wikiground-pool-start", daemon=True).start()

    def submit(self, fn: Callable, *args: Any):
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            if self._pool is None:
                from concurrent.futures import ProcessPoolExecutor

                ctx = multiprocessing.get_context("forkserver")
                # Workers import the parser and cleaner once in the fork server instead of once per worker.
                ctx.set_forkserver_preload(_WORKER_PRELOAD)
                self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx)
            return self._pool.submit(fn, *args)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _hint(exc: BaseException) -> str:
    """What to do about a failure whose message alone does not say."""
    from concurrent.futures.process import BrokenProcessPool

    if isinstance(exc, BrokenProcessPool):
        # The usual cause: worker processes start by importing the caller's main module, and a script that
        # calls build_index at its top level then calls it again in every worker.
        return (
            " (a worker process died; a script that calls build_index must do so under "
            '`if __name__ == "__main__":`, since worker processes import the main module, or pass workers=1)'
        )
    return ""


def _dense_shards_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.dense-shards"


def _build_one(name: str, tmp: Path, *, progress: bool, options: Mapping[str, Any]) -> dict[str, Any]:
    out_dir = tmp / name
    out_dir.mkdir(exist_ok=True)
    started = time.time()
    logger.info("building %s index", name)
    try:
        info = backends.build(name, tmp / STORE_FILE, out_dir, progress=progress, options=options)
    except WikigroundError:
        raise
    except Exception as exc:
        raise BuildError(f"index {name!r} failed: {type(exc).__name__}: {exc}") from exc
    info = dict(info or {})
    info.setdefault("seconds", round(time.time() - started, 3))
    return _jsonable(info)


def _check_indexes(indexes: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(indexes, str):
        indexes = parse_index_list(indexes)
    unknown = [name for name in indexes if name not in BUILT_CHANNELS]
    if unknown:
        raise ConfigError(f"unknown index {', '.join(unknown)}: choose among {', '.join(BUILT_CHANNELS)}, all or none")
    return tuple(dict.fromkeys(indexes))


def parse_index_list(text: str) -> tuple[str, ...]:
    """``"all"``, ``"none"`` or a comma list such as ``"bm25,tfidf"``."""
    text = text.strip().lower()
    if text in ("", "none"):
        return ()
    if text == "all":
        return BUILT_CHANNELS
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_FILE).is_file():
        # Guard against `--out ~`: only an earlier index folder may be replaced.
        raise ConfigError(f"{out}: folder is not empty and holds no {MANIFEST_FILE}; refusing to replace it")


def _schema_version() -> int:
    from indexer.schema import SCHEMA_VERSION

    return SCHEMA_VERSION


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return repr(value)
