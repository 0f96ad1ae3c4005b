"""Scale benchmark (issues 21, 38): synthetic enwiki-shaped dumps of ~1M and ~4M passages (and ~10M on request)
built with ``--indexes bm25,tfidf,kg`` under the default memory budget, per-stage cost, query latency / throughput / RSS per channel and fused, recall@5 against
the 10k vital index, and an extrapolation to the whole of English Wikipedia.

python -m benchmarks.bench_scale --sizes 1M,4M[,10M] [--out /work/scratch/scale] [--claims N]

How it measures:
- Build: one ``python -m indexer build`` process per size; a sampler thread reads the process tree (the build
  and its cleaner workers; the JVM of BM25 runs inside the build process) every 0.2 s with psutil: RSS summed over
  the tree, anonymous memory (``RssAnon``) summed over the tree, CPU seconds of the tree (live processes plus
  reaped children). Stages are cut at the build's own log
  lines: ingest until "finishing the store", store finish until "building bm25 index", then each channel.
  Disk: the stage's output files after the build, and the peak size of the build's temporary folder.
- Query latency: a separate process opens the index, warms it up, and times each channel alone and the fused
  search per claim (``Retriever.channel_search`` / ``Retriever.search``); its peak RSS is the query process RSS
  with every channel loaded.
- Batch: ``python -m retriever.query --queries`` per channel and fused, timed from spawn to exit (process start
  included), its peak RSS from ``wait4``; the fused run's evidence gives recall@5 (page titles, any gold).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import latency, md_table, read_claims, unique_in_order, vital_jsonl

log = logging.getLogger("benchmarks.scale")

DEFAULT_SIZES = ("1M", "4M")  # SIZES=1M,4M,10M adds 10M (about 2.3M articles)
INDEXES = "bm25,tfidf,kg"  # kg builds nothing of its own: it reads the store's triples
QUERY_CHANNELS = ("bm25", "tfidf", "title")
FUSED = "bm25,tfidf,title"
LATENCY_CHANNELS = FUSED + ",kg"  # kg is timed alone (fused stays the three channels above)
ALL_FOUR = "bm25,dense,tfidf,title"  # with the dense channel of cheap vectors (largest size, see add_dense)
FULL_ENWIKI = {"articles": 7_000_000, "bz2_gb": 22, "passages": 40_000_000}
STAGE_MARKS = (
    ("store_finish", "finishing the store"),
    ("bm25", "building bm25 index"),
    ("tfidf", "building tfidf index"),
    ("dense", "building dense index"),
    ("kg", "building kg index"),
)
SAMPLE_S = 0.2
PY = sys.executable
REPO = Path(__file__).resolve().parents[1]


# -- build measurement --------------------------------------------------------------------------------------------


def rss_anon(pid: int | str = "self") -> int:
    """Bytes of anonymous memory of a process (``RssAnon``: what the kernel cannot drop, unlike the touched pages
    of mmapped index files that RSS also counts); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class TreeSampler:
    """RSS and CPU of a process and its descendants, sampled in a thread; stage marks cut the samples."""

    def __init__(self, pid: int, watch_dir: Path, tmp_prefix: str):
        import psutil

        self.proc = psutil.Process(pid)
        self.watch_dir, self.tmp_prefix = watch_dir, tmp_prefix
        # (t, rss, cpu s, tmp bytes, main rss, main cpu s, anon): the main process alone runs the serial parts
        self.samples: list[tuple[float, ...]] = []
        self.marks: list[tuple[str, float]] = [("ingest", time.time())]
        self._stop = threading.Event()
        self._last_cpu = 0.0
        self._cpu_seen: dict[int, float] = {}
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def mark(self, stage: str) -> None:
        self.marks.append((stage, time.time()))

    def _tree(self) -> tuple[float, float, float, float, float]:
        """RSS now, and CPU so far: each process's last-seen CPU is kept after it exits (the fork server reaps the
        workers, so their CPU never reaches the build process's children times while it runs)."""
        import psutil

        rss = main = main_cpu = anon = 0.0
        try:
            t = self.proc.cpu_times()
            main_cpu = t.user + t.system
            rss = main = self.proc.memory_info().rss
            anon = rss_anon(self.proc.pid)
            for child in self.proc.children(recursive=True):
                try:
                    ct = child.cpu_times()
                    self._cpu_seen[child.pid] = ct.user + ct.system
                    rss += child.memory_info().rss
                    anon += rss_anon(child.pid)
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        self._last_cpu = max(self._last_cpu, main_cpu + sum(self._cpu_seen.values()))
        return rss, self._last_cpu, main, main_cpu, anon

    def _tmp_bytes(self, tick: int) -> float:
        if tick % 10:
            return self.samples[-1][3] if self.samples else 0.0
        total = 0
        for entry in self.watch_dir.iterdir():
            if entry.name.startswith(self.tmp_prefix):
                total += sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
        return float(total)

    def _run(self) -> None:
        tick = 0
        while not self._stop.is_set():
            rss, cpu, main, main_cpu, anon = self._tree()
            try:
                tmp = self._tmp_bytes(tick)
            except OSError:
                tmp = self.samples[-1][3] if self.samples else 0.0
            self.samples.append((time.time(), rss, cpu, tmp, main, main_cpu, anon))
            tick += 1
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()

    def stages(self, end: float, cpu_end: float) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        bounds = [*self.marks, ("end", end)]
        for (name, t0), (_, t1) in zip(bounds, bounds[1:]):
            inside = [s for s in self.samples if t0 <= s[0] <= t1] or [min(self.samples, key=lambda s: abs(s[0] - t0))]
            before = [s[2] for s in self.samples if s[0] <= t0]
            after = [s[2] for s in self.samples if s[0] <= t1]
            cpu0 = before[-1] if before else 0.0
            cpu1 = cpu_end if t1 == end else (after[-1] if after else cpu0)
            mains = [s[5] for s in self.samples if t0 <= s[0] <= t1]
            out[name] = {
                "wall_s": t1 - t0,
                "cpu_s": max(0.0, cpu1 - cpu0),
                "peak_rss_mb": max(s[1] for s in inside) / 2**20,
                "peak_tmp_disk_mb": max(s[3] for s in inside) / 2**20,
                "peak_main_rss_mb": max(s[4] for s in inside) / 2**20,
                "peak_anon_mb": max(s[6] for s in inside) / 2**20,
                "main_cpu_s": (max(mains) - min(mains)) if len(mains) > 1 else 0.0,
            }
        return out


