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


def _leads_copy(index_dir: Path, out: Path) -> Path:
    """A copy of ``index_dir`` whose dense channel holds each page's lead passage only, made by
    ``indexer.embed --dense-scope leads --assemble`` as a user would, with the lead passages' shards cut from the
    full index's vectors first (the encoder is deterministic: re-encoding them gives the same vectors, in minutes),
    so the embed step finds them complete and assembles."""
    import shutil

    import numpy as np

    from backends.dense.embed import (
        SHARD_SIZE,
        _digest,
        _texts,
        _write_digest,
        check_model,
        lead_ids,
        shard_path,
    )
    from backends.encoder import model_info
    from backends.passage_table import connect
    from indexer.embed import main as embed_main
    from wikiground.layout import store_path

    leads = out / f"{index_dir.name}_leads"
    shutil.rmtree(leads, ignore_errors=True)
    shutil.copytree(index_dir, leads, ignore=shutil.ignore_patterns("shards"))
    vectors = np.load(index_dir / "dense" / "vectors.npy", mmap_mode="r")
    params = json.loads((index_dir / "dense" / "params.json").read_text(encoding="utf-8"))
    shards = leads / "dense" / "shards" / "leads"
    shards.mkdir(parents=True)
    check_model(shards, model_info(params["encoder_backend"]))
    con = connect(store_path(leads))
    try:
        rows = lead_ids(con)
        for a in range(0, len(rows), SHARD_SIZE):
            b = min(a + SHARD_SIZE, len(rows))
            np.save(shard_path(shards, a, b), np.ascontiguousarray(vectors[rows[a:b]], dtype=np.float32))
            # The texts' digest, as the embedder records it: the shard is then current for these passages.
            _write_digest(shards, a, b, _digest(_texts(con, a, b, store_path(leads), rows)))
    finally:
        con.close()
    if embed_main(["--index", str(leads), "--dense-scope", "leads", "--assemble", "--quiet"]) != 0:
        raise RuntimeError(f"indexer.embed --dense-scope leads failed on {leads}")
    return leads


def _scope_row(name: str, index_dir: Path, claims_rows: list[dict[str, Any]], text_key: str, out: Path, full: dict):
    """Fused recall with the dense channel over lead passages only against all passages (issue 22)."""
    from retriever.api import Retriever

    leads = _leads_copy(index_dir, out)
    claims = [r[text_key] for r in claims_rows]
    golds = [r["gold_titles"] for r in claims_rows]
    with Retriever.open(leads) as r:
        r.warm_up()
        params = json.loads((leads / "dense" / "params.json").read_text(encoding="utf-8"))
        ranks, _ = _rankings(r, claims, max(KS))
    m = page_metrics(ranks["fused"], golds)
    delta = 100 * (m["R@5"] - full["fused"]["R@5"])
    row = [name, params["count"], params["passages"], full["fused"]["R@5"], m["R@5"], round(delta, 1)]
    row.append("met" if abs(delta) <= 0.5 else "missed")
    return row, {"vectors": params["count"], "passages": params["passages"], "R@5": m["R@5"], "delta_points": delta}


def _scope_section(rows: list[list[Any]]) -> str:
    return (
        "### Dense scope `leads` against `all` (issue 22)\n\n"
        "The same index with the dense channel built by `indexer.embed --dense-scope leads --assemble` (each page's "
        "lead passage only; its shards cut from the full build's vectors, as the encoder is deterministic); fused "
        "(all four channels) recall@5 of the same claims. Target: within 0.5 point of `all`.\n\n"
        + md_table(["corpus", "lead vectors", "passages", "fused R@5, all", "fused R@5, leads", "points", ""], rows)
        + "\n"
    )


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
    scope_rows = []
    row, results["fever_dev_vital"]["leads"] = _scope_row(
        "fever_dev_vital", vital_idx, fever, "claim", out, results["fever_dev_vital"]["metrics"]
    )
    scope_rows.append(row)

    hotpot_idx = out / "hotpot_index"
    m = build([shared / "corpora" / "hotpotqa2017_abstracts.jsonl"], hotpot_idx)
    hotpot = read_claims(shared / "claims" / "hotpotqa_dev_multihop.jsonl")
    text, results["hotpotqa_dev_multihop"] = _corpus_section(
        "hotpotqa_dev_multihop", hotpot_idx, hotpot, "question", out, m
    )
    sections.append(text)
    row, results["hotpotqa_dev_multihop"]["leads"] = _scope_row(
        "hotpotqa_dev_multihop", hotpot_idx, hotpot, "question", out, results["hotpotqa_dev_multihop"]["metrics"]
    )
    scope_rows.append(row)
    sections.append(_scope_section(scope_rows))

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
