"""The search flags that ``wikiground query`` and ``wikiground serve`` share, and the options they make.

One argument group (``--index``, ``--k``, ``--indexes``, fusion, multi-hop with its planner, the live fallback's
flags), one check of it, and the typed options of :mod:`retriever.service` it turns into: :class:`OpenOptions`
(what to open) and :class:`SearchOptions` (what each claim is searched with).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from retriever.service import (
    FUSIONS,
    MAX_HOPS,
    PLANNERS,
    FallbackSettings,
    OpenOptions,
    SearchOptions,
    check_k,
    parse_weights,
)
from wikiground.errors import QueryError

__all__ = ["add_search_options", "check_search_options", "fallback_settings", "open_options", "search_options"]


def add_search_options(parser: argparse.ArgumentParser, *, title: str | None = None) -> None:
    """The shared flags, on ``parser``; their names are public (kept). ``title``: a help section for the first
    ones (the multi-hop and live fallback flags have sections of their own)."""
    p: Any = parser.add_argument_group(title) if title else parser
    p.add_argument("--index", required=True, type=Path, help="index folder built by `python -m indexer build`")
    p.add_argument("--k", type=int, default=10, help="evidence items to return, 1 to 1000 (default 10)")
    p.add_argument(
        "--indexes", default="all", help="channels: comma list of bm25,dense,tfidf,title (default: all built)"
    )
    p.add_argument(
        "--fusion",
        choices=FUSIONS,
        default="rrf",
        help="rrf: reciprocal rank fusion with the sure channels' rank-1 promotion (default); rrf-plain: without it; "
        "score: weighted min-max scores (a server's default: each request may name its own)",
    )
    p.add_argument("--weights", help="per-channel weights, e.g. title=1.5,dense=1,bm25=0.7,tfidf=0.3")
    p.add_argument("--passages", action="store_true", help="top-k passages instead of top-k pages")
    m = parser.add_argument_group("multi-hop retrieval")
    m.add_argument(
        "--multihop", action="store_true", help="iterative multi-hop retrieval (entity, semantic and attribute queries)"
    )
    m.add_argument("--hops", type=int, default=None, help=f"multi-hop iterations, 1 to {MAX_HOPS} (default 3)")
    m.add_argument(
        "--planner",
        choices=PLANNERS,
        default="local",
        help="who plans each hop's queries: local (default, from the store) or dspy (an LLM through DSPy; its "
        "answers are recorded in and replayed from --cache, by --cache-mode)",
    )
    m.add_argument("--lm", metavar="MODEL", help="the dspy planner's dspy.LM model string, e.g. openai/gpt-4o-mini")
    m.add_argument(
        "--lm-api-base",
        metavar="URL",
        help="base URL of an OpenAI-compatible server for --lm (e.g. http://127.0.0.1:8000/v1; key: "
        "WIKIGROUND_LM_API_KEY)",
    )
    _add_live_options(parser)


def _add_live_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("live Wikipedia fallback (only for entities the local index lacks)")
    g.add_argument("--on-the-fly", action="store_true", help="ask the live MediaWiki API for missing entities")
    g.add_argument("--api-url", help="MediaWiki api.php URL (default English Wikipedia)")
    g.add_argument(
        "--contact", help="contact URL or email for the User-Agent (Wikimedia policy; or WIKIGROUND_CONTACT)"
    )
    g.add_argument("--cache", type=Path, help="cache folder for live responses (and the dspy planner's answers)")
    g.add_argument(
        "--cache-mode", choices=("record", "replay", "off"), help="record (default when live), replay (no network), off"
    )
    g.add_argument("--rate", type=float, help="requests per second, over all of a server's clients (default 1)")
    g.add_argument(
        "--live-deadline",
        type=float,
        metavar="SECONDS",
        help="all of one claim's live lookups end by this, retries and waits included "
        "(default 30; or WIKIGROUND_LIVE_DEADLINE)",
    )
    g.add_argument("--ingest-live", action="store_true", help="write pages fetched live into the index's delta store")
    g.add_argument(
        "--live-bridges",
        action="store_true",
        help="with --on-the-fly, also when every entity is local: fetch the second hop's pages that the "
        "index lacks (names in the best local evidence; one request)",
    )
    g.add_argument(
        "--check-fresh",
        action="store_true",
        help="with --on-the-fly, also ask the live revision of the local pages among a claim's top evidence "
        "(prop=info, 50 titles a request) and answer from the new text of those that changed (origin: live)",
    )


def check_search_options(args: argparse.Namespace) -> None:
    """The shared flags' bounds and combinations (QueryError naming the flag)."""
    check_k(args.k, what="--k")
    if args.hops is not None and not 1 <= args.hops <= MAX_HOPS:
        raise QueryError(f"--hops must be a whole number from 1 to {MAX_HOPS}, got {args.hops}")
    if args.hops is not None and not args.multihop:
        raise QueryError("--hops works with --multihop")
    if args.live_bridges and not args.on_the_fly:
        raise QueryError("--live-bridges works with --on-the-fly")
    if args.check_fresh and not args.on_the_fly:
        raise QueryError("--check-fresh works with --on-the-fly")
    if args.planner != "local" and not args.multihop:
        raise QueryError(f"--planner {args.planner} works with --multihop")
    if (args.lm is not None or args.lm_api_base is not None) and args.planner != "dspy":
        raise QueryError("--lm and --lm-api-base work with --planner dspy")
    if args.planner == "dspy" and args.lm is None and fallback_settings(args).cache_mode != "replay":
        raise QueryError("--planner dspy needs --lm MODEL (or --cache-mode replay with the --cache of a recorded run)")


def fallback_settings(args: argparse.Namespace) -> FallbackSettings:
    """The live fallback's settings from the flags; unset ones come from ``WIKIGROUND_*`` variables."""
    return FallbackSettings.from_env(
        api_url=args.api_url,
        contact=args.contact,
        cache_dir=args.cache,
        cache_mode=args.cache_mode,
        rate=args.rate,
        live_deadline=args.live_deadline,
    )


def open_options(args: argparse.Namespace) -> OpenOptions:
    """What the flags open: the index, its channels and fusion, the live fallback and the multi-hop planner."""
    return OpenOptions(
        index=args.index,
        channels=args.indexes,
        weights=parse_weights(args.weights),
        fusion=args.fusion,
        on_the_fly=args.on_the_fly,
        fallback=fallback_settings(args),
        ingest_live=args.ingest_live,
        live_bridges=args.live_bridges,
        check_fresh=args.check_fresh,
        planner=args.planner,
        lm=args.lm,
        lm_api_base=args.lm_api_base,
    )


def search_options(args: argparse.Namespace) -> SearchOptions:
    """What each claim is searched with (the server's defaults for what a request leaves out)."""
    return SearchOptions(
        k=args.k, multihop=args.multihop, hops=args.hops, on_the_fly=args.on_the_fly, passages=args.passages
    )
