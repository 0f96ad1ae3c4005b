"""Retrieval quality and speed per channel and fused, with bm25s as the reference, on two real corpora.

- vital_articles_summaries.json (10,033 leads) with claims/fever_dev_vital.jsonl (686 FEVER dev claims)
- hotpotqa2017_abstracts.jsonl (5,716 abstracts) with claims/hotpotqa_dev_multihop.jsonl (588 questions)
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    KS,
    build,
    latency,
    md_table,
    page_metrics,
    peak_rss_mib,
    plot_curves,
    read_claims,
    recall_curve,
    unique_in_order,
    vital_jsonl,
)

log = logging.getLogger("benchmarks.retrieval")
CHANNELS = ("title", "bm25", "dense", "tfidf")
DEPTH = 100  # hits per channel before page collapse


def _rankings(retriever, claims: list[str], k: int) -> tuple[dict[str, list[list[str]]], dict[str, list[float]]]:
    """Page-title rankings and latencies (ms) per channel alone and fused."""
    store = retriever.store
    ranks: dict[str, list[list[str]]] = {c: [] for c in (*retriever.channels, "fused")}
    lat: dict[str, list[float]] = {c: [] for c in ranks}
    for claim in claims:
        for c in retriever.channels:
            t0 = time.perf_counter()
            hits = retriever.channel_search(c, claim, DEPTH)
            lat[c].append((time.perf_counter() - t0) * 1000)
            titles = store.pages({h.page_id for h in hits})
            ranks[c].append(unique_in_order(titles[h.page_id].title for h in hits if h.page_id in titles)[:k])
        t0 = time.perf_counter()
        res = retriever.search(claim, k)
        lat["fused"].append((time.perf_counter() - t0) * 1000)
        ranks["fused"].append([e.title for e in res.evidence])
    return ranks, lat


def _bm25s_reference(index_dir: Path, claims: list[str], k: int) -> tuple[list[list[str]], list[float], float]:
    """bm25s over the same passages (title + heading + text), collapsed to pages like our channels."""
    import bm25s
    import duckdb

    con = duckdb.connect(str(index_dir / "wiki.duckdb"), read_only=True)
    rows = con.execute("SELECT title, heading_path, text FROM passages ORDER BY passage_id").fetchall()
    con.close()
    titles = [r[0] for r in rows]
    t0 = time.perf_counter()
    corpus_tokens = bm25s.tokenize([f"{t} {h} {x}" for t, h, x in rows], stopwords="en", show_progress=False)
    model = bm25s.BM25()
    model.index(corpus_tokens, show_progress=False)
    build_s = time.perf_counter() - t0
    out, lat = [], []
    n = len(rows)
    for claim in claims:
        t0 = time.perf_counter()
        q = bm25s.tokenize([claim], stopwords="en", show_progress=False)
        if not q.vocab:
            docs = []
        else:
            res, _ = model.retrieve(q, k=min(DEPTH, n), show_progress=False)
            docs = list(res[0])
        lat.append((time.perf_counter() - t0) * 1000)
        out.append(unique_in_order(titles[int(i)] for i in docs)[:k])
    return out, lat, build_s


def _corpus_section(
    name: str, index_dir: Path, claims_rows: list[dict[str, Any]], text_key: str, out: Path, manifest: dict
) -> tuple[str, dict]:
    from retriever.api import Retriever

    claims = [r[text_key] for r in claims_rows]
    golds = [r["gold_titles"] for r in claims_rows]
    k = max(KS)
    with Retriever.open(index_dir) as r:
        r.warm_up()
        ranks, lat = _rankings(r, claims, k)
        # Batch throughput: the whole claim set through the fused path once more (everything loaded).
        t0 = time.perf_counter()
        for _ in r.search_batch(claims, 10):
            pass
        batch_qps = len(claims) / (time.perf_counter() - t0)
    ref_ranks, ref_lat, ref_build = _bm25s_reference(index_dir, claims, k)
    ranks["bm25s (reference)"] = ref_ranks
    lat["bm25s (reference)"] = ref_lat

    rows, metrics = [], {}
    for c, rk in ranks.items():
        m = page_metrics(rk, golds)
        metrics[c] = m
        lt = latency(lat[c])
        rows.append([c, m["R@1"], m["R@5"], m["R@10"], m["R@21"], m["all@21"], m["MRR"], lt["p50"], lt["p95"]])
    curves = {c: recall_curve(rk, golds, k) for c, rk in ranks.items()}
    # Plots are committed next to RESULTS.md (benchmarks/out/ is scratch and ignored by git).
    plots = Path(__file__).resolve().parent / "plots"
    plots.mkdir(exist_ok=True)
    png = plots / f"recall_{name}.png"
    plot_curves(curves, png, title=f"{name}: title recall@k ({len(claims)} claims)")
    rel = png.relative_to(plots.parent)
    builds = manifest.get("indexes", {})
    build_rows = [
        [n, v.get("build_seconds", float("nan")), v.get("documents", v.get("count", ""))] for n, v in builds.items()
    ]
    build_rows.append(["bm25s (reference)", ref_build, ""])
    single = max(metrics[c]["R@5"] for c in r.channels)
    text = (
        f"### {name}\n\n"
        f"{manifest.get('counts', {}).get('pages', '?')} pages, {manifest.get('counts', {}).get('passages', '?')} passages; "
        f"{len(claims)} claims. Recall is over page titles (any gold title in the top k; `all@21` = every gold title in the top 21); "
        f"latency is per query, ms, one thread of work on this machine.\n\n"
        + md_table(["channel", "R@1", "R@5", "R@10", "R@21", "all@21", "MRR", "p50 ms", "p95 ms"], rows)
        + f"\n\nFused R@5 {metrics['fused']['R@5']:.3f} vs best single channel {single:.3f} "
        f"({'above' if metrics['fused']['R@5'] > single else 'NOT above'}). "
        f"Batch throughput (fused, k=10): {batch_qps:.1f} queries/s.\n\n"
        + md_table(["index", "build s", "documents"], build_rows)
        + f"\n\n![recall@k]({rel})\n"
    )
    return text, {"metrics": metrics, "latency": {c: latency(v) for c, v in lat.items()}, "batch_qps": batch_qps}


def main(shared: Path, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    sections = ["## Retrieval: channels alone and fused (issue 3)\n"]

    vital_idx = out / "vital_index"
    t0 = time.perf_counter()
    m = build([vital_jsonl(shared, out)], vital_idx)
    log.info("vital index ready in %.0f s", time.perf_counter() - t0)
    fever = read_claims(shared / "claims" / "fever_dev_vital.jsonl")
    text, results["fever_dev_vital"] = _corpus_section("fever_dev_vital", vital_idx, fever, "claim", out, m)
    sections.append(text)

    hotpot_idx = out / "hotpot_index"
    m = build([shared / "corpora" / "hotpotqa2017_abstracts.jsonl"], hotpot_idx)
    hotpot = read_claims(shared / "claims" / "hotpotqa_dev_multihop.jsonl")
    text, results["hotpotqa_dev_multihop"] = _corpus_section(
        "hotpotqa_dev_multihop", hotpot_idx, hotpot, "question", out, m
    )
    sections.append(text)

    sections.append(f"Peak memory of the benchmark process (builds + queries): {peak_rss_mib():.0f} MiB.\n")
    (out / "retrieval.json").write_text(json.dumps(results, indent=2))
    return "\n".join(sections)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "retrieval")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    print(main(a.shared, a.out))
