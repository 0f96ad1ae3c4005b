"""Batch throughput of `python -m retriever.query --queries`, process start included: claim by claim against blocks
(each channel searching many claims at once, on both cores), in the same run, over the vital-articles index.

- Index: the 10k vital-article leads (the retrieval bench's index, built here when it is missing).
- Claims: claims/fever_dev_vital.jsonl (686 FEVER dev claims).
- Each configuration is a fresh process (imports, JVM, index loading included), timed from spawn to exit; claim
  by claim is the same CLI with ``WIKIGROUND_BATCH_BLOCK=0``. Runs alternate between the two modes; the best of
  ``REPEATS`` is reported (the machine may be shared). The two modes' outputs are compared line by line.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import build, md_table, read_claims, vital_jsonl

log = logging.getLogger("benchmarks.batch")
ROOT = Path(__file__).resolve().parents[1]
CHANNEL_SETS = ("bm25,tfidf,title", "bm25,dense,tfidf,title")
MODES = {"claim by claim": "0", "blocks": ""}  # WIKIGROUND_BATCH_BLOCK: "" is the default block size
REPEATS = 2


def _run(index: Path, channels: str, queries: Path, out: Path, block: str) -> dict[str, float]:
    """One CLI batch in a fresh process: wall seconds from spawn to exit, CPU seconds, peak RSS (MiB)."""
    cmd = [sys.executable, "-m", "retriever.query", "--index", str(index), "--indexes", channels]
    cmd += ["--queries", str(queries), "--out", str(out), "--quiet"]
    env = {**os.environ, "WIKIGROUND_BATCH_BLOCK": block}
    # Peak RSS from GNU time: the rusage of a forked child starts from this (large) process's own peak.
    rss_file = out.with_suffix(".rss")
    gnu_time = shutil.which("time", path="/usr/bin")
    if gnu_time:
        cmd = [gnu_time, "-f", "%M", "-o", str(rss_file), *cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    rss = float("nan")
    if gnu_time:
        rss = int(rss_file.read_text().split()[-1]) / 1024  # KiB
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": rss}


def _answers(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("timings_ms", None)
    return rows


def _measure(index: Path, channels: str, queries: Path, one: Path, out: Path, n: int) -> tuple[list[list], dict]:
    best: dict[str, dict[str, float]] = {}
    start: dict[str, float] = {}
    for _ in range(REPEATS):
        for mode, block in MODES.items():
            r = _run(index, channels, queries, out / f"{mode.replace(' ', '_')}.jsonl", block)
            if mode not in best or r["wall_s"] < best[mode]["wall_s"]:
                best[mode] = r
            s = _run(index, channels, one, out / "one.jsonl", block)["wall_s"]
            start[mode] = min(start.get(mode, s), s)
    same = _answers(out / "claim_by_claim.jsonl") == _answers(out / "blocks.jsonl")
    rows = []
    for mode, r in best.items():
        rate = (n - 1) / max(r["wall_s"] - start[mode], 1e-9)  # claims/s once started
        rows.append(
            [channels, mode, n / r["wall_s"], r["wall_s"], start[mode], rate, r["cpu_s"] / r["wall_s"], r["rss_mib"]]
        )
    ratio = best["claim by claim"]["wall_s"] / best["blocks"]["wall_s"]
    return rows, {"best": best, "start_s": start, "identical": same, "speedup": ratio}


def _vital_index(shared: Path, retrieval: Path) -> Path:
    """The retrieval bench's vital index (built when missing), rebuilt when a channel of it no longer loads (an index
    of an older channel format)."""
    from indexer.build import build_index
    from retriever.api import Retriever
    from wikiground.errors import WikigroundError

    index = retrieval / "vital_index"
    inputs = [vital_jsonl(shared, retrieval)]
    build(inputs, index)
    try:
        with Retriever.open(index, channels=CHANNEL_SETS[-1]) as r:
            r.warm_up()
    except WikigroundError as exc:
        log.info("rebuilding %s: %s", index, exc)
        build_index(inputs, index, indexes=("bm25", "dense", "tfidf"), progress=True)
    return index


def main(shared: Path, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    retrieval = out.parent / "retrieval"  # the retrieval bench's index, shared
    retrieval.mkdir(parents=True, exist_ok=True)
    index = _vital_index(shared, retrieval)
    claims = read_claims(shared / "claims" / "fever_dev_vital.jsonl")
    queries, one = out / "claims.jsonl", out / "one_claim.jsonl"
    lines = [json.dumps({"id": c["id"], "claim": c["claim"]}, ensure_ascii=False) + "\n" for c in claims]
    queries.write_text("".join(lines), encoding="utf-8")
    one.write_text(lines[0], encoding="utf-8")
    rows, results = [], {}
    for channels in CHANNEL_SETS:
        r, results[channels] = _measure(index, channels, queries, one, out, len(claims))
        rows += r
        log.info("%s: %s", channels, results[channels])
    (out / "batch.json").write_text(json.dumps(results, indent=2))
    same = all(r["identical"] for r in results.values())
    speedups = ", ".join(f"{c}: {r['speedup']:.2f}x" for c, r in results.items())
    return (
        "## Batch throughput, process start included (issue 21, item 6)\n\n"
        f"`python -m retriever.query --index vital_index --indexes CHANNELS --queries FILE --out OUT` over the "
        f"10k vital-article index, {len(claims)} FEVER dev claims (claims/fever_dev_vital.jsonl), k=10. Each run is "
        "a fresh process timed from spawn to exit; claim by claim is the same command with "
        f"`WIKIGROUND_BATCH_BLOCK=0`. The two modes alternate, best of {REPEATS} each; the machine may have been "
        "shared. `start s` is the same command with one claim (process start, imports, JVM, index loading); "
        "`claims/s started` is the rate after it; CPU/wall above 1 means both cores were used.\n\n"
        + md_table(
            ["channels", "mode", "claims/s", "wall s", "start s", "claims/s started", "CPU/wall", "peak RSS MiB"],
            rows,
        )
        + f"\n\nBlocks against claim by claim, same run: {speedups}. Outputs identical (evidence, order, scores; "
        f"timings aside): {'yes' if same else 'NO'}.\n"
    )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "batch")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    print(main(a.shared, a.out))
