"""``wikiground compact --index DIR``: the delta folded into the base, so that the channels search one index again.

The delta is searched beside the base at every query, each channel scoring its passages directly
(``backends.delta_parts``), so its cost grows with it. Past :data:`COMPACT_SHARE` of the base's passages, the
store is written again with the delta applied (a replaced page's newest revision in place of the old one, a deleted
page gone, a moved page under its new title and its old title a redirect; the folded pages' origin ``local``, their
``rev_id`` and revision time kept), then its lookups and every built channel, in a temporary folder beside the index.
It is swapped in under the build lock, as a build is: a reader keeps the generation it opened. The delta's segments
written meanwhile (live pages, another update) are carried into the new index; the folded ones are not, and the
files they applied stay recorded in the manifest (``folded_updates``), so applying them again changes nothing.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from indexer.build_lock import build_lock
from indexer.delta_segment import delta_lock
from indexer.manifest import read_manifest, write_manifest
from indexer.store import open_delta
from indexer.update import FOLDED_KEY, delta_counts, record_updates
from wikiground.errors import BuildError, ConfigError
from wikiground.layout import (
    BUILT_CHANNELS,
    LOOKUPS_DIR,
    PARAMS_FILE,
    STORE_FILE,
    build_tmp_prefix,
    delta_dir,
    delta_segments,
    store_path,
    swap_folder,
)

log = logging.getLogger(__name__)

# A tenth of the base's passages. Below it the delta costs a query little (the fused latency with a day's delta is in
# benchmarks/RESULTS.md), while a compaction costs what building the channels costs; around it the delta's direct
# scoring (dense compares the query with every delta vector) nears the base's own search, and a fresh base dump is
# worth considering too (docs/updating.md).
COMPACT_SHARE = 0.10


def delta_share(index_dir: Path, counts: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The delta's passages, the base's, and the share of the one in the other. ``counts``: the delta's
    ``passages``, ``pages`` and ``deleted`` where the caller has just counted them (an update's summary), so that
    the delta is not merged in memory again; else they are counted in it."""
    manifest = read_manifest(index_dir)
    base = int((manifest.get("counts") or {}).get("passages") or 0)
    if counts is None:
        counts = _count_delta(index_dir)
    counts = {key: int(counts.get(key) or 0) for key in ("passages", "pages", "deleted")}
    share = counts["passages"] / base if base else float(counts["passages"] > 0)
    return {
        "delta_passages": counts["passages"],
        "delta_pages": counts["pages"],
        "delta_deleted": counts["deleted"],
        "base_passages": base,
        "share": round(share, 6),
        "threshold": COMPACT_SHARE,
    }


def _count_delta(index_dir: Path) -> dict[str, int]:
    con, _ = open_delta(index_dir)
    if con is None:
        return {}
    try:
        return delta_counts(con)
    finally:
        con.close()


def compact_index(index_dir: str | Path, *, force: bool = False, memory: int | None = None) -> dict[str, Any]:
    """Fold the delta of ``index_dir`` into its base when it holds :data:`COMPACT_SHARE` of the base's passages or
    more (``force``: whatever its size); returns what was done (``compacted`` False: why not)."""
    index_dir = Path(index_dir).absolute()
    sizes = delta_share(index_dir)
    empty = not (sizes["delta_pages"] or sizes["delta_deleted"])
    if empty or (not force and sizes["share"] < COMPACT_SHARE):
        why = (
            "the delta is empty"
            if empty
            else (
                f"the delta holds {sizes['delta_passages']:,} passages, {sizes['share']:.2%} of the base's "
                f"{sizes['base_passages']:,}: below the {COMPACT_SHARE:.0%} worth a compaction (--force: compact)"
            )
        )
        return {"compacted": False, "reason": why, **sizes}
    if read_manifest(index_dir).get("pending") or {}:
        raise ConfigError(
            f"{index_dir}: a channel is still pending (wikiground embed --index {index_dir}): compact once it joined"
        )
    started = time.perf_counter()
    with build_lock(index_dir):
        manifest = _compact_locked(index_dir, memory)
    seconds = round(time.perf_counter() - started, 3)
    log.info("compacted %s: %d delta pages folded in %.1f s", index_dir, sizes["delta_pages"], seconds)
    return {"compacted": True, "build_id": manifest["build_id"], "seconds": seconds, **sizes}


