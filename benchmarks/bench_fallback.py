"""Live fallback benchmark: each corpus split in two, half indexed locally, half only behind FakeWiki.

Two corpora and their dev claims: HotpotQA abstracts with the multi-hop questions, and the vital
articles' leads with the FEVER claims (which name their entity). The split is by crc32 of the
title: stable and blind to content. For each, page recall@k of the fully local index, of the
local half alone, and of the local half with ``on_the_fly`` (FakeWiki on 127.0.0.1 serving the
other half); requests per claim; requests made for claims whose gold pages are all local (target
0); the cache hit rate of a second run over the same claims; wall time. The fallback client runs
on a fake clock (no real sleeping), so wall time is local work plus the loopback round trips.
"""

from __future__ import annotations

import html
import json
import logging
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.fallback")

K = 10
INDEXES = ("bm25", "tfidf")
CONTACT = "benchmark@localhost"


@dataclass(frozen=True)
class Dataset:
    name: str
    claims_file: str
    text_key: str
    rows: Callable[[Path], list[tuple[str, str]]]  # corpus -> (title, text)
    pages: Callable[[Path, set[str]], dict]  # FakePages for the remote titles


def _hotpot_rows(shared: Path) -> list[tuple[str, str]]:
    with (shared / "corpora" / "hotpotqa2017_abstracts.jsonl").open(encoding="utf-8") as fh:
        # The abstracts' sentences come stripped: joined with "" they would run together ("Archer.In 1945").
        return [
            (html.unescape(r["title"]), " ".join(x.strip() for x in r["sentences"] if x.strip()))
            for r in map(json.loads, fh)
        ]


