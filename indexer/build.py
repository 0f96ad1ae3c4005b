"""Build an index folder: inputs -> ``wiki.duckdb`` -> search indexes -> ``manifest.json``, atomically.

The main process only decompresses and cuts dumps at ``</page>`` into chunks of whole pages (JSONL:
batches of :data:`BATCH_PAGES` pages); a process pool parses the chunks with mwxml, cleans and chunks
the pages, and returns Arrow tables. Multistream bz2 is decompressed by the pool too, a group of
streams per task. Results come back in input order (so the store is identical for any worker count)
and are bulk-loaded by :class:`~indexer.store_writer.StoreWriter`. Everything is written into a
temp folder next to ``out`` that replaces ``out`` only when complete, under a lock beside ``out``. Each
build has an id, written to the manifest, the store's ``build_info`` and every channel's params.json,
so that readers can tell one build from the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import multiprocessing
import os
import shutil
import stat
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import backends
from indexer import lookups, stages
from indexer.build_lock import build_lock
from indexer.manifest import write_manifest
from indexer.readers import GroupDecompressor, InputReader, RawPage, XmlChunk, decompress_group, expand_inputs
from indexer.store_writer import (
    DEFAULT_MAX_PAGE_CHARS,
    DEFAULT_PASSAGE_WORDS,
    RowBatch,
    StoreWriter,
    process_batch,
    process_xml_chunk,
)
from wikiground import __version__
from wikiground.errors import BuildError, ConfigError, InputError, WikigroundError
from wikiground.layout import (
    BUILT_CHANNELS,
    DELTA_LOCK_FILE,
    FILE_MODE,
    INDEX_CHOICES,
    INDEX_ENTRIES,
    LOOKUPS_DIR,
    MANIFEST_FILE,
    PARAMS_FILE,
    STORE_FILE,
    atomic_write_json,
    build_tmp_prefix,
    delta_dir,
    delta_segments,
    old_prefix,
    swap_folder,
)
from wikiground.system import default_build_memory, usable_cpus

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


@dataclass(frozen=True)
class _Plan:
    """What a build was asked for, checked: recorded in the manifest's ``parameters``."""

    indexes: tuple[str, ...]
    namespaces: list[int]
    workers: int
    max_page_chars: int
    passage_words: int
    index_options: dict[str, dict]
    progress: bool
    memory: int  # bytes the whole build (every process of it) may use; each stage takes its share
    dense_later: str = "no"  # indexer.dense_later.MODES: publish before the dense channel is embedded

    def fingerprint(self) -> dict[str, Any]:
        """The options that shape the index (not how fast or in how much memory it is built)."""
        # A channel's options are checked with its stage; when the dense channel is embedded does not shape it.
        skip = ("workers", "memory", "indexes", "index_options", "dense_later")
        shaping = {k: v for k, v in self.parameters().items() if k not in skip}
        return {**shaping, "graph": "kg" in self.indexes}  # the kg channel's arrays are written with the store

    def parameters(self) -> dict[str, Any]:
        return {
            "indexes": list(self.indexes),
            "namespaces": self.namespaces,
            "workers": self.workers,
            "max_page_chars": self.max_page_chars,
            "passage_words": self.passage_words,
            "index_options": _jsonable(self.index_options),
            "memory": self.memory,
            "dense_later": self.dense_later,
        }


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
    memory: int | None = None,
    resume: bool = False,
    dense_later: str = "no",
) -> dict[str, Any]:
    """Ingest dumps / JSONL corpora into ``out`` (store + chosen indexes) and return the manifest.

    ``workers``: cleaner processes (default: the usable CPUs; 1 = in-process). ``memory``: bytes the build may use
    (default :func:`~wikiground.system.default_build_memory`): DuckDB, the JVM and the TF-IDF merge each get a
    share of it and spill to the build's folder past it. ``resume``: continue the build of ``out`` that was cut
    off with the same inputs and options, keeping its finished stages (:mod:`indexer.stages`); without it, what an
    earlier build left is removed and the build starts clean. ``dense_later`` ("auto", "yes", "no"): publish the
    index before the dense channel is embedded, listing it under ``pending`` in the manifest
    (:mod:`indexer.dense_later`; "auto": when the embedding is estimated to take longer than its threshold);
    :func:`indexer.dense_later.complete` then embeds it and brings it in. On any failure the
    partial build is removed, an existing ``out`` is left untouched and the error is raised. ``out`` is
    replaced only when it is empty or an index folder of ours (our manifest, only our files), and never
    when an input lies inside it. Builds to one ``out`` take turns through a lock beside it.
    """
    _refuse_in_worker()
    started = time.time()
    plan = _plan(indexes, namespaces, workers, progress, index_options, max_page_chars, passage_words, memory)
    plan = replace(plan, dense_later=_check_dense_later(dense_later))
    paths = expand_inputs(inputs)
    out = _follow_out(Path(out).absolute())
    _check_out(out, paths)
    out.parent.mkdir(parents=True, exist_ok=True)
    _check_resources(paths, out, plan)
    with build_lock(out):
        _check_out(out, paths)  # again, under the lock: the first look was before any build was excluded
        manifest = _build_locked(out, paths, plan, started, resume)
    counts = manifest["counts"]
    logger.info(
        "built %s: %d pages, %d redirects, %d passages in %.1fs",
        out,
        counts["pages"],
        counts["redirects"],
        counts["passages"],
        manifest["build"]["seconds"],
    )
    return manifest


