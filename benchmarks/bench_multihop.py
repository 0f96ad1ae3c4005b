"""Multi-hop retrieval (issue 5) on HotpotQA dev questions over the HotpotQA abstracts corpus.

All-gold recall@21 (every gold title among the 21 pages returned), recall@5/@10, per hop; single-shot
fused retrieval at k=21 as the baseline in the same run; latency per claim (p50/p95).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from benchmarks.common import build, latency, md_table, page_metrics, read_claims

log = logging.getLogger("benchmarks.multihop")
FINAL_K = 21


def _index(shared: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """The retrieval bench's HotpotQA index when it exists, else a build of our own."""
    corpus = shared / "corpora" / "hotpotqa2017_abstracts.jsonl"
    reuse = out.parent / "retrieval" / "hotpot_index"
    if (reuse / "manifest.json").is_file():
        return reuse, json.loads((reuse / "manifest.json").read_text())
    target = out / "hotpot_index"
    return target, build([corpus], target)


def run(index_dir: Path, rows: list[dict[str, Any]], *, hops: int = 3) -> dict[str, Any]:
    """Rankings and latencies of single-shot fused search and of the multi-hop pipeline."""
    from retriever.api import Retriever
    from retriever.multihop import MultiHopParams, MultiHopRetriever

    questions = [r["question"] for r in rows]
    with Retriever.open(index_dir) as r:
        r.warm_up()
        mh = MultiHopRetriever(r, params=MultiHopParams(final_k=FINAL_K, hops=hops))
        mh.search(questions[0])  # first call pays for lazy loads
        base, base_ms = [], []
        for q in questions:
            t0 = time.perf_counter()
            res = r.search(q, FINAL_K)
            base_ms.append((time.perf_counter() - t0) * 1000)
            base.append([e.title for e in res.evidence])
        multi, multi_ms, per_hop, queries, found_hop = [], [], [[] for _ in range(hops)], [], []
        for q in questions:
            t0 = time.perf_counter()
            res = mh.search(q)
            multi_ms.append((time.perf_counter() - t0) * 1000)
            multi.append([e.title for e in res.evidence])
            found_hop.append({e.title: e.hop for e in res.evidence})
            for h in range(hops):
                # The ranking as scored after hop h+1 (a claim that stopped early keeps its last ranking).
                snap = res.hops[min(h, len(res.hops) - 1)]["ranking"] if res.hops else []
                per_hop[h].append(snap)
            queries.append(res.stats.get("queries", 0))
        channels = list(r.channels)
    return {
        "base": base,
        "base_ms": base_ms,
        "multi": multi,
        "multi_ms": multi_ms,
        "per_hop": per_hop,
        "queries": queries,
        "found_hop": found_hop,
        "channels": channels,
    }


def main(shared: Path, out: Path, *, limit: int | None = None) -> str:
    out.mkdir(parents=True, exist_ok=True)
    index_dir, manifest = _index(shared, out)
    rows = read_claims(shared / "claims" / "hotpotqa_dev_multihop.jsonl", limit)
    golds = [r["gold_titles"] for r in rows]
    res = run(index_dir, rows)
    ks = (5, 10, FINAL_K)
    mb, mm = page_metrics(res["base"], golds, ks), page_metrics(res["multi"], golds, ks)
    lb, lm = latency(res["base_ms"]), latency(res["multi_ms"])
    table = [
        [
            "single-shot fused (k=21)",
            mb["all@5"],
            mb["all@10"],
            mb["all@21"],
            mb["R@5"],
            mb["R@21"],
            lb["p50"],
            lb["p95"],
        ],
    ]
    for h, snap in enumerate(res["per_hop"], 1):
        m = page_metrics(snap, golds, ks)
        table.append([f"multi-hop, after hop {h}", m["all@5"], m["all@10"], m["all@21"], m["R@5"], m["R@21"], "", ""])
    table.append(
        [
            "multi-hop (3 hops, final)",
            mm["all@5"],
            mm["all@10"],
            mm["all@21"],
            mm["R@5"],
            mm["R@21"],
            lm["p50"],
            lm["p95"],
        ]
    )
    # Which hop found the gold pages the pipeline returned.
    hop_counts: dict[int, int] = {}
    for gold, fh in zip(golds, res["found_hop"]):
        for g in gold:
            if g in fh:
                hop_counts[fh[g]] = hop_counts.get(fh[g], 0) + 1
    gain = mm["all@21"] - mb["all@21"]
    counts = manifest.get("counts", {})
    nq = res["queries"]
    text = (
        "## Multi-hop retrieval (issue 5)\n\n"
        f"{len(rows)} HotpotQA dev questions (2 gold pages each) over `hotpotqa2017_abstracts.jsonl`: "
        f"{counts.get('pages', '?')} pages, {counts.get('passages', '?')} passages (a small corpus: absolute numbers are "
        f"far above what the same pipeline would reach on full Wikipedia). Channels: {', '.join(res['channels'])}. "
        "`all@k` = every gold title in the top k (the issue's metric at k=21); `R@k` = any gold title. "
        "Local planner and scorer (no LLM). Latency per question, ms, after warm-up.\n\n"
        + md_table(["method", "all@5", "all@10", "all@21", "R@5", "R@21", "p50 ms", "p95 ms"], table)
        + f"\n\nMulti-hop all@21 {mm['all@21']:.3f} vs single-shot {mb['all@21']:.3f} ({gain:+.3f}). "
        f"Queries per question: mean {sum(nq) / len(nq):.1f}, max {max(nq)}. "
        f"Gold pages returned, by the hop that found them: "
        + ", ".join(f"hop {h}: {n}" for h, n in sorted(hop_counts.items()))
        + ". Rows 'after hop h' are the pipeline's scored ranking after h hops of the same run.\n"
    )
    (out / "multihop.json").write_text(
        json.dumps(
            {
                "baseline": mb,
                "multihop": mm,
                "latency_ms": {"baseline": lb, "multihop": lm},
                "hop_counts": hop_counts,
                "questions": len(rows),
                "index": str(index_dir),
            },
            indent=2,
        )
    )
    return text


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "multihop")
    ap.add_argument("--limit", type=int, default=None, help="first N questions only (quick check)")
    ap.add_argument("--index", type=Path, default=None, help="use this index folder")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if a.index:
        _index = lambda shared, out: (a.index, json.loads((a.index / "manifest.json").read_text()))  # noqa: E731
    print(main(a.shared, a.out, limit=a.limit))
