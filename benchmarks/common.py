"""Shared benchmark plumbing: corpora as JSONL inputs, index builds, page-level metrics, latency stats, measures run
in a fresh interpreter."""

from __future__ import annotations

import json
import logging
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks")

KS = (1, 5, 10, 21)
ROOT = Path(__file__).resolve().parents[1]


def in_fresh_interpreter(module: str, function: str, *args: Any) -> Any:
    """``module.function(*args)`` run in a new Python process, its JSON result returned: for a measure that must not
    share this long-lived process's heap, threads or settings (a user's build or client starts afresh). ``args``
    and the result go through JSON; the child's stderr passes through."""
    code = f"import json, sys; from {module} import {function} as f; print(json.dumps(f(*json.loads(sys.argv[1]))))"
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{module}.{function}{args!r:.200} failed in its own process (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def vital_jsonl(shared: Path, out: Path) -> Path:
    """vital_articles_summaries.json ({title: {title, extract, ...}}) as a {title, text} JSONL corpus."""
    dst = out / "vital_articles.jsonl"
    if not dst.exists():
        data = json.loads((shared / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
        tmp = dst.with_suffix(".part")
        with tmp.open("w", encoding="utf-8") as fh:
            for key, rec in data.items():
                fh.write(
                    json.dumps({"title": rec.get("title") or key, "text": rec.get("extract") or ""}, ensure_ascii=False)
                    + "\n"
                )
        tmp.replace(dst)
    return dst


def build(inputs: Sequence[Path], out: Path, *, indexes: Sequence[str] = ("bm25", "dense", "tfidf")) -> dict[str, Any]:
    """Build once: reuse an index folder whose manifest lists every requested index, built from these very
    inputs (same sha256): a corpus written anew by a changed benchmark gets a new index."""
    from backends.encoder import sha256_file
    from indexer.build import build_index

    man = out / "manifest.json"
    if man.is_file():
        m = json.loads(man.read_text())
        built_from = sorted(i.get("sha256") for i in m.get("inputs", []))
        if (
            all(i in m.get("indexes", {}) for i in indexes)
            and _current_formats(out, m, indexes)
            and built_from == sorted(sha256_file(Path(p)) for p in inputs)
        ):
            log.info("reusing %s", out)
            return m
    t0 = time.perf_counter()
    m = build_index(list(inputs), out, indexes=tuple(indexes), progress=True)
    m.setdefault("bench_build_seconds", time.perf_counter() - t0)
    return m


def _current_formats(out: Path, manifest: dict[str, Any], indexes: Sequence[str]) -> bool:
    """Whether the store and every channel folder are of the formats this code writes (else: rebuild)."""
    import importlib

    from indexer.build import _schema_version

    if manifest.get("schema_version") != _schema_version():
        return False
    for name in indexes:
        params = out / name / "params.json"
        if not params.is_file():
            continue
        module = importlib.import_module(f"backends.{name}")
        wanted = getattr(module, "FORMAT_VERSION", None)
        if wanted is not None and json.loads(params.read_text()).get("format_version") != wanted:
            return False
    return True


def read_claims(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    return rows[:limit] if limit else rows


def unique_in_order(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def page_metrics(
    rankings: Sequence[Sequence[str]], golds: Sequence[Sequence[str]], ks: Sequence[int] = KS
) -> dict[str, float]:
    """Any-gold recall@k (``R@k``), all-gold recall@k (``all@k``) and MRR over page-title rankings, as
    ``wikiground eval`` scores them (retriever/evaluate: ir_measures underneath)."""
    from retriever.evaluate.gold import Gold, title_key
    from retriever.evaluate.measures import score
    from retriever.evaluate.runs import Ranking

    gold = {str(n): Gold(str(n), (tuple(title_key(t) for t in g),)) for n, g in enumerate(golds)}
    run = {str(n): Ranking(tuple(dict.fromkeys(title_key(t) for t in r))) for n, r in enumerate(rankings)}
    figures = score(gold, run, tuple(ks))["figures"]
    out: dict[str, float] = {}
    for k in ks:
        out[f"R@{k}"] = figures[f"any_gold_recall@{k}"]
        out[f"all@{k}"] = figures[f"all_gold_recall@{k}"]
    out["MRR"] = figures["MRR"]
    return out


def recall_curve(
    rankings: Sequence[Sequence[str]], golds: Sequence[Sequence[str]], kmax: int = 21, *, all_gold: bool = False
) -> list[float]:
    f = all if all_gold else any
    n = len(rankings)
    return [sum(f(g in r[:k] for g in gold) for r, gold in zip(rankings, golds)) / n for k in range(1, kmax + 1)]


def latency(ms: Sequence[float]) -> dict[str, float]:
    s = sorted(ms)
    if not s:
        return {"p50": float("nan"), "p95": float("nan"), "mean": float("nan")}
    return {
        "p50": statistics.median(s),
        "p95": s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))],
        "mean": statistics.fmean(s),
    }


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def plot_curves(curves: dict[str, list[float]], path: Path, *, title: str, ylabel: str = "recall@k") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=110)
    for name, ys in curves.items():
        ax.plot(
            range(1, len(ys) + 1), ys, marker="o", markersize=3, label=name, linewidth=2.2 if name == "fused" else 1.2
        )
    ax.set_xlabel("k (pages)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