# `python -m indexer build` without its progress bars (their redraws would be most of stderr), INFO logging kept:
# the stage marks are the build's own log lines.
_BUILD_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
from indexer.build import build_index
from wikiground.system import parse_size
if __name__ == "__main__":
    memory = parse_size(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else None
    resume = len(sys.argv) > 5 and sys.argv[5] == "resume"
    indexes = tuple(sys.argv[3].split(","))
    build_index([sys.argv[1]], sys.argv[2], indexes=indexes, progress=False, memory=memory, resume=resume)
"""


def measure_build(
    dump: Path, index: Path, *, indexes: str = INDEXES, memory: str | None = None, resume: bool = False
) -> dict[str, Any]:
    """Build ``index`` from ``dump`` in a child process and measure each stage (see the module doc); ``memory``:
    the build's ``--memory`` (default: the build's own default); ``resume``: continue a cut-off build (``--resume``),
    whose finished stages are then not measured: only the stages it ran are kept."""
    from wikiground.layout import build_tmp_prefix

    index.parent.mkdir(parents=True, exist_ok=True)
    cmd = [PY, "-c", _BUILD_SCRIPT, str(dump), str(index), indexes, memory or "", *(["resume"] if resume else [])]
    started = time.time()
    # stdout into the one pipe read: a second pipe nobody reads blocks the build once it fills.
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.STDOUT)
    sampler = TreeSampler(proc.pid, index.parent, build_tmp_prefix(index))
    log_lines = _follow_stderr(proc, sampler)
    _, status, usage = os.wait4(proc.pid, 0)
    end = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"build of {index} failed ({proc.returncode}):\n" + "\n".join(log_lines[-30:]))
    cpu_end = usage.ru_utime + usage.ru_stime  # the build and every descendant it reaped
    stages = sampler.stages(end, max(cpu_end, sampler.samples[-1][2] if sampler.samples else 0.0))
    if resume:  # what ran before the first channel was the check of the kept stages, not ingest
        stages = {k: v for k, v in stages.items() if k not in ("ingest", "store_finish")}
    manifest = json.loads((index / "manifest.json").read_text())
    disk = _disk(index)
    for name, mb in disk.items():
        if name in stages:
            stages[name]["disk_mb"] = mb
    if not resume:
        stages.setdefault("store_finish", {})["disk_mb"] = disk.get("store", 0.0)
    return {
        "resumed": resume,
        "stages": stages,
        "wall_s": end - started,
        "peak_rss_mb": max(s[1] for s in sampler.samples) / 2**20,
        "peak_anon_mb": max(s[6] for s in sampler.samples) / 2**20,
        "counts": manifest["counts"],
        "disk_mb": disk,
        "dump_mb": dump.stat().st_size / 2**20,
        "resource_estimate": [line for line in log_lines if "estimated peak" in line],
        "jvm_heap": _jvm_heap(log_lines),
    }


def _jvm_heap(lines: list[str]) -> dict[str, float] | None:
    """The BM25 stage's JVM heap, peak committed and cap (MB), from its log line: the part of that stage's RSS
    that stops growing at the cap."""
    for line in lines:
        m = re.search(r"JVM heap peaked at (\d+) MB committed, of its (\d+) MB cap", line)
        if m:
            return {"peak_committed_mb": float(m.group(1)), "cap_mb": float(m.group(2))}
    return None


def _follow_stderr(proc: subprocess.Popen, sampler: TreeSampler) -> list[str]:
    """Read the build's stderr (tqdm redraws with \\r) and mark stages at their log lines."""
    assert proc.stderr is not None
    lines: list[str] = []
    buf = b""
    while True:
        chunk = proc.stderr.read1(65536) if hasattr(proc.stderr, "read1") else proc.stderr.read(4096)
        if not chunk:
            break
        buf += chunk
        parts = re.split(rb"[\r\n]", buf)
        buf = parts.pop()
        for raw in parts:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            if not line.startswith("ingest:"):
                lines.append(line)
            for stage, needle in STAGE_MARKS:
                if needle in line:
                    sampler.mark(stage)
    return lines


