"""``wikiground eval --gold FILE --run FILE [--k 1,5,10,20] [--json]``: a run's retrieval figures against a gold
file (gold.py: FEVER, HoVer, HotpotQA, KILT, the claim files; runs.py: any output format; measures.py: the
figures and the rules they follow)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from wikiground.errors import InputError, WikigroundError

__all__ = ["evaluate", "main"]


def evaluate(gold: Path, run: Path, ks: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The figures of ``run`` against ``gold`` (measures.score), with the seconds taken."""
    from retriever.evaluate.gold import read_gold
    from retriever.evaluate.measures import DEFAULT_KS, score
    from retriever.evaluate.runs import read_run

    t0 = time.perf_counter()
    result = score(read_gold(gold), read_run(run), ks or DEFAULT_KS)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers like 1,5,10, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"expected whole numbers from 1, got {text!r}")
    return ks


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="wikiground eval",
        description="Score a run against a gold file: any-gold and all-gold recall@k, MRR, nDCG@10, KILT's "
        "R-Precision and evidence-set recall@k, FEVER's evidence recall within 5 sentences.",
    )
    p.add_argument("--gold", type=Path, required=True, help="FEVER, HoVer, HotpotQA, KILT or {id, gold_titles} file")
    p.add_argument("--run", type=Path, required=True, help="a run: jsonl, trec, kilt, fever or hotpot")
    p.add_argument("--k", type=_ks, default=None, help="cut-offs, e.g. 1,5,10,20 (the default)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = evaluate(args.gold, args.run, args.k)
    except WikigroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {InputError(str(exc))}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"claims: {result['claims']} (missing from the run: {result['missing']}); {result['seconds']:.3f} s")
    for name, value in result["figures"].items():
        print(f"{name:<28} {value:.4f}")
    return 0