def _compact_locked(index_dir: Path, memory: int | None) -> dict[str, Any]:
    from indexer.build import remove_stale_temps
    from indexer.compact_store import newest_revision

    remove_stale_temps(index_dir)
    tmp = Path(tempfile.mkdtemp(prefix=build_tmp_prefix(index_dir), dir=index_dir.parent))
    try:
        old = read_manifest(index_dir)
        build_id = uuid.uuid4().hex
        counts, folded = _write_store(index_dir, tmp / STORE_FILE, build_id, memory, _survivors(tmp))
        manifest = _build_channels(index_dir, tmp, old, build_id, memory)
        manifest.update(counts=counts, store_bytes=(tmp / STORE_FILE).stat().st_size)
        manifest["newest_rev_timestamp"] = newest_revision(tmp / STORE_FILE, old.get("newest_rev_timestamp"))
        manifest[FOLDED_KEY] = list(old.get("updates") or [])
        manifest.pop("files", None)  # listed again from the new folder's files
        manifest["delta"] = {"pages": 0, "deleted": 0, "stale": 0}
        manifest["compacted"] = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "from_build": old.get("build_id"),
            "segments": folded,
        }
        write_manifest(tmp, manifest)
        _publish(index_dir, tmp, set(folded))
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _survivors(tmp).unlink(missing_ok=True)
        if isinstance(exc, Exception) and not isinstance(exc, (BuildError, ConfigError)):
            raise BuildError(f"compacting {index_dir} failed: {type(exc).__name__}: {exc}") from exc
        raise
    return record_updates(index_dir)


def _build_channels(index_dir: Path, tmp: Path, old: dict[str, Any], build_id: str, memory: int | None) -> dict:
    """The lookups and every channel the old manifest lists, built from the new store with the options they were
    built with (dense: the scope it has); the new manifest."""
    from indexer import lookups
    from indexer.build import build_one, stamp_channel

    built = dict(old.get("indexes") or {})
    lookups.build(tmp / STORE_FILE, tmp / LOOKUPS_DIR, build_id, graph="kg" in built, memory_limit=memory)
    options = (old.get("parameters") or {}).get("index_options") or {}
    for name in [n for n in built if n in BUILT_CHANNELS]:
        opts = dict(options.get(name) or {})
        if name == "dense":
            opts["shards_dir"] = str(tmp.parent / f"{tmp.name}.dense-shards")
            opts["scope"] = _dense_scope(index_dir, opts.get("scope", "auto"))
        try:
            if name == "dense":
                _carry_vectors(index_dir, tmp, opts)
            built[name] = build_one(name, tmp, progress=False, options=opts, memory=memory)
        finally:
            shutil.rmtree(tmp.parent / f"{tmp.name}.dense-shards", ignore_errors=True)
        stamp_channel(tmp / name, build_id)
    _survivors(tmp).unlink(missing_ok=True)
    return {**old, "build_id": build_id, "indexes": built}


def _survivors(tmp: Path) -> Path:
    """Beside the compaction's folder: the old id of each surviving base passage, by new id."""
    return tmp.parent / f"{tmp.name}.survivors.npy"


def _carry_vectors(index_dir: Path, tmp: Path, opts: dict[str, Any]) -> None:
    """The dense shards of the passages that survived, from the base's vectors (``indexer.compact_dense``)."""
    import numpy as np

    from indexer.compact_dense import seed_shards

    survivors = np.load(_survivors(tmp), allow_pickle=False)
    seed_shards(index_dir / "dense", tmp / STORE_FILE, survivors, Path(opts["shards_dir"]), opts)


def _dense_scope(index_dir: Path, asked: str) -> str:
    import json

    try:
        params = json.loads((index_dir / "dense" / PARAMS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return asked
    return params.get("scope") or asked if isinstance(params, dict) else asked


def _publish(index_dir: Path, tmp: Path, folded: set[str]) -> None:
    """Swap ``tmp`` in, carrying the delta's segments written since the compaction began (not the folded ones)."""
    import os

    from indexer.build import folder_mode

    os.chmod(tmp, folder_mode(index_dir))
    with delta_lock(index_dir, exclusive=True):
        kept = [s for s in delta_segments(index_dir) if s.name not in folded]
        if kept:
            delta_dir(tmp).mkdir(exist_ok=True)
            for seg in kept:
                shutil.copy2(seg, delta_dir(tmp) / seg.name)
            log.info("carried %d delta segment(s) written during the compaction", len(kept))
        swap_folder(tmp, index_dir)


def _write_store(
    index_dir: Path, db: Path, build_id: str, memory: int | None, survivors: Path
) -> tuple[dict[str, int], list[str]]:
    """The base store with the delta applied, into ``db``; its row counts and the segments folded."""
    import duckdb

    from indexer.compact_store import fold_store

    delta, listing = open_delta(index_dir)
    if delta is None:
        raise BuildError(f"{index_dir}: no delta to fold")
    try:
        counts = fold_store(store_path(index_dir), delta, db, build_id, memory, survivors=survivors)
        return counts, [entry[0] for entry in listing]
    except duckdb.Error as exc:
        raise BuildError(f"{db}: writing the compacted store failed ({exc})") from exc
    finally:
        delta.close()
