"""Fusion at rank 1 (issue 43): every channel subset fused, the default's rank-1 promotion cross-validated, and the
time fusion takes.

- FEVER vital (686 claims over 10,033 leads) and HotpotQA dev (588 questions over 5,716 abstracts), each over an
  index with all five channels. Every claim's channels are searched once (at the depth a k=21 search uses); every
  subset of them is then fused from those hits, as ``Retriever.search`` would fuse that subset.
- Recall at 1, 5, 21 (any gold page), all@21 (every gold page) and MRR, per subset, with the default fusion.
- The promotion's parameters (``retriever.fusion.Promotion``) by 5-fold cross-validation: picked on four folds of
  both sets' claims, measured on the fifth; the shipped ``PROMOTION`` and plain RRF beside them.
- The best subset chosen the same way (on four folds, per set and for both sets at once) and measured on the fifth:
  the in-sample best of 31 subsets is an optimistic figure, this one is comparable with the default's held-apart one.
- Every claim's hits are cached in the output folder (``<index>.hits.pkl``, keyed by the index's build and the claims
  file), so that a rerun over the same index fuses without searching again.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import pickle
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.common import build, md_table, page_metrics, read_claims, vital_jsonl

log = logging.getLogger("benchmarks.fusion")
K = 21
METRICS = ("R@1", "R@5", "R@21", "all@21", "MRR")
FOLDS = 5
SEED = 43
ALL = ("bm25", "dense", "tfidf", "title", "kg")  # the default: every channel the index has


def _grid() -> list[Any]:
    from retriever.fusion import Promotion

    return [Promotion(g, t) for g in (0.0, 2.0, 4.0, 6.0, 8.0, 12.0) for t in (None, 2.5, 2.75)]


def _hits(index: Path, claims: list[str]) -> tuple[list[dict[str, list]], dict[int, str], dict[str, float]]:
    """Every claim's hits per channel (one search of all five), the titles of their pages, the index's weights; read
    from the cache beside the index when it was written for this very build and these claims."""
    from retriever.api import Retriever

    build_id = json.loads((index / "manifest.json").read_text()).get("build_id")
    key = hashlib.sha256(json.dumps([build_id, claims, K, ALL]).encode()).hexdigest()
    cache = index.with_name(index.name + ".hits.pkl")
    if cache.is_file():
        cached = pickle.loads(cache.read_bytes())  # our own file, written below
        if cached.get("key") == key:
            log.info("%s: hits from %s", index, cache)
            return cached["found"], cached["titles"], cached["weights"]
    with Retriever.open(index, channels=ALL) as r:
        r.warm_up()
        depth = max(r.depth, 4 * K)
        found = [r.search_hits(claim, k=depth)[0] for claim in claims]
        pages = {h.page_id for res in found for hits in res.values() for h in hits}
        titles = {pid: p.title for pid, p in r.store.pages(pages).items()}
        weights = dict(r.weights)
    tmp = cache.with_suffix(".part")
    tmp.write_bytes(pickle.dumps({"key": key, "found": found, "titles": titles, "weights": weights}))
    tmp.replace(cache)
    return found, titles, weights


def _ranking(
    results: dict[str, list], chans: tuple[str, ...], titles: dict[int, str], weights, promotion, rank1=None
) -> list:
    """The subset's fused page titles; with ``rank1`` (a model, or "shipped"), the learned rank 1 reorders its top 5."""
    from retriever.fusion import fuse

    pages = fuse({c: h for c, h in results.items() if c in chans}, weights=weights, promotion=promotion, rank1=rank1)
    return [titles[p.page_id] for p in pages[:K] if p.page_id in titles]


def _metrics(rankings: list[list[str]], golds: list[list[str]]) -> dict[str, float]:
    m = page_metrics(rankings, golds)
    return {k: m[k] for k in METRICS}


