"""The knowledge-graph channel (issue 24): channel ablation, path coverage, latency, and the build cost of `triples`.

- FEVER vital (686 claims over 10,033 leads) and HotpotQA dev (588 questions over 5,716 abstracts): fused
  recall@5 with `kg` and without; multi-hop all-gold recall@21 with kg bridges and without (HotpotQA); the share
  of claims for which a kg path connects two of the claim's entities; the kg channel's latency.
- Build cost: the store built with and without its triples (in-process builds, each in a fresh interpreter, so the
  two differ only in the triples), and with the kg channel (its graph arrays), on the gensim dump and on the ingest
  bench's x20 dump.

The retrieval bench's indexes are reused when present (copied, then given their triples the way a build makes
them: `indexer.store_writer.fill_triples`); otherwise built here.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import build, in_fresh_interpreter, latency, md_table, page_metrics, read_claims, vital_jsonl

log = logging.getLogger("benchmarks.kg")
FUSED_K = 5
MULTIHOP_K = 21
WITHOUT_KG = ("title", "bm25", "dense", "tfidf")
GENSIM = "dumps/gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def with_triples(src: Path, dst: Path) -> dict[str, Any]:
    """A copy of the index ``src`` whose store has its ``triples`` (and kg listed in the manifest); the seconds the
    triples took. Reused when ``dst`` is already that copy of the same build."""
    import duckdb

    from indexer.schema import TRIPLES_DDL
    from indexer.store_writer import fill_triples

    src_manifest = json.loads((src / "manifest.json").read_text())
    if (dst / "manifest.json").is_file():
        m = json.loads((dst / "manifest.json").read_text())
        if m.get("build_id") == src_manifest.get("build_id") and "kg" in m.get("indexes", {}):
            return m
        shutil.rmtree(dst)
    tmp = dst.with_name(dst.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    con = duckdb.connect(str(tmp / "wiki.duckdb"))
    try:
        t0 = time.perf_counter()
        if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'triples'").fetchone()[0]:
            added = con.execute("SELECT count(*) FROM triples").fetchone()[0]  # built by this version already
        else:
            con.execute(TRIPLES_DDL)
            added = fill_triples(con)
            con.execute("CHECKPOINT")
        seconds = time.perf_counter() - t0
    finally:
        con.close()
    m = dict(src_manifest)
    m["store_bytes"] = (tmp / "wiki.duckdb").stat().st_size
    m["indexes"] = {**m.get("indexes", {}), "kg": {"type": "kg", "seconds": round(seconds, 3)}}
    m["counts"] = {**m.get("counts", {}), "triples": added}
    (tmp / "manifest.json").write_text(json.dumps(m, indent=2))
    _refresh_unreadable(tmp, m.get("build_id"))
    tmp.rename(dst)
    return m


def _refresh_unreadable(folder: Path, build_id: str | None) -> None:
    """Rebuild, from the copied store, a channel this version no longer reads (an older TF-IDF format)."""
    import backends
    from indexer.build import stamp_channel
    from indexer.store import Store
    from wikiground.errors import IndexCorruptError

    for channel in ("tfidf",):
        if not (folder / channel).is_dir():
            continue
        with Store.open(folder) as store:
            try:
                backends.load(channel, folder, store=store)
                continue
            except IndexCorruptError as exc:
                log.info("%s: rebuilding %s (%s)", folder, channel, exc)
        shutil.rmtree(folder / channel)
        (folder / channel).mkdir()
        backends.build(channel, folder / "wiki.duckdb", folder / channel)
        if build_id:
            stamp_channel(folder / channel, build_id)


def _index(shared: Path, out: Path, name: str, corpus: Path) -> tuple[Path, dict[str, Any]]:
    reuse = out.parent / "retrieval" / name
    target = out / name
    if (reuse / "manifest.json").is_file():
        return target, with_triples(reuse, target)
    return target, build([corpus], target, indexes=(*WITHOUT_KG[1:], "kg"))


def _connects(path: Any, entities: set[int]) -> bool:
    nodes = {f.subject_id for f in path.facts} | {f.object_id for f in path.facts if f.object_id is not None}
    return len(nodes & entities) >= 2


def _fused_and_kg(index: Path, claims: list[str]) -> dict[str, Any]:
    """Fused top-5 with and without kg (one search of every channel per claim, fused both ways, as
    ``Retriever.search`` fuses), the kg channel's latency, and which claims a path connects."""
    from retriever.api import Retriever
    from retriever.fusion import fuse

    out: dict[str, Any] = {"with": [], "without": [], "kg_ms": [], "kg_resolve_ms": [], "connects": []}
    with Retriever.open(index) as r:
        r.warm_up()
        title, kg = r.backend("title"), r.backend("kg")
        for claim in claims:
            hits, _ = r.search_hits(claim, k=max(r.depth, 4 * FUSED_K))
            for label, chans in (("with", hits), ("without", {c: h for c, h in hits.items() if c != "kg"})):
                pages = fuse(chans, weights=r.weights, method=r.fusion, rrf_k=r.rrf_k)[:FUSED_K]
                found = r.store.pages(p.page_id for p in pages)
                out[label].append([found[p.page_id].title for p in pages if p.page_id in found])
            t0 = time.perf_counter()
            mentions = title.mentions(claim)
            t1 = time.perf_counter()
            kg.search_mentions(mentions, r.depth, query_length=len(claim), query=claim)
            t2 = time.perf_counter()
            out["kg_ms"].append((t2 - t1) * 1000)
            out["kg_resolve_ms"].append((t2 - t0) * 1000)
            entities = {m.resolution.page_id for m in mentions if m.resolution is not None}
            out["connects"].append(any(_connects(p, entities) for p in kg.paths(mentions, claim)))
    return out


