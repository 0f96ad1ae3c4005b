"""``python -m indexer.embed --index DIR [--start A --end B] [--engine ray] [--assemble]``: dense embeddings in
resumable shards.

The work is :mod:`backends.dense.embed` (shards, in this process), :mod:`backends.dense.ray_embed` (shards, on
Ray Data) and :func:`backends.dense.assemble` (the index); this is their command line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from backends import dense
from backends.dense.embed import SCOPES, SHARD_SIZE, embed_range, plan_scope, scope_shards_dir
from backends.encoder import BACKENDS
from wikiground.errors import BuildError, ConfigError, IndexCorruptError, InputError, ModelError
from wikiground.layout import store_path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m indexer.embed", description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True, help="index folder holding wiki.duckdb")
    ap.add_argument("--start", type=int, default=0, help="first passage (row, for --dense-scope leads)")
    ap.add_argument("--end", type=int, default=None)
    ap.add_argument("--shard-size", type=int, default=SHARD_SIZE)
    ap.add_argument("--backend", default="auto", choices=BACKENDS)
    ap.add_argument("--threads", type=int, default=None, help="encoder threads (per Ray worker with --engine ray)")
    ap.add_argument("--batch-size", type=int, default=32, help="passages per encoder call")
    ap.add_argument("--engine", default="local", choices=("local", "ray"), help="this process, or Ray Data")
    ap.add_argument(
        "--address", default=None, help="Ray cluster: 'auto' or ray://host:port (default: a local Ray instance)"
    )
    ap.add_argument("--workers", type=int, default=None, help="Ray encoder actors (default: local 1; cluster CPUs/4)")
    ap.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per Ray actor (torch on CUDA there)")
    ap.add_argument(
        "--dense-scope", default="auto", choices=SCOPES, help="all passages, or each page's lead passage only"
    )
    ap.add_argument(
        "--assemble",
        action="store_true",
        help="after encoding, build the dense index from all shards (an index whose dense channel is pending is "
        "joined without it once every passage is embedded)",
    )
    ap.add_argument("--exact-threshold", type=int, default=None)
    ap.add_argument(
        "--dense-tune-queries",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --assemble: choose the IVF's nprobe on these queries instead of held-out passages",
    )
    ap.add_argument("--quiet", action="store_true")
    return ap


def _embed(args: argparse.Namespace, db: Path, shards: Path, rows) -> dict:
    common = {
        "start": args.start,
        "end": args.end,
        "shard_size": args.shard_size,
        "backend": args.backend,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "progress": not args.quiet,
        "ids": rows,
    }
    if args.engine == "ray":
        from backends.dense.ray_embed import embed_ray

        return embed_ray(
            db,
            shards,
            address=args.address,
            workers=args.workers,
            gpus_per_worker=args.gpus_per_worker,
            **common,
        )
    if args.address or args.workers or args.gpus_per_worker:
        raise ConfigError("--address, --workers and --gpus-per-worker need --engine ray")
    return embed_range(db, shards, **common)


def _register(index: Path, dense_dir: Path, params: dict) -> bool:
    """List the assembled channel in the index's manifest, stamped with the store's build id and its files' sizes
    (as a build does), so that queries use it; False for a bare store without a manifest."""
    from indexer.manifest import read_manifest, write_manifest
    from wikiground.layout import PARAMS_FILE, atomic_write_json

    if not (index / "manifest.json").is_file():
        return False
    manifest = read_manifest(index)
    files = {
        f.relative_to(dense_dir).as_posix(): f.stat().st_size
        for f in sorted(dense_dir.rglob("*"))
        if f.is_file() and f.name != PARAMS_FILE and dense.SHARDS_DIR not in f.relative_to(dense_dir).parts
    }
    params = {**params, "files": files}
    if manifest.get("build_id"):
        params["build_id"] = manifest["build_id"]
    atomic_write_json(dense_dir / PARAMS_FILE, params, sort_keys=True)
    manifest.setdefault("indexes", {})[dense.NAME] = {
        "type": dense.NAME,
        "engine": f"{params['model']} ({params['encoder_backend']}) + {params['index_type']}",
        "model": params["model"],
        "model_version": f"{params['package']}=={params['package_version']}",
        "params": params,
        "documents": params["count"],
    }
    write_manifest(index, manifest)
    return True


def _pending(args: argparse.Namespace) -> dict | None:
    """The index's pending dense channel (indexer.dense_later): its scope is the one embedded."""
    from indexer.dense_later import pending_dense

    if not (args.index / "manifest.json").is_file():
        return None
    entry = pending_dense(args.index)
    if entry is not None and args.dense_scope not in ("auto", entry["scope"]):
        raise ConfigError(
            f"--dense-scope {args.dense_scope}: the pending dense channel of {args.index} is {entry['scope']}"
        )
    return entry


def _whole(args: argparse.Namespace) -> bool:
    """Whether this run covered every passage (no --start/--end range): then a pending channel joins, as it does
    with --assemble."""
    return args.start == 0 and args.end is None


def _build_id(index: Path) -> str | None:
    from indexer.manifest import read_manifest

    return read_manifest(index).get("build_id")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    db = store_path(args.index)
    dense_dir = args.index / "dense"
    try:
        pending = _pending(args)
        scope, rows, _ = plan_scope(db, pending["scope"] if pending else args.dense_scope)
        build_id = _build_id(args.index) if pending else None
        stats = _embed(args, db, scope_shards_dir(dense_dir / "shards", scope), rows)
        rate = f" at {stats['passages_per_s']}/s" if stats["passages_per_s"] else ""
        print(
            f"embedded {stats['encoded']} passages{rate} ({scope}), {stats['shards_written']} shards written, "
            f"{stats['shards_skipped']} kept",
            file=sys.stderr,
        )
        if pending and (_whole(args) or args.assemble):  # assembling checks that the shards cover every row
            from indexer.dense_later import join

            manifest = join(args.index, stats, expected_build=build_id)
            entry = manifest["indexes"]["dense"]
            print(f"dense index: {entry['documents']} vectors ({scope}) joined {args.index}", file=sys.stderr)
        elif args.assemble:
            opts = {} if args.exact_threshold is None else {"exact_threshold": args.exact_threshold}
            if args.dense_tune_queries is not None:
                opts["tune_queries"] = args.dense_tune_queries
            entry = dense.assemble(db, dense_dir, encoder_backend=stats["encoder_backend"], scope=scope, **opts)
            listed = _register(args.index, dense_dir, entry)
            print(
                f"dense index: {entry['index_type']}, {entry['count']} vectors ({scope}) in {dense_dir}"
                + ("; listed in the manifest" if listed else ""),
                file=sys.stderr,
            )
    except (InputError, BuildError, ConfigError, ModelError, IndexCorruptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
