"""Encoder backends on real passages: passages/s and agreement with torch (sentence-transformers); int8 against
fp32 ONNX; and the Ray Data embedder against the in-process one over the same store, in the same run.

``python -m benchmarks.bench_encoder --shared ../shared/data [--out benchmarks/out] [--n 300] [--ray-n 3000]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_N = 300
BATCH_SIZE = 32
RAY_N = 3000  # passages embedded by each engine
RAY_SHARD = 250
BACKENDS = ("torch", "onnx", "onnx-int8")


def load_passages(shared: Path, *, n: int = DEFAULT_N) -> list[str]:
    """The first ``n`` HotpotQA 2017 abstracts with at least 3 sentences, as the index embeds them."""
    from backends.encoder import passage_text

    out: list[str] = []
    with open(shared / "corpora" / "hotpotqa2017_abstracts.jsonl", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if len(rec["sentences"]) >= 3:
                out.append(passage_text(rec["title"], "", " ".join(s.strip() for s in rec["sentences"])))
            if len(out) >= n:
                break
    return out


def _time(encoder, texts: list[str]) -> tuple[np.ndarray, float]:
    encoder.encode(texts[:BATCH_SIZE], batch_size=BATCH_SIZE)  # warm-up
    t0 = time.perf_counter()
    vecs = encoder.encode(texts, batch_size=BATCH_SIZE)
    return vecs, time.perf_counter() - t0


def measure(shared: Path, *, n: int = DEFAULT_N, threads: int = 2, cache: Path | None = None) -> list[dict]:
    from tokenizers import Tokenizer

    from backends.encoder import MAX_SEQ_LENGTH, model_dir
    from tests.support.vectors import cosine_rows

    texts = load_passages(shared, n=n)
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=MAX_SEQ_LENGTH)
    mean_tokens = float(np.mean([len(e.ids) for e in tok.encode_batch(texts)]))
    rows, vectors, encoders = [], {}, {}
    for backend in BACKENDS:
        t0 = time.perf_counter()
        enc = encoders[backend] = _load(backend, threads=threads, cache=cache)
        load_s = time.perf_counter() - t0
        vecs, secs = _time(enc, texts)
        vectors[backend] = vecs
        reference = vectors["torch"]
        cos = cosine_rows(vecs, reference)
        rows.append(
            {
                "backend": backend,
                "passages": len(texts),
                "mean_tokens": round(mean_tokens, 1),
                "threads": threads,
                "load_s": round(load_s, 2),
                "seconds": round(secs, 2),
                "passages_per_s": round(len(texts) / secs, 1),
                "cos_to_torch_mean": round(float(cos.mean()), 6),
                "cos_to_torch_min": round(float(cos.min()), 6),
                "top1_agree_with_torch": round(_nn_agreement(vecs, reference), 4),
            }
        )
    rows[-1].update(_int8_agreement(vectors["onnx-int8"], vectors["onnx"], texts, encoders["onnx"]))
    return rows


def _load(backend: str, *, threads: int, cache: Path | None):
    from backends.encoder import OnnxEncoder, load_encoder, model_dir

    if backend == "onnx-int8":  # measured, not offered: see the section's verdict
        return OnnxEncoder(model_dir(), threads=threads, cache=cache, int8=True)
    return load_encoder(backend=backend, threads=threads, cache=cache)


def _nn_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of passages whose nearest other passage is the same under both vector sets."""
    off = 2 * np.eye(len(a))
    return float(np.mean(np.argmax(a @ a.T - off, axis=1) == np.argmax(b @ b.T - off, axis=1)))


def _int8_agreement(int8: np.ndarray, fp32: np.ndarray, texts: list[str], fp32_encoder) -> dict:
    """int8 passages against fp32 ones: nearest-neighbour agreement, and with each passage's last sentence as a
    query (encoded by fp32 ONNX, as at search time) the top-1 agreement and top-5 overlap."""
    from tests.support.vectors import cosine_rows

    q = fp32_encoder.encode([t.rsplit(". ", 1)[-1] for t in texts], batch_size=BATCH_SIZE)
    top_int8 = np.argsort(-(q @ int8.T), axis=1)[:, :5]
    top_fp32 = np.argsort(-(q @ fp32.T), axis=1)[:, :5]
    return {
        "nn_agree_fp32": round(_nn_agreement(int8, fp32), 4),
        "query_top1_agree_fp32": round(float(np.mean(top_int8[:, 0] == top_fp32[:, 0])), 4),
        "query_top5_overlap_fp32": round(
            float(np.mean([len(set(a) & set(b)) / 5 for a, b in zip(top_int8, top_fp32)])), 4
        ),
        "cos_to_fp32_min": round(float(cosine_rows(int8, fp32).min()), 6),
    }