def _disk(index: Path) -> dict[str, float]:
    def size(p: Path) -> float:
        if p.is_file():
            return p.stat().st_size / 2**20
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 2**20 if p.is_dir() else 0.0

    out = {"store": size(index / "wiki.duckdb") + size(index / "lookups")}  # the store with its mmap'd lookups
    for name in ("bm25", "tfidf", "dense", "kg"):
        if (index / name).is_dir():
            out[name] = size(index / name)
    return out


# -- queries ------------------------------------------------------------------------------------------------------

_LATENCY_SCRIPT = """
import json, resource, sys, time
from benchmarks.bench_scale import rss_anon
from retriever.api import Retriever
index, claims_path, n, channels = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
fused = sys.argv[5].split(",")
claims = [json.loads(l)["claim"] for l in open(claims_path, encoding="utf-8") if l.strip()][:n]
t0 = time.perf_counter()
with Retriever.open(index, channels=channels) as r:
    r.warm_up()
    open_s = time.perf_counter() - t0
    lat = {c: [] for c in (*r.channels, "fused")}
    kg = r.backend("kg") if "kg" in r.channels else None
    lat["kg alone"], facts, anon, failed = [], [], 0, {}
    for claim in claims:
        for c in (*r.channels, "fused"):
            t = time.perf_counter()
            try:
                r.channel_search(c, claim, 100) if c != "fused" else r.search(claim, 10, channels=fused)
            except Exception:
                failed[c] = failed.get(c, 0) + 1
            lat[c].append((time.perf_counter() - t) * 1000)
        anon = max(anon, rss_anon())
        if kg is not None:  # from the title channel's mentions, as the retriever runs it; and the facts it read
            mentions = r.backend("title").mentions(claim)
            t = time.perf_counter(); kg.search_mentions(mentions, 100, query_length=len(claim), query=claim)
            lat["kg alone"].append((time.perf_counter() - t) * 1000)
            ids = sorted({m.resolution.page_id for m in mentions if m.resolution is not None})
            facts.append(r.store.rows("SELECT count(*) FROM triples WHERE subject_page_id IN (SELECT unnest(?))", [ids])[0][0] if ids else 0)
    triples = r.store.count("triples") if kg is not None else 0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out = {"latency_ms": lat, "open_s": open_s, "rss_mb": rss, "anon_mb": anon / 2**20, "failed": failed}
print(json.dumps({**out, "kg_facts": facts, "triples": triples}))
"""