def _multihop(index: Path, questions: list[str]) -> dict[str, list[list[str]]]:
    from retriever.api import Retriever
    from retriever.multihop import MultiHopParams, MultiHopRetriever

    out: dict[str, list[list[str]]] = {}
    with Retriever.open(index) as r:
        r.warm_up()
        for label, channels in (("with", None), ("without", WITHOUT_KG)):
            mh = MultiHopRetriever(r, params=MultiHopParams(final_k=MULTIHOP_K, channels=channels))
            out[label] = [[e.title for e in mh.search(q).evidence] for q in questions]
    return out


def _store_seconds(
    dump: Path, out: Path, *, triples: bool, keep: bool = False, kg: bool = False
) -> tuple[float, float, float]:
    """Wall and CPU seconds of a store build (in-process, no search index), with or without its triples, or with
    the kg channel (``kg``: its graph arrays written with the lookups), and the CPU seconds spent in the triples'
    own code; ``keep``: leave the store in ``out/store-kg``. Each build runs in a fresh interpreter, as a user's
    build does: in this long-lived bench process the builds' allocations would also pay for collecting the earlier
    benches' objects."""
    target = out / ("store-kg" if kg else f"store-{'triples' if triples else 'plain'}")
    shutil.rmtree(target, ignore_errors=True)
    mode = "kg" if kg else "triples" if triples else "plain"
    seconds, cpu, own = in_fresh_interpreter("benchmarks.bench_kg", "_child_build", str(dump), str(target), mode)
    if not keep:
        shutil.rmtree(target, ignore_errors=True)
    return seconds, cpu, own


# The triples' own steps in a build: the facts of each page (cleaner side), their staging (gathered, made Arrow,
# written), the final resolve.
_OWN_STEPS = ("_fill_triples", "_staged_triple_rows", "_arrow_columns", "StoreWriter._stage_triples", "fill_triples")


