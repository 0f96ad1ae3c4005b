"""Dense IVF at scale (issue 21, item 4): >= 1M vectors, built and queried on this machine, beside the reference.

Encoding 1M passages on 2 CPU cores takes ~9 h, so the vectors are made cheaply, from real text: a few thousand
real sentences (HotpotQA abstracts and vital-article leads from ``shared/data/corpora``) are encoded with the
project's MiniLM encoder, and each passage vector is the normalised sum of 3-5 of them drawn at random. The
scale benchmark's synthetic passages are made of real sentences too, so this mirrors them; random mixtures are
less clustered than real passages, which makes IVF's job harder, not easier. Queries are the real FEVER dev
claims (``shared/data/claims/fever_dev_vital.jsonl``), encoded by the same model.

Steps: the IVF build (backends/dense/ivf.py: training, adding, nprobe chosen for recall@10 >= 0.95 on half
of the claims, see TUNE_SLICE) runs in a child process, and so do the queries, so that each reports its own peak RSS.
The reference, built and queried the same way in the same run, is the index the project built before: IVF-PQ
with 64 eight-bit codes a vector (trained as it was: 64 points per PQ centroid, 10 k-means iterations), loaded
and searched by the same code (it reads indexes of that format). Exact top-10 of every claim (the recall
reference) and exact single-query latency over the memory-mapped float32 rows come from this process. Big files
go to ``$WIKIGROUND_DENSE_SCALE_DIR`` (default ``out``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import latency, md_table, read_claims

log = logging.getLogger("benchmarks.dense_scale")

N_VECTORS = int(os.environ.get("WIKIGROUND_DENSE_SCALE_N", "1000000"))
N_SENTENCES = int(os.environ.get("WIKIGROUND_DENSE_SCALE_SENTENCES", "6000"))
MIX = (3, 5)
SEED = 21
THREADS = 2
K = 10
EXACT_TIMED = 10  # single-query exact searches timed (each reads every row)
# nprobe is chosen on every other claim (the queries the index serves: held-out rows of these mixtures are
# harder than claims, and would choose all lists); recall is reported on the others, which tuning never saw.
TUNE_SLICE = slice(0, None, 2)
REPORT_SLICE = slice(1, None, 2)
ROOT = Path(__file__).resolve().parents[1]


def _sentences(shared: Path, n: int) -> list[str]:
    """``n`` distinct real sentences of 6-60 words, fixed-seed sample."""
    out: list[str] = []
    for line in (shared / "corpora" / "hotpotqa2017_abstracts.jsonl").open(encoding="utf-8"):
        out += [s.strip() for s in json.loads(line)["sentences"]]
    vital = json.loads((shared / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
    for rec in vital.values():
        out += re.split(r"(?<=[.!?])\s+(?=[A-Z])", rec.get("extract") or "")
    keep = sorted({s for s in out if 6 <= len(s.split()) <= 60})
    rng = np.random.default_rng(SEED)
    return [keep[i] for i in np.sort(rng.choice(len(keep), size=min(n, len(keep)), replace=False))]


def _encoded(texts: list[str], path: Path) -> tuple[np.ndarray, float]:
    """Vectors of ``texts`` (cached at ``path``), and the texts/s of the encoding (nan when cached)."""
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file() and json.loads(meta.read_text())["texts"] == len(texts):
        return np.load(path), json.loads(meta.read_text())["texts_per_s"]
    from backends.encoder import load_encoder

    enc = load_encoder(threads=THREADS)
    t0 = time.perf_counter()
    vecs = enc.encode(texts, batch_size=64)
    rate = len(texts) / (time.perf_counter() - t0)
    np.save(path, vecs)
    meta.write_text(json.dumps({"texts": len(texts), "texts_per_s": rate, "backend": enc.backend}))
    return vecs, rate


def _make_vectors(sent: np.ndarray, n: int, path: Path) -> float:
    """``n`` passage vectors: normalised sums of 3-5 random sentence vectors, written as float32 .npy."""
    if path.is_file() and np.load(path, mmap_mode="r").shape == (n, sent.shape[1]):
        return float("nan")
    t0 = time.perf_counter()
    rng = np.random.default_rng(SEED + 1)
    tmp = path.with_suffix(".part.npy")
    arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, sent.shape[1]))
    step = 20_000
    for a in range(0, n, step):
        m = min(step, n - a)
        idx = rng.integers(0, len(sent), size=(m, MIX[1]))
        used = np.arange(MIX[1]) < rng.integers(MIX[0], MIX[1] + 1, size=m)[:, None]
        v = np.einsum("ij,ijd->id", used.astype(np.float32), sent[idx])
        arr[a : a + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    arr.flush()
    del arr
    os.replace(tmp, path)
    return time.perf_counter() - t0


def _exact_reference(vectors: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, dict]:
    """Exact top-K of every query (blocked matmul) and the latency of single-query exact search."""
    from backends.dense import ivf

    truth = ivf.exact_top(vectors, q, K, block_rows=262_144)
    ms = []
    for row in q[:EXACT_TIMED]:
        t0 = time.perf_counter()
        ivf.exact_top(vectors, row[None, :], K, block_rows=262_144)
        ms.append((time.perf_counter() - t0) * 1000)
    return truth, latency(ms)


def _status() -> dict[str, float]:
    """This process's RSS figures from /proc (MiB)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, val = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(val.split()[0]) / 1024
    return out