def _subsets(found, titles, weights, golds) -> tuple[dict[str, dict[str, float]], dict[str, list[bool]]]:
    """Metrics of every non-empty channel subset under the default fusion, with plain RRF's R@1 beside them; and per
    subset, whether each claim's first page is a gold one (for the subset chosen on training folds)."""
    from retriever.evaluate.gold import title_key
    from retriever.fusion import PLAIN, PROMOTION

    gold_keys = [{title_key(t) for t in g} for g in golds]
    out, firsts = {}, {}
    for n in range(1, len(ALL) + 1):
        for chans in itertools.combinations(ALL, n):
            ranked = [_ranking(f, chans, titles, weights, PROMOTION) for f in found]
            m = _metrics(ranked, golds)
            plain = _metrics([_ranking(f, chans, titles, weights, PLAIN) for f in found], golds)
            learned = _metrics([_ranking(f, chans, titles, weights, PROMOTION, "shipped") for f in found], golds)
            out[",".join(chans)] = {
                **m,
                "R@1 plain": plain["R@1"],
                "R@5 plain": plain["R@5"],
                "R@1 learned": learned["R@1"],
                "MRR learned": learned["MRR"],
            }
            firsts[",".join(chans)] = [bool(r) and title_key(r[0]) in g for r, g in zip(ranked, gold_keys)]
    return out, firsts


def _folds(n: int) -> list[int]:
    """Each claim's fold, 0..FOLDS-1 (a fixed shuffle)."""
    from benchmarks.rank1_fit import split

    return split(n, FOLDS, SEED)


