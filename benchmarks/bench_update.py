"""``wikiground update`` at scale: an increment of N changed pages applied to a built index, and the fused query
latency with that delta against the same index without one.

The base is a copy of a built index less its delta (an index refuses links inside its folder), so the built index
itself is left alone; with ``--in-place`` the index is updated itself, for a scale bench's index that two copies of
would not fit the disk (it must hold no delta yet). The increment is the first N
articles of the base's own dump, each revised as an editor would (a sentence changed, a section added) and written
as an adds-changes file: two ``<revision>``s per ``<page>``, the original and the edit.

The update is timed as ``wikiground update`` runs it: the segment and the channels' delta parts written with it
(``backends.delta_store.write_parts``). An increment already written in ``--work`` for the same ``--pages`` is
reused.

python -m benchmarks.bench_update --index /work/scratch/scale/idx-4M --dump /work/scratch/scale/synth-4M.xml.bz2 \
    --pages 10000 --work /work/scratch/h39-bench
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import shutil
import time
from pathlib import Path

from benchmarks.common import ROOT, latency, page_metrics, read_claims

EDIT_NOTE = "In 2026 the article was revised to describe its subject's recent history."


def shadow_index(index: Path, work: Path) -> Path:
    """``work/index``: a copy of ``index`` without its delta (an index refuses links inside its folder), so that the
    built index is never written."""
    out = work / "index"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(index, out, ignore=lambda folder, names: ["delta"] if Path(folder) == index else [])
    return out


def increment(dump: Path, out: Path, pages: int) -> Path:
    """The first ``pages`` articles of ``dump`` revised, as an adds-changes file (reused when written before)."""
    import mwxml

    done = out / f"enwiki-20261126-pages-meta-hist-incr-{pages}.xml.bz2"
    if done.is_file():
        return done
    from tests.support.wikidump import DumpPage, Revision, write_dump

    found = []
    with bz2.open(dump, "rb") as fh:
        for page in mwxml.Dump.from_file(fh).pages:
            revs = list(page)
            if page.namespace != 0 or page.redirect or not revs or not revs[-1].text:
                continue
            rev = revs[-1]
            text = rev.text
            edited = text.replace(". ", ", as recorded. ", 1) + f"\n\n== Recent history ==\n{EDIT_NOTE}\n"
            found.append(
                DumpPage(
                    page.id,
                    page.title,
                    [
                        Revision(rev.id, rev.timestamp.long_format(), text),
                        Revision(rev.id + 1, "2026-11-26T10:00:00Z", edited, "update"),
                    ],
                )
            )
            if len(found) >= pages:
                break
    return write_dump(done, found)


def fused_latency(index: Path, claims: list[dict], k: int = 5) -> dict:
    from retriever import Retriever

    with Retriever.open(index) as r:
        t0 = time.perf_counter()
        r.search("warm up the channels and the delta parts", k)
        first = time.perf_counter() - t0
        ms, rankings = [], []
        for c in claims:
            t = time.perf_counter()
            res = r.search(c["claim"], k)
            ms.append((time.perf_counter() - t) * 1000)
            rankings.append([e.title for e in res.evidence])
    golds = [c.get("gold_titles") or c.get("titles") or [] for c in claims]
    return {"first_search_s": round(first, 2), **latency(ms), **page_metrics(rankings, golds, (5,))}


def measure(args: argparse.Namespace, claims: list[dict]) -> dict:
    """The increment written, the index copied, queried, updated, and queried again."""
    from backends.delta_store import write_parts
    from indexer.compact import delta_share
    from indexer.update import update_index

    t = time.perf_counter()
    incr = increment(args.dump, args.work, args.pages)
    made = time.perf_counter() - t
    if args.in_place:
        if (args.index / "delta").exists():
            raise SystemExit(f"{args.index} holds a delta already: --in-place times an index without one first")
        index = args.index
    else:
        index = shadow_index(args.index, args.work)
    none = fused_latency(index, claims)
    t = time.perf_counter()
    summary = update_index(index, [incr], prepare=write_parts)
    applied = time.perf_counter() - t
    return {
        "pages": args.pages,
        "increment_bytes": incr.stat().st_size,
        "increment_written_s": round(made, 1),
        "update_s": round(applied, 1),
        "applied": summary["applied"],
        "delta_share": delta_share(index),
        "no_delta": none,
        "with_delta": fused_latency(index, claims),
    }


def latencies(index: Path, claims: list[dict], rounds: int = 1) -> dict:
    """The fused latency of ``index`` with its delta, then with its delta folder moved out of it (and back),
    ``rounds`` times: the first round also warms the files both read, so the last round's pair is reported, and
    every round's p50 ratio."""
    aside = index.parent / "delta.aside"
    ratios = []
    for _ in range(rounds):
        with_delta = fused_latency(index, claims)
        (index / "delta").rename(aside)
        try:
            none = fused_latency(index, claims)
        finally:
            aside.rename(index / "delta")
        ratios.append(round(with_delta["p50"] / none["p50"], 3) if none["p50"] else None)
    return {"no_delta": none, "with_delta": with_delta, "p50_ratio_per_round": ratios}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--dump", type=Path, required=True, help="the dump the index was built from")
    p.add_argument("--pages", type=int, default=10_000)
    p.add_argument("--claims", type=int, default=100, help="how many claims are timed")
    p.add_argument("--claims-file", type=Path, default=ROOT / "tests" / "data" / "claims" / "fever_dev_vital.jsonl")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=1, help="with --reuse: with and without the delta, this many times")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="time the queries of --work's index as an earlier run left it, with its delta and with it moved aside",
    )
    p.add_argument(
        "--in-place",
        action="store_true",
        help="update --index itself rather than a copy in --work (a bench's own index, too big to copy)",
    )
    args = p.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args.work.mkdir(parents=True, exist_ok=True)
    claims = read_claims(args.claims_file, args.claims)
    if args.reuse:
        index = args.index if args.in_place else args.work / "index"
        from indexer.compact import delta_share

        result = {"pages": args.pages, "delta_share": delta_share(index), **latencies(index, claims, args.rounds)}
    else:
        result = measure(args, claims)
    result["load_average"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
