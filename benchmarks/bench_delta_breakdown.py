"""Where a claim's time goes with a delta: the fused search (wall time, and the CPU time of all its threads, which
other jobs' load does not inflate), each channel's search (as the fused search runs them, side by side), and, one
at a time, each built channel's base search and delta part, the merge of their hits, and the evidence lookup.
The same index is timed with its delta and with its delta folder moved aside, alternately, claim by claim groups.

python -m benchmarks.bench_delta_breakdown --index /work/scratch/h39/index --claims 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, read_claims


def _ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t) * 1000, out


def _parts(r: Any, query: str, depth: int, out: dict[str, list[float]]) -> None:
    """Each built channel's pieces, one at a time: the base's search (depth, and twice depth as a delta asks), the
    delta part's, and the merge."""
    from backends.delta_parts import MergedChannel, _batch, merge_hits

    shadow = r.store.shadow
    for name in r.channels:
        b = r.backend(name)
        if not isinstance(b, MergedChannel):
            continue
        out[f"{name}.base@{depth}"].append(_ms(lambda b=b: _batch(b.base, [query], depth))[0])
        part = b.part(shadow) if shadow.listing else None
        if part is None:
            continue
        ms, base_hits = _ms(lambda b=b: _batch(b.base, [query], depth + depth))
        out[f"{name}.base@{2 * depth}"].append(ms)
        if hasattr(part, "search_with_base"):  # the base's search and the part's from one analysis of the query
            out[f"{name}.with_base"].append(_ms(lambda part=part: part.search_with_base([query], depth, 2 * depth))[0])
        if not hasattr(part, "search_batch"):
            continue
        ms, delta_hits = _ms(lambda part=part: part.search_batch([query], depth))
        out[f"{name}.delta_part"].append(ms)
        merge = lambda: merge_hits(base_hits[0], delta_hits[0], shadow.hidden, depth, name)  # noqa: E731
        out[f"{name}.merge"].append(_ms(merge)[0])


def breakdown(index: Path, claims: list[dict], k: int = 5) -> dict[str, dict[str, float]]:
    from retriever import Retriever

    out: dict[str, list[float]] = defaultdict(list)
    with Retriever.open(index) as r:
        r.search("warm up the channels and the delta parts", k)
        depth = max(r.depth, 4 * k)
        for c in claims:
            q = c["claim"]
            cpu = time.process_time()
            ms, res = _ms(lambda q=q: r.search(q, k))
            out["fused"].append(ms)
            out["fused_cpu"].append((time.process_time() - cpu) * 1000)  # every thread's: what load does not inflate
            for name, t in res.stats["timings_ms"].items():
                out[f"timings.{name}"].append(t)
            _parts(r, q, depth, out)
            results, _ = r.search_hits(q, k=depth)
            pages = r.fuse(results)
            out["fuse"].append(_ms(lambda results=results: r.fuse(results))[0])
            out["evidence"].append(_ms(lambda pages=pages: r._evidence(pages, k=k, passages=False))[0])
    return {
        key: {"p50": round(statistics.median(v), 3), "mean": round(statistics.fmean(v), 3)}
        for key, v in sorted(out.items())
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--index", type=Path, required=True, help="an index with a delta (bench_update's --work/index)")
    p.add_argument("--claims", type=int, default=100)
    p.add_argument("--claims-file", type=Path, default=ROOT / "tests" / "data" / "claims" / "fever_dev_vital.jsonl")
    p.add_argument("--rounds", type=int, default=2, help="with and without the delta, alternately, this many times")
    args = p.parse_args(argv)
    claims = read_claims(args.claims_file, args.claims)
    aside = args.index.parent / "delta.aside"
    runs: dict[str, list] = {"with_delta": [], "no_delta": []}
    for _ in range(args.rounds):
        runs["with_delta"].append(breakdown(args.index, claims))
        (args.index / "delta").rename(aside)
        try:
            runs["no_delta"].append(breakdown(args.index, claims))
        finally:
            aside.rename(args.index / "delta")
    print(json.dumps({**runs, "load_average": os.getloadavg()}))
    print(table(runs))
    return 0


def table(runs: dict[str, list]) -> str:
    """p50 (ms) of each piece with the delta and without it, per round."""
    keys = sorted({key for run in runs["with_delta"] for key in run})
    lines = [f"{'piece':24} " + " ".join(f"{'with':>8} {'without':>8}" for _ in runs["with_delta"])]
    for key in keys:
        cells = [
            f"{w.get(key, {}).get('p50', float('nan')):8.2f} {n.get(key, {}).get('p50', float('nan')):8.2f}"
            for w, n in zip(runs["with_delta"], runs["no_delta"], strict=True)
        ]
        lines.append(f"{key:24} " + " ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
