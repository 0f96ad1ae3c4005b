"""The dense channel of a compaction (``indexer.compact``) without embedding the base again.

A compaction numbers the passages again: the base's surviving passages first, in their order, then the delta's
(``indexer.compact_store``). The dense build embeds the store in shards of passage-id ranges and keeps a shard
whose vectors and text digest are already written (``backends.dense.embed``). So, before it runs, every shard of
the new numbering whose passages all survived from the base is written from the base's own vectors (the same
texts, the same model), with its digest: the build then encodes only the shards that hold a changed or new
passage. Where the base's dense index was made by another model, or with another scope, nothing is carried.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def seed_shards(old_dense: Path, db: Path, survivors: np.ndarray, shards_dir: Path, options: dict[str, Any]) -> int:
    """Write into ``shards_dir`` the shards of the compacted store ``db`` whose passages all survived, from the
    vectors of ``old_dense`` (the base's dense folder); ``survivors[new_id]`` is a surviving passage's old id.
    Returns the vectors carried (0: none could be)."""
    from backends.dense import FORMAT_VERSION, IDS_FILE, NAME, VECTORS_FILE
    from backends.dense.embed import (
        SHARD_SIZE,
        check_model,
        plan_scope,
        read_texts,
        scope_shards_dir,
        shard_ranges,
        write_shard,
    )
    from backends.encoder import model_info
    from wikiground.errors import IndexCorruptError, IndexFormatError, IndexMissingError
    from wikiground.layout import read_params

    try:
        old = read_params(old_dense, NAME, FORMAT_VERSION)
    except (IndexMissingError, IndexFormatError, IndexCorruptError) as exc:
        log.info("%s: no vectors to carry (%s); the compacted store is embedded whole", old_dense, exc)
        return 0
    info = model_info(old.get("encoder_backend") or "unknown")
    scope, rows, passages = plan_scope(db, options.get("scope", "auto"))
    if [old.get(k) for k in ("model", "sha256", "dim")] != [info[k] for k in ("model", "sha256", "dim")]:
        log.info("%s: made by another model; the compacted store is embedded whole", old_dense)
        return 0
    if old.get("scope", "all") != scope:
        log.info("%s: of scope %s, not %s; the compacted store is embedded whole", old_dense, old.get("scope"), scope)
        return 0
    old_rows = np.load(old_dense / IDS_FILE, allow_pickle=False) if scope == "leads" else None
    source = _old_rows(np.arange(passages) if rows is None else np.asarray(rows), survivors, old_rows)
    vectors = np.load(old_dense / VECTORS_FILE, mmap_mode="r", allow_pickle=False)
    folder = scope_shards_dir(shards_dir, scope)
    folder.mkdir(parents=True, exist_ok=True)
    carried = 0
    for a, b in shard_ranges(0, len(source), shard_size=int(options.get("shard_size") or SHARD_SIZE)):
        if (source[a:b] < 0).any():
            continue
        _, digest = read_texts(db, a, b, rows)
        write_shard(folder, a, b, np.ascontiguousarray(vectors[source[a:b]], dtype=np.float32), digest)
        carried += b - a
    if carried:
        check_model(folder, info)
    log.info("%s: %d vectors carried into the compaction's dense shards", old_dense, carried)
    return carried


def _old_rows(new_ids: np.ndarray, survivors: np.ndarray, old_rows: np.ndarray | None) -> np.ndarray:
    """For each dense row of the compacted store (its passage id ``new_ids[row]``), the row of the base's vectors
    holding the same passage, or -1 (a passage of the delta, or one the base did not embed)."""
    out = np.full(len(new_ids), -1, dtype=np.int64)
    kept = new_ids < len(survivors)
    old_ids = survivors[new_ids[kept]]
    if old_rows is None:
        out[kept] = old_ids
        return out
    pos = np.minimum(np.searchsorted(old_rows, old_ids), max(len(old_rows) - 1, 0))
    found = (old_rows[pos] == old_ids) if len(old_rows) else np.zeros(len(old_ids), dtype=bool)
    out[np.flatnonzero(kept)[found]] = pos[found]
    return out