def _build_locked(out: Path, paths: list[Path], plan: _Plan, started: float, resume: bool) -> dict[str, Any]:
    """The build under its lock: in a temporary folder beside ``out`` (the one a cut-off build left, with
    ``resume``), swapped into place when whole. A build that fails after a finished stage keeps its folder for
    ``--resume``."""
    print_ = stages.fingerprint(paths, plan.fingerprint(), __version__)
    journal = stages.StageJournal.find(out, print_) if resume else None
    remove_stale_temps(out, keep=journal.folder if journal else None)
    if journal is None:
        if resume:
            logger.warning("--resume: no cut-off build of %s with these inputs and options; starting clean", out)
        tmp = Path(tempfile.mkdtemp(prefix=build_tmp_prefix(out), dir=out.parent))
        journal = stages.StageJournal.new(tmp, print_, uuid.uuid4().hex, started)
    else:
        logger.warning("resuming the build of %s in %s (finished: %s)", out, journal.folder, journal.finished)
    try:
        manifest = _build_into(journal.folder, out, paths, plan, journal)
        (journal.folder / stages.JOURNAL_FILE).unlink()
        _publish(journal.folder, out)
        if "dense" in plan.indexes and "shards_dir" not in plan.index_options.get("dense", {}):
            shutil.rmtree(_dense_shards_dir(out), ignore_errors=True)
    except BaseException as exc:
        if journal.finished and (journal.folder / stages.JOURNAL_FILE).is_file():
            logger.warning(
                "%s keeps the finished stages (%s): rerun with --resume to continue",
                journal.folder,
                ", ".join(journal.finished),
            )
        else:
            shutil.rmtree(journal.folder, ignore_errors=True)
        if isinstance(exc, (WikigroundError, KeyboardInterrupt, SystemExit)) or not isinstance(exc, Exception):
            raise
        raise BuildError(f"building {out} failed: {type(exc).__name__}: {exc}{_hint(exc)}") from exc
    return manifest


def _check_dense_later(mode: str) -> str:
    from indexer.dense_later import MODES

    if mode not in MODES:
        raise ConfigError(f"dense_later {mode!r}: choose from {', '.join(MODES)}")
    return mode


def _refuse_in_worker() -> None:
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A worker process is importing the caller's main module, which calls build_index at its top level:
        # stop here, before any folder is made (the caller's own build reports the dead worker).
        raise ConfigError(
            'build_index called while a worker process starts: call it under `if __name__ == "__main__":`'
        )


