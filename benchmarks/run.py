"""`make bench`: run every benchmark in one process and write benchmarks/RESULTS.md.

python -m benchmarks.run --shared ../shared/data [--only ingest,retrieval] [--out benchmarks/out]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import logging
import os
import platform
import sys
import time
from pathlib import Path

BENCHES = (
    "ingest",
    "encoder",
    "bm25",
    "retrieval",
    "batch",
    "serve",
    "fallback",
    "multihop",
    "kg",
    "fusion",
    "explorer",
)
HERE = Path(__file__).resolve().parent


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        mem = "?"
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}), {mem} RAM, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run")
    ap.add_argument("--shared", type=Path, default=HERE.parent.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--only", default=",".join(BENCHES))
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.out.mkdir(parents=True, exist_ok=True)
    sections: list[str] = []
    started = dt.datetime.now(dt.UTC)
    for name in [b.strip() for b in args.only.split(",") if b.strip()]:
        try:
            mod = importlib.import_module(f"benchmarks.bench_{name}")
        except ModuleNotFoundError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        print(f"== bench {name}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        (args.out / name).mkdir(parents=True, exist_ok=True)
        section = mod.main(args.shared, args.out / name)
        sections.append(section.rstrip() + f"\n\n_(bench `{name}` took {time.perf_counter() - t0:.0f} s)_\n")
        # Write after each bench so a long run leaves partial results.
        _write(args.results, started, sections, argv)
    return 0


def _write(path: Path, started: dt.datetime, sections: list[str], argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    only = any(a.startswith("--only") for a in args)
    cmd = "make bench" if not only else "python -m benchmarks.run " + " ".join(args)
    head = (
        "# Benchmark results\n\n"
        f"- Machine: {machine()}\n"
        f"- Date: {started:%Y-%m-%d %H:%M} UTC\n"
        f"- Command: `{cmd}` (one run; every figure below comes from it)\n\n"
    )
    tmp = path.with_suffix(".md.part")
    tmp.write_text(head + "\n".join(sections), encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
