"""Command line: ``python -m retriever.query --index DIR [--k 10] [--indexes ...] [--json] "claim"``.

Batch: ``--queries FILE.jsonl --out FILE.jsonl`` (each line ``{id, claim}`` or ``{id, question}``);
each output line is ``{id, query, status, evidence: [...]}`` with evidence in rank order, or with ``--format
trec|kilt|fever|hotpot`` what the field's scorers read (retriever/formats.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from retriever.cli_options import add_search_options, check_search_options, open_options, search_options
from retriever.formats import DEFAULT_RUN_TAG, DOCIDS, FORMATS, renderer
from wikiground.errors import QueryError, WikigroundError
from wikiground.text import clean_surrogates

log = logging.getLogger("retriever.query")

__all__ = ["build_parser", "main", "read_queries"]


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def read_queries(path: Path) -> Iterator[tuple[Any, str]]:
    """(id, text) per line of a JSONL file; the text is ``claim`` or ``question``, lone surrogates made U+FFFD.

    The id is the line's ``id`` as given (``null`` included), or the line number when the line has none.
    A line that is not such an object is a QueryError naming ``file:line``.
    """
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise QueryError(f"{path}: cannot read queries: {exc.strerror or exc}") from exc
    with fh:
        lineno = 0
        try:
            for lineno, raw in enumerate(fh, 1):  # noqa: B007 - read after the loop on a read error
                if raw.strip():
                    yield _query_of(path, lineno, raw)
        except OSError as exc:
            raise QueryError(f"{path}:{lineno + 1}: cannot read queries: {exc.strerror or exc}") from exc


def _query_of(path: Path, lineno: int, raw: bytes) -> tuple[Any, str]:
    try:
        line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise QueryError(f"{path}:{lineno}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    try:
        obj = json.loads(line, parse_constant=_no_constants, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        detail = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise QueryError(f"{path}:{lineno}: not JSON: {detail}") from exc
    if not isinstance(obj, dict):
        raise QueryError(f"{path}:{lineno}: expected an object with 'claim' or 'question'")
    text = obj.get("claim", obj.get("question"))
    if not isinstance(text, str):
        keys = clean_surrogates(", ".join(obj))
        raise QueryError(f"{path}:{lineno}: no 'claim' or 'question' string (keys: {keys})")
    return (obj["id"] if "id" in obj else lineno), clean_surrogates(text)


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
        score = e.get("page_score", e["score"])  # the score that orders the list
        out.write(f"{i:>2}  {score:>8.4f}  {e['origin']:<6} {ranks:<28} {title}\n")
        text = " ".join(e["evidence_text"].split())
        out.write(f"    {text[:240]}{'…' if len(text) > 240 else ''}\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m retriever.query", description=__doc__.split("\n")[0])
    p.add_argument("claim", nargs="?", help="claim or question text")
    add_search_options(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--queries", type=Path, help="JSONL file of {id, claim} or {id, question}")
    p.add_argument("--out", type=Path, help="JSONL output for --queries (default: stdout); replaced when complete")
    p.add_argument(
        "--resume", action="store_true", help="continue a batch into --out that was cut off (keeps its answers)"
    )
    p.add_argument(
        "--format",
        default="jsonl",
        choices=FORMATS,
        help="output: jsonl (the evidence lines), trec (run file), kilt, fever (predicted_evidence), hotpot "
        "(supporting_facts)",
    )
    p.add_argument("--run-tag", default=DEFAULT_RUN_TAG, help="--format trec: the run's tag (last column)")
    p.add_argument(
        "--docid", default="title", choices=DOCIDS, help="--format trec: the document id column (title: underscores)"
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
    except BrokenPipeError:  # the reader went away (`wikiground query ... | head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _check_args(args: argparse.Namespace) -> None:
    if args.claim is None and args.queries is None:
        raise QueryError("give a claim, or --queries FILE.jsonl")
    check_search_options(args)
    renderer(args.format, run_tag=args.run_tag, docid=args.docid)
    if args.resume and (args.queries is None or args.out is None):
        raise QueryError("--resume works with --queries and --out")


def _run(args: argparse.Namespace) -> int:
    from retriever import service

    _check_args(args)
    opening, options = open_options(args), search_options(args)
    queries = list(read_queries(args.queries)) if args.queries is not None else []
    planner = opening.open_planner()
    with opening.open() as retriever:

        def answer(text: str, id_: Any = service.NO_ID) -> dict[str, Any]:
            return service.answer(retriever, text, options, planner=planner, id=id_)

        render = None if args.format == "jsonl" else renderer(args.format, run_tag=args.run_tag, docid=args.docid)
        if args.queries is None:
            result = answer(clean_surrogates(args.claim))
            if render is not None:
                sys.stdout.write(render(result))
            elif args.json:
                sys.stdout.write(service.json_line(result, indent=2))
            else:
                _table(result, sys.stdout)
                if args.multihop:
                    _hops(result, sys.stdout)
            return 0
        from retriever.batch import BatchRunner

        block = service.block_answerer(retriever, options)
        runner = BatchRunner(
            answer, queries, args.out, resume=args.resume, quiet=args.quiet, answer_block=block, render=render
        )
        return runner.run(args.on_the_fly)


def _hops(result: dict[str, Any], out: TextIO, *, width: int = 100) -> None:
    """Each hop's queries by kind with the titles they returned, then the hop that found each page."""
    for h in result.get("hops", []):
        out.write(f"hop {h['hop']} ({h.get('ms', 0):.0f} ms), new pages: {len(h.get('new_titles', []))}\n")
        for kind, qs in h.get("queries", {}).items():
            for q in qs:
                titles = ", ".join(q["titles"])
                line = f"  {kind:<9} k={q['k']:<2} {q['query']!r} -> {titles}"
                out.write(line[:width] + ("…" if len(line) > width else "") + "\n")
    found = [
        f"{e['title']} (hop {e.get('hop')}{', via ' + e['via'] if e.get('via') else ''})"
        for e in result.get("evidence", [])
    ]
    if found:
        out.write("found: " + "; ".join(found) + "\n")


if __name__ == "__main__":
    sys.exit(main())
