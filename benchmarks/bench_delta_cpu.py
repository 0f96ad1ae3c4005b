"""The CPU a claim's search costs with the delta against without it, measured so that other jobs' load does not
decide the ratio: one process opens the index twice, once as it is and once through a link whose delta listing is
kept empty (the same files, as if the delta folder were moved aside), searches each claim with both, alternately,
on one lane (every channel in the calling thread), and counts that thread's CPU time. ``bench_update --reuse`` and
``bench_delta_breakdown`` time wall clocks, which a loaded machine's scheduler swings by tens of percent.

python -m benchmarks.bench_delta_cpu --index /work/scratch/h39/w1M/index --claims 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, read_claims


def _without_delta(index: Path, link: Path) -> None:
    """Stores opened through ``link`` (a link to ``index``) list no delta segments; those opened as ``index`` do."""
    import indexer.store as store

    listed = store.delta_segments
    store.delta_segments = lambda path: [] if str(path).startswith(str(link)) else listed(path)


def measure(index: Path, claims: list[str], rounds: int, k: int = 5) -> list[dict]:
    import retriever.lanes as lanes
    from retriever import Retriever

    lanes.usable_cpus = lambda: 1  # one lane: the search's CPU is the calling thread's
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        link = Path(tmp) / "index"
        link.symlink_to(index.resolve())
        _without_delta(index, link)
        with Retriever.open(index) as with_delta, Retriever.open(link) as without:
            if not with_delta.store.shadow.listing or without.store.shadow.listing:
                raise SystemExit(f"{index}: no delta to compare with")
            for r in (with_delta, without):  # the files read once, Java's compiler warmed
                for claim in claims[:20]:
                    r.search(claim, k)
            for _ in range(rounds):
                cpu: dict[str, list[float]] = {"with_delta": [], "no_delta": []}
                for i, claim in enumerate(claims):
                    pair = [("with_delta", with_delta), ("no_delta", without)]
                    for name, r in pair if i % 2 == 0 else pair[::-1]:
                        t = time.thread_time()
                        r.search(claim, k)
                        cpu[name].append((time.thread_time() - t) * 1000)
                p50 = {name: statistics.median(v) for name, v in cpu.items()}
                per_claim = statistics.median(a / b for a, b in zip(cpu["with_delta"], cpu["no_delta"], strict=True))
                out.append(
                    {
                        "cpu_p50_ms": {name: round(v, 2) for name, v in p50.items()},
                        "cpu_mean_ms": {name: round(statistics.fmean(v), 2) for name, v in cpu.items()},
                        "p50_ratio": round(p50["with_delta"] / p50["no_delta"], 3),
                        "per_claim_ratio_p50": round(per_claim, 3),
                        "load_average": os.getloadavg()[0],
                    }
                )
                print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--index", type=Path, required=True, help="an index with a delta (bench_update's --work/index)")
    p.add_argument("--claims", type=int, default=100)
    p.add_argument("--claims-file", type=Path, default=ROOT / "tests" / "data" / "claims" / "fever_dev_vital.jsonl")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    measure(args.index, [c["claim"] for c in read_claims(args.claims_file, args.claims)], args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
