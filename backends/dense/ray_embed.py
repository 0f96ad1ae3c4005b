"""Passage embeddings on Ray Data: the same shards as :mod:`backends.dense.embed`, encoded by a pool of actors.

The pipeline: one row per shard still to encode -> read tasks fetch its passage texts from the store (the store
path must be readable on every node) -> an actor pool encodes them (each actor loads the model once; CPU actors
run ONNX, GPU actors torch on CUDA) -> the driver writes each shard and its digest atomically as results stream
in. A shard is written whole or not at all, so a killed run resumes where it stopped. A worker that dies is
replaced: Ray Data creates encoder actors with ``max_restarts=-1, max_task_retries=-1`` (a dead actor is
restarted and its shard retried) and Ray retries a read task whose worker died (``max_retries=3``); these
are Ray Data's own defaults, which its 2.60 API no longer lets a caller set by name. ``ray`` is imported only
here and only when the Ray engine runs.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backends.dense.embed import (
    SHARD_SIZE,
    check_model,
    check_range,
    encode_texts,
    pending_shards,
    read_texts,
    run_stats,
    write_shard,
)
from backends.passage_table import connect, passage_count
from wikiground.errors import BuildError, ConfigError

log = logging.getLogger(__name__)

READ_CPUS = 0.25  # a read task is mostly DuckDB I/O: a quarter CPU leaves room beside the encoder actors
LOCAL_OBJECT_STORE = 512 * 1024 * 1024  # a shard's texts and vectors are a few MB each


@dataclass(frozen=True)
class RayPlan:
    """How the pipeline is sized: encoder actors, each with ``cpus`` reserved and ``threads`` ONNX threads."""

    workers: int
    threads: int
    cpus: float
    gpus: float


def plan_resources(
    cluster_cpus: float, cluster_gpus: float, *, workers: int | None, threads: int | None, gpus_per_worker: float
) -> RayPlan:
    """Actors and read tasks sized so that they always fit together: the pipeline never waits for CPUs.

    Every actor reserves less than its share of CPUs (at most ``threads`` - 0.5, at least 0.5), so at least
    READ_CPUS stay free for the read tasks that feed it; ONNX still runs ``threads`` threads in the actor.
    """
    if gpus_per_worker < 0 or (workers is not None and workers < 1) or (threads is not None and threads < 1):
        raise ConfigError("--workers and --threads must be >= 1, --gpus-per-worker >= 0")
    if gpus_per_worker > 0:
        if cluster_gpus < gpus_per_worker:
            raise ConfigError(f"--gpus-per-worker {gpus_per_worker}: the Ray cluster has {cluster_gpus:g} GPUs")
        n = workers or max(1, int(cluster_gpus // gpus_per_worker))
        return RayPlan(workers=n, threads=threads or 1, cpus=min(1.0, cluster_cpus / n / 2), gpus=gpus_per_worker)
    if cluster_cpus < 1:
        raise ConfigError(f"the Ray cluster has {cluster_cpus:g} CPUs: an encoder needs at least 1")
    n = workers or max(1, int(cluster_cpus // 4))
    share = (cluster_cpus - READ_CPUS) / n
    if share < 0.5:
        raise ConfigError(f"--workers {n} does not fit in {cluster_cpus:g} CPUs (each actor needs 0.5)")
    t = threads or max(1, int(cluster_cpus // n))
    return RayPlan(workers=n, threads=t, cpus=max(0.5, min(t - 0.5, share)), gpus=0.0)


def _read_shard(batch, *, db_path: str):
    """Read task: a batch of shard rows -> the same rows with their passage texts and digest."""
    import pyarrow as pa

    rows = batch.to_pylist()
    out = {"start": [], "end": [], "texts": [], "digest": []}
    for row in rows:
        ids = np.asarray(row["ids"], dtype=np.int64) if row.get("ids") is not None else None
        a, b = (0, len(ids)) if ids is not None else (row["start"], row["end"])
        texts, digest = read_texts(Path(db_path), a, b, ids)
        for key, value in (("start", row["start"]), ("end", row["end"]), ("texts", texts), ("digest", digest)):
            out[key].append(value)
    return pa.table(out)


class ShardEncoder:
    """Actor: loads the encoder once, then turns each shard's texts into float32 vectors (as bytes)."""

    def __init__(self, backend: str, threads: int, batch_size: int, device: str):
        from backends.encoder import load_encoder

        self.encoder = load_encoder(backend=backend, threads=threads, device=device)
        self.batch_size = batch_size

    def __call__(self, batch):
        import pyarrow as pa

        vectors = []
        for texts in batch.column("texts").to_pylist():
            vecs = encode_texts(self.encoder, texts, batch_size=self.batch_size)
            vectors.append(vecs.astype(np.float32).tobytes())
        return pa.table(
            {
                "start": batch.column("start"),
                "end": batch.column("end"),
                "digest": batch.column("digest"),
                "vectors": pa.array(vectors, type=pa.large_binary()),
                "backend": [self.encoder.backend] * len(vectors),
            }
        )


