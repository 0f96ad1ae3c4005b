"""Command line: ``python -m retriever.query --index DIR [--k 10] [--indexes ...] [--json] "claim"``.

Batch: ``--queries FILE.jsonl --out FILE.jsonl`` (each line ``{id, claim}`` or ``{id, question}``);
each output line is ``{id, query, status, evidence: [...]}`` with evidence in rank order.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from wikiground.errors import QueryError, WikigroundError

log = logging.getLogger("retriever.query")


def _fallback_settings(args: argparse.Namespace) -> Any:
    """The live fallback's settings from the flags; unset ones come from ``WIKIGROUND_*`` variables."""
    from fallback.settings import FallbackSettings

    return FallbackSettings.from_env(
        api_url=args.api_url, contact=args.contact, cache_dir=args.cache, cache_mode=args.cache_mode, rate=args.rate
    )


def _parse_weights(spec: str | None) -> dict[str, float] | None:
    if not spec:
        return None
    out: dict[str, float] = {}
    for part in spec.split(","):
        name, _, val = part.partition("=")
        try:
            out[name.strip()] = float(val)
        except ValueError as exc:
            raise QueryError(f"--weights: expected name=number pairs, got {part!r}") from exc
    return out


def read_queries(path: Path) -> Iterator[tuple[Any, str]]:
    """(id, text) per line of a JSONL file; the text is ``claim`` or ``question``."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise QueryError(f"{path}: cannot read queries: {exc.strerror or exc}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise QueryError(f"{path}:{lineno}: not JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise QueryError(f"{path}:{lineno}: expected an object with 'claim' or 'question'")
            text = obj.get("claim", obj.get("question"))
            if not isinstance(text, str):
                raise QueryError(f"{path}:{lineno}: no 'claim' or 'question' string (keys: {', '.join(obj)})")
            yield obj.get("id", lineno), text


def _table(result: dict[str, Any], out: TextIO) -> None:
    ev = result["evidence"]
    out.write(f"query: {result['query']}\nstatus: {result['status']}")
    if "requests" in result:
        out.write(f"   live requests: {result['requests']} (from cache: {result.get('cache_hits', 0)})")
    out.write("\n")
    if not ev:
        out.write("(no evidence)\n")
        return
    out.write(f"{'#':>2}  {'score':>8}  {'origin':<6} {'channels':<28} title / section\n")
    for i, e in enumerate(ev, 1):
        ranks = " ".join(f"{c}:{r}" for c, r in sorted(e.get("ranks", {}).items()))
        title = e["title"] + (f" > {e['section']}" if e.get("section") else "")
        if e.get("retrieved_for_entity"):
            title += f"   [entity: {e['retrieved_for_entity']}]"
        out.write(f"{i:>2}  {e['score']:>8.4f}  {e['origin']:<6} {ranks:<28} {title}\n")
        text = " ".join(e["evidence_text"].split())
        out.write(f"    {text[:240]}{'…' if len(text) > 240 else ''}\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m retriever.query", description=__doc__.split("\n")[0])
    p.add_argument("claim", nargs="?", help="claim or question text")
    p.add_argument("--index", required=True, type=Path, help="index folder built by `python -m indexer build`")
    p.add_argument("--k", type=int, default=10, help="evidence items to return (default 10)")
    p.add_argument(
        "--indexes", default="all", help="channels: comma list of bm25,dense,tfidf,title (default: all built)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--queries", type=Path, help="JSONL file of {id, claim} or {id, question}")
    p.add_argument("--out", type=Path, help="JSONL output for --queries (default: stdout)")
    p.add_argument(
        "--fusion", choices=("rrf", "score"), default="rrf", help="reciprocal rank fusion (default) or weighted scores"
    )
    p.add_argument("--weights", help="per-channel weights, e.g. title=1.5,dense=1,bm25=0.7,tfidf=0.3")
    p.add_argument("--passages", action="store_true", help="top-k passages instead of top-k pages")
    p.add_argument(
        "--multihop", action="store_true", help="iterative multi-hop retrieval (entity, semantic and attribute queries)"
    )
    p.add_argument("--hops", type=int, default=None, help="multi-hop iterations (default 3)")
    g = p.add_argument_group("live Wikipedia fallback (only for entities the local index lacks)")
    g.add_argument("--on-the-fly", action="store_true", help="ask the live MediaWiki API for missing entities")
    g.add_argument("--api-url", help="MediaWiki api.php URL (default English Wikipedia)")
    g.add_argument(
        "--contact", help="contact URL or email for the User-Agent (Wikimedia policy; or WIKIGROUND_CONTACT)"
    )
    g.add_argument("--cache", type=Path, help="cache folder for live responses")
    g.add_argument(
        "--cache-mode", choices=("record", "replay", "off"), help="record (default when live), replay (no network), off"
    )
    g.add_argument("--rate", type=float, help="requests per second (default 1)")
    g.add_argument("--ingest-live", action="store_true", help="write pages fetched live into the index's delta store")
    g.add_argument(
        "--live-bridges",
        action="store_true",
        help="with --on-the-fly, also when every entity is local: fetch the second hop's pages that the "
        "index lacks (names in the best local evidence; one request)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging and tracebacks")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return _run(args)
    except WikigroundError as exc:
        if args.verbose:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from retriever.api import Retriever

    if args.claim is None and args.queries is None:
        raise QueryError("give a claim, or --queries FILE.jsonl")
    if args.k <= 0:
        raise QueryError("--k must be positive")
    if args.live_bridges and not args.on_the_fly:
        raise QueryError("--live-bridges works with --on-the-fly")
    retriever = Retriever.open(
        args.index,
        channels=args.indexes,
        weights=_parse_weights(args.weights),
        fusion=args.fusion,
        on_the_fly=args.on_the_fly,
        fallback=_fallback_settings(args) if args.on_the_fly else None,
        ingest_live=args.ingest_live,
        live_bridges=args.live_bridges,
    )
    multihop = None
    if args.multihop:
        from retriever.multihop import MultiHopParams, MultiHopRetriever

        params = MultiHopParams(final_k=args.k, **({"hops": args.hops} if args.hops else {}))
        multihop = MultiHopRetriever(retriever, params=params)

    def answer(text: str, id_: Any = None) -> dict[str, Any]:
        if multihop is not None:
            return multihop.search(text).to_dict(id_)
        return retriever.search(text, args.k, passages=args.passages).to_dict(id_)

    with retriever:
        if args.queries is None:
            result = answer(args.claim)
            if args.json:
                json.dump(result, sys.stdout, ensure_ascii=False, indent=2)
                sys.stdout.write("\n")
            else:
                _table(result, sys.stdout)
                if multihop is not None:
                    from retriever.multihop.render import write_hops

                    write_hops(result, sys.stdout)
            return 0
        queries = list(read_queries(args.queries))
        out = args.out.open("w", encoding="utf-8") if args.out else sys.stdout
        t0 = time.perf_counter()
        requests = cache_hits = 0
        try:
            from tqdm import tqdm

            bar = tqdm(
                queries, unit="q", disable=args.quiet or not sys.stderr.isatty() and args.out is None, file=sys.stderr
            )
            for id_, text in bar:
                res = answer(text, id_)
                requests += res.get("requests", 0)
                cache_hits += res.get("cache_hits", 0)
                out.write(json.dumps(res, ensure_ascii=False) + "\n")
        finally:
            if args.out:
                out.close()
        dt = time.perf_counter() - t0
        msg = f"{len(queries)} queries in {dt:.1f} s ({len(queries) / dt if dt else 0:.1f}/s)"
        if args.on_the_fly:
            msg += f"; live requests {requests}, served from cache {cache_hits}"
        print(msg, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
