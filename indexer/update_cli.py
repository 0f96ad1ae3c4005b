"""``python -m indexer update`` and ``python -m indexer compact`` (``wikiground update``, ``wikiground compact``):
their options and their output."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    update = sub.add_parser(
        "update",
        help="apply adds-changes / pages-articles dumps and page_change events to an index (no rebuild)",
        description="Make an index current: newer revisions, new pages, deletions and moves go into its delta, "
        "which every channel searches with the base.",
    )
    update.add_argument("--index", required=True, type=Path, metavar="DIR", help="the index folder to update")
    update.add_argument(
        "--dump",
        action="append",
        default=[],
        metavar="FILE",
        help="MediaWiki XML (.xml/.bz2/.xz/.gz): an adds-changes file (pages-meta-hist-incr) or a pages-articles "
        "export; the newest revision of each page is kept; repeatable",
    )
    update.add_argument(
        "--events",
        action="append",
        default=[],
        metavar="FILE",
        help="mediawiki.page_change.v1 events as JSON lines: deletes, undeletes and moves are applied, edits "
        "without text are noted as stale; repeatable",
    )
    update.add_argument("--workers", type=int, default=None, metavar="N", help="cleaner processes (default: CPUs)")
    update.add_argument("--json", action="store_true", help="print the update's summary as JSON")
    update.add_argument("--quiet", action="store_true", help="warnings only")
    update.add_argument("--verbose", action="store_true", help="debug logging and tracebacks on errors")


def run(args: argparse.Namespace, *, prepare: Callable[[Path, Path, str], object] | None = None) -> int:
    """The update; ``prepare``: what is written with its segment (the channels' delta parts)."""
    from indexer.compact import delta_share
    from indexer.update import update_index

    summary = update_index(args.index, args.dump, args.events, workers=args.workers, prepare=prepare)
    # Every query scores the delta directly, so past the share worth a compaction the user is told, once per update.
    summary["delta_share"] = delta_share(args.index, summary["delta"])
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
    elif not args.quiet:
        print(describe(args.index, summary))
    return 0


def describe(index: Path, summary: dict) -> str:
    """One line per file: what it changed, or why it was skipped."""
    lines = []
    for r in summary["applied"]:
        lines.append(
            f"{r['name']}: {r['pages_added']} added, {r['pages_changed']} changed, {r['pages_deleted']} deleted, "
            f"{r['pages_moved']} moved, {r['pages_undeleted']} undeleted, {r['pages_stale']} stale, "
            f"{r['skipped_older']} older revision(s) skipped"
        )
    lines.extend(f"{s['name']}: {s['reason']}, skipped" for s in summary["skipped_files"])
    segment = summary["segment"] or "nothing new"
    lines.append(f"{index}: delta {segment}; {summary['seconds']:.1f}s")
    share = summary.get("delta_share")
    if share and share["share"] >= share["threshold"]:
        lines.append(
            f"the delta holds {share['delta_passages']:,} passages, {share['share']:.1%} of the base's "
            f"{share['base_passages']:,}, past the {share['threshold']:.0%} where it slows every query: "
            f"wikiground compact --index {index} folds it into the base"
        )
    return "\n".join(lines)


def add_compact_parser(sub: argparse._SubParsersAction) -> None:
    compact = sub.add_parser(
        "compact",
        help="fold the delta into the base channels (when it has grown past a tenth of the base)",
        description="Rebuild the store and the channels with the delta applied, in a temporary folder swapped in "
        "under the build lock; below the share worth it, say so and do nothing.",
    )
    compact.add_argument("--index", required=True, type=Path, metavar="DIR", help="the index folder to compact")
    compact.add_argument("--force", action="store_true", help="compact whatever the delta's size")
    compact.add_argument("--json", action="store_true", help="print what was done as JSON")
    compact.add_argument("--quiet", action="store_true", help="warnings only")
    compact.add_argument("--verbose", action="store_true", help="debug logging and tracebacks on errors")


def run_compact(args: argparse.Namespace) -> int:
    from indexer.compact import compact_index

    done = compact_index(args.index, force=args.force)
    if args.json:
        print(json.dumps(done, indent=2, ensure_ascii=False))
    elif not args.quiet:
        if done["compacted"]:
            print(
                f"{args.index}: {done['delta_pages']} delta page(s) and {done['delta_deleted']} deletion(s) folded "
                f"into the base (build {done['build_id']}); {done['seconds']:.1f}s"
            )
        else:
            print(f"{args.index}: not compacted: {done['reason']}")
    return 0
