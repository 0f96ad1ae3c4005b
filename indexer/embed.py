"""``python -m indexer.embed --index DIR [--start A --end B] [--assemble]``: dense embeddings in resumable shards.

The work is :mod:`backends.dense.embed` (shards) and :func:`backends.dense.assemble` (the index); this is
their command line.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from backends import dense
from backends.dense.embed import SHARD_SIZE, embed_range
from wikiground.errors import BuildError, InputError
from wikiground.layout import store_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m indexer.embed", description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True, help="index folder holding wiki.duckdb")
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--end", type=int, default=None)
    ap.add_argument("--shard-size", type=int, default=SHARD_SIZE)
    ap.add_argument("--backend", default="auto", choices=("auto", "torch", "onnx"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--assemble", action="store_true", help="after encoding, build the dense index from all shards")
    ap.add_argument("--exact-threshold", type=int, default=None)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    db = store_path(args.index)
    dense_dir = args.index / "dense"
    try:
        stats = embed_range(
            db,
            dense_dir / "shards",
            start=args.start,
            end=args.end,
            shard_size=args.shard_size,
            backend=args.backend,
            threads=args.threads,
            progress=not args.quiet,
        )
        print(
            f"embedded {stats['encoded']} passages, {stats['shards_written']} shards written, "
            f"{stats['shards_skipped']} kept",
            file=sys.stderr,
        )
        if args.assemble:
            opts = {} if args.exact_threshold is None else {"exact_threshold": args.exact_threshold}
            entry = dense.assemble(db, dense_dir, encoder_backend=stats["encoder_backend"], **opts)
            print(f"dense index: {entry['index_type']}, {entry['count']} vectors in {dense_dir}", file=sys.stderr)
    except (InputError, BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
