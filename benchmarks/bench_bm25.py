"""BM25 (Pyserini/Lucene) on the 10k vital articles: build time, query latency, page recall on FEVER.

``python -m benchmarks.bench_bm25 --shared ../shared/data [--out benchmarks/out/bm25]``

Two stores are built from ``corpora/vital_articles_summaries.json``: one passage per article (the
lead) and ~100-word chunks of it. Queries are the 686 ``claims/fever_dev_vital.jsonl`` claims.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from pathlib import Path

from benchmarks.common import latency, md_table, page_metrics, unique_in_order

CHUNK_WORDS = 100
K_PASSAGES = 20  # passages fetched per claim before collapsing to pages
WARMUP_QUERIES = 50


def make_store(shared: Path, db_path: Path, *, chunk_words: int | None) -> int:
    """A store (public schema) of vital-article leads: whole, or cut into ``chunk_words`` pieces."""
    import duckdb

    from indexer.schema import DDL
    from wikiground.text import normalize_title

    data = json.loads((shared / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
    pages, passages = [], []
    for page_id, (key, rec) in enumerate(data.items()):
        title, text = rec.get("title") or key, rec.get("extract") or ""
        pages.append((page_id, title, 0, False, text, normalize_title(title)))
        words = text.split()
        step = chunk_words or max(1, len(words))
        for i, start in enumerate(range(0, max(1, len(words)), step)):
            passages.append((len(passages), page_id, 0, " ".join(words[start : start + step]), title, "", "text", i))
    db_path.unlink(missing_ok=True)
    con = duckdb.connect(str(db_path))
    con.execute(DDL)
    # Bulk insert through Arrow: executemany is row by row and takes minutes here.
    import pyarrow as pa

    page_cols = ["page_id", "title", "namespace", "is_disambiguation", "lead", "title_norm"]
    page_rows = pa.table(dict(zip(page_cols, map(list, zip(*pages)))))
    passage_rows = pa.table(
        dict(
            zip(
                ["passage_id", "page_id", "section_index", "text", "title", "heading_path", "source", "passage_index"],
                map(list, zip(*passages)),
            )
        )
    )
    con.register("page_rows", page_rows)
    con.register("passage_rows", passage_rows)
    con.execute(f"INSERT INTO pages ({', '.join(page_cols)}) SELECT * FROM page_rows")
    con.execute("INSERT INTO passages SELECT * FROM passage_rows")
    con.close()
    return len(passages)


def run_variant(shared: Path, out: Path, name: str, *, chunk_words: int | None, claims: list[dict]) -> dict:
    from backends import bm25

    db = out / f"{name}.duckdb"
    n_passages = make_store(shared, db, chunk_words=chunk_words)
    index_dir = out / f"{name}-bm25"
    manifest = bm25.build(db, index_dir, threads=2)
    queries = [c["claim"] for c in claims]
    golds = [c["gold_titles"] for c in claims]
    with bm25.load(index_dir) as backend:
        for q in queries[:WARMUP_QUERIES]:  # JIT warm-up; not timed
            backend.search(q, k=K_PASSAGES)
        times, rankings = [], []
        for q in queries:
            t0 = time.perf_counter()
            hits = backend.search(q, k=K_PASSAGES)
            times.append((time.perf_counter() - t0) * 1000)
            rankings.append(unique_in_order(h.title for h in hits))
        t0 = time.perf_counter()
        backend.search_batch(queries, k=K_PASSAGES)
        batch_qps = len(queries) / (time.perf_counter() - t0)
    size_mb = sum(p.stat().st_size for p in index_dir.rglob("*") if p.is_file()) / 2**20
    return {
        "name": name,
        "passages": n_passages,
        "build_s": manifest["build_seconds"],
        "size_mb": size_mb,
        "lat": latency(times),
        "batch_qps": batch_qps,
        "metrics": page_metrics(rankings, golds, ks=(1, 5, 10)),
        "engine": manifest["engine"],
    }


def main(shared: Path, out: Path) -> str:
    """Run both variants; return a markdown section."""
    out.mkdir(parents=True, exist_ok=True)
    claims = [json.loads(line) for line in (shared / "claims" / "fever_dev_vital.jsonl").open(encoding="utf-8")]
    results = [
        run_variant(shared, out, "lead", chunk_words=None, claims=claims),
        run_variant(shared, out, f"chunk{CHUNK_WORDS}", chunk_words=CHUNK_WORDS, claims=claims),
    ]
    for r in results:  # the stores and indexes are scratch; keep the output folder small
        shutil.rmtree(out / f"{r['name']}-bm25", ignore_errors=True)
        (out / f"{r['name']}.duckdb").unlink(missing_ok=True)
    rows = [
        (
            r["name"],
            r["passages"],
            r["build_s"],
            r["size_mb"],
            r["lat"]["p50"],
            r["lat"]["p95"],
            r["batch_qps"],
            r["metrics"]["R@1"],
            r["metrics"]["R@5"],
            r["metrics"]["R@10"],
            r["metrics"]["MRR"],
        )
        for r in results
    ]
    table = md_table(
        [
            "passages as",
            "passages",
            "build s",
            "index MiB",
            "p50 ms",
            "p95 ms",
            "batch q/s (search_batch)",
            "page R@1",
            "page R@5",
            "page R@10",
            "MRR",
        ],
        rows,
    )
    return (
        "## BM25 (Pyserini/Lucene)\n\n"
        f"{results[0]['engine']}; 10,033 vital-article leads; title field + contents, k1=0.9, b=0.4; "
        f"{len(claims)} FEVER dev claims (fever_dev_vital.jsonl), {K_PASSAGES} passages per claim collapsed to "
        f"pages, any-gold recall; latency of single `search` calls after {WARMUP_QUERIES} warm-up queries.\n\n"
        f"{table}\n"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_bm25")
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "bm25")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    print(main(args.shared, args.out))
