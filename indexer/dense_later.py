"""The dense channel embedded after the index is published: usable first, complete later.

On 2 cores MiniLM embeds a few dozen passages a second, so a build of all of Wikipedia would leave no index at all
for days although the store and the lexical channels are ready in hours. When the embedding is estimated to take
longer than :data:`LATER_SECONDS` (or ``--dense-later yes``), the build publishes the index without the dense
channel and lists it under ``pending`` in the manifest, with its scope and estimate. The same command then embeds
(the sharded, resumable embedder of :mod:`backends.dense.embed`, its shards in ``dense/shards`` of the published
folder) and :func:`join` brings the channel in; a cut-off run continues with ``wikiground embed --index DIR``.

Joining never disturbs a reader. The channel is assembled in a temporary folder beside the index, stamped with the
store's build id, swapped into ``dense/`` in one step (:func:`wikiground.layout.swap_folder`), and only then moved
from ``pending`` to ``indexes`` in the manifest. A retriever keeps the channels it opened with: one opened before
the join answers without dense, one opened after with it, never a mix. The server notices the join and opens a new
generation (:mod:`retriever.serve.state`).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wikiground.errors import BuildError, ConfigError
from wikiground.layout import PARAMS_FILE, atomic_write_json, build_tmp_prefix, store_path, swap_folder

log = logging.getLogger(__name__)

# Below half an hour a build is waited for in one sitting, and one swap with every channel is simpler for the user
# (and for the tests and the benchmark corpora); above it the lexical index that is ready now is worth more than
# the whole index later.
LATER_SECONDS = 1800
MODES = ("auto", "yes", "no")
PENDING_KEY = "pending"
SHARDS = "shards"


def decide(mode: str, seconds: float) -> tuple[bool, str]:
    """(embed after publishing?, why) for ``--dense-later mode`` and the estimated embedding seconds."""
    from backends.dense.embed import duration

    if mode not in MODES:
        raise ConfigError(f"--dense-later {mode!r}: choose from {', '.join(MODES)}")
    if mode == "yes":
        return True, "--dense-later yes"
    if mode == "no":
        return False, "--dense-later no"
    eta = duration(seconds)
    if seconds > LATER_SECONDS:
        return True, f"the embedding is estimated at {eta}, above {duration(LATER_SECONDS)}"
    return False, f"the embedding is estimated at {eta}, within {duration(LATER_SECONDS)}"


def pending_entry(est: Mapping[str, Any], why: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's ``pending.dense``: what remains to embed, at what rate, and why it was left for later."""
    return {
        "scope": est["scope"],
        "passages": est["leads"] if est["scope"] == "leads" else est["passages"],
        "rate": round(float(est["rate"]), 1),
        "rate_source": est["rate_source"],
        "eta_seconds": round(float(est["seconds"]), 1),
        "reason": why,
        "shards": f"dense/{SHARDS}",
        "options": {k: str(v) for k, v in options.items() if v is not None and k != "shards_dir"},
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def carry_shards(tmp: Path, earlier: Path) -> None:
    """Make ``tmp/dense/shards``, holding the shards an earlier, cut-off build of this index left at ``earlier``
    (each is checked against its passages' text before it is used)."""
    target = tmp / "dense" / SHARDS
    target.parent.mkdir(parents=True, exist_ok=True)
    if earlier.is_dir() and not target.exists():
        earlier.rename(target)
    target.mkdir(exist_ok=True)


def pending_dense(index: Path) -> dict[str, Any] | None:
    """The manifest's ``pending.dense`` entry of ``index``, or None."""
    from indexer.manifest import read_manifest

    entry = (read_manifest(index).get(PENDING_KEY) or {}).get("dense")
    return entry if isinstance(entry, dict) else None


def status_line(manifest: Mapping[str, Any]) -> str:
    """What is ready and what is pending, with the estimate: printed when a build publishes early."""
    from backends.dense.embed import duration

    ready = [*manifest.get("indexes", {}), "title"]
    parts = [f"ready: {', '.join(dict.fromkeys(ready))}"]
    for name, entry in (manifest.get(PENDING_KEY) or {}).items():
        parts.append(
            f"pending: {name} ({entry['passages']:,} passages, {entry['scope']}, at ~{entry['rate']:.0f}/s "
            f"≈ {duration(entry['eta_seconds'])}; {entry['reason']})"
        )
    return "; ".join(parts)


def complete(
    index: str | Path,
    *,
    backend: str = "auto",
    threads: int | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> dict[str, Any] | None:
    """Embed what ``pending.dense`` of ``index`` lists (resuming from its shards) and :func:`join` the channel;
    returns the new manifest, or None when nothing is pending."""
    from backends.dense.embed import embed_range, plan_scope, scope_shards_dir

    index = Path(index).absolute()
    entry = pending_dense(index)
    if entry is None:
        return None
    build_id = _build_id(index)
    db = store_path(index)
    scope, rows, _ = plan_scope(db, entry["scope"])
    stats = embed_range(
        db,
        scope_shards_dir(index / "dense" / SHARDS, scope),
        ids=rows,
        backend=backend,
        threads=threads,
        batch_size=batch_size,
        progress=progress,
    )
    return join(index, stats, expected_build=build_id)


def join(index: Path, stats: Mapping[str, Any], *, expected_build: str | None = None) -> dict[str, Any]:
    """Assemble the pending dense channel of ``index`` from its shards and bring it into queries: the assembled
    folder swapped into ``dense/`` in one step, then the manifest's entry moved from ``pending`` to ``indexes``.
    Under the build lock, so that no rebuild swaps the folder meanwhile; an index rebuilt since the embedding
    started (another build id) is refused."""
    from indexer.build_lock import build_lock
    from indexer.manifest import read_manifest, write_manifest

    index = Path(index).absolute()
    with build_lock(index):
        manifest = read_manifest(index)
        entry = (manifest.get(PENDING_KEY) or {}).get("dense")
        if entry is None:
            raise BuildError(f"{index}: no pending dense channel to join (its manifest has none)")
        if expected_build is not None and manifest.get("build_id") != expected_build:
            raise BuildError(
                f"{index} was rebuilt while its dense channel was embedded (build {expected_build} -> "
                f"{manifest.get('build_id')}): run `wikiground embed --index {index}` again"
            )
        t0 = time.perf_counter()
        params = _assemble_beside(index, manifest.get("build_id"), entry, stats)
        from backends.dense import manifest_entry

        manifest.setdefault("indexes", {})["dense"] = manifest_entry(params, seconds=time.perf_counter() - t0)
        del manifest[PENDING_KEY]["dense"]
        if not manifest[PENDING_KEY]:
            del manifest[PENDING_KEY]
        write_manifest(index, manifest)
    log.info("dense channel joined %s: %d vectors (%s)", index, params["count"], params["scope"])
    return manifest


def _assemble_beside(index: Path, build_id: str | None, entry: Mapping[str, Any], stats: Mapping[str, Any]) -> dict:
    """dense/ assembled in a temporary folder beside the index (a later build removes it if this dies), stamped,
    and swapped into place; the shards go with the old dense/ folder."""
    from backends import dense

    tmp = Path(tempfile.mkdtemp(prefix=f"{build_tmp_prefix(index)}dense-", dir=index.parent))
    try:
        tune = entry.get("options", {}).get("tune_queries")
        params = dense.assemble(
            store_path(index),
            tmp,
            encoder_backend=stats.get("encoder_backend"),
            shards_dir=index / "dense" / SHARDS,
            scope=entry["scope"],
            tune_queries=Path(tune) if tune else None,
            extra={"encode_seconds": stats.get("encode_seconds"), "passages_per_s": stats.get("passages_per_s")},
        )
        params = _stamp(tmp, params, build_id)
        tmp.chmod(0o777 & ~_umask())
        swap_folder(tmp, index / "dense")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    dense.prepare_queries(stats.get("encoder_backend"))
    return params


def _stamp(folder: Path, params: dict, build_id: str | None) -> dict:
    """``build_id`` and ``files`` into params.json, as a build stamps each channel (``backends.load`` checks
    them)."""
    files = {
        f.relative_to(folder).as_posix(): f.stat().st_size
        for f in sorted(folder.rglob("*"))
        if f.is_file() and f.name != PARAMS_FILE
    }
    params = {**params, "files": files, **({"build_id": build_id} if build_id else {})}
    atomic_write_json(folder / PARAMS_FILE, params, sort_keys=True)
    return params


def _build_id(index: Path) -> str | None:
    from indexer.manifest import read_manifest

    return read_manifest(index).get("build_id")


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