def _plan(
    indexes: Sequence[str],
    namespaces: Sequence[int],
    workers: int | None,
    progress: bool,
    index_options: Mapping[str, Mapping] | None,
    max_page_chars: int,
    passage_words: int,
    memory: int | None = None,
) -> _Plan:
    """The options checked: unknown indexes, no namespace or a non-positive size are refused."""
    namespaces = sorted({int(n) for n in namespaces})
    if not namespaces:
        raise ConfigError("namespaces: give at least one namespace number")
    if max_page_chars < 1 or passage_words < 1:
        raise ConfigError("max_page_chars and passage_words must be positive")
    memory = default_build_memory() if memory is None else int(memory)
    if memory < MIN_BUILD_MEMORY:
        raise ConfigError(f"--memory {memory >> 20} MiB is too little: a build needs {MIN_BUILD_MEMORY >> 20} MiB")
    return _Plan(
        indexes=_check_indexes(indexes),
        namespaces=namespaces,
        workers=usable_cpus() if workers is None else int(workers),
        max_page_chars=max_page_chars,
        passage_words=passage_words,
        index_options={name: dict(opts) for name, opts in (index_options or {}).items()},
        progress=progress,
        memory=memory,
    )


def _build_into(tmp: Path, out: Path, paths: list[Path], plan: _Plan, journal: stages.StageJournal) -> dict[str, Any]:
    """Everything of the new index inside ``tmp``: the store, its build id, the channels, the manifest (last);
    each stage recorded in ``journal`` as it finishes, and taken from it when it finished before."""
    build_id, started = journal.build_id, journal.started
    ingest = journal.done("ingest")
    if ingest is None:
        ingest = _ingest_stage(tmp, paths, plan, build_id, started)
        journal.finish("ingest", ingest, (STORE_FILE, LOOKUPS_DIR))
    pending: dict[str, Any] = {}
    built = _build_channels(tmp, out, plan, journal, pending)
    finished = time.time()
    ingest = dict(ingest)
    ingest_seconds, inputs, sites, stamps = (ingest.pop(k) for k in ("seconds", "inputs", "siteinfo", "stamps"))
    manifest = {
        "schema_version": _schema_version(),
        "tool": "wikiground",
        "tool_version": __version__,
        "build_id": build_id,
        "store": STORE_FILE,
        "store_bytes": (tmp / STORE_FILE).stat().st_size,
        "inputs": inputs,
        "siteinfo": sites[0] if sites else {},
        "newest_rev_timestamp": max(stamps) if stamps else None,
        **ingest,
        "parameters": plan.parameters(),
        "build": {
            "started": _iso(started),
            "finished": _iso(finished),
            "seconds": round(finished - started, 3),
            "ingest_seconds": round(ingest_seconds, 3),
        },
        "indexes": built,
        **({"pending": pending} if pending else {}),
    }
    write_manifest(tmp, manifest)
    return manifest


def _ingest_stage(tmp: Path, paths: list[Path], plan: _Plan, build_id: str, started: float) -> dict[str, Any]:
    """The store and its lookups; the result as the stage journal keeps it (plain JSON)."""
    t0 = time.time()
    ingest = _ingest(
        paths,
        tmp / STORE_FILE,
        namespaces=plan.namespaces,
        workers=plan.workers,
        progress=plan.progress,
        max_page_chars=plan.max_page_chars,
        passage_words=plan.passage_words,
        build_info=(build_id, _iso(started)),
        graph="kg" in plan.indexes,
        memory=plan.memory,
    )
    readers = ingest.pop("readers")
    return _jsonable(
        {
            **ingest,
            "seconds": time.time() - t0,
            "inputs": [r.stats.to_dict() for r in readers],
            "siteinfo": [r.stats.siteinfo for r in readers if r.stats.siteinfo],
            "stamps": [r.stats.newest_rev_timestamp for r in readers if r.stats.newest_rev_timestamp],
        }
    )


def _build_channels(
    tmp: Path, out: Path, plan: _Plan, journal: stages.StageJournal, pending: dict[str, Any]
) -> dict[str, Any]:
    """Each chosen channel built from the store, its params.json stamped with the build id and its files' sizes;
    a channel the journal has from before is kept. A dense channel left for after publishing goes into
    ``pending`` instead (:mod:`indexer.dense_later`)."""
    built: dict[str, Any] = {}
    for name in build_order(plan.indexes):
        asked = plan.index_options.get(name, {})
        kept = journal.done(name, asked) if name in BUILT_CHANNELS else None
        if kept is not None:
            built[name] = kept
            continue
        if name not in BUILT_CHANNELS:  # served from the store's tables, always built: listed, no folder
            built[name] = {"type": name, "params": {"uses": "the store's triples table"}}
            continue
        opts = dict(plan.index_options.get(name, {}))
        if name == "dense":
            # Embedding shards live beside the index, outside the temporary folder: a failed or
            # interrupted build resumes from them (each shard is checked against its passages' text).
            opts.setdefault("shards_dir", _dense_shards_dir(out))
            est = _dense_estimate(tmp / STORE_FILE, out, opts.get("scope", "auto"))
            opts["scope"] = est["scope"]
            entry = _dense_pending(tmp, out, plan, est, opts)
            if entry is not None:
                pending[name] = entry
                continue
        built[name] = build_one(name, tmp, progress=plan.progress, options=opts, memory=plan.memory)
        stamp_channel(tmp / name, journal.build_id)
        journal.finish(name, built[name], (name,), options=asked)
    return {name: built[name] for name in plan.indexes if name in built}


