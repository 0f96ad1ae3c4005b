"""A query's channel searches on the cores (retriever.lanes): a thread per core, slowest first, results in order."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from retriever import lanes


def _tracked(delays: dict[str, float]):
    started: list[str] = []
    running = [0, 0]  # now, most at once
    lock = threading.Lock()

    def run(name: str) -> str:
        with lock:
            started.append(name)
            running[0] += 1
            running[1] = max(running)
        time.sleep(delays.get(name, 0.01))
        with lock:
            running[0] -= 1
        return name.upper()

    return run, started, running


def test_tasks_run_on_a_thread_per_core_slowest_first_with_results_in_order(monkeypatch):
    monkeypatch.setattr(lanes, "usable_cpus", lambda: 2)
    tasks = ["tfidf", "bm25", "title", "dense"]
    run, started, running = _tracked({"dense": 0.2})
    with ThreadPoolExecutor(8) as pool:
        assert lanes.run_tasks(pool, tasks, run, name=str) == ["TFIDF", "BM25", "TITLE", "DENSE"]
    assert started[:2] == ["dense", "bm25"] and sorted(started[2:]) == ["tfidf", "title"]
    assert running[1] == 2  # never more threads than cores: the others ran one after another beside dense


def test_every_channel_gets_a_thread_on_enough_cores(monkeypatch):
    monkeypatch.setattr(lanes, "usable_cpus", lambda: 16)
    run, _, running = _tracked(dict.fromkeys(("a", "b", "c"), 0.2))
    with ThreadPoolExecutor(8) as pool:
        assert lanes.run_tasks(pool, ["a", "b", "c"], run, name=str) == ["A", "B", "C"]
    assert running[1] == 3


def test_a_failing_task_raises_in_the_caller_and_no_new_task_starts(monkeypatch):
    monkeypatch.setattr(lanes, "usable_cpus", lambda: 1)
    started: list[str] = []

    def run(name: str) -> str:
        started.append(name)
        if name == "bm25":
            raise RuntimeError("lucene failed")
        return name

    with ThreadPoolExecutor(2) as pool, pytest.raises(RuntimeError, match="lucene failed"):
        lanes.run_tasks(pool, ["tfidf", "bm25", "title"], run, name=str)
    assert started == ["bm25"]  # first, as a slow channel; the rest never started
