"""Live fallback benchmark: half of the HotpotQA abstracts indexed locally, half only behind FakeWiki.

Measures page recall@k with and without on-the-fly retrieval (vs. a fully local index),
requests per claim, requests made for claims whose gold pages are all local (target 0),
the cache hit rate of a second run, and wall time. Time in the fallback client is a fake
clock (no real sleeping), so wall time is the local work plus the 127.0.0.1 round trips.
"""

from __future__ import annotations

import html
import json
import logging
import time
import zlib
from pathlib import Path

log = logging.getLogger("benchmarks.fallback")

K = 10
N_CLAIMS = 120
INDEXES = ("tfidf",)


def _split_corpus(shared: Path, out: Path) -> tuple[Path, Path, set[str]]:
    src = shared / "corpora" / "hotpotqa2017_abstracts.jsonl"
    local, full = out / "hotpot_local.jsonl", out / "hotpot_full.jsonl"
    remote: set[str] = set()
    with src.open(encoding="utf-8") as fh, local.open("w", encoding="utf-8") as lf, full.open("w", encoding="utf-8") as ff:
        for line in fh:
            row = json.loads(line)
            title = html.unescape(row["title"])
            rec = json.dumps({"title": title, "text": "".join(row["sentences"]).strip()}, ensure_ascii=False) + "\n"
            ff.write(rec)
            if zlib.crc32(title.encode()) % 2:   # a stable, content-blind split
                remote.add(title)
            else:
                lf.write(rec)
    return local, full, remote


def _recall(results, claims) -> float:
    hit = total = 0
    for res, c in zip(results, claims):
        got = {e.title for e in res.evidence}
        hit += sum(t in got for t in c["gold_titles"])
        total += len(c["gold_titles"])
    return hit / max(1, total)


def main(shared: Path, out: Path) -> str:
    from benchmarks.common import build
    from fallback.client import WikiApi
    from fallback.clock import FakeClock
    from fallback.fakewiki import FakeWiki, pages_from_hotpot
    from fallback.live import LiveFallback
    from retriever.api import Retriever

    out.mkdir(parents=True, exist_ok=True)
    local_jsonl, full_jsonl, remote = _split_corpus(shared, out)
    build([local_jsonl], out / "idx_half", indexes=INDEXES)
    build([full_jsonl], out / "idx_full", indexes=INDEXES)
    claims = [json.loads(l) for l in (shared / "claims" / "hotpotqa_dev_multihop.jsonl").open(encoding="utf-8")][:N_CLAIMS]
    pages = pages_from_hotpot(shared / "corpora" / "hotpotqa2017_abstracts.jsonl", titles=remote)
    report: dict = {"claims": len(claims), "k": K, "remote_pages": len(pages)}
    with Retriever.open(out / "idx_full") as full:
        report["recall_full_local"] = _recall([full.search(c["question"], K) for c in claims], claims)
    cache = out / "live_cache"
    with FakeWiki(pages) as wiki, Retriever.open(out / "idx_half") as half:
        report["recall_half_local"] = _recall([half.search(c["question"], K) for c in claims], claims)
        for run in ("first", "second"):
            api = WikiApi(api_url=wiki.api_url, contact="benchmark@localhost", cache_dir=cache, rate=1000, clock=FakeClock())
            fb = LiveFallback(api)
            t0 = time.perf_counter()
            results = [_with_fb(half, fb, c["question"]) for c in claims]
            wall = time.perf_counter() - t0
            all_local = [r for r, c in zip(results, claims) if not any(t in remote for t in c["gold_titles"])]
            report[run] = {
                "recall_with_fallback": _recall(results, claims),
                "requests": api.requests, "cache_hits": api.cache_hits,
                "requests_per_claim": api.requests / len(claims),
                "cache_hit_rate": api.cache_hits / max(1, api.cache_hits + api.requests),
                "requests_for_all_local_claims": sum(r.stats.get("requests", 0) for r in all_local),
                "all_local_claims": len(all_local), "wall_s": round(wall, 2),
            }
    text = json.dumps(report, indent=2)
    (out / "bench_fallback.json").write_text(text, encoding="utf-8")
    return text


def _with_fb(retriever, fb, claim):
    retriever.fallback = fb
    return retriever.search(claim, K, on_the_fly=True)


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shared", type=Path, default=Path("../shared/data"))
    p.add_argument("--out", type=Path, default=Path("data/bench_fallback"))
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(main(a.shared, a.out))