def build_order(indexes: Sequence[str]) -> list[str]:
    """The channels in the order they are built: BM25 last. Its JVM runs in this process and keeps the heap it grew
    to until the process ends, so a channel built after it would add its own peak on top of that heap."""
    return sorted(indexes, key=lambda name: name == "bm25")


def stamp_channel(folder: Path, build_id: str) -> None:
    """``build_id`` and ``files`` (relative path -> bytes) into a channel's params.json: ``backends.load`` checks
    that the channel is of the store's build and that no file of it was truncated."""
    path = folder / PARAMS_FILE
    params = json.loads(path.read_text(encoding="utf-8"))
    files = {
        f.relative_to(folder).as_posix(): f.stat().st_size
        for f in sorted(folder.rglob("*"))
        if f.is_file() and f.name != PARAMS_FILE
    }
    atomic_write_json(path, {**params, "build_id": build_id, "files": files}, sort_keys=True)


def _publish(tmp: Path, out: Path) -> None:
    """Swap ``tmp`` into the place of ``out``, keeping ``out``'s mode and carrying its live delta over."""
    os.chmod(tmp, folder_mode(out))  # mkdtemp makes 0700
    with _carried_delta(out, tmp):
        swap_folder(tmp, out)


def folder_mode(out: Path) -> int:
    """An existing folder keeps its mode; a new one gets the umask's default, as mkdir would give it."""
    if out.is_dir():
        return stat.S_IMODE(out.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


@contextlib.contextmanager
def _carried_delta(out: Path, tmp: Path) -> Iterator[None]:
    """Copy ``out/delta/`` (pages ingested live) into the new build, holding the delta's lock exclusively until the
    swap, so that no live page written meanwhile is lost."""
    folder = delta_dir(out)
    if not folder.is_dir():
        yield
        return
    fd = os.open(folder / DELTA_LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # delta writers hold it only while they write one segment
        segments = delta_segments(out)
        target = delta_dir(tmp)
        target.mkdir(exist_ok=True)
        for seg in segments:
            shutil.copy2(seg, target / seg.name)
        if segments:
            logger.info("carried %d live delta segment(s) from %s into the new build", len(segments), folder)
        yield
    finally:
        os.close(fd)


def _leftover_folders(out: Path, prefixes: tuple[str, ...]) -> Iterator[Path]:
    """The folders beside ``out`` whose names start with one of ``prefixes`` (links never: not the build's own)."""
    for entry in out.parent.iterdir():
        if entry.name.startswith(prefixes) and entry.is_dir() and not entry.is_symlink():
            yield entry


def remove_stale_temps(out: Path, keep: Path | None = None) -> None:
    """Temporary folders of earlier builds of ``out`` that died (kill -9, power loss) or failed, but ``keep`` (the
    one a resumed build continues); called under the build lock, so no live build owns them. An ``.old-`` folder is
    removed only while ``out`` exists: without ``out`` it is the last copy of the previous index (a swap cut off
    between its two renames)."""
    old = old_prefix(out)
    for entry in _leftover_folders(out, (build_tmp_prefix(out), old)):
        if entry == keep:
            continue
        if entry.name.startswith(old) and not out.exists():
            logger.warning("%s holds the previous index of %s (a swap was cut off): kept", entry, out)
            continue
        logger.info("removing %s, left by an interrupted build", entry)
        shutil.rmtree(entry, ignore_errors=True)


def _ingest(
    paths: list[Path],
    db_path: Path,
    *,
    namespaces: list[int],
    workers: int,
    progress: bool,
    max_page_chars: int,
    passage_words: int,
    build_info: tuple[str, str] | None = None,
    graph: bool = False,
    memory: int,
) -> dict[str, Any]:
    """Read every input into the store; returns the writer's counts plus the readers (for their stats).
    ``build_info`` (build id, start time) goes into the store's ``build_info`` table; ``graph``: write the kg
    channel's arrays with the lookups; ``memory``: the build's bytes, shared by the cleaner processes and DuckDB."""
    from tqdm import tqdm

    readers: list[InputReader] = []
    total_bytes = sum(p.stat().st_size for p in paths if p.is_file())
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="ingest", disable=not progress, smoothing=0.1)
    writer = StoreWriter(db_path, memory_limit=ingest_duckdb_share(memory, workers))
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
        result = writer.finish(build_info=build_info)
    except BaseException:
        writer.close()
        raise
    finally:
        pool.close()
        bar.close()
    if result["counts"]["pages"] == 0 and result["counts"]["redirects"] == 0:
        raise InputError(f"no pages found in namespace(s) {namespaces}", path=", ".join(str(p) for p in paths))
    build_id = build_info[0] if build_info else None
    result["lookups"] = _write_lookups(db_path, build_id, graph=graph, memory=int(memory * LOOKUPS_DUCKDB_SHARE))
    result["readers"] = readers
    return result


def _write_lookups(db_path: Path, build_id: str | None, *, graph: bool, memory: int | None) -> dict[str, int]:
    logger.info("writing the lookup tables" + (" and the kg channel's graph arrays" if graph else ""))
    return lookups.build(db_path, db_path.parent / LOOKUPS_DIR, build_id, graph=graph, memory_limit=memory)


# -- the memory budget's shares ------------------------------------------------------------------------------------
# The build's processes beside DuckDB: this process (the interpreter, Arrow batches in flight) and each cleaner
# process (one page batch in, its rows out). DuckDB's share is what they leave, less a margin for what DuckDB
# allocates outside its buffer pool; past its share it spills to the store's temporary folder.
MIN_BUILD_MEMORY = 512 << 20
MAIN_PROCESS_BYTES = 512 << 20
CLEANER_PROCESS_BYTES = 256 << 20
DUCKDB_MARGIN = 0.6
LOOKUPS_DUCKDB_SHARE = 0.4  # lookups run alone after ingest: the sorted key arrays beside them are small


def ingest_duckdb_share(memory: int, workers: int) -> int:
    """DuckDB's bytes during ingest, out of the build's ``memory`` with ``workers`` cleaner processes."""
    left = memory - MAIN_PROCESS_BYTES - CLEANER_PROCESS_BYTES * (workers if workers > 1 else 0)
    return max(128 << 20, int(left * DUCKDB_MARGIN))


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
        """Start the fork server and the workers in the background, so that their start overlaps the reading of the
        first pages."""

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


def _dense_pending(tmp: Path, out: Path, plan: _Plan, est: dict, opts: Mapping[str, Any]) -> dict[str, Any] | None:
    """The manifest's ``pending.dense`` when the dense channel is embedded after publishing (its shards, and
    those a cut-off build left, in ``tmp/dense/shards``); None when the build embeds it now."""
    from indexer import dense_later

    later, why = dense_later.decide(plan.dense_later, est["seconds"])
    logger.info("dense: %s (%s)", "left for after publishing" if later else "embedded before publishing", why)
    if not later:
        return None
    dense_later.carry_shards(tmp, Path(opts["shards_dir"]))
    return dense_later.pending_entry(est, why, opts)


def _dense_estimate(db_path: Path, out: Path, scope: str) -> dict[str, Any]:
    """The dense scope resolved ("auto": leads above LEADS_THRESHOLD passages) and the embedding's estimate, said
    before a long embed, at the rate the last build of ``out`` recorded (else the reference per-core rate)."""
    from backends.dense.embed import LONG_EMBED_SECONDS, embed_estimate, estimate_message

    try:
        rate = json.loads((out / "dense" / PARAMS_FILE).read_text(encoding="utf-8")).get("passages_per_s")
    except (OSError, ValueError, AttributeError):
        rate = None
    est = embed_estimate(db_path, scope, rate=rate)
    long = est["seconds"] > LONG_EMBED_SECONDS or (scope == "auto" and est["scope"] == "leads")
    logger.log(logging.WARNING if long else logging.INFO, "%s", estimate_message(est, scope))
    return est


def build_one(
    name: str, tmp: Path, *, progress: bool, options: Mapping[str, Any], memory: int | None = None
) -> dict[str, Any]:
    out_dir = tmp / name
    out_dir.mkdir(exist_ok=True)
    started = time.time()
    logger.info("building %s index", name)
    try:
        info = backends.build(name, tmp / STORE_FILE, out_dir, progress=progress, options=options, memory=memory)
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
    unknown = [name for name in indexes if name not in INDEX_CHOICES]
    if unknown:
        raise ConfigError(f"unknown index {', '.join(unknown)}: choose among {', '.join(INDEX_CHOICES)}, all or none")
    return tuple(dict.fromkeys(indexes))


def parse_index_list(text: str) -> tuple[str, ...]:
    """``"all"``, ``"none"`` or a comma list such as ``"bm25,tfidf"``."""
    text = text.strip().lower()
    if text in ("", "none"):
        return ()
    if text == "all":
        return INDEX_CHOICES
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _follow_out(out: Path) -> Path:
    """The folder the build replaces: a symlinked ``--out`` is followed, so that the swap happens at its target
    and the link goes on naming the new index (replacing the link itself would leave the target stale). Its
    parent must be a folder the build can write in."""
    if out.is_symlink():
        try:
            out = out.resolve(strict=False)
        except (OSError, RuntimeError) as exc:  # a link loop
            raise ConfigError(f"{out}: --out is a symbolic link that cannot be followed ({exc})") from exc
    parent = out.parent
    for above in (parent, *parent.parents):
        if above.exists():
            if not above.is_dir():
                raise ConfigError(f"{out}: --out lies under {above}, which is a file, not a folder")
            if not os.access(above, os.W_OK | os.X_OK):
                raise ConfigError(f"{out}: cannot write in {above} (permission denied): choose another --out")
            break
    return out


def _check_out(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an ``out`` that the build must not replace: a file, a folder that is not provably an index of
    ours, or a folder holding one of the inputs."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder")
    real_out = out.resolve()
    for path in inputs:
        real = Path(path).resolve()
        if real == real_out or real_out in real.parents:
            raise ConfigError(
                f"{path}: this input lies inside --out {out}, which the build replaces: write the index elsewhere"
            )
    if not out.is_dir():
        return
    entries = sorted(os.listdir(out))
    if not entries:
        return
    foreign = [e for e in entries if e not in INDEX_ENTRIES]
    why = _not_ours(out) if not foreign else f"it holds {_few(foreign)}, which no index has"
    if why:
        # Guard against `--out ~` or a folder that merely has a manifest.json of something else.
        raise ConfigError(f"{out}: not a wikiground index folder ({why}); refusing to replace it: choose a new folder")


def _not_ours(out: Path) -> str | None:
    """Why the manifest of ``out`` is not one of ours, or None when it is."""
    path = out / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {MANIFEST_FILE}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        return f"{MANIFEST_FILE} is unreadable: {exc}"
    if not isinstance(data, dict) or data.get("tool") != "wikiground" or "schema_version" not in data:
        return f"{MANIFEST_FILE} is not a wikiground manifest"
    return None


def _few(names: Sequence[str], n: int = 5) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


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


# -- resource check before a build --------------------------------------------------------------------------------

# Bytes on disk per passage of each part of the index, and peak RSS of the build under the default budget: from
# benchmarks/bench_scale.py's builds of enwiki-shaped dumps (benchmarks/RESULTS.md, "Scale").
# The store includes its triples and its lookups/; kg adds the graph arrays to lookups/.
DISK_PER_PASSAGE = {"store": 800, "bm25": 130, "tfidf": 520, "dense": 1600, "kg": 90}
# TF-IDF's spill files while its postings are written: the build's peak temporary disk beyond the final size.
TFIDF_SPILL_PER_PASSAGE = 450
RAM_BASE_MB = 1850  # the build process, the JVM and DuckDB before the corpus fills their shares
RAM_PER_WORKER_MB = 250
RAM_PER_PASSAGE = 220  # bytes of peak RSS per passage until the stages reach their shares of the budget
RESOURCE_CHECK_MIN_BYTES = 64 << 20  # smaller inputs are not checked
SAMPLE_BYTES = 2 << 20  # bytes of each input cleaned (decompressed) and decompressed (compressed) for the estimate
SKIP_CHECK_ENV = "WIKIGROUND_SKIP_RESOURCE_CHECK"


def estimate_resources(
    paths: Sequence[Path],
    indexes: Sequence[str],
    *,
    workers: int,
    passage_words: int = DEFAULT_PASSAGE_WORDS,
    memory: int | None = None,
) -> dict[str, float]:
    """Passages, disk (final and peak, bytes) and peak RAM (bytes) a build of ``paths`` will need; the RAM grows
    with the corpus until every stage holds its share of ``memory`` (the build's budget), then stays there.

    The passages per byte are measured by cleaning the first :data:`SAMPLE_BYTES` (decompressed) of each input,
    and its compression ratio by decompressing its first :data:`SAMPLE_BYTES`: both are the input's own."""
    passages = 0.0
    for path in paths:
        found, sampled, whole = _sample_passages(path, SAMPLE_BYTES, passage_words)
        if whole:
            passages += found
        else:
            passages += found / max(sampled, 1) * path.stat().st_size * _expansion(path, SAMPLE_BYTES)
    parts = ("store", *indexes)
    final = sum(DISK_PER_PASSAGE.get(p, 0) for p in parts) * passages
    ram = (RAM_BASE_MB + RAM_PER_WORKER_MB * max(1, workers)) * 2**20 + RAM_PER_PASSAGE * passages
    ram = min(ram, default_build_memory() if memory is None else memory)
    return {
        "passages": passages,
        "disk_bytes": final,
        "peak_disk_bytes": final + (TFIDF_SPILL_PER_PASSAGE * passages if "tfidf" in parts else 0),
        "ram_bytes": ram,
    }


def _sample_passages(path: Path, limit: int, passage_words: int) -> tuple[int, int, bool]:
    """(passages, decompressed bytes they came from, whether that was the whole input) of the start of ``path``,
    cleaned in this process."""
    items = InputReader(path).items()
    passages = sampled = 0
    batch: list[RawPage] = []
    whole = True
    try:
        for item in items:
            if isinstance(item, XmlChunk):
                rows, size = process_xml_chunk(item, DEFAULT_MAX_PAGE_CHARS, passage_words), len(item.data)
            else:
                batch.append(item)
                if len(batch) < BATCH_PAGES:
                    continue
                rows, size = process_batch(batch, DEFAULT_MAX_PAGE_CHARS, passage_words), _raw_bytes(batch)
                batch = []
            table = rows.tables.get("passages")
            passages, sampled = passages + (0 if table is None else table.num_rows), sampled + size
            if sampled >= limit:
                whole = False
                break
        if batch:
            table = process_batch(batch, DEFAULT_MAX_PAGE_CHARS, passage_words).tables.get("passages")
            passages, sampled = passages + (0 if table is None else table.num_rows), sampled + _raw_bytes(batch)
    finally:
        items.close()
    return passages, sampled, whole


def _raw_bytes(pages: Sequence[RawPage]) -> int:
    """About the bytes a batch of JSONL pages took in the input (its text, not the JSON quoting)."""
    return sum(
        len(p.title) + len(p.text) + sum(len(h) + len(t) for h, t in p.sections) + sum(len(t) for _, t in p.sentences)
        for p in pages
    )


def _expansion(path: Path, limit: int) -> float:
    """Decompressed bytes per byte of ``path``, from its first ``limit`` bytes (1 for uncompressed inputs)."""
    import bz2
    import zlib

    name = path.name.lower()
    if name.endswith(".bz2"):
        make: Callable[[], Any] = bz2.BZ2Decompressor
    elif name.endswith(".gz"):
        make = lambda: zlib.decompressobj(wbits=47)  # noqa: E731 - gzip or zlib header, one member each
    else:
        return 1.0
    with open(path, "rb") as fh:
        data = fh.read(limit)
    # Fed in small steps: a bz2 block comes out whole once its last byte is in, so the input up to the last step
    # that produced output holds whole blocks only (a partial block at the end would bias the ratio down).
    out = whole_in = 0
    dec = make()
    for at in range(0, len(data), 16 << 10):
        rest = data[at : at + (16 << 10)]
        while rest:
            got = len(dec.decompress(rest))
            out += got
            if got:
                whole_in = at + len(data[at : at + (16 << 10)]) - (len(dec.unused_data) if dec.eof else 0)
            if not dec.eof:
                break
            rest, dec = dec.unused_data, make()  # multistream / multi-member: the next one
    return max(1.0, out / whole_in) if whole_in else 1.0


def _check_resources(paths: Sequence[Path], out: Path, plan: _Plan) -> None:
    """Refuse, before anything is written, a build whose estimated disk or RAM exceeds what the machine has;
    warn when it comes close. ``WIKIGROUND_SKIP_RESOURCE_CHECK=1`` turns the refusal into a warning."""
    total = sum(p.stat().st_size for p in paths if p.is_file())
    if total < RESOURCE_CHECK_MIN_BYTES:
        return
    est = estimate_resources(
        paths, plan.indexes, workers=plan.workers, passage_words=plan.passage_words, memory=plan.memory
    )
    # What cut-off builds of ``out`` left is this build's too: a resumed build continues in it, a new one removes
    # it first (remove_stale_temps). Counted as taken, it refused to resume a build from its own finished stages.
    kept = _cut_off_bytes(out)
    free_disk = shutil.disk_usage(out.parent).free + kept
    ram_total, ram_free = _memory()
    gb = 2**30
    head = f"{total / gb:.1f} GB of input, about {est['passages'] / 1e6:.1f}M passages"
    problems, warnings = [], []
    if est["peak_disk_bytes"] > free_disk:
        problems.append(
            f"disk: needs about {est['peak_disk_bytes'] / gb:.1f} GB while building ({est['disk_bytes'] / gb:.1f} GB "
            f"final) but {out.parent} has {free_disk / gb:.1f} GB free"
        )
    elif est["peak_disk_bytes"] > 0.8 * free_disk:
        warnings.append(f"disk: about {est['peak_disk_bytes'] / gb:.1f} GB of {free_disk / gb:.1f} GB free")
    if ram_total and est["ram_bytes"] > ram_total:
        problems.append(
            f"memory: peak about {est['ram_bytes'] / gb:.1f} GB but the machine has {ram_total / gb:.1f} GB "
            "(give the build less with --memory SIZE)"
        )
    elif ram_free and est["ram_bytes"] > ram_free:
        warnings.append(
            f"memory: peak about {est['ram_bytes'] / gb:.1f} GB, {ram_free / gb:.1f} GB available now "
            "(--memory SIZE gives the build less)"
        )
    if kept:
        head += f" ({kept / gb:.1f} GB of it on disk already, in a cut-off build's folder)"
    for w in warnings:
        logger.warning("%s: %s; %s", out, head, w)
    if problems:
        message = f"{out}: {head}: " + "; ".join(problems)
        if os.environ.get(SKIP_CHECK_ENV) == "1":
            logger.warning("%s (%s=1: building anyway)", message, SKIP_CHECK_ENV)
            return
        raise BuildError(
            f"{message}. Free space, choose fewer --indexes or a smaller --memory ({SKIP_CHECK_ENV}=1 builds anyway)"
        )
    logger.info(
        "%s: %s; estimated peak %.1f GB disk, %.1f GB RAM",
        out,
        head,
        est["peak_disk_bytes"] / gb,
        est["ram_bytes"] / gb,
    )


def _cut_off_bytes(out: Path) -> int:
    """Bytes in the temporary folders that earlier, cut-off builds of ``out`` left beside it."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in _leftover_folders(out, (build_tmp_prefix(out),)):
            total += sum(f.stat().st_blocks * 512 for f in entry.rglob("*") if f.is_file() and not f.is_symlink())
    return total


def _memory() -> tuple[int, int]:
    """(total, available) bytes of RAM, or zeros when the system does not say (no /proc/meminfo)."""
    found: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        return 0, 0
    return found.get("MemTotal", 0), found.get("MemAvailable", 0)
