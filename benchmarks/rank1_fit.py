"""Fitting ``retriever.rank1``'s model (issue 43): a pairwise logistic regression over the fused top 5's features.

For every claim, the default fusion without the learned rank 1 gives the top 5 pages; each is described by
``retriever.rank1.features`` and labelled gold or not. Each gold page is paired with each other page of the claim's
top 5 (both signs); a logistic regression without intercept, on features scaled by the pairs' standard deviations,
learns which of two wins. Claims with no gold page in their top 5, or only gold pages, add no pair.

- Held apart: folds by claim (both sets' claims, ``FOLDS`` of them, seeded); on each fold's complement, C is chosen
  by an inner 4-fold cross-validation (summed R@1 of both sets), the model fitted, and measured on the fold.
- Shipped: C chosen the same way on all dev claims, the model fitted on all of them (``shipped``).
scikit-learn is used here only; the query side reads the weights from JSON and takes a dot product.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

C_GRID = (0.3, 1.0, 3.0)
INNER = 4


def examples(found, titles, weights, golds, chans, k: int) -> list[dict[str, Any]]:
    """Per claim: the fused page ids (top ``k``, titled ones), the top 5's feature rows and gold labels."""
    from retriever.evaluate.gold import title_key
    from retriever.fusion import RRF_K, fuse
    from retriever.rank1 import features

    out = []
    for f, gold in zip(found, golds):
        res = {c: h for c, h in f.items() if c in chans}
        pages = fuse(res, weights=weights, rank1=None)
        top = pages[:5]
        keys = {title_key(t) for t in gold}
        x = np.array(features(res, top, weights, RRF_K), dtype=float).reshape(len(top), -1)
        y = np.array([title_key(titles.get(p.page_id, "")) in keys for p in top], dtype=float)
        out.append({"pages": [p.page_id for p in pages[:k]], "x": x, "y": y})
    return out


def fit(claims: list[dict[str, Any]], c: float) -> np.ndarray:
    """The pairwise model's weights over the raw features."""
    from sklearn.linear_model import LogisticRegression

    diffs = [
        e["x"][i] - e["x"][j] for e in claims for i in np.flatnonzero(e["y"] == 1) for j in np.flatnonzero(e["y"] == 0)
    ]
    d = np.array(diffs)
    sd = d.std(0)
    sd[sd == 0] = 1.0
    d = d / sd
    model = LogisticRegression(C=c, fit_intercept=False, max_iter=5000)
    model.fit(np.vstack([d, -d]), np.r_[np.ones(len(d)), np.zeros(len(d))])
    return model.coef_[0] / sd


def reordered(e: dict[str, Any], w: np.ndarray) -> list[int]:
    """A claim's fused pages with the top 5 ordered by the model (ties: fused order), as ``retriever.rank1``."""
    scores = e["x"] @ w
    top = e["pages"][: len(scores)]
    order = sorted(range(len(top)), key=lambda i: (-scores[i], i))
    return [top[i] for i in order] + e["pages"][len(top) :]


def _r1(claims: list[dict[str, Any]], w: np.ndarray) -> float:
    return float(np.mean([e["y"][int(np.argmax(e["x"] @ w))] for e in claims])) if claims else 0.0


def choose_c(by_set: dict[str, list[dict[str, Any]]], seed: int) -> float:
    """C with the best summed R@1 over the sets on an inner cross-validation (ties: the smaller C)."""
    inner = {name: split(len(claims), INNER, seed) for name, claims in by_set.items()}

    def score(c: float) -> float:
        total = 0.0
        for k in range(INNER):
            train = [e for name, cl in by_set.items() for e, f in zip(cl, inner[name]) if f != k]
            w = fit(train, c)
            total += sum(_r1([e for e, f in zip(cl, inner[name]) if f == k], w) for name, cl in by_set.items())
        return total

    return max(C_GRID, key=lambda c: (score(c), -c))


def split(n: int, folds: int, seed: int) -> list[int]:
    """Each of ``n`` items' fold, 0..folds-1: a shuffle seeded by ``seed``, dealt round."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    fold = [0] * n
    for i, j in enumerate(order):
        fold[j] = i % folds
    return fold


def cross_validated(
    by_set: dict[str, list[dict[str, Any]]], folds: dict[str, list[int]], n_folds: int, seed: int
) -> tuple[dict[str, list[list[int]]], list[float]]:
    """Each claim's pages reordered by the model fitted (C chosen within) on the other folds; the Cs picked."""
    held = {name: [[] for _ in claims] for name, claims in by_set.items()}
    picked = []
    for k in range(n_folds):
        train = {name: [e for e, f in zip(cl, folds[name]) if f != k] for name, cl in by_set.items()}
        c = choose_c(train, seed + k)
        picked.append(c)
        w = fit([e for cl in train.values() for e in cl], c)
        for name, cl in by_set.items():
            for j, (e, f) in enumerate(zip(cl, folds[name])):
                if f == k:
                    held[name][j] = reordered(e, w)
    return held, picked


def shipped(by_set: dict[str, list[dict[str, Any]]], seed: int, fitted_on: str) -> dict[str, Any]:
    """The model fitted on every claim, as ``retriever/rank1.json`` holds it."""
    from retriever.rank1 import FEATURES

    c = choose_c(by_set, seed)
    w = fit([e for cl in by_set.values() for e in cl], c)
    return {
        "what": "retriever.rank1: a linear model of rank 1 among the fused top 5 (pairwise logistic regression)",
        "fitted_on": fitted_on,
        "C": c,
        "within": 5,
        "weights": {name: round(float(v), 6) for name, v in zip(FEATURES, w)},
    }
