"""`indexer.embed --engine ray`: Ray Data on a local instance writes the in-process embedder's shards, resumes
after the driver is killed, and its index answers as the in-process one does (real HotpotQA-2017 abstracts)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from tests.support.vectors import cosine_rows
from tests.test_tfidf import make_store

PASSAGES = 48
SHARD = 6  # 8 shards: the killed run stops between them
QUERIES = [
    "plant family that includes celery, carrots and parsley",
    "a private eye in a mystery novel series",
    "a country music song released as a single",
    "an American film directed in the 1990s",
]


def _embed_cli(index: Path, *args: str, **popen) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "indexer.embed", "--index", str(index), "--shard-size", str(SHARD), *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _run(index: Path, *args: str) -> str:
    proc = _embed_cli(index, *args)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return err


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """One real store, copied into an index folder per engine; the in-process index built in the first."""
    from backends import dense

    root = tmp_path_factory.mktemp("ray")
    (root / "local").mkdir()
    make_store(root / "local" / "wiki.duckdb", n=PASSAGES)
    (root / "ray").mkdir()
    shutil.copy(root / "local" / "wiki.duckdb", root / "ray" / "wiki.duckdb")
    dense.build(
        root / "local" / "wiki.duckdb", root / "local" / "dense", shard_size=SHARD, scope="all", keep_shards=True
    )
    return root


def _shard_seals(index: Path) -> list[Path]:
    return sorted((index / "dense" / "shards").glob("*.sha256"))


@pytest.fixture(scope="module")
def resumed(stores):
    """A Ray run whose driver (and the Ray instance it started) is killed after two shards, then run again to
    the end with --assemble: (index folder, the second run's stderr, shards kept from the first)."""
    index = stores / "ray"
    proc = _embed_cli(index, "--engine", "ray", "--batch-size", "4", start_new_session=True)
    deadline = time.monotonic() + 240
    while len(_shard_seals(index)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver's group: it and the Ray processes it started
    except ProcessLookupError:
        pass  # it finished first: the test below says so
    proc.communicate()
    kept = len(_shard_seals(index))
    err = _run(index, "--engine", "ray", "--workers", "1", "--assemble")
    return index, err, kept


def test_killed_ray_run_resumes_with_the_in_process_vectors(stores, resumed):
    """The second run keeps the first one's shards, encodes the rest, and every vector equals the in-process
    embedder's, bit for bit (same chunks, same ONNX graph and threads)."""
    index, err, kept = resumed
    assert 2 <= kept < PASSAGES // SHARD, f"{kept} shards before the kill"
    assert f"{kept} kept" in err and "embedded" in err
    assert "passage/s" in err  # the progress bar shows the rate (and the ETA)
    local = np.load(stores / "local" / "dense" / "vectors.npy")
    ray = np.load(index / "dense" / "vectors.npy")
    assert ray.shape == local.shape == (PASSAGES, 384)
    assert np.array_equal(ray, local)


def test_ray_index_answers_as_the_in_process_one(stores, resumed):
    from backends import dense

    local = dense.load(stores / "local")
    ray = dense.load(resumed[0])
    assert ray.params["count"] == PASSAGES and ray.params["encoder_backend"] == local.params["encoder_backend"]
    cos = cosine_rows(np.asarray(local.vectors), np.asarray(ray.vectors))
    assert cos.min() >= 0.9999, f"passage {int(cos.argmin())}: cosine {cos.min()}"
    for a, b in zip(local.search_batch(QUERIES, k=5), ray.search_batch(QUERIES, k=5)):
        assert [h.passage_id for h in a] == [h.passage_id for h in b]
        np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-5)


def test_rerun_with_every_shard_done_starts_no_ray(stores):
    err = _run(stores / "local", "--engine", "ray", "--address", "ray://127.0.0.1:1")
    assert "embedded 0 passages" in err and f"{PASSAGES // SHARD} kept" in err


@pytest.mark.parametrize("cpus", [1, 2, 3, 4, 8, 16, 64])
@pytest.mark.parametrize("workers", [None, 1, 2])
def test_actors_always_leave_room_for_read_tasks(cpus, workers):
    """On any machine, the encoder actors' CPU reservations leave at least one read task's worth free, so the
    pipeline cannot wait forever for CPUs (the deadlock of a 2-core machine)."""
    from backends.dense.ray_embed import READ_CPUS, plan_resources
    from wikiground.errors import ConfigError

    if workers is not None and cpus - READ_CPUS < 0.5 * workers:
        with pytest.raises(ConfigError):
            plan_resources(cpus, 0, workers=workers, threads=None, gpus_per_worker=0)
        return
    plan = plan_resources(cpus, 0, workers=workers, threads=None, gpus_per_worker=0)
    assert plan.workers * plan.cpus + READ_CPUS <= cpus
    assert plan.threads >= 1 and plan.cpus >= 0.5
    if cpus == 2 and workers is None:
        assert (plan.workers, plan.threads) == (1, 2)  # this machine: one actor on both cores


def test_gpu_workers_need_gpus():
    from backends.dense.ray_embed import plan_resources
    from wikiground.errors import ConfigError

    with pytest.raises(ConfigError, match="GPUs"):
        plan_resources(8, 0, workers=None, threads=None, gpus_per_worker=1)
    plan = plan_resources(8, 4, workers=None, threads=None, gpus_per_worker=1)
    assert (plan.workers, plan.gpus) == (4, 1) and plan.workers * plan.cpus <= 8