def embed_ray(
    db_path: Path,
    shards_dir: Path,
    *,
    address: str | None = None,
    workers: int | None = None,
    gpus_per_worker: float = 0.0,
    threads: int | None = None,
    batch_size: int = 32,
    start: int = 0,
    end: int | None = None,
    shard_size: int = SHARD_SIZE,
    backend: str = "auto",
    ids: np.ndarray | None = None,
    progress: bool = False,
) -> dict:
    """Encode passages [start, end) (rows of ``ids`` for scope leads) into shards with Ray Data; skip complete ones.

    ``address``: None starts a local Ray instance sized to this machine; "auto" or "ray://host:port" joins a
    cluster. Returns the same statistics as :func:`backends.dense.embed.embed_range`.
    """
    db_path, shards_dir = Path(db_path).absolute(), Path(shards_dir)
    con = connect(db_path)
    try:
        n = passage_count(con, db_path) if ids is None else len(ids)
        end = check_range(start, end, n, db_path)
        shards_dir.mkdir(parents=True, exist_ok=True)
        ranges, todo = pending_shards(con, db_path, shards_dir, start, end, shard_size=shard_size, ids=ids)
    finally:
        con.close()
    t0 = time.perf_counter()
    used = None
    if todo:
        ray = _init_ray(address)
        try:
            plan = plan_resources(
                ray.cluster_resources().get("CPU", 0.0),
                ray.cluster_resources().get("GPU", 0.0),
                workers=workers,
                threads=threads,
                gpus_per_worker=gpus_per_worker,
            )
            log.info("ray: %d encoder actors x %d threads (%.2f CPUs, %g GPUs each)", *plan.__dict__.values())
            ds = _dataset(ray, db_path, todo, ids, plan, backend=backend, batch_size=batch_size)
            used = _write_results(ds, shards_dir, todo, progress=progress)
        except ray.exceptions.RayError as exc:
            # A task that failed for good (its retries spent): the shards written so far stay for the next run.
            raise BuildError(f"{shards_dir}: the Ray embedding failed: {exc}") from exc
        finally:
            ray.shutdown()  # a local instance stops; a cluster stays up, this driver leaves it
    return run_stats(n, ranges, todo, time.perf_counter() - t0, used, shards_dir)


def _init_ray(address: str | None):
    """Connect to ``address`` or start a quiet local instance with the CPUs this process may use."""
    # Ray's own start-up notes and C++ log lines stay out of the user's terminal; failures still raise here.
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    # Ray would report usage to its servers; an indexer run contacts nothing but the cluster it was given.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data
        import ray.exceptions  # noqa: F401 - embed_ray catches its errors
    except ImportError as exc:
        raise ConfigError("--engine ray needs Ray Data: pip install 'wikiground[distributed]'") from exc
    from backends.encoder import default_threads

    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    opts = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    if address is None:
        # "local": a new instance even when `ray start` runs on this machine (ray.init() alone would join it).
        opts.update(address="local", num_cpus=default_threads(), num_gpus=0, object_store_memory=LOCAL_OBJECT_STORE)
    else:
        opts["address"] = address
    try:
        ray.init(**opts)
    except Exception as exc:  # noqa: BLE001 - connection and start-up failures are configuration errors here
        raise ConfigError(f"cannot start or reach Ray at {address or 'a local instance'}: {exc}") from exc
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.verbose_stats_logs = False
    return ray


def _dataset(ray, db_path: Path, todo, ids, plan: RayPlan, *, backend: str, batch_size: int):
    """shard rows -> read tasks (texts) -> encoder actor pool (vectors), streamed."""
    items = [{"start": a, "end": b, "ids": None if ids is None else [int(x) for x in ids[a:b]]} for a, b in todo]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    ds = ds.map_batches(
        _read_shard,
        batch_size=1,
        batch_format="pyarrow",
        fn_kwargs={"db_path": str(db_path)},
        num_cpus=READ_CPUS,
    )
    return ds.map_batches(
        ShardEncoder,
        batch_size=1,
        batch_format="pyarrow",
        fn_constructor_kwargs={
            "backend": "torch" if plan.gpus else backend,
            "threads": plan.threads,
            "batch_size": batch_size,
            "device": "cuda" if plan.gpus else "cpu",
        },
        compute=ray.data.ActorPoolStrategy(size=plan.workers),
        num_cpus=plan.cpus,
        num_gpus=plan.gpus or None,
    )


def _write_results(ds, shards_dir: Path, todo, *, progress: bool) -> str | None:
    """Each encoded shard, as it arrives: checked, written atomically with its digest; passages/s and ETA shown."""
    from tqdm import tqdm

    from backends.encoder import DIM, model_info

    expected = {(a, b) for a, b in todo}
    backend = None
    total = sum(b - a for a, b in todo)
    with tqdm(total=total, unit="passage", desc="embed (ray)", disable=not progress, file=sys.stderr) as bar:
        for row in ds.iter_rows():
            a, b = int(row["start"]), int(row["end"])
            vecs = np.frombuffer(row["vectors"], dtype=np.float32)
            if (a, b) not in expected or vecs.size != (b - a) * DIM:
                raise BuildError(f"{shards_dir}: Ray returned {vecs.size} values for shard [{a}, {b})")
            if backend is None:
                backend = row["backend"]
                check_model(shards_dir, model_info(backend))
            write_shard(shards_dir, a, b, vecs.reshape(b - a, DIM), row["digest"])
            expected.discard((a, b))
            bar.update(b - a)
    if expected:
        raise BuildError(f"{shards_dir}: Ray finished without {len(expected)} shards, e.g. {min(expected)}")
    return backend