def measure_latency(
    index: Path, claims: Path, n: int, channels: str = LATENCY_CHANNELS, fused: str = FUSED
) -> dict[str, Any]:
    """Per-claim latency per channel and fused, in one fresh process (its peak RSS: every channel loaded)."""
    cmd = [PY, "-c", _LATENCY_SCRIPT, str(index), str(claims), str(n), channels, fused]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"latency run on {index} failed:\n{res.stderr[-3000:]}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    data["latency"] = {c: latency(v) for c, v in data.pop("latency_ms").items() if v}
    facts = sorted(data.pop("kg_facts", []))
    data["kg_facts_p50"] = facts[len(facts) // 2] if facts else 0
    return data


def measure_batch(index: Path, claims: Path, channels: str, out: Path) -> dict[str, Any]:
    """``retriever.query --queries`` timed from spawn to exit; peak RSS from wait4; the answers' page titles."""
    cmd = [PY, "-m", "retriever.query", "--index", str(index), "--indexes", channels, "--k", "10"]
    cmd += ["--queries", str(claims), "--out", str(out), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    anon = [0]

    def poll() -> None:
        while proc.returncode is None and os.path.exists(f"/proc/{proc.pid}"):
            anon[0] = max(anon[0], rss_anon(proc.pid))
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1) or not out.is_file():
        raise RuntimeError(f"batch {channels} on {index} failed ({proc.returncode}): {err[-2000:].decode()}")
    answers = [json.loads(line) for line in out.open(encoding="utf-8") if line.strip()]
    titles = [unique_in_order(e["title"] for e in a["evidence"]) for a in answers]
    return {
        "claims": len(answers),
        "wall_s": wall,
        "claims_per_s": len(answers) / wall,
        "rss_mb": usage.ru_maxrss / 1024,
        "anon_mb": anon[0] / 2**20,
        "titles": titles,
        "errors": sum(a.get("status") == "error" for a in answers),
    }


def recall_at(titles: list[list[str]], golds: list[list[str]], k: int = 5) -> float:
    return sum(any(g in t[:k] for g in gold) for t, gold in zip(titles, golds)) / max(1, len(golds))


def measure_queries(index: Path, claims: Path, golds: list[list[str]], n_latency: int, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"latency": measure_latency(index, claims, n_latency), "batch": {}}
    for channels in (*QUERY_CHANNELS, FUSED):
        b = measure_batch(index, claims, channels, work / f"batch-{channels.replace(',', '+')}.jsonl")
        b["recall@5"] = recall_at(b.pop("titles"), golds)
        out["batch"][channels] = b
        log.info("%s %s: %.1f claims/s, R@5 %.3f", index.name, channels, b["claims_per_s"], b["recall@5"])
    return out


# -- dense at scale, from cheap vectors ---------------------------------------------------------------------------


def add_dense(index: Path, shared: Path, claims: Path, work: Path) -> dict[str, Any]:
    """A ``dense/`` channel for ``index`` whose vectors are made cheaply, so the four channels can be timed together.

    Encoding 1M passages takes ~9 h here. Each passage's vector is instead a mixture of 3-5 encoded real sentences
    (``benchmarks.bench_dense_scale``), as the synthetic passages are made of real sentences: not the passage's own
    embedding, so the channel's hits are not its recall, but its index (IVF-PQ, nprobe chosen on every other claim
    for recall@10 >= 0.95 against exact search) and its query path (the claim encoded by MiniLM, the IVF search, the
    exact re-rank) are the real ones, at full size."""
    from backends.dense import FORMAT_VERSION, VECTORS_FILE
    from backends.dense import ivf as dense_ivf
    from backends.encoder import model_info
    from backends.passage_table import connect
    from backends.passage_table import write as write_table
    from benchmarks import bench_dense_scale as cheap
    from wikiground.layout import PARAMS_FILE, atomic_write_json

    folder = index / "dense"
    params_path = folder / PARAMS_FILE
    if params_path.is_file() and json.loads(params_path.read_text()).get("cheap_vectors"):
        return json.loads(params_path.read_text())
    folder.mkdir(exist_ok=True)
    con = connect(index / "wiki.duckdb")
    try:
        n = write_table(con, index / "wiki.duckdb", folder)
    finally:
        con.close()
    work.mkdir(parents=True, exist_ok=True)
    sents = cheap._sentences(shared, cheap.N_SENTENCES)
    sent_vecs, _ = cheap._encoded(sents, work / "sentences.npy")
    texts = [json.loads(line)["claim"] for line in claims.open(encoding="utf-8") if line.strip()]
    q, _ = cheap._encoded(texts, work / "claims.npy")
    t0 = time.perf_counter()
    cheap._make_vectors(sent_vecs, n, folder / VECTORS_FILE)
    made = time.perf_counter() - t0
    params = dense_ivf.build(folder / VECTORS_FILE, folder, threads=2, tune_queries=q[cheap.TUNE_SLICE])
    params.update(
        type="dense",
        format_version=FORMAT_VERSION,
        count=n,
        passages=n,
        scope="all",
        metric="inner_product",
        cheap_vectors=True,
        vectors_made_s=round(made, 1),
        **model_info("auto"),
    )
    atomic_write_json(params_path, params, sort_keys=True)
    return params


# -- the run ------------------------------------------------------------------------------------------------------


def _claims_file(shared: Path, out: Path, limit: int | None) -> tuple[Path, list[list[str]]]:
    rows = read_claims(shared / "claims" / "fever_dev_vital.jsonl", limit)
    path = out / f"claims-{len(rows)}.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps({"id": r["id"], "claim": r["claim"]}) + "\n")
    return path, [r["gold_titles"] for r in rows]


def _dump_for(shared: Path, out: Path, size: str) -> tuple[Path, dict]:
    from benchmarks.synth_dump import GENERATOR_VERSION, generate, parse_size

    dump = out / f"synth-{size}.xml.bz2"
    info_path = dump.with_name(dump.name + ".json")
    if dump.is_file() and info_path.is_file():
        info = json.loads(info_path.read_text())
        if info.get("target_passages") == parse_size(size) and info.get("generator") == GENERATOR_VERSION:
            return dump, info
    t0 = time.perf_counter()
    info = generate(shared, dump, parse_size(size))
    info["generate_s"] = time.perf_counter() - t0
    info_path.write_text(json.dumps(info, indent=2))
    return dump, info


def _built(index: Path, dump: Path) -> bool:
    man = index / "manifest.json"
    if not man.is_file():
        return False
    m = json.loads(man.read_text())
    same = [i for i in m.get("inputs", []) if i.get("bytes", i.get("size")) == dump.stat().st_size]
    return bool(same) and all(c in m.get("indexes", {}) for c in INDEXES.split(","))


def _measured(cached: dict, info: dict, claims: Path) -> bool:
    """Whether ``cached`` holds a whole size's figures for the dump ``info`` describes and these claims."""
    keys = ("bytes", "target_passages", "seed", "generator")
    same_dump = all(cached.get("dump", {}).get(k) == info.get(k) for k in keys)
    return same_dump and "queries" in cached and cached.get("claims") == claims.name


def run_size(shared: Path, out: Path, size: str, claims: Path, golds: list, n_latency: int) -> dict[str, Any]:
    dump, info = _dump_for(shared, out, size)
    index = out / f"idx-{size}"
    cache = out / f"scale-{size}.json"
    result: dict[str, Any] = {"size": size, "dump": info, "claims": claims.name}
    cached = json.loads(cache.read_text()) if cache.is_file() else {}
    if not index.exists() and _measured(cached, info, claims):
        # A larger size needs the disk: a finished size's index may be deleted and its figures kept, as long as
        # they were measured on this very dump with these claims.
        log.info("%s: index deleted, its measured figures kept (%s)", size, cache)
        return cached
    if cached and _built(index, dump):
        if _measured(cached, info, claims):  # a rerun after a later step failed
            return cached
        result["build"] = cached["build"]
    else:
        log.info("building %s from %s", index, dump)
        result["build"] = measure_build(dump, index)
    cache.write_text(json.dumps(result, indent=2))
    work = out / f"work-{size}"
    work.mkdir(exist_ok=True)
    result["queries"] = measure_queries(index, claims, golds, n_latency, work)
    cache.write_text(json.dumps(result, indent=2))
    return result


def reference_10k(shared: Path, out: Path, claims: Path, golds: list, n_latency: int) -> dict[str, Any]:
    """The 10k vital-article index (same channels), measured in the same run: the recall and speed reference."""
    corpus = vital_jsonl(shared, out)
    index = out / "idx-vital10k"
    build = measure_build(corpus, index) if not _built(index, corpus) else None
    manifest = json.loads((index / "manifest.json").read_text())
    work = out / "work-vital10k"
    work.mkdir(exist_ok=True)
    return {
        "counts": manifest["counts"],
        "build": build,
        "queries": measure_queries(index, claims, golds, n_latency, work),
    }


# -- extrapolation ------------------------------------------------------------------------------------------------


def _exponent(ns: list[float], ys: list[float]) -> float:
    """b of y ~ n^b, the least-squares slope in log-log over the sizes (1 = linear)."""
    if len(ns) < 2 or min(ns + ys) <= 0 or len(set(ns)) < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns), np.log(ys), 1)[0])


