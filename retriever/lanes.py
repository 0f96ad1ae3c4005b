"""A query's channel searches on the cores: at most one thread per core, the slowest channel started first.

The dense channel's query encoder is a search's longest task. With a thread per channel, the other channels'
threads took turns on its core with it, and its encoding took longer than alone; with as many threads as cores,
the encoder keeps a core and the other channels run one after another beside it, done before it is, so a block and
a loaded server both finish sooner. On more cores every channel still gets a thread of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TypeVar

from wikiground.system import usable_cpus

T = TypeVar("T")
R = TypeVar("R")

# The channels that take longest, started first (the others keep their order).
SLOWEST_FIRST = ("dense", "bm25")


def run_tasks(pool: Executor, tasks: Sequence[T], run: Callable[[T], R], name: Callable[[T], str]) -> list[R]:
    """``[run(t) for t in tasks]``, the tasks run on at most one thread per usable core (the calling thread one of
    them, the others from ``pool``), each thread taking the next task when it is done with one, slowest first
    (``name(task)``: the channel it searches, ranked by ``SLOWEST_FIRST``). The results come in ``tasks``' order:
    fusion sums the channels' scores in it. The first task to fail raises here, once all have stopped."""
    rank = {c: i for i, c in enumerate(SLOWEST_FIRST)}
    order = sorted(range(len(tasks)), key=lambda i: (rank.get(name(tasks[i]), len(rank)), i))
    results: list[R | None] = [None] * len(tasks)
    errors: list[BaseException] = []
    lock = threading.Lock()

    def lane() -> None:
        while True:
            with lock:
                if not order or errors:
                    return
                i = order.pop(0)
            try:
                results[i] = run(tasks[i])
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
                with lock:
                    errors.append(exc)

    helpers = [pool.submit(lane) for _ in range(min(usable_cpus(), len(tasks)) - 1)]
    lane()
    for f in helpers:
        f.result()
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]
