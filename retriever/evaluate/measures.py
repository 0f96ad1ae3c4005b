"""The figures of a run against gold: the standard measures from ir_measures (pytrec_eval underneath), KILT's
R-Precision and evidence-set recall, FEVER's evidence recall.

- ``any_gold_recall@k``: a gold page in the first k (ir_measures ``Success@k``); ``all_gold_recall@k``: every gold
  page in the first k (``R@k`` = 1); ``page_recall@k``: the share of gold pages in the first k (``R@k``); ``MRR``
  (``RR``) and ``nDCG@10`` (``nDCG@10``), binary relevance, every gold page relevant.
- ``R-Precision``: KILT's rule (``eval_retrieval.py``): per gold set of R pages, the share of the first R pages
  found in it; the best set counts.
- ``evidence_set_recall@k``: KILT's rule: each gold set is found at the rank of its last page; found when a set is
  within the first k.
- ``fever_evidence_recall@5``: FEVER's scorer's rule: a whole gold group of ``[page, line]`` within the first five
  predicted sentences; over the verifiable claims (NOT ENOUGH INFO ones are left out, as the scorer leaves them),
  for runs and gold files that have sentences.

Every figure averages over the gold file's claims that have gold pages; a claim the run lacks counts 0 (as
``trec_eval -c``; ir_measures alone averages over the claims the run has, so the two agree when the run answers
every claim).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from retriever.evaluate.gold import Gold
from retriever.evaluate.runs import Ranking

__all__ = ["DEFAULT_KS", "score"]

DEFAULT_KS = (1, 5, 10, 20)
FEVER_K = 5


def _standard(golds: Sequence[Gold], run: Mapping[str, Ranking], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """Per measure name, per query id: the ir_measures figures."""
    import ir_measures
    from ir_measures import RR, R, Success, nDCG

    qrels = [ir_measures.Qrel(g.id, page, 1) for g in golds for page in g.pages]
    docs = [
        ir_measures.ScoredDoc(g.id, page, float(len(run[g.id].pages) - n))
        for g in golds
        if g.id in run
        for n, page in enumerate(run[g.id].pages)
    ]
    measures: dict[Any, str] = {RR: "MRR", nDCG @ 10: "nDCG@10"}
    for k in ks:
        measures[Success @ k] = f"any_gold_recall@{k}"
        measures[R @ k] = f"page_recall@{k}"
    out: dict[str, dict[str, float]] = {name: {} for name in measures.values()}
    for m in ir_measures.iter_calc(list(measures), qrels, docs):
        out[measures[m.measure]][m.query_id] = float(m.value)
    for k in ks:
        out[f"all_gold_recall@{k}"] = {q: float(v >= 1.0 - 1e-9) for q, v in out[f"page_recall@{k}"].items()}
    return out


def _r_precision(gold: Gold, pages: Sequence[str]) -> float:
    best = 0.0
    for s in gold.sets:
        r = len(s)
        best = max(best, len(set(pages[:r]) & set(s)) / r)
    return best


def _set_rank(gold: Gold, pages: Sequence[str]) -> float:
    """The rank (1-based) at which a whole gold set is first found: each set at its last page's rank."""
    at = {p: n for n, p in reversed(list(enumerate(pages, 1)))}
    return min((max(at.get(p, math.inf) for p in s) for s in gold.sets), default=math.inf)


def _fever_found(gold: Gold, sentences: Sequence[tuple[str, int]]) -> float:
    first = set(sentences[:FEVER_K])
    return float(any(all(x in first for x in group) for group in gold.sentence_sets))


def score(gold: Mapping[str, Gold], run: Mapping[str, Ranking], ks: Sequence[int] = DEFAULT_KS) -> dict[str, Any]:
    """The run's figures (module docstring), with ``claims`` (scored), ``missing`` (gold claims the run lacks)
    and ``sentence_claims`` (those the FEVER figure averages over)."""
    golds = [g for g in gold.values() if g.sets and g.verifiable]
    per_query = _standard(golds, run, ks)
    empty = Ranking(())
    figures: dict[str, float] = {}
    n = len(golds) or 1
    for name, values in per_query.items():
        figures[name] = sum(values.get(g.id, 0.0) for g in golds) / n
    figures["R-Precision"] = sum(_r_precision(g, run.get(g.id, empty).pages) for g in golds) / n
    ranks = [_set_rank(g, run.get(g.id, empty).pages) for g in golds]
    for k in ks:
        figures[f"evidence_set_recall@{k}"] = sum(r <= k for r in ranks) / n
    result: dict[str, Any] = {"claims": len(golds), "missing": sum(g.id not in run for g in golds)}
    with_lines = [g for g in golds if g.sentence_sets]
    if with_lines and all(r.sentences is not None for r in run.values()):
        found = [_fever_found(g, run.get(g.id, empty).sentences or ()) for g in with_lines]
        figures[f"fever_evidence_recall@{FEVER_K}"] = sum(found) / len(with_lines)
        result["sentence_claims"] = len(with_lines)
    order = ["MRR", "nDCG@10", "R-Precision", f"fever_evidence_recall@{FEVER_K}"]
    for prefix in ("any_gold_recall", "all_gold_recall", "page_recall", "evidence_set_recall"):
        order += [f"{prefix}@{k}" for k in ks]
    result["figures"] = {name: round(figures[name], 6) for name in order if name in figures}
    return result