def _line(ns: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the sizes' points."""
    slope, intercept = np.polyfit(ns, ys, 1)
    return float(intercept), float(slope)


def _hours_16(stage: dict[str, float], wall_40m: float, scale: float) -> float:
    """16 cores. Ingest: its workers scale, its main process (reading, cutting, the DuckDB writer) does not, so
    max(tree CPU / 16, main-process CPU). Other stages: Amdahl, the parallel share read from CPU/wall on 2 cores
    (a stage that used one core stays as it is)."""
    if stage["stage"] == "ingest" and stage.get("main_cpu_s"):
        return max(stage["cpu_s"] * scale / 16, stage["main_cpu_s"] * scale) / 3600
    used = min(2.0, max(1.0, stage["cpu_s"] / stage["wall_s"])) if stage["wall_s"] > 0 else 1.0
    p = 2.0 * (1.0 - 1.0 / used)  # S2 = 1 / ((1 - p) + p / 2) = used
    return wall_40m * used * ((1.0 - p) + p / 16) / 3600


def extrapolate(results: list[dict[str, Any]], target: int = FULL_ENWIKI["passages"]) -> list[dict]:
    """Per stage, fitted over every measured size: time (the largest size's wall time times (target / n)^b, b the
    CPU-time exponent of the log-log fit, at least 1), RAM (the least-squares line through the peaks, never
    falling) and disk (the least-squares line through the stage's output)."""
    rows = []
    names = dict.fromkeys(stage for r in results for stage in r["build"]["stages"])
    for stage in names:  # each over the sizes that measured it (a resumed build measures its last stages only)
        measured = [r for r in results if stage in r["build"]["stages"]]
        ns = [float(r["build"]["counts"]["passages"]) for r in measured]
        points = [r["build"]["stages"][stage] for r in measured]
        b = points[-1]
        if len(ns) < 2 or not b.get("wall_s"):
            continue
        exp_cpu = _exponent(ns, [p["cpu_s"] for p in points])
        scale = (target / ns[-1]) ** max(1.0, exp_cpu if math.isfinite(exp_cpu) else 1.0)
        ram0, ram_slope = _line(ns, [p["peak_rss_mb"] for p in points])
        disk0, disk_slope = _line(ns, [p.get("disk_mb", 0.0) for p in points])
        # The growth between the two largest sizes, carried on: where the smaller sizes still grew towards the
        # memory budget, a line through every size overstates what the next 10M passages add.
        last = _line(ns[-2:], [p["peak_rss_mb"] for p in points[-2:]])[1] if len(ns) >= 2 else 0.0
        row = {"stage": stage, **b}
        rows.append(
            {
                "stage": stage,
                "sizes": len(ns),
                "time_exponent": exp_cpu,
                "wall_exponent": _exponent(ns, [p["wall_s"] for p in points]),
                "hours_2core": b["wall_s"] * scale / 3600,
                "hours_16core": _hours_16(row, b["wall_s"] * scale, scale),
                "ram_gb": max(b["peak_rss_mb"], ram0 + max(0.0, ram_slope) * target) / 1024,
                "ram_gb_last": (b["peak_rss_mb"] + max(0.0, last) * max(0.0, target - ns[-1])) / 1024,
                "disk_gb": max(0.0, disk0 + disk_slope * target) / 1024,
                "linear": not math.isfinite(exp_cpu) or exp_cpu <= 1.15,
            }
        )
    return rows


# -- report -------------------------------------------------------------------------------------------------------


def _build_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        b = r["build"]
        n = b["counts"]["passages"]
        for stage, s in b["stages"].items():
            rows.append(
                [
                    r["size"],
                    f"{n:,}",
                    stage,
                    s["wall_s"],
                    s["cpu_s"],
                    s["peak_rss_mb"],
                    s.get("peak_main_rss_mb", float("nan")),
                    s.get("peak_anon_mb", float("nan")),
                    s.get("disk_mb", 0.0),
                    s.get("peak_tmp_disk_mb", 0.0),
                ]
            )
        per_m = sum(s["wall_s"] for k, s in b["stages"].items() if k in ("ingest", "store_finish", "bm25", "tfidf"))
        rows.append(
            [
                r["size"],
                f"{n:,}",
                "**total**",
                b["wall_s"],
                sum(s["cpu_s"] for s in b["stages"].values()),
                b["peak_rss_mb"],
                "",
                b.get("peak_anon_mb", float("nan")),
                sum(b["disk_mb"].values()),
                "",
            ]
        )
        if not b.get("resumed"):  # a resumed build's ingest and store were not measured
            rows.append(
                [r["size"], "", "min per 1M passages (ingest+store+bm25+tfidf)", per_m / 60 / (n / 1e6), *[""] * 6]
            )
    header = ["size", "passages", "stage", "wall s", "CPU s", "peak RSS MiB", "of it main process", "peak anon MiB"]
    header.append("disk MiB")
    return md_table([*header, "peak tmp MiB"], rows)


def _query_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        q = r["queries"]
        lat = q["latency"]["latency"]
        for ch in (*QUERY_CHANNELS, FUSED):
            key = "fused" if ch == FUSED else ch
            b = q["batch"][ch]
            lt = lat.get(key, {"p50": float("nan"), "p95": float("nan")})
            failed = q["latency"].get("failed", {}).get(key, 0) + b.get("errors", 0)
            anon = b.get("anon_mb", float("nan"))
            rows.append(
                [r["size"], ch, lt["p50"], lt["p95"], failed, b["claims_per_s"], b["rss_mb"], anon, b["recall@5"]]
            )
        for key in ("kg", "kg alone"):
            if key in lat:
                failed = q["latency"].get("failed", {}).get(key, 0)
                rows.append([r["size"], key, lat[key]["p50"], lat[key]["p95"], failed, "", "", "", ""])
        anon = q["latency"].get("anon_mb", float("nan"))
        rows.append([r["size"], "(latency process, all loaded)", "", "", "", "", q["latency"]["rss_mb"], anon, ""])
    header = ["index", "channels", "p50 ms", "p95 ms", "failed claims", "batch claims/s", "process RSS MiB"]
    return md_table([*header, "anon MiB", "R@5"], rows)


def _extrapolation_table(rows: list[dict]) -> str:
    body = [
        [
            x["stage"],
            x["time_exponent"],
            x["wall_exponent"],
            x["hours_2core"],
            x["hours_16core"],
            x["ram_gb"],
            x.get("ram_gb_last", float("nan")),
            x["disk_gb"],
            "yes" if x["linear"] else "**no**",
        ]
        for x in rows
    ]
    tot2 = sum(x["hours_2core"] for x in rows)
    tot16 = sum(x["hours_16core"] for x in rows)
    peak = max((x["ram_gb"] for x in rows), default=0.0)
    peak_last = max((x.get("ram_gb_last", 0.0) for x in rows), default=0.0)
    body.append(["**total**", "", "", tot2, tot16, peak, peak_last, sum(x["disk_gb"] for x in rows), ""])
    header = ["stage", "CPU exponent", "wall exponent", "h (2 cores)", "h (16 cores)", "peak RAM GB (line)"]
    header += ["peak RAM GB (last step)", "disk GB"]
    return md_table([*header, "linear"], body)


def _dense_section(big: dict) -> str:
    p, four = big["dense"], big["four"]
    lat = four["latency"]
    rows = [
        [big["size"], ch, lat[key]["p50"], lat[key]["p95"]] for ch, key in (("dense", "dense"), (ALL_FOUR, "fused"))
    ]
    rows.append([big["size"], "(latency process, all four loaded)", "", four["rss_mb"]])
    note = (
        f"The {big['size']} index with a `dense/` channel whose {p['count']:,} vectors are mixtures of 3-5 encoded "
        "real sentences (`bench_scale.add_dense`: encoding the passages would take ~9 h here); the claims are encoded "
        f"by MiniLM at query time. IVF{p['nlist']},PQ{p['pq_m']}x{p['pq_bits']}, nprobe {p['nprobe']} chosen on "
        f"every other claim (recall@10 {p['recall_at_10']:.3f} against exact search), re-rank of "
        f"{p['rerank_factor']}k; built in {p['ivf_build_seconds']:.0f} s. Latency as above (k=10), fused over all "
        "four; recall is not reported (the vectors are not the passages' own).\n"
    )
    return note + "\n" + md_table(["index", "channels", "p50 ms", "p95 ms / RSS MiB"], rows)


def _targets(results: list[dict], ref: dict | None) -> str:
    big = results[-1]
    lat = big["queries"]["latency"]["latency"]
    fused = lat.get("fused", {})
    b = big["build"]
    n = b["counts"]["passages"]
    per_m = sum(s["wall_s"] for k, s in b["stages"].items() if k in ("ingest", "store_finish", "bm25", "tfidf"))
    lines = [
        f"- fused p50 {fused.get('p50', float('nan')):.0f} ms (target <= 40), "
        f"p95 {fused.get('p95', float('nan')):.0f} ms (<= 120) at {n:,} passages",
        f"- TF-IDF p50 {lat.get('tfidf', {}).get('p50', float('nan')):.0f} ms (<= 10)",
        f"- kg p50 {lat.get('kg alone', {}).get('p50', float('nan')):.1f} ms (issue 24: <= 10) from the resolved "
        f"entities, {lat.get('kg', {}).get('p50', float('nan')):.1f} ms with their resolution; "
        f"{big['queries']['latency'].get('triples', 0):,} triples, the claim's entities state "
        f"{big['queries']['latency'].get('kg_facts_p50', 0)} facts (p50)",
        f"- query process RSS (all channels loaded) {big['queries']['latency']['rss_mb']:.0f} MiB (<= 2048); "
        f"fused batch process {big['queries']['batch'][FUSED]['rss_mb']:.0f} MiB",
        f"- build peak RSS {b['peak_rss_mb']:.0f} MiB (<= 4096)",
        *(
            [
                f"- dense IVF alone p50 {big['four']['latency']['dense']['p50']:.1f} ms (<= 10) at "
                f"{big['dense']['count']:,} vectors; all four channels fused p50 "
                f"{big['four']['latency']['fused']['p50']:.0f} ms (<= 60)"
            ]
            if "four" in big
            else []
        ),
        f"- ingest + store + bm25 + tfidf: {per_m / 60 / (n / 1e6):.1f} min per 1M passages (<= 6)"
        + (" (resumed: tfidf and bm25 only)" if b.get("resumed") else ""),
        f"- fused batch {big['queries']['batch'][FUSED]['claims_per_s']:.1f} claims/s (>= 25), process start included",
    ]
    if len(results) >= 2:
        a = results[0]["build"]
        ratio = b["peak_rss_mb"] / a["peak_rss_mb"]
        growth = b["counts"]["passages"] / a["counts"]["passages"]
        lines.append(f"- build peak RSS x{ratio:.2f} for x{growth:.2f} passages (target <= 1.2 at x2)")
    if ref:
        r10 = ref["queries"]["batch"][FUSED]["recall@5"]
        lines.append(
            f"- fused R@5 {big['queries']['batch'][FUSED]['recall@5']:.3f} vs {r10:.3f} on the 10k vital index "
            f"(target: within 0.010); 10k batch {ref['queries']['batch'][FUSED]['claims_per_s']:.1f} claims/s (>= 50)"
        )
    return "\n".join(lines)


def report(results: list[dict], ref: dict | None, n_claims: int, n_latency: int) -> str:
    parts = [
        "## Scale: synthetic enwiki-shaped dumps, bm25,tfidf (issue 21)\n",
        "Dumps from `benchmarks/synth_dump.py`: real sentences (HotpotQA 2017 abstracts, the gensim enwiki fixture; "
        "not those about the vital pages' own subjects, nor any sharing a 10-word run with a vital lead) in "
        "enwiki-shaped articles (lead, 3 sections, links, categories, a redirect for every other article) plus "
        "the 10,033 real vital-article leads. The machine is shared (2 cores) and other jobs ran meanwhile: "
        "read the ratios more than the absolute figures.\n",
        "\n".join(
            f"- {r['size']}: {r['dump']['bytes'] / 2**20:.0f} MiB bz2, {r['build']['counts']['pages']:,} pages, "
            f"{r['build']['counts']['redirects']:,} redirects, {r['build']['counts']['passages']:,} passages"
            for r in results
        ),
        "\n### Build, per stage\n",
        "One build process per size, sampled every 0.2 s (RSS summed over the process tree, and of the main process "
        "alone: the DuckDB writer, the JVM of BM25, TF-IDF's merge; CPU of the tree); "
        "stages cut at the build's log lines. `disk` is the stage's output; `peak tmp` the build folder's peak.\n",
        _build_table(results),
        "\nThe build's own pre-build estimate (`indexer.build` resource check, from the input's first 2 MB):\n",
        "\n".join(
            f"- {r['size']}: {'; '.join(r['build'].get('resource_estimate') or ['(none logged)'])}" for r in results
        ),
        "\nThe BM25 stage's JVM heap (its log line), peak committed of its cap:\n",
        "\n".join(
            f"- {r['size']}: {h['peak_committed_mb']:.0f} of {h['cap_mb']:.0f} MB"
            if (h := r["build"].get("jvm_heap"))
            else f"- {r['size']}: (not recorded)"
            for r in results
        ),
        f"\n### Queries ({n_latency} claims for latency, {n_claims} FEVER dev claims for batch and recall)\n",
        "Latency: one process, everything warmed up, `channel_search` per channel and `search` fused (k=10; fused "
        f"over {FUSED}). `kg` resolves the claim's entities itself; `kg alone` starts from the title channel's "
        "mentions, as the retriever runs it. "
        "Batch: `python -m retriever.query --queries` per channel set, spawn to exit; RSS from wait4.\n",
        _query_table(results + ([{"size": "vital 10k", **ref}] if ref else [])),
    ]
    if len(results) >= 2:
        rows = extrapolate(results)
        parts += [
            f"\n### Extrapolation to English Wikipedia (~{FULL_ENWIKI['articles'] / 1e6:.0f}M articles, "
            f"~{FULL_ENWIKI['bz2_gb']} GB bz2, ~{FULL_ENWIKI['passages'] / 1e6:.0f}M passages)\n",
            f"Fitted over the {len(results)} sizes measured. Time: the largest size's wall time times (40M / n)^b, b "
            "the log-log least-squares exponent of CPU seconds over the sizes (at least 1; CPU time is less disturbed "
            "by the other jobs than wall time). 16 cores: ingest "
            "takes max(CPU / 16, its main process's CPU), the main process (reading, cutting, the DuckDB writer) "
            "being serial; other stages by Amdahl's law with the parallel share read from CPU/wall on 2 cores. "
            "RAM: the least-squares line through the peaks, and the growth between the two largest sizes carried "
            "on (last step). Disk: the least-squares line through each stage's output. "
            "A stage with b > 1.15 is marked not linear.\n",
            _extrapolation_table(rows),
        ]
    if results and "four" in results[-1]:
        parts += ["\n### All four channels, with dense of cheap vectors\n", _dense_section(results[-1])]
    parts += ["\n### Against the targets\n", _targets(results, ref)]
    return "\n".join(parts) + "\n"


def main(
    shared: Path,
    out: Path,
    sizes: tuple[str, ...] = DEFAULT_SIZES,
    *,
    claims_limit: int | None = None,
    n_latency: int = 200,
    reference: bool = True,
    dense: bool = True,
) -> str:
    out.mkdir(parents=True, exist_ok=True)
    claims, golds = _claims_file(shared, out, claims_limit)
    ref = reference_10k(shared, out, claims, golds, n_latency) if reference else None
    results = [run_size(shared, out, size, claims, golds, n_latency) for size in sizes]
    if dense and results:
        big = results[-1]
        index = out / f"idx-{big['size']}"
        big["dense"] = add_dense(index, shared, claims, out / "dense-vectors")
        big["four"] = measure_latency(index, claims, n_latency, channels=ALL_FOUR, fused=ALL_FOUR)
        (out / f"scale-{big['size']}.json").write_text(json.dumps(big, indent=2))
    text = report(results, ref, len(golds), min(n_latency, len(golds)))
    (out / "scale.json").write_text(json.dumps({"results": results, "reference": ref}, indent=2))
    (out / "scale.md").write_text(text)
    return text


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_scale")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path("/work/scratch/scale"))
    ap.add_argument("--sizes", default=",".join(DEFAULT_SIZES), help="passage counts, e.g. 20k or 0.5M,1M")
    ap.add_argument("--claims", type=int, default=None, help="first N dev claims only (default: all)")
    ap.add_argument("--latency-claims", type=int, default=200)
    ap.add_argument("--no-reference", action="store_true", help="skip the 10k vital index")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense channel of cheap vectors")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    sizes = tuple(s.strip() for s in a.sizes.split(",") if s.strip())
    print(
        main(
            a.shared,
            a.out,
            sizes,
            claims_limit=a.claims,
            n_latency=a.latency_claims,
            reference=not a.no_reference,
            dense=not a.no_dense,
        )
    )
