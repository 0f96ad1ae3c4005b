"""The channels' delta parts as plain files (``INDEX/delta/parts-KEY/CHANNEL/``: ``params.json`` and ``.npy`` arrays,
read with mmap), so that opening an index with a delta costs about what opening one without does.

``KEY`` names the delta the parts were built from: the base's build id and the names of the delta's segments
(immutable files with unique names). ``wikiground update`` writes them with its segment, before renaming the segment
in (:func:`write_parts`); a process that finds none for its delta (a segment written by live ingest, parts of an
older format, of another build) builds them in memory with a warning and writes them back for the next reader
(``backends.delta_parts``). A channel's folder is renamed in whole, its ``params.json`` written last.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.delta_corpus import CORPUS_SQL, DeltaCorpus, Strings, corpus_from_rows
from wikiground.errors import IndexCorruptError, IndexFormatError, IndexMissingError
from wikiground.layout import FILE_MODE, PARAMS_FILE, atomic_write_json, delta_dir, read_params, swap_folder

log = logging.getLogger(__name__)

# Each channel's part format, bumped when its arrays change: a reader finding an older one builds it in memory (the
# other channels' parts, unchanged, are still read). 2: TF-IDF as impact-ordered postings, not a sparse matrix; BM25
# lists by impact too.
PARTS_FORMATS = {"bm25": 2, "tfidf": 2, "dense": 1}
PARTS_PREFIX = "parts-"
KIND = "delta part"
PARTS_JVM_HEAP = "1g"  # the JVM heap of a process that writes the delta parts (wikiground update)


def parts_key(build_id: str | None, segment_names: Sequence[str]) -> str:
    """The name of the delta the parts belong to: the base's build and the delta's segments."""
    text = "\n".join([str(build_id), *sorted(segment_names)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def part_dir(index_dir: Path, key: str, channel: str) -> Path:
    return delta_dir(index_dir) / f"{PARTS_PREFIX}{key}" / channel


def save_part(folder: Path, channel: str, build_id: str | None, corpus: DeltaCorpus, part: Any) -> None:
    """``part`` (None: the delta holds no passages) with its corpus into ``folder``, swapped in whole (for a folder
    there that its reader could not use: of an older format, damaged)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        params, arrays = part.state() if part is not None else ({}, {})
        arrays = {**corpus_arrays(corpus), **{f"part.{k}": v for k, v in arrays.items()}}
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
            os.chmod(tmp / f"{name}.npy", FILE_MODE)
        sizes = {name: (tmp / f"{name}.npy").stat().st_size for name in arrays}
        record = {"type": KIND, "format_version": PARTS_FORMATS[channel], "channel": channel, "build_id": build_id}
        record.update(passages=len(corpus), empty=part is None, files=sizes, part=params)
        atomic_write_json(tmp / PARAMS_FILE, record)
        swap_folder(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_part(folder: Path, channel: str, build_id: str | None, restore: Callable[..., Any]) -> tuple[bool, Any]:
    """``(found, part)``: the part saved in ``folder`` (part None: the delta holds no passages), or
    ``(False, None)`` with a warning where it is missing, of an older format or of another build."""
    try:
        params = read_params(folder, KIND, PARTS_FORMATS[channel], required=("channel", "build_id", "files", "part"))
        if params["channel"] != channel or params["build_id"] != build_id:
            raise IndexCorruptError(f"{folder}: parts of build {params['build_id']}, not {build_id}")
        arrays = {}
        for name, size in params["files"].items():
            path = folder / f"{name}.npy"
            if path.stat().st_size != size:
                raise IndexCorruptError(f"{path}: {path.stat().st_size} bytes, written {size}")
            arrays[name] = _mapped(path)
        corpus = corpus_of(arrays)
        if params["empty"]:
            return True, None
        return True, restore(corpus, params["part"], {k[5:]: v for k, v in arrays.items() if k.startswith("part.")})
    except (IndexMissingError, IndexFormatError, IndexCorruptError, OSError, ValueError, KeyError) as exc:
        log.warning(
            "%s: the delta's %s part is missing or unreadable (%s): building it in memory", folder, channel, exc
        )
        return False, None


def _mapped(path: Path) -> np.ndarray:
    """An array file read with mmap (an empty array, which numpy cannot map, read as it is)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:
        return np.load(path, allow_pickle=False)


def corpus_arrays(corpus: DeltaCorpus) -> dict[str, np.ndarray]:
    blob, ends = Strings.pack(corpus.titles)
    return {
        "corpus.passage_ids": corpus.passage_ids,
        "corpus.page_ids": corpus.page_ids,
        "corpus.leads": corpus.leads,
        "corpus.titles": blob,
        "corpus.title_ends": ends,
    }


def corpus_of(arrays: dict[str, np.ndarray]) -> DeltaCorpus:
    """The saved corpus: ids and titles (the parts need no text once built)."""
    # Plain views of the mapped files: a memmap's item or slice is a memmap object, dearer to make per hit.
    plain = {k: np.asarray(v) for k, v in arrays.items() if k.startswith("corpus.")}
    return DeltaCorpus(
        passage_ids=plain["corpus.passage_ids"],
        page_ids=plain["corpus.page_ids"],
        titles=Strings(plain["corpus.titles"], plain["corpus.title_ends"]),
        headings=(),
        texts=(),
        leads=plain["corpus.leads"],
    )


def part_class(channel: str) -> Any:
    """The class of ``channel``'s delta part (None: a channel without one, served from the store)."""
    if channel == "tfidf":
        from backends.delta_scoring import TfidfPart as part
    elif channel == "dense":
        from backends.delta_scoring import DensePart as part
    elif channel == "bm25":
        from backends.bm25_delta import BM25Part as part
    else:
        return None
    return part


def make_part(channel: str, base: Any, corpus: DeltaCorpus, previous: Any = None) -> Any:
    """``channel``'s delta part over ``corpus``, built (``previous``: the part of the delta before, reused)."""
    return part_class(channel)(base, corpus, previous)


def restorer(channel: str) -> Callable[..., Any] | None:
    """``restore(base, corpus, params, arrays)`` of ``channel``'s part (None: a channel without a delta part)."""
    cls = part_class(channel)
    return cls.restore if cls is not None else None


def write_parts(index_dir: Path, staged: Path, name: str) -> list[str]:
    """Every built channel's delta part for the delta with segment ``staged`` (not yet renamed in as ``name``)
    added, saved under the key readers will compute once it is; parts of older deltas removed. Returns the channels
    written. Called by ``wikiground update`` under the delta's lock held exclusively."""
    import backends
    from indexer.manifest import read_manifest
    from indexer.store import Store, open_delta
    from wikiground.layout import delta_segments

    current = [s.name for s in delta_segments(index_dir)]
    con, _ = open_delta(index_dir, extra=[staged])
    try:
        corpus = corpus_from_rows(con.execute(CORPUS_SQL).fetchall())
    finally:
        if con is not None:
            con.close()
    built = [c for c in (read_manifest(index_dir).get("indexes") or {}) if restorer(c) is not None]
    if "bm25" in built:
        # The part asks Java for tokens a bounded slice at a time and for the base's statistics: a small heap does,
        # where the default cap (a quarter of RAM) let the analyzer's garbage grow it by gigabytes. A JVM already
        # running (a process that searched before) keeps its own.
        from backends.jvm import HEAP_ENV, ensure_jvm

        ensure_jvm(heap=os.environ.get(HEAP_ENV) or PARTS_JVM_HEAP)
    with Store.open(index_dir) as store:
        key, before = parts_key(store.build_id, [*current, name]), parts_key(store.build_id, current)
        for channel in built:
            base = backends.load(channel, index_dir, store=store)
            try:
                previous = _previous(index_dir, before, channel, store.build_id, base)
                part = make_part(channel, base, corpus, previous) if len(corpus) else None
                save_part(part_dir(index_dir, key, channel), channel, store.build_id, corpus, part)
            finally:
                close = getattr(base, "close", None)  # the Backend protocol's close, where the base has one
                if close is not None:
                    close()
    remove_old_parts(index_dir, keep=(key, before))
    return built


def _previous(index_dir: Path, key: str, channel: str, build_id: str | None, base: Any) -> Any:
    """The part saved for the delta before this update (dense keeps the vectors of unchanged passages)."""
    folder = part_dir(index_dir, key, channel)
    if not (folder / PARAMS_FILE).is_file():
        return None
    restore = restorer(channel)
    return load_part(folder, channel, build_id, lambda *a: restore(base, *a))[1]


def remove_old_parts(index_dir: Path, keep: Sequence[str]) -> None:
    """Parts of deltas no reader will open again (a reader still on one builds its parts in memory)."""
    wanted = {f"{PARTS_PREFIX}{k}" for k in keep}
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(delta_dir(index_dir)):
            if entry.name.startswith(PARTS_PREFIX) and entry.name not in wanted and entry.is_dir():
                shutil.rmtree(entry.path, ignore_errors=True)