def _vital_rows(shared: Path) -> list[tuple[str, str]]:
    data = json.loads((shared / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
    return [(r.get("title") or key, r.get("extract") or "") for key, r in data.items()]


def _hotpot_pages(shared: Path, remote: set[str]) -> dict:
    from tests.support.fakewiki import pages_from_hotpot

    return pages_from_hotpot(shared / "corpora" / "hotpotqa2017_abstracts.jsonl", titles=remote)


def _vital_pages(shared: Path, remote: set[str]) -> dict:
    from tests.support.fakewiki import pages_from_vital

    return pages_from_vital(shared / "corpora" / "vital_articles_summaries.json", titles=remote)


DATASETS = (
    Dataset("hotpot", "hotpotqa_dev_multihop.jsonl", "question", _hotpot_rows, _hotpot_pages),
    Dataset("vital", "fever_dev_vital.jsonl", "claim", _vital_rows, _vital_pages),
)


def is_remote(title: str) -> bool:
    """The split: odd crc32 of the title -> only behind the loopback server."""
    return bool(zlib.crc32(title.encode("utf-8")) % 2)


def split_corpus(rows: list[tuple[str, str]], out: Path, name: str) -> tuple[Path, Path, set[str]]:
    local, full = out / f"{name}_local.jsonl", out / f"{name}_full.jsonl"
    remote: set[str] = set()
    for path in (local, full):
        tmp = path.with_suffix(".part")
        with tmp.open("w", encoding="utf-8") as fh:
            for title, text in rows:
                if path is local and is_remote(title):
                    remote.add(title)
                    continue
                fh.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
        tmp.replace(path)
    return local, full, remote


def recall(results: list[Any], claims: list[dict]) -> float:
    """Share of gold pages (over all claims) found in the top-k evidence."""
    hit = total = 0
    for res, c in zip(results, claims):
        got = {e.title for e in res.evidence}
        hit += sum(t in got for t in c["gold_titles"])
        total += len(c["gold_titles"])
    return hit / max(1, total)


def make_fallback(
    api_url: str,
    cache: Path,
    retriever: Any,
    *,
    scorer: str = "auto",
    threshold: float | None = None,
    search_top_m: int | None = None,
) -> Any:
    """The fallback the benchmark measures: the retriever's own wiring (scorer from the local index)."""
    from fallback.client import WikiApi
    from fallback.live import LiveFallback
    from fallback.settings import FallbackSettings
    from retriever.api import default_live_planner, default_live_scorer
    from tests.support.clock import FakeClock

    api = WikiApi(FallbackSettings(api_url=api_url, contact=CONTACT, cache_dir=cache, rate=1000), clock=FakeClock())
    fn, default_threshold = default_live_scorer(retriever, scorer)
    opts = {} if search_top_m is None else {"search_top_m": search_top_m}
    return LiveFallback(
        api,
        scorer=fn,
        min_relevance=default_threshold if threshold is None else threshold,
        planner=default_live_planner(retriever),
        **opts,
    )


def run_dataset(
    ds: Dataset, shared: Path, out: Path, *, limit: int | None = None, **fallback_opts: Any
) -> dict[str, Any]:
    from benchmarks.common import build
    from retriever.api import Retriever
    from tests.support.fakewiki import FakeWiki

    rows = ds.rows(shared)  # read once: the split, the page counts and the name classes all use it
    local_jsonl, full_jsonl, remote = split_corpus(rows, out, ds.name)
    build([local_jsonl], out / f"{ds.name}_half", indexes=INDEXES)
    build([full_jsonl], out / f"{ds.name}_full", indexes=INDEXES)
    claims = [json.loads(l) for l in (shared / "claims" / ds.claims_file).open(encoding="utf-8") if l.strip()][:limit]
    for c in claims:
        # Titles as the corpus rows have them: 8 HotpotQA gold titles come HTML-escaped ("Will &amp; Grace").
        c["gold_titles"] = [html.unescape(t) for t in c["gold_titles"]]
    pages = ds.pages(shared, remote)
    all_local = [not any(is_remote(t) for t in c["gold_titles"]) for c in claims]
    report: dict[str, Any] = {
        "claims": len(claims),
        "all_local_claims": sum(all_local),
        "k": K,
        "local_pages": len(rows) - len(remote),
        "remote_pages": len(pages),
    }
    texts = [c[ds.text_key] for c in claims]
    with Retriever.open(out / f"{ds.name}_full") as full:
        t0 = time.perf_counter()
        report["recall_full_local"] = recall([full.search(q, K) for q in texts], claims)
        report["wall_s_full_local"] = round(time.perf_counter() - t0, 2)
    cache = out / f"{ds.name}_live_cache"
    if cache.exists():  # the first run must start cold for the hit rate to mean anything
        shutil.rmtree(cache)
    with FakeWiki(pages) as wiki, Retriever.open(out / f"{ds.name}_half") as half:
        t0 = time.perf_counter()
        local_only = [half.search(q, K) for q in texts]
        report["wall_s_half_local"] = round(time.perf_counter() - t0, 2)
        report["recall_half_local"] = recall(local_only, claims)
        for run in ("first", "second", "bridges"):
            if run == "bridges":  # the opt-in second hop for all-local claims, from a cold cache of its own
                half.live_bridges, cache = True, out / f"{ds.name}_live_cache_bridges"
                shutil.rmtree(cache, ignore_errors=True)
            half.fallback = make_fallback(wiki.api_url, cache, half, **fallback_opts)
            api = half.fallback.api
            t0 = time.perf_counter()
            results = [half.search(q, K, on_the_fly=True) for q in texts]
            wall = time.perf_counter() - t0
            req = [r.stats.get("requests", 0) for r in results]
            looked_up = sum(bool(r.stats.get("missing_entities")) for r in results)
            report[run] = {
                "recall_with_fallback": recall(results, claims),
                "requests": api.requests,
                "cache_hits": api.cache_hits,
                "requests_per_claim": api.requests / max(1, len(claims)),
                "cache_hit_rate": api.cache_hits / max(1, api.cache_hits + api.requests),
                "claims_looked_up": looked_up,
                "requests_for_all_local_claims": sum(n for n, a in zip(req, all_local) if a),
                "all_local_claims_looked_up": sum(
                    bool(r.stats.get("missing_entities")) or n > 0 for r, n, a in zip(results, req, all_local) if a
                ),
                "wall_s": round(wall, 2),
            }
            if run == "first":
                report["all_local_names"] = _name_classes([r for r, a in zip(results, all_local) if a], rows, remote)
                report["examples_all_local_looked_up"] = [
                    {"claim": q, "missing": r.stats.get("missing_entities")}
                    for q, r, a in zip(texts, results, all_local)
                    if a and r.stats.get("missing_entities")
                ][:8]
            half.fallback.close()
    report["recall_gained"] = report["first"]["recall_with_fallback"] - report["recall_half_local"]
    report["recall_gained_bridges"] = report["bridges"]["recall_with_fallback"] - report["recall_half_local"]
    return report


def _name_classes(results: list[Any], rows: list[tuple[str, str]], remote: set[str]) -> dict[str, int]:
    """Where the names looked up for all-local claims live: a title of the local half (a needless lookup), of
    the remote half, or of neither (the corpus lacks the entity: even the fully local index would not know it).
    A name matches a title up to the case of its first letter and a disambiguator."""
    from backends.entities import strip_disambiguator
    from wikiground.text import canonical_title

    def key(text: str) -> str:
        return canonical_title(strip_disambiguator(text))

    remote_keys = {key(t) for t in remote}
    local_keys = {key(t) for t, _ in rows if t not in remote}
    out = {
        "names": 0,
        "local_half": 0,
        "remote_half": 0,
        "absent_from_corpus": 0,
        "requests_for_claims_naming_only_absent": 0,
    }
    for r in results:
        names = r.stats.get("missing_entities") or []
        classes = [
            "local_half" if key(n) in local_keys else "remote_half" if key(n) in remote_keys else "absent_from_corpus"
            for n in names
        ]
        out["names"] += len(names)
        for c in classes:
            out[c] += 1
        if names and all(c == "absent_from_corpus" for c in classes):
            out["requests_for_claims_naming_only_absent"] += r.stats.get("requests", 0)
    return out


def section(reports: dict[str, dict[str, Any]]) -> str:
    from benchmarks.common import md_table

    rows = []
    for name, r in reports.items():
        f, s = r["first"], r["second"]
        rows.append(
            [
                name,
                r["claims"],
                r["all_local_claims"],
                r["recall_full_local"],
                r["recall_half_local"],
                f["recall_with_fallback"],
                r["recall_gained"],
                f["requests_per_claim"],
                f["claims_looked_up"],
                f"{f['requests_for_all_local_claims']} ({f['all_local_claims_looked_up']} claims)",
                s["cache_hit_rate"],
                s["requests"],
                f"{r['wall_s_half_local']:.1f} / {f['wall_s']:.1f} / {s['wall_s']:.1f}",
            ]
        )
    table = md_table(
        [
            "corpus",
            "claims",
            "all-local claims",
            f"R@{K} full local",
            f"R@{K} half local",
            f"R@{K} half + fallback",
            "recall gained",
            "requests / claim",
            "claims looked up",
            "requests on all-local claims",
            "cache hit rate (2nd run)",
            "requests (2nd run)",
            "wall s: local / fallback / 2nd run",
        ],
        rows,
    )
    notes = [
        "## Live fallback (`--on-the-fly`) over a split corpus",
        "",
        "Each corpus is split by crc32 of the title: one half indexed locally (BM25 + TF-IDF + title channel),",
        "the other half served only by FakeWiki, a MediaWiki-API-compatible server on 127.0.0.1. Recall is the",
        f"share of gold pages in the top {K}. The live client runs on a fake clock (rate limiting costs no",
        "real time); the second run replays from the response cache of the first. FakeWiki's search matches",
        "all terms with plurals folded, like CirrusSearch; it has no redirects beyond the pages' own titles.",
        "",
        "Which names are looked up (`backends.entities.missing_entities`): unresolved names only; none when a",
        "claim's subject (its first entity and those coordinated with it) is local; for a question, each",
        "missing name and each compared entity without a local page of its own. Names in the sentences closest",
        "to the claim of the pages it names (then of the best local evidence, then of search hits) are fetched",
        "as the bridge hop, and the pages found are evidence. Live evidence lists the pages the claim names",
        "first. A search and its hits' intros are one request (`list=search` beside `generator=search`), and so",
        "are a disambiguation page's options with their intros (`generator=links`) and the categories of",
        "attempt 3's pages.",
        "",
        table,
        "",
        "With `--live-bridges` (opt-in; `live_bridges=True`), a claim whose entities are all local also gets the",
        "second hop: the names in the best local evidence's closest sentences that resolve to no local page, in",
        "one request (the rule above makes no request for such a claim). Same split, cold cache:",
        "",
        md_table(
            [
                "corpus",
                f"R@{K} full local",
                f"R@{K} half + fallback + bridges",
                "recall gained",
                "vs full local",
                "requests / claim",
                "requests on all-local claims",
            ],
            [
                [
                    name,
                    r["recall_full_local"],
                    r["bridges"]["recall_with_fallback"],
                    r["recall_gained_bridges"],
                    r["bridges"]["recall_with_fallback"] - r["recall_full_local"],
                    r["bridges"]["requests_per_claim"],
                    f"{r['bridges']['requests_for_all_local_claims']} ({r['bridges']['all_local_claims_looked_up']} claims)",
                ]
                for name, r in reports.items()
            ],
        ),
        "",
    ]
    rows = [
        [
            name,
            c["names"],
            c["absent_from_corpus"],
            c["remote_half"],
            c["local_half"],
            f"{c['requests_for_claims_naming_only_absent']} of {r['first']['requests_for_all_local_claims']}",
        ]
        for name, r in reports.items()
        if (c := r.get("all_local_names"))
    ]
    if rows:
        notes += [
            "Names looked up for claims whose gold pages are all local, by where the corpus has them. A name absent",
            "from the whole corpus is an entity that even the fully local index lacks (the corpora hold only the",
            "claims' gold and distractor pages, not all of Wikipedia), so the rule \"ask only for entities the local",
            'index lacks" sends it; a name that is a local-half title would be a needless lookup.',
            "",
            md_table(
                [
                    "corpus",
                    "names looked up",
                    "absent from the whole corpus",
                    "remote-half titles",
                    "local-half titles",
                    "requests for claims naming only absent entities",
                ],
                rows,
            ),
            "",
        ]
    for name, r in reports.items():
        ex = r.get("examples_all_local_looked_up") or []
        if ex:
            notes.append(f"All-local {name} claims that still made a lookup (first {len(ex)}):")
            notes += [f"- {e['claim']!r} -> {e['missing']}" for e in ex]
            notes.append("")
    return "\n".join(notes)


def main(shared: Path, out: Path, *, limit: int | None = None, only: tuple[str, ...] = ()) -> str:
    out.mkdir(parents=True, exist_ok=True)
    reports = {ds.name: run_dataset(ds, shared, out, limit=limit) for ds in DATASETS if not only or ds.name in only}
    tmp = out / "bench_fallback.json.part"
    tmp.write_text(json.dumps(reports, indent=2), encoding="utf-8")
    tmp.replace(out / "bench_fallback.json")
    return section(reports)


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shared", type=Path, default=Path("../shared/data"))
    p.add_argument("--out", type=Path, default=Path("data/bench_fallback"))
    p.add_argument("--limit", type=int, default=None, help="first N claims of each set")
    p.add_argument("--only", default="", help="comma list: hotpot,vital")
    a = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(main(a.shared, a.out, limit=a.limit, only=tuple(x for x in a.only.split(",") if x)))
