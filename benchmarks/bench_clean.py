"""Throughput of the wikitext cleaner against ``mwparserfromhell.strip_code``.

    python -m benchmarks.bench_clean [DUMP.xml.bz2] [--repeat N]
    python -m benchmarks.bench_clean --pathological [--size CHARS]

``measure(pages)`` returns MB/s (UTF-8 bytes of wikitext per second, best of ``repeat`` runs)
for ``indexer.wikitext.parse_wikitext`` and for ``mwparserfromhell.parse(text).strip_code()``,
plus raw bz2 decompression of the dump when a dump path is given to ``main``.

``--pathological`` cleans each malformed page of tests/test_pathological_pages.py at ``size`` characters
(1,000,000 by default), each in a process of its own: CPU and wall seconds, and how much the peak RSS grew.
"""

from __future__ import annotations

import argparse
import bz2
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

DEFAULT_DUMP = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "dumps"
    / "gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)


def _best_seconds(fn: Callable[[], object], *, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def measure(pages: list[str], *, repeat: int = 3) -> dict:
    """MB/s of ``parse_wikitext`` and of mwparserfromhell's ``strip_code`` on ``pages``."""
    import mwparserfromhell

    from indexer.wikitext import parse_wikitext

    megabytes = sum(len(p.encode("utf-8")) for p in pages) / 1e6
    ours = _best_seconds(lambda: [parse_wikitext(p) for p in pages], repeat=repeat)
    theirs = _best_seconds(lambda: [mwparserfromhell.parse(p).strip_code() for p in pages], repeat=max(1, repeat - 1))
    return {
        "pages": len(pages),
        "megabytes": round(megabytes, 3),
        "parse_wikitext_mb_s": round(megabytes / ours, 2),
        "strip_code_mb_s": round(megabytes / theirs, 2),
        "speedup": round(theirs / ours, 2),
    }


def article_texts(dump: Path) -> list[str]:
    """Wikitext of the non-redirect namespace-0 pages of a pages-articles dump."""
    import mwxml

    opener = bz2.open if dump.suffix == ".bz2" else open
    texts: list[str] = []
    with opener(dump, "rb") as fh:
        for page in mwxml.Dump.from_file(fh):
            if page.namespace != 0 or page.redirect:
                continue
            for revision in page:
                texts.append(revision.text or "")
    return texts


def bz2_mb_s(dump: Path, *, repeat: int = 3) -> float:
    """Raw decompression speed (MB/s of decompressed output)."""
    raw = dump.read_bytes()
    size = len(bz2.decompress(raw)) / 1e6
    return round(size / _best_seconds(lambda: bz2.decompress(raw), repeat=repeat), 2)


_ONE_PATTERN = """
import resource, sys, time
from tests.test_pathological_pages import PATTERNS
from indexer.wikitext import parse_wikitext
text = PATTERNS[sys.argv[1]](int(sys.argv[2]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu, wall = time.process_time(), time.perf_counter()
parse_wikitext(text, title="T")
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(round(time.process_time() - cpu, 3), round(time.perf_counter() - wall, 3), round(grown, 1))
"""


def pathological(size: int = 1_000_000) -> dict:
    """Per malformed page of the tests, cleaned at ``size`` characters: CPU s, wall s, peak RSS growth (MB)."""
    from tests.test_pathological_pages import PATTERNS

    root = Path(__file__).resolve().parents[1]
    out = {}
    for name in PATTERNS:
        done = subprocess.run(
            [sys.executable, "-c", _ONE_PATTERN, name, str(size)], capture_output=True, text=True, cwd=root, check=True
        )
        cpu, wall, grown = done.stdout.split()
        out[name] = {"cpu_s": float(cpu), "wall_s": float(wall), "rss_growth_mb": float(grown)}
    return out


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", nargs="?", type=Path, default=DEFAULT_DUMP)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pathological", action="store_true", help="time the malformed pages of the tests instead")
    ap.add_argument("--size", type=int, default=1_000_000, help="characters of each malformed page")
    args = ap.parse_args(list(argv) if argv is not None else None)
    if args.pathological:
        print(json.dumps(pathological(args.size), indent=2))
        return 0
    result = measure(article_texts(args.dump), repeat=args.repeat)
    result["bz2_decompress_mb_s"] = bz2_mb_s(args.dump, repeat=args.repeat)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