def _cross_validated(sets: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Held-apart metrics of the promotion picked (best summed R@1, then R@5, over both sets) on the other folds."""
    grid = _grid()
    ranked = {
        name: [[_ranking(f, ALL, s["titles"], s["weights"], p) for f in s["found"]] for p in grid]
        for name, s in sets.items()
    }
    held = {name: [None] * len(s["found"]) for name, s in sets.items()}
    picked = []
    for fold in range(FOLDS):

        def score(i: int, fold: int = fold) -> tuple[float, float]:
            total = [0.0, 0.0]
            for name, s in sets.items():
                keep = [j for j, f in enumerate(s["fold"]) if f != fold]
                m = _metrics([ranked[name][i][j] for j in keep], [s["golds"][j] for j in keep])
                total[0] += m["R@1"]
                total[1] += m["R@5"]
            return total[0], total[1]

        best = max(range(len(grid)), key=lambda i: (score(i), -i))
        picked.append(_label(grid[best]))
        for name, s in sets.items():
            for j, f in enumerate(s["fold"]):
                if f == fold:
                    held[name][j] = ranked[name][best][j]
    return {name: _metrics(held[name], s["golds"]) for name, s in sets.items()}, picked


def _subset_cv(sets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """R@1 of the subset with the best R@1 on four folds (of that set alone, or summed over both sets; ties to the
    default), measured on the fifth: the held-apart figure of choosing a subset, beside the default's."""
    full = ",".join(ALL)
    names = list(next(iter(sets.values()))["firsts"])
    out: dict[str, Any] = {"per set": {}, "both": {}, "picked": {"per set": [], "both": []}}
    held = {how: {name: [False] * len(s["found"]) for name, s in sets.items()} for how in ("per set", "both")}
    for fold in range(FOLDS):
        train = {name: [j for j, f in enumerate(s["fold"]) if f != fold] for name, s in sets.items()}

        def r1(name: str, sub: str) -> float:
            hits = sets[name]["firsts"][sub]
            return sum(hits[j] for j in train[name]) / len(train[name])

        both = max(names, key=lambda sub: (sum(r1(name, sub) for name in sets), sub == full))
        out["picked"]["both"].append(both)
        for name, s in sets.items():
            own = max(names, key=lambda sub, name=name: (r1(name, sub), sub == full))
            out["picked"]["per set"].append(f"{name}: {own}")
            for j, f in enumerate(s["fold"]):
                if f == fold:
                    held["per set"][name][j] = s["firsts"][own][j]
                    held["both"][name][j] = s["firsts"][both][j]
    for how, by_set in held.items():
        out[how] = {name: sum(v) / len(v) for name, v in by_set.items()}
    return out


def _label(p: Any) -> str:
    return f"gain {p.margin_gain:g}, title from {p.title_protect if p.title_protect is not None else 'never'}"


def _fuse_us(found: list[dict[str, list]], weights) -> dict[str, float]:
    """Mean microseconds fuse() takes per claim of all five channels: plain RRF, the promotion alone (the default
    before the learned rank 1) and the default, taking turns claim by claim (so that the host's load weighs on all
    alike)."""
    from retriever.fusion import PLAIN, PROMOTION, fuse

    kinds = (("plain", PLAIN, None), ("promotion", PROMOTION, None), ("default", PROMOTION, "shipped"))
    spent = dict.fromkeys((k for k, _, _ in kinds), 0.0)
    for _ in range(3):
        for f in found:
            for label, p, rank1 in kinds:
                t0 = time.perf_counter()
                fuse(f, weights=weights, promotion=p, rank1=rank1)
                spent[label] += time.perf_counter() - t0
    return {label: s / (3 * len(found)) * 1e6 for label, s in spent.items()}


def _subset_rows(subsets: dict[str, dict[str, float]]) -> list[list[Any]]:
    """The subsets that matter: each channel alone, all five, all five less one, and the three best others at R@1."""
    full = ",".join(ALL)
    chosen = [*ALL, full] + [",".join(c for c in ALL if c != x) for x in ALL]
    others = sorted((s for s in subsets if s not in chosen), key=lambda s: -subsets[s]["R@1"])[:3]
    rows = []
    for name in sorted(chosen + others, key=lambda s: (-subsets[s]["R@1"], s)):
        m = subsets[name]
        label = f"**{name}** (default)" if name == full else name
        rows.append([label, *(m[k] for k in METRICS), m["R@1 plain"], m["R@1 learned"], m["MRR learned"]])
    return rows


def _why(name: str, subsets: dict[str, dict[str, float]], cv: dict[str, float], learned: dict[str, Any]) -> str:
    """Why the default is all five channels with the learned rank 1: its R@1 held apart against the subsets'."""
    full = ",".join(ALL)
    best = max((s for s in subsets if s != full), key=lambda s: (subsets[s]["R@1"], subsets[s]["all@21"]))
    best_learned = max((s for s in subsets if s != full), key=lambda s: subsets[s]["R@1 learned"])
    widest = max(subsets, key=lambda s: (subsets[s]["all@21"], s == full))
    m, held = subsets[full], learned["cv"]
    return (
        f"{name}: the default, all five channels with the learned rank 1, has R@1 {held['R@1']:.3f} held apart "
        f"({learned['shipped']['R@1']:.3f} in sample); with the promotion alone {m['R@1']:.3f} in sample "
        f"({cv['R@1']:.3f} held apart). The best other subset with the promotion: {best} {subsets[best]['R@1']:.3f} "
        f"in sample; with the learned rank 1 (in sample, the model fitted on five channels): {best_learned} "
        f"{subsets[best_learned]['R@1 learned']:.3f}. Its all@21 is {m['all@21']:.3f}; the highest of any subset is "
        f"{subsets[widest]['all@21']:.3f} ({widest})."
    )


def _both(sets: dict[str, dict[str, Any]]) -> str:
    """Which subsets have the best R@1 and the best all@21 summed over the sets, against the default's."""
    full = ",".join(ALL)
    names = next(iter(sets.values()))["subsets"]
    out = []
    for metric in ("R@1", "all@21"):
        total = {c: sum(s["subsets"][c][metric] for s in sets.values()) for c in names}
        best = max(total, key=lambda c: (total[c], c == full))
        out.append(
            f"{metric} summed over both sets: the default {total[full]:.3f}, the best subset {best} {total[best]:.3f}."
        )
    return " ".join(out)


def _learned(sets: dict[str, dict[str, Any]], out: Path, write_model: bool) -> dict[str, Any]:
    """The learned rank 1: held apart (C chosen and the model fitted on the other folds) and the shipped model's
    figures; the model fitted on every claim written to the output folder (and to the package with
    ``write_model``)."""
    import retriever.rank1 as rank1
    from benchmarks import rank1_fit
    from retriever.fusion import PROMOTION

    by_set = {
        name: rank1_fit.examples(s["found"], s["titles"], s["weights"], s["golds"], ALL, K) for name, s in sets.items()
    }
    held, picked = rank1_fit.cross_validated(by_set, {n: s["fold"] for n, s in sets.items()}, FOLDS, SEED)
    fitted_on = (
        "every claim of "
        + " and ".join(f"{n} ({len(s['found'])})" for n, s in sets.items())
        + f" over indexes of all five channels; C chosen by {rank1_fit.INNER}-fold cross-validation (seed {SEED})"
    )
    model = rank1_fit.shipped(by_set, SEED, fitted_on)
    text = json.dumps(model, indent=2) + "\n"
    (out / "rank1.json").write_text(text)
    if write_model:
        rank1.MODEL_FILE.write_text(text)
        rank1.shipped.cache_clear()
    results: dict[str, Any] = {"C picked": picked, "model": model}
    for name, s in sets.items():
        titled = [[s["titles"][p] for p in pages if p in s["titles"]] for pages in held[name]]
        shipped = [_ranking(f, ALL, s["titles"], s["weights"], PROMOTION, "shipped") for f in s["found"]]
        results[name] = {"cv": _metrics(titled, s["golds"]), "shipped": _metrics(shipped, s["golds"])}
    return results


def main(shared: Path, out: Path, *, limit: int | None = None, write_model: bool = False) -> str:
    from retriever.fusion import PLAIN, PROMOTION

    out.mkdir(parents=True, exist_ok=True)
    sets_spec = (
        ("fever_dev_vital", "vital_index", vital_jsonl(shared, out), "fever_dev_vital.jsonl", "claim"),
        (
            "hotpotqa_dev",
            "hotpot_index",
            shared / "corpora" / "hotpotqa2017_abstracts.jsonl",
            "hotpotqa_dev_multihop.jsonl",
            "question",
        ),
    )
    sets: dict[str, dict[str, Any]] = {}
    for name, folder, corpus, claims_file, key in sets_spec:
        build([corpus], out / folder, indexes=("bm25", "dense", "tfidf", "kg"))
        rows = read_claims(shared / "claims" / claims_file, limit)
        log.info("%s: every channel's hits for %d claims", name, len(rows))
        found, titles, weights = _hits(out / folder, [r[key] for r in rows])
        golds = [r["gold_titles"] for r in rows]
        sets[name] = {"found": found, "titles": titles, "weights": weights, "golds": golds, "fold": _folds(len(rows))}
    results: dict[str, Any] = {"learned": _learned(sets, out, write_model)}
    for s in sets.values():
        s["subsets"], s["firsts"] = _subsets(s["found"], s["titles"], s["weights"], s["golds"])
    cv, picked = _cross_validated(sets)
    results["subset_cv"] = _subset_cv(sets)
    for name, s in sets.items():
        fixed = {
            label: _metrics([_ranking(f, ALL, s["titles"], s["weights"], p) for f in s["found"]], s["golds"])
            for label, p in (("plain", PLAIN), ("shipped", PROMOTION))
        }
        results[name] = {"subsets": s["subsets"], "cv": cv[name], **fixed}
    results["picked"] = picked
    results["fuse_us"] = _fuse_us(sets["fever_dev_vital"]["found"], sets["fever_dev_vital"]["weights"])
    (out / "fusion.json").write_text(json.dumps(results, indent=2))
    return _report(sets, results)


def _report(sets: dict[str, dict[str, Any]], results: dict[str, Any]) -> str:
    from retriever.fusion import PROMOTION

    parts = [
        "## Fusion at rank 1: channel subsets and the promotion (issue 43)\n\n"
        "Every claim's five channels searched once (depth 84, as a k=21 search); each subset fused from those hits "
        "as `Retriever.search` fuses it. Default fusion: RRF whose top 5 is reordered by the channels' sure rank-1 "
        f"pages (`retriever.fusion.PROMOTION`: {_label(PROMOTION)}, within {PROMOTION.within}). Recall over page "
        "titles. The first five figures: the subset under that fusion (the default before the learned rank 1); `R@1 plain`: "
        "with plain RRF; `R@1 learned`, `MRR learned`: with the learned rank 1 reordering the top 5 too (in sample: the "
        "shipped model was fitted on these claims; held-apart figures below).\n"
    ]
    head = ["channels", *METRICS, "R@1 plain", "R@1 learned", "MRR learned"]
    for name, s in sets.items():
        parts.append(f"### {name} ({len(s['found'])} claims)\n\n" + md_table(head, _subset_rows(s["subsets"])) + "\n")
    rows = []
    for name in sets:
        r = results[name]
        for label, m in (
            ("plain RRF (before)", r["plain"]),
            ("promotion picked on the other folds", r["cv"]),
            ("shipped PROMOTION (fitted on all): the default before", r["shipped"]),
            ("**learned rank 1 fitted on the other folds (the default, held apart)**", results["learned"][name]["cv"]),
            ("learned rank 1 shipped (fitted on all)", results["learned"][name]["shipped"]),
        ):
            rows.append([name, label, *(m[k] for k in METRICS)])
    counts = Counter(results["picked"])
    parts.append(
        f"### Cross-validated ({FOLDS} folds of both sets' claims, seed {SEED})\n\n"
        "The promotion's parameters picked (best summed R@1, then R@5) among margin gains 0-12 and title thresholds "
        "never/2.5/2.75 on four folds of both sets, measured on the fifth; the fifth folds' rankings together:\n\n"
        + md_table(["set", "fusion", *METRICS], rows)
        + "\n\nPicked per fold: "
        + "; ".join(f"{k} ({n}x)" for k, n in counts.most_common())
        + ".\n\n"
        + "\n\n".join(_why(name, sets[name]["subsets"], results[name]["cv"], results["learned"][name]) for name in sets)
        + "\n\n"
        + _both(sets)
        + "\n\n"
        + _subset_cv_text(results, list(sets))
        + "\n\n"
        + _learned_text(results)
        + f"\n\nfuse() per claim of five channels: plain {results['fuse_us']['plain']:.0f} us, promotion only "
        f"{results['fuse_us']['promotion']:.0f} us, default (learned rank 1) {results['fuse_us']['default']:.0f} us "
        "(mean of 3 passes over the FEVER claims' hits, the three in turns).\n"
    )
    return "\n".join(parts)


def _learned_text(results: dict[str, Any]) -> str:
    """The default's learned rank 1 against the best subsets, held apart."""
    learned, sub = results["learned"], results["subset_cv"]
    figures = "; ".join(
        f"{name} R@1 {learned[name]['cv']['R@1']:.3f} (best subset chosen per set on the other folds "
        f"{sub['per set'][name]:.3f}; in sample, the best subset {max(m['R@1'] for m in results[name]['subsets'].values()):.3f})"
        for name in sub["per set"]
    )
    return (
        "The default: RRF with the promotion, then the fused top 5 reordered by the learned rank 1 "
        "(`retriever/rank1.json`, a pairwise logistic regression over `retriever.rank1.FEATURES`). Held apart (C "
        f"chosen by an inner cross-validation on the other folds, picked {', '.join(f'{c:g}' for c in learned['C picked'])}): "
        f"{figures}. Shipped: C {learned['model']['C']:g}, fitted on {learned['model']['fitted_on']}."
    )


def _subset_cv_text(results: dict[str, Any], names: list[str]) -> str:
    """The held-apart R@1 of choosing a subset on training folds, per set and for both, against the default's."""
    sub = results["subset_cv"]
    figures = "; ".join(
        f"{name} {sub['per set'][name]:.3f} chosen per set, {sub['both'][name]:.3f} chosen for both, the default "
        f"{results[name]['cv']['R@1']:.3f}"
        for name in names
    )
    return (
        f"R@1 of the subset with the best R@1 on four folds, measured on the fifth: {figures}. Chosen per set: "
        + ", ".join(f"{k} ({n}x)" for k, n in Counter(sub["picked"]["per set"]).most_common())
        + "; for both: "
        + ", ".join(f"{k} ({n}x)" for k, n in Counter(sub["picked"]["both"]).most_common())
        + "."
    )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "fusion")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument(
        "--write-model",
        action="store_true",
        help="write the rank-1 model fitted on all dev claims to retriever/rank1.json",
    )
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    print(main(a.shared, a.out, limit=a.limit, write_model=a.write_model))