def _child_build(dump: str, target: str, mode: str) -> list[float]:
    """One store build of :func:`_store_seconds`, timed from the build call on (the interpreter's start and the
    imports, alike for all modes, left out). CPU seconds are the process's, DuckDB's threads included: other jobs on
    the machine stretch the wall time of a build, much less the CPU time it takes. "plain" leaves the triples out.
    The triples' own steps are timed as they run (the calling thread's CPU, the process's for the DuckDB step)."""
    from contextlib import ExitStack
    from unittest import mock

    from indexer import store_writer
    from indexer.build import build_index

    logging.disable(logging.WARNING)
    own, depth = [0.0], [0]

    def timed(fn: Any, clock: Any, name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            if depth[0] or (name == "_arrow_columns" and args[0] != "_staged_triples"):
                return fn(*args, **kwargs)  # another table's rows, or within a step already timed
            depth[0] += 1
            c0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                own[0] += clock() - c0
                depth[0] -= 1

        return run

    with ExitStack() as stack:
        if mode == "plain":
            stack.enter_context(mock.patch.object(store_writer, "fill_triples", lambda *a: 0))
            stack.enter_context(mock.patch.object(store_writer, "_fill_triples", lambda *a: None))
        else:
            for step in _OWN_STEPS:
                owner, name = (store_writer.StoreWriter, step.split(".")[1]) if "." in step else (store_writer, step)
                clock = time.process_time if name == "fill_triples" else time.thread_time
                stack.enter_context(mock.patch.object(owner, name, timed(getattr(owner, name), clock, name)))
        t0, c0 = time.perf_counter(), time.process_time()
        build_index([Path(dump)], Path(target), indexes=("kg",) if mode == "kg" else (), workers=1)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return [seconds, cpu, own[0]]


def build_cost(shared: Path, out: Path, *, repeats: int = 7) -> list[list[Any]]:
    """Store build seconds without and with the triples, and with the kg channel's graph arrays too, in ``repeats``
    turns, each turn one build of each (so a drift of the shared machine weighs on all alike): the median CPU and
    wall seconds of each, and the median CPU seconds of the triples' own steps; the last build with the kg channel
    is kept for :func:`scale_latency`."""
    from benchmarks.bench_ingest import make_dumps

    x20, _ = make_dumps(shared, out.parent / "ingest")
    rows = []
    for name, dump in (("gensim (206 pages)", shared / GENSIM), ("gensim x20", x20)):
        plain, full, channel = [], [], []
        for turn in range(repeats):
            plain.append(_store_seconds(dump, out, triples=False))
            full.append(_store_seconds(dump, out, triples=True))
            channel.append(_store_seconds(dump, out, triples=True, kg=True, keep=turn == repeats - 1))
        p, f, c = (statistics.median(cpu for _, cpu, _ in runs) for runs in (plain, full, channel))
        pw, fw = (statistics.median(wall for wall, _, _ in runs) for runs in (plain, full))
        own = statistics.median(o for _, _, o in full)
        rows.append(
            [name, p, f, (f - p) / p * 100, own, own / p * 100, c, (c - f) / f * 100, pw, fw, (fw - pw) / pw * 100]
        )
    return rows


def scale_latency(shared: Path, store: Path) -> dict[str, Any]:
    """The kg channel's latency on the x20 store (kept by :func:`build_cost`) for the FEVER claims about its pages."""
    from retriever.api import Retriever

    claims = [r["claim"] for r in read_claims(shared / "claims" / "fever_dev_fixture_dumps.jsonl")]
    ms: list[float] = []
    with Retriever.open(store, channels="title,kg") as r:
        title, kg = r.backend("title"), r.backend("kg")
        triples = r.store.count("triples")
        passages = r.store.count("passages")
        for claim in claims:
            mentions = title.mentions(claim)
            t0 = time.perf_counter()
            kg.search_mentions(mentions, r.depth, query_length=len(claim), query=claim)
            ms.append((time.perf_counter() - t0) * 1000)
    shutil.rmtree(store, ignore_errors=True)
    return {"claims": len(claims), "triples": triples, "passages": passages, **latency(ms)}


def _ablation_rows(name: str, rows: list[dict], res: dict[str, Any]) -> list[list[Any]]:
    golds = [r["gold_titles"] for r in rows]
    mw, mo = page_metrics(res["with"], golds, (FUSED_K,)), page_metrics(res["without"], golds, (FUSED_K,))
    lk, lr = latency(res["kg_ms"]), latency(res["kg_resolve_ms"])
    share = sum(res["connects"]) / len(rows)
    return [[name, mo[f"R@{FUSED_K}"], mw[f"R@{FUSED_K}"], share, lk["p50"], lk["p95"], lr["p50"], lr["p95"]]]


def main(shared: Path, out: Path, *, limit: int | None = None, multihop_limit: int | None = None) -> str:
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    table: list[list[Any]] = []
    sets = (
        ("fever_dev_vital", "vital_index", vital_jsonl(shared, out), "fever_dev_vital.jsonl", "claim"),
        (
            "hotpotqa_dev",
            "hotpot_index",
            shared / "corpora" / "hotpotqa2017_abstracts.jsonl",
            "hotpotqa_dev_multihop.jsonl",
            "question",
        ),
    )
    indexes: dict[str, tuple[Path, dict]] = {}
    for name, folder, corpus, claims_file, key in sets:
        index, manifest = _index(shared, out, folder, corpus)
        indexes[name] = (index, manifest)
        rows = read_claims(shared / "claims" / claims_file, limit)
        log.info("%s: fused search with and without kg over %d claims", name, len(rows))
        res = _fused_and_kg(index, [r[key] for r in rows])
        table.extend(_ablation_rows(f"{name} ({manifest['counts'].get('triples', '?')} triples)", rows, res))
        results[name] = {"with": res["with"], "without": res["without"], "connects": res["connects"]}
    hotpot_rows = read_claims(shared / "claims" / "hotpotqa_dev_multihop.jsonl", multihop_limit or limit)
    log.info("multi-hop with and without kg over %d questions", len(hotpot_rows))
    mh = _multihop(indexes["hotpotqa_dev"][0], [r["question"] for r in hotpot_rows])
    golds = [r["gold_titles"] for r in hotpot_rows]
    mw, mo = page_metrics(mh["with"], golds, (MULTIHOP_K,)), page_metrics(mh["without"], golds, (MULTIHOP_K,))
    log.info("build cost of the triples")
    cost = build_cost(shared, out)
    scale = scale_latency(shared, out / "store-kg")
    results.update(multihop={"with": mw, "without": mo}, build_cost=cost, scale=scale)
    (out / "kg.json").write_text(json.dumps(results, indent=2))
    return _report(table, mw, mo, cost, indexes, len(hotpot_rows)) + (
        f"\nOn the x20 store ({scale['passages']:,} passages, {scale['triples']:,} triples), the kg channel answers the "
        f"{scale['claims']} FEVER claims about its pages in p50 {scale['p50']:.1f} ms, p95 {scale['p95']:.1f} ms.\n"
    )


def _report(table, mw, mo, cost, indexes, n_multihop) -> str:
    fill = {n: m["indexes"]["kg"].get("seconds") for n, (_, m) in indexes.items() if "kg" in m.get("indexes", {})}
    return (
        "## Knowledge-graph channel (issue 24)\n\n"
        f"Fused recall@{FUSED_K} over page titles without and with the `kg` channel (same run, same index); the share "
        "of claims for which a kg path (1 or 2 hops) connects two of the claim's resolved entities; the kg channel's "
        "latency per claim, ms, alone (from the title channel's resolved mentions, as the retriever runs it) and with "
        "the entity resolution.\n\n"
        + md_table(
            [
                "set",
                f"R@{FUSED_K} without kg",
                f"R@{FUSED_K} with kg",
                "path connects 2 entities",
                "kg p50",
                "kg p95",
                "kg+resolve p50",
                "kg+resolve p95",
            ],
            table,
        )
        + f"\n\nMulti-hop ({n_multihop} HotpotQA dev questions, 3 hops, final k={MULTIHOP_K}): all-gold recall@{MULTIHOP_K} "
        f"{mo[f'all@{MULTIHOP_K}']:.3f} without kg, {mw[f'all@{MULTIHOP_K}']:.3f} with kg (as a channel and its "
        f"paths' pages as bridges); any-gold R@{MULTIHOP_K} {mo[f'R@{MULTIHOP_K}']:.3f} -> {mw[f'R@{MULTIHOP_K}']:.3f}.\n\n"
        "Build cost of `triples`: in-process store builds (workers=1, no search index, each in a fresh interpreter, "
        "timed from the build call) without and with the triples "
        "(page extraction in the cleaner and the final resolve), and with the kg channel (`--indexes kg`: its graph "
        "arrays written into `lookups/`), 7 turns, each turn one build of each: the median CPU seconds of the build "
        "process (DuckDB's threads included; other jobs on the machine stretch wall time, much less CPU time), the "
        "median CPU seconds spent in the triples' own steps as they run (the facts of each page, their staging, the "
        "final resolve: a direct measure, where the difference of two builds carries both builds' noise), and the "
        "median wall time.\n\n"
        + md_table(
            [
                "dump",
                "store CPU s without",
                "store CPU s with",
                "cost %",
                "triples' own CPU s",
                "own % of store",
                "with kg channel CPU s",
                "kg channel % of store",
                "wall s without",
                "wall s with",
                "cost % (wall)",
            ],
            cost,
        )
        + f"\n\nTriples of the text corpora (titles named in sentences, as they have no links), added to the "
        f"retrieval bench's stores: {', '.join(f'{n} {s:.2f} s' for n, s in fill.items() if s is not None)}.\n"
    )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "kg")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--multihop-limit", type=int, default=None, help="first N HotpotQA questions for multi-hop")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    print(main(a.shared, a.out, limit=a.limit, multihop_limit=a.multihop_limit))