VARIANTS = {"index": "the product's IVF (fast-scan)", "reference": "IVF-PQ64x8, the previous format"}


def _child(mode: str, work: Path, variant: str) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_dense_scale",
            "--child",
            mode,
            "--work",
            str(work),
            "--variant",
            variant,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        raise RuntimeError(f"{mode} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _reference_build(vectors_path: Path, out_dir: Path, tune: np.ndarray) -> dict:
    """IVF-PQ64x8 as the project built it before the fast-scan index, with its nprobe chosen by the same rule."""
    import faiss

    from backends.dense import ivf

    faiss.omp_set_num_threads(THREADS)
    t0 = time.perf_counter()
    vectors = np.load(vectors_path, mmap_mode="r")
    n, dim = vectors.shape
    nlist = ivf.default_nlist(n)
    rows = ivf._sample(n, ivf.TRAIN_PER_LIST * nlist, 1234)
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, 64, 8, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = index.pq.cp.seed = 1234
    index.pq.cp.niter, index.pq.cp.max_points_per_centroid = 10, 64
    index.train(np.ascontiguousarray(vectors[rows]))
    for a in range(0, n, ivf.ADD_BLOCK):
        index.add(np.ascontiguousarray(vectors[a : a + ivf.ADD_BLOCK]))
    faiss.write_index(index, str(out_dir / "ivf_pq.faiss"))
    built = time.perf_counter() - t0
    del index
    mapped = _load_reference(out_dir)
    tuned = ivf.tune_nprobe(mapped, ivf.RowReader(vectors_path), vectors, rows, queries=tune)
    size = (out_dir / "ivf_pq.faiss").stat().st_size
    return {"index_type": "ivf_pq+rerank", "ivf_file": "ivf_pq.faiss", "nlist": nlist, "pq_m": 64, "pq_bits": 8,
            "bytes_per_vector": 72, "index_bytes": size, "rerank_factor": ivf.RERANK_FACTOR,
            "ivf_build_seconds": round(built, 2), **tuned}  # fmt: skip


def _load_reference(folder: Path, nprobe: int = 32):
    """The reference index, mapped as the product mapped it (its lists inside ``ivf_pq.faiss``, FAISS's prefetch
    threads off): the product's ``ivf.load`` reads the fast-scan format only."""
    import faiss

    from backends.dense import ivf

    index = ivf._read(folder / "ivf_pq.faiss")
    inner = faiss.extract_index_ivf(index)
    lists = faiss.downcast_InvertedLists(inner.invlists)
    if isinstance(lists, faiss.OnDiskInvertedLists):
        lists.prefetch_nthread = 0
    inner.nprobe = nprobe
    return index


def child_build(work: Path, variant: str) -> dict:
    from backends.dense import ivf

    index_dir = work / variant
    index_dir.mkdir(exist_ok=True)
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    tune = np.load(work / "claims.npy")[TUNE_SLICE]
    if variant == "reference":
        params = _reference_build(work / "vectors.npy", index_dir, tune)
    else:
        params = ivf.build(work / "vectors.npy", index_dir, threads=THREADS, tune_queries=tune)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    params["count"] = int(np.load(work / "vectors.npy", mmap_mode="r").shape[0])
    (index_dir / "params.json").write_text(json.dumps(params, indent=2, sort_keys=True))
    return {
        "params": params,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
        "peak_rss_mib": _status()["VmHWM"],  # ru_maxrss would include the parent's RSS from before exec
    }


def child_query(work: Path, variant: str) -> dict:
    """Load the mmap'd index, then time claims one at a time (encoded, and encoding included) and in a batch."""
    import faiss

    from backends.dense import ivf
    from backends.encoder import load_encoder

    faiss.omp_set_num_threads(THREADS)
    claims = [c["claim"] for c in json.loads((work / "claims_text.json").read_text())]
    q = np.load(work / "claims.npy")
    truth = np.load(work / "truth.npy")
    params = json.loads((work / variant / "params.json").read_text())
    t0 = time.perf_counter()
    index = (
        _load_reference(work / variant, params["nprobe"])
        if variant == "reference"
        else ivf.load(work / variant, params)
    )
    rows = ivf.RowReader(work / "vectors.npy")
    load_s = time.perf_counter() - t0
    rss_loaded = _status()
    enc = load_encoder(threads=THREADS, queries=True)
    enc.encode_queries(claims[:8])
    for i in range(5):  # warm-up: first touches of the lists and rows
        ivf.search(index, rows, q[i : i + 1], K)
    search_ms, full_ms = [], []
    found = np.empty((len(q), K), dtype=np.int64)
    for i, claim in enumerate(claims):
        t1 = time.perf_counter()
        found[i] = ivf.search(index, rows, q[i : i + 1], K)[0][0]
        t2 = time.perf_counter()
        ivf.search(index, rows, enc.encode_queries([claim]), K)
        t3 = time.perf_counter()
        search_ms.append((t2 - t1) * 1000)
        full_ms.append((t3 - t2) * 1000)
    t4 = time.perf_counter()
    ivf.search(index, rows, q, K)
    batch_qps = len(q) / (time.perf_counter() - t4)
    curve = {}
    for p in sorted({max(1, params["nprobe"] // 2), params["nprobe"], min(params["nlist"], 2 * params["nprobe"])}):
        curve[p] = ivf.recall_at(ivf.search(index, rows, q, K, nprobe=p)[0][REPORT_SLICE], truth[REPORT_SLICE], K)
    return {
        "load_s": load_s,
        "rss_loaded": rss_loaded,
        "rss_end": _status(),
        "search": latency(search_ms),
        "with_encoding": latency(full_ms),
        "batch_qps": batch_qps,
        "recall_claims": ivf.recall_at(found[REPORT_SLICE], truth[REPORT_SLICE], K),
        "recall_tuning_claims": ivf.recall_at(found[TUNE_SLICE], truth[TUNE_SLICE], K),
        "claims_curve": curve,
        "peak_rss_mib": _status()["VmHWM"],
    }


def main(shared: Path, out: Path) -> str:
    work = Path(os.environ.get("WIKIGROUND_DENSE_SCALE_DIR") or out / "dense_scale")
    work.mkdir(parents=True, exist_ok=True)
    sents = _sentences(shared, N_SENTENCES)
    sent_vecs, sent_rate = _encoded(sents, work / "sentences.npy")
    claims = read_claims(shared / "claims" / "fever_dev_vital.jsonl")
    (work / "claims_text.json").write_text(json.dumps([{"claim": c["claim"]} for c in claims]))
    q, _ = _encoded([c["claim"] for c in claims], work / "claims.npy")
    make_s = _make_vectors(sent_vecs, N_VECTORS, work / "vectors.npy")
    vectors = np.load(work / "vectors.npy", mmap_mode="r")
    truth, exact_lat = _exact_reference(vectors, q)
    np.save(work / "truth.npy", truth)
    del vectors
    result = {"n": N_VECTORS, "sentences": len(sents), "sentence_rate": sent_rate, "make_s": make_s, "exact": exact_lat}
    for variant in VARIANTS:  # one after the other, each in fresh child processes
        log.info("%s: building over %d vectors", variant, N_VECTORS)
        built = _child("build", work, variant)
        log.info("%s: querying", variant)
        result[variant] = {"build": built, "query": _child("query", work, variant)}
    (work / "dense_scale.json").write_text(json.dumps(result, indent=2))
    return _report(result, work)


def _column(r: dict, variant: str) -> dict[str, str]:
    b, qy = r[variant]["build"], r[variant]["query"]
    p = b["params"]
    kind = "PQ{m}x{bits}{fs}".format(m=p["pq_m"], bits=p["pq_bits"], fs="fs" if p["pq_bits"] == 4 else "")
    return {
        "index": f"IVF{p['nlist']},{kind} + exact re-rank of {p['rerank_factor']}k",
        "bytes per vector (code + id)": str(p["bytes_per_vector"]),
        "index files": f"{p['index_bytes'] / 2**20:.0f} MiB",
        "build wall / CPU": f"{b['wall_s']:.0f} s / {b['cpu_s']:.0f} s (IVF part {p['ivf_build_seconds']:.0f} s)",
        "build peak RSS": f"{b['peak_rss_mib']:.0f} MiB",
        "nprobe chosen at build": f"{p['nprobe']} of {p['nlist']} ({p['recall_query_source']}: "
        f"recall@10 {p['recall_at_10']:.3f})",
        "recall@10 vs exact, the other claims": f"{qy['recall_claims']:.3f} (tuning claims "
        f"{qy['recall_tuning_claims']:.3f})",
        "the other claims' recall@10 by nprobe": ", ".join(f"{k}: {v:.3f}" for k, v in qy["claims_curve"].items()),
        "search p50 / p95 (claim encoded)": f"{qy['search']['p50']:.2f} / {qy['search']['p95']:.2f} ms",
        "with encoding p50 / p95": f"{qy['with_encoding']['p50']:.2f} / {qy['with_encoding']['p95']:.2f} ms",
        "speed-up over exact search (p50)": f"{r['exact']['p50'] / qy['search']['p50']:.0f}x",
        "batch search": f"{qy['batch_qps']:.0f} claims/s",
        "query RSS after load": f"{qy['rss_loaded']['VmRSS']:.0f} MiB",
        "query RSS at end (anon / file)": f"{qy['rss_end']['VmRSS']:.0f} MiB ({qy['rss_end']['RssAnon']:.0f} / "
        f"{qy['rss_end']['RssFile']:.0f})",
    }


def _report(r: dict, work: Path) -> str:
    new, ref = _column(r, "index"), _column(r, "reference")
    rows = [(key, new[key], ref[key]) for key in new]
    vec_mib = (work / "vectors.npy").stat().st_size / 2**20
    qn, qr = r["index"]["query"], r["reference"]["query"]
    lines = [
        f"{r['n']:,} vectors x 384 (vectors.npy {vec_mib:.0f} MiB), each the normalised sum of 3-5 of "
        f"{r['sentences']:,} encoded real sentences; queries: the 686 FEVER dev claims encoded by MiniLM, nprobe "
        "chosen on every other one, recall reported on the others. Exact search (numpy over the mapped rows): "
        f"{r['exact']['p50']:.0f} ms p50.",
        "",
        md_table(("", VARIANTS["index"], VARIANTS["reference"]), rows),
        "",
        f"Same run, against the reference: search p50 {qr['search']['p50'] / qn['search']['p50']:.2f}x faster, "
        f"p95 {qr['search']['p95'] / qn['search']['p95']:.2f}x, batch {qn['batch_qps'] / qr['batch_qps']:.2f}x; "
        f"recall@10 on the claims not used for tuning {qn['recall_claims']:.3f} against {qr['recall_claims']:.3f}.",
    ]
    return "## Dense IVF at scale (issue 21)\n\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "dense_scale")
    ap.add_argument("--child", choices=("build", "query"))
    ap.add_argument("--work", type=Path)
    ap.add_argument("--variant", choices=tuple(VARIANTS), default="index")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    if a.child:
        print(json.dumps((child_build if a.child == "build" else child_query)(a.work, a.variant)))
    else:
        print(main(a.shared, a.out))