def measure_ray(shared: Path, work: Path, *, n: int = RAY_N) -> dict:
    """The same store embedded in this process, then by Ray Data on a local instance (same cores, same shards):
    wall seconds of each, start-up included (the model load; Ray's start, read tasks and actor)."""
    import shutil

    from backends.dense.embed import embed_range, list_shards
    from backends.dense.ray_embed import embed_ray
    from indexer.build import build_index
    from tests.support.vectors import cosine_rows

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lines = (shared / "corpora" / "hotpotqa2017_abstracts.jsonl").read_text(encoding="utf-8").splitlines()
    (work / "corpus.jsonl").write_text("\n".join(lines[:n]) + "\n", encoding="utf-8")
    build_index([work / "corpus.jsonl"], work / "index", indexes=(), workers=1)
    db = work / "index" / "wiki.duckdb"
    t0 = time.perf_counter()
    local = embed_range(db, work / "local", shard_size=RAY_SHARD, batch_size=BATCH_SIZE)
    local_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray = embed_ray(db, work / "ray", shard_size=RAY_SHARD, batch_size=BATCH_SIZE)
    ray_s = time.perf_counter() - t0
    a = np.concatenate([np.load(p) for _, _, p in list_shards(work / "local")])
    b = np.concatenate([np.load(p) for _, _, p in list_shards(work / "ray")])
    return {
        "passages": local["passages"],
        "shards": local["shards_written"],
        "local_s": round(local_s, 1),
        "ray_s": round(ray_s, 1),
        "local_per_s": round(local["encoded"] / local_s, 1),
        "ray_per_s": round(ray["encoded"] / ray_s, 1),
        "ratio": round(local_s / ray_s, 3),
        "local_steady_per_s": _steady_rate(work / "local"),
        "ray_steady_per_s": _steady_rate(work / "ray"),
        "ray_startup_s": round(ray_s - (ray["encoded"] / _steady_rate(work / "ray")), 1),
        "cos_min": round(float(cosine_rows(a, b).min()), 6),
        "identical": bool(np.array_equal(a, b)),
    }


def _steady_rate(shards: Path) -> float:
    """Passages/s between the first and the last shard written (their files' times): start-up left out."""
    from backends.dense.embed import list_shards

    done = sorted((p.stat().st_mtime, b - a) for a, b, p in list_shards(shards))
    return round(sum(n for _, n in done[1:]) / (done[-1][0] - done[0][0]), 1)


def ray_section(r: dict) -> list[str]:
    return [
        "",
        "### Ray Data (local instance) against the in-process embedder",
        "",
        f"{r['passages']} real HotpotQA-2017 abstracts in {r['shards']} shards, the same 2 cores, one after the "
        "other in this run; wall time from the call to the last shard written, start-up included.",
        "",
        "| engine | seconds | passages/s (wall) | passages/s (first to last shard) |",
        "|---|---|---|---|",
        f"| in-process | {r['local_s']} | {r['local_per_s']} | {r['local_steady_per_s']} |",
        f"| Ray Data, 1 actor x 2 threads | {r['ray_s']} | {r['ray_per_s']} | {r['ray_steady_per_s']} |",
        "",
        f"Ray / in-process: **{r['ratio']}** over the wall time, "
        f"**{round(r['ray_steady_per_s'] / r['local_steady_per_s'], 3)}** once running (target >= 0.85); "
        f"Ray's start-up (instance, workers, actor and model load) about {r['ray_startup_s']} s. "
        f"Vectors: cosine min {r['cos_min']}, bit-identical: {r['identical']}.",
    ]


TIE = 0.10  # throughputs within 10% count as equal (run-to-run noise on a shared 2-core machine)


def pick(rows: list[dict]) -> str:
    """Faster backend among those at equal quality (cosine to torch >= .999); load time breaks a tie."""
    ok = [r for r in rows if r["cos_to_torch_min"] >= 0.999]
    best = max(ok, key=lambda r: r["passages_per_s"])
    near = [r for r in ok if r["passages_per_s"] >= (1 - TIE) * best["passages_per_s"]]
    return min(near, key=lambda r: r["load_s"])["backend"]


def main(shared: Path, out: Path, *, n: int = DEFAULT_N, ray_n: int = RAY_N) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rows = measure(shared, n=n)
    ray = measure_ray(shared, out / "encoder_ray", n=ray_n) if ray_n else None
    (out / "encoder.json").write_text(json.dumps({"backends": rows, "ray": ray}, indent=2), encoding="utf-8")
    lines = [
        "## Encoder backends (all-MiniLM-L6-v2, CPU)",
        "",
        f"{rows[0]['passages']} real HotpotQA-2017 abstracts (title: text), mean {rows[0]['mean_tokens']} tokens, "
        f"batch {BATCH_SIZE}, {rows[0]['threads']} threads.",
        "",
        "| backend | load s | passages/s | cosine to torch (mean / min) | nearest-neighbour agreement |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['load_s']} | {r['passages_per_s']} | "
            f"{r['cos_to_torch_mean']} / {r['cos_to_torch_min']} | {r['top1_agree_with_torch']} |"
        )
    by = {r["backend"]: r for r in rows}
    i8, fp = by["onnx-int8"], by["onnx"]
    speed = i8["passages_per_s"] / fp["passages_per_s"]
    kept = speed >= 1.3 and i8["nn_agree_fp32"] >= 0.98
    lines += [
        "",
        f"Rule (faster by more than {int(TIE * 100)}%, else the quicker to load) picks **{pick(rows)}** "
        "in this run. The code's `auto` uses **onnx** (falls back to torch if the export fails): equal "
        "vectors (cosine 1.0), a load 20x+ faster for query processes, and throughput within ~15% of torch "
        "either way across runs on this shared machine.",
        "",
        f"int8 (onnxruntime dynamic quantisation) against fp32 ONNX: **{speed:.2f}x** passages/s; "
        f"nearest-neighbour agreement {i8['nn_agree_fp32']}, query top-1 agreement {i8['query_top1_agree_fp32']}, "
        f"top-5 overlap {i8['query_top5_overlap_fp32']}, cosine min {i8['cos_to_fp32_min']}. Bars: >= 1.3x and "
        f">= 0.98 agreement: {'met' if kept else 'not met'} in this run.",
    ]
    if ray:
        lines += ray_section(ray)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--n", type=int, default=DEFAULT_N)
    ap.add_argument("--ray-n", type=int, default=RAY_N, help="passages for Ray vs in-process (0: skip)")
    args = ap.parse_args()
    sys.stdout.write(main(args.shared, args.out, n=args.n, ray_n=args.ray_n))
