"""``python -m indexer build --dump PATH --out DIR [--indexes LIST] [--namespaces 0] [--workers N]
[--dense-scope auto|all|leads] [--dense-tune-queries FILE] [--dense-later auto|yes|no] [--no-embed] [--quiet]``,
``python -m indexer update --index DIR --dump FILE... [--events FILE...]`` and
``python -m indexer compact --index DIR [--force]``."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated namespace numbers, got {text!r}") from None


def _size(text: str) -> int:
    from wikiground.system import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_scale_options(build: argparse.ArgumentParser) -> None:
    """What a build of all of Wikipedia needs: a memory budget, and continuing one that was cut off."""
    build.add_argument(
        "--memory",
        type=_size,
        default=None,
        metavar="SIZE",
        help="memory the whole build may use, e.g. 3G (default: a sixth of this machine's RAM, 1G to 4G); DuckDB, "
        "Lucene and TF-IDF spill to the build's folder past their shares",
    )
    build.add_argument(
        "--resume",
        action="store_true",
        help="continue a build of --out that was cut off (killed, out of memory or disk) with the same inputs and "
        "options: its finished stages are kept where their checksums still match",
    )


def _add_later_options(build: argparse.ArgumentParser) -> None:
    """Usable first, complete later (indexer.dense_later)."""
    build.add_argument(
        "--dense-later",
        default="auto",
        choices=("auto", "yes", "no"),
        help="publish the index before the dense channel is embedded, which then joins it: auto (default) when "
        "the embedding is estimated at more than 30 min, yes always, no waits for it",
    )
    build.add_argument(
        "--no-embed",
        action="store_true",
        help="with the dense channel pending: stop once the index is published; `wikiground embed --index DIR` "
        "embeds it later (here, or on a cluster with --engine ray)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m indexer", description="Build a wikiground index folder.")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="ingest dumps / JSONL corpora into a store and search indexes")
    build.add_argument(
        "--dump",
        action="append",
        required=True,
        metavar="PATH",
        help="MediaWiki XML dump (.xml/.bz2/.gz), JSONL corpus, or a folder of them; repeatable",
    )
    build.add_argument("--out", required=True, metavar="DIR", help="index folder to create or replace")
    build.add_argument(
        "--indexes",
        default="all",
        metavar="LIST",
        help="comma list among bm25,dense,tfidf,kg; 'all' (default) or 'none' (store alone)",
    )
    build.add_argument(
        "--namespaces",
        type=_int_list,
        default=[0],
        metavar="LIST",
        help="namespace numbers to keep, e.g. 0,4 (default 0)",
    )
    build.add_argument(
        "--workers", type=int, default=None, metavar="N", help="cleaner processes (default: usable CPUs; 1 = no pool)"
    )
    build.add_argument(
        "--max-page-chars",
        type=int,
        default=None,
        metavar="N",
        help="truncate wikitext longer than this (with a warning)",
    )
    build.add_argument(
        "--dense-scope",
        default="auto",
        choices=("auto", "all", "leads"),
        help="dense channel: every passage, each page's lead passage only, or auto (leads above 1,000,000 passages)",
    )
    build.add_argument(
        "--dense-tune-queries",
        type=Path,
        default=None,
        metavar="FILE",
        help="dense IVF (from 1M passages): choose nprobe on these queries (JSON lines with claim/query/text, or "
        "plain lines) instead of held-out passages",
    )
    _add_scale_options(build)
    _add_later_options(build)
    build.add_argument("--quiet", action="store_true", help="no progress bar, warnings only")
    build.add_argument("--verbose", action="store_true", help="debug logging and tracebacks on errors")
    from indexer import update_cli

    update_cli.add_parser(sub)
    update_cli.add_compact_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)

    if args.command == "update":
        from backends.delta_store import write_parts  # the channels' delta parts, written with the update
        from indexer import update_cli

        run = functools.partial(update_cli.run, prepare=write_parts)
        return _guarded(run, args, "interrupted; the index is as it was before this update")
    if args.command == "compact":
        from indexer import update_cli

        return _guarded(update_cli.run_compact, args, "interrupted; the index is as it was before this compaction")
    return _guarded(_build, args, "interrupted; finished stages are kept for --resume, the rest was removed")


def _guarded(work: Callable[[argparse.Namespace], int], args: argparse.Namespace, interrupted: str) -> int:
    """``work(args)``'s exit code; Ctrl-C and a WikigroundError as one line on stderr and their exit codes."""
    from wikiground.errors import ConfigError, WikigroundError

    try:
        return work(args)
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return EXIT_INTERRUPTED
    except WikigroundError as exc:
        if args.verbose:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_ERROR


def _build(args: argparse.Namespace) -> int:
    from indexer.build import build_index, parse_index_list

    options: dict = {} if args.max_page_chars is None else {"max_page_chars": args.max_page_chars}
    if args.memory is not None:
        options["memory"] = args.memory
    if args.resume:
        options["resume"] = True
    if args.dense_tune_queries is not None:  # a bad file fails now, not after hours of embedding
        from backends.dense import read_tune_queries

        read_tune_queries(args.dense_tune_queries)
    manifest = build_index(
        args.dump,
        args.out,
        indexes=parse_index_list(args.indexes),
        namespaces=args.namespaces,
        workers=args.workers,
        progress=not args.quiet,
        index_options={"dense": {"scope": args.dense_scope, "tune_queries": args.dense_tune_queries}},
        dense_later=args.dense_later,
        **options,
    )
    _report(args, manifest)
    if manifest.get("pending") and not args.no_embed:
        _complete(args)
    return 0


def _report(args: argparse.Namespace, manifest: dict) -> None:
    counts = manifest["counts"]
    if not args.quiet:
        formats = ", ".join(sorted({i["format"] for i in manifest["inputs"]}))
        print(
            f"{args.out}: {counts['pages']:,} pages, {counts['redirects']:,} redirects, "
            f"{counts['passages']:,} passages, {counts['sentences']:,} sentences ({formats}); "
            f"indexes: {', '.join(manifest['indexes']) or 'none'}; {manifest['build']['seconds']:.1f}s"
        )
    if manifest.get("pending"):
        from indexer.dense_later import status_line

        then = f"embed it with `wikiground embed --index {args.out}`" if args.no_embed else "embedding it now"
        print(f"{args.out}: published; {status_line(manifest)}; {then}", file=sys.stderr)


def _complete(args: argparse.Namespace) -> dict:
    """The pending dense channel embedded and joined to the published index (Ctrl-C keeps its shards)."""
    from indexer.dense_later import complete

    try:
        manifest = complete(args.out, progress=not args.quiet)
    except KeyboardInterrupt:
        print(
            f"interrupted; {args.out} stays published without the dense channel: `wikiground embed --index "
            f"{args.out}` continues from its shards",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_INTERRUPTED) from None
    if not args.quiet and manifest is not None:
        print(f"{args.out}: the dense channel joined the index; queries use it from now on", file=sys.stderr)
    return manifest


if __name__ == "__main__":
    sys.exit(main())
