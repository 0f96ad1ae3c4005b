"""Concurrent single-claim searches answered together: requests that arrive while others are being searched
wait in a queue, and the next free lane answers everything queued with the same options as one block
(:class:`retriever.batch.BlockAnswerer`: each channel searches the block in one call, the store is asked once).

A lone request is answered at once, by the single-claim path, so an idle server answers as fast as before; under
load the blocks grow by themselves, and with them the claims per second (a block of claims costs far less than as
many single searches: the channels' batch calls and the store's lookups are shared). One block runs at a time
(``lanes``): a block already searches its channels side by side on every core, and a second lane would only split
the waiting claims into smaller blocks, which share less.

Each request's answer is its own: a block that fails is answered again claim by claim, so an error reaches only
the request that caused it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from retriever.api import NO_ID

Answer = Callable[[list[tuple[Any, str]]], list[dict[str, Any]]]

log = logging.getLogger(__name__)

MAX_BLOCK = 32  # claims in one block: bounds the time one block takes
LANES = 1  # one block at a time: a second lane splits the waiting claims into smaller blocks, which share less
# Under load (the last block held several claims), a drain waits this long for as many claims as the last block
# held: the clients it answered send their next claims within milliseconds of each other, and a block started at
# the first of them would leave the rest to wait for it. An idle server does not wait (after a loaded spell, its
# first request may, once).
GATHER_SECONDS = 0.025


@dataclass(slots=True)
class _Waiting:
    claim: str
    future: Future = field(default_factory=Future)


class Coalescer:
    """Queues of waiting claims, one per set of options (and index generation), answered on the executor's
    threads by at most ``lanes`` drains at a time; a drain goes on while claims are waiting."""

    def __init__(
        self, executor: Executor, *, lanes: int = LANES, max_block: int = MAX_BLOCK, gather: float = GATHER_SECONDS
    ):
        self.executor = executor
        self.lanes = max(1, lanes)
        self.max_block = max(1, max_block)
        self.gather = max(0.0, gather)
        self._lock = threading.Condition()
        self._last = 0  # claims in the last block
        self._queues: dict[Hashable, tuple[Answer, list[_Waiting]]] = {}
        self._draining = 0
        self.blocks = 0  # blocks answered, and the claims in them (for /stats)
        self.claims = 0

    def submit(self, key: Hashable, answer: Answer, claim: str) -> Future:
        """The future of ``claim``'s output line, answered by ``answer`` in a block with the other claims queued
        under ``key`` (the same options and index generation, so the same ``answer``)."""
        waiting = _Waiting(claim)
        with self._lock:
            self._queues.setdefault(key, (answer, []))[1].append(waiting)
            self._lock.notify_all()  # a drain gathering a block counts the new claim
            start = self._draining < self.lanes
            if start:
                self._draining += 1
        if start:
            try:
                self.executor.submit(self._drain)
            except BaseException:
                with self._lock:
                    self._draining -= 1
                waiting.future.cancel()
                raise
        return waiting.future

    def stats(self) -> dict[str, int]:
        with self._lock:
            waiting = self._count()
        return {"blocks": self.blocks, "claims": self.claims, "waiting": waiting}

    def _take(self) -> tuple[Answer, list[_Waiting]] | None:
        """The oldest queue's next block, or None (and this drain ends) when nothing waits."""
        with self._lock:
            self._gather()
            if not self._queues:
                self._draining -= 1
                return None
            key = next(iter(self._queues))
            answer, queue = self._queues[key]
            block, rest = queue[: self.max_block], queue[self.max_block :]
            if rest:
                self._queues[key] = (answer, rest)
            else:
                del self._queues[key]
        # A request that gave up (timed out, client gone) before its block started is dropped here.
        return answer, [w for w in block if w.future.set_running_or_notify_cancel()]

    def _gather(self) -> None:
        """Under load, wait (lock held, released while waiting) a moment for a block as large as the last one."""
        if self._last <= 1 or not self.gather:
            return
        deadline = time.monotonic() + self.gather
        while self._count() < min(self._last, self.max_block):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._lock.wait(left)

    def _count(self) -> int:
        return sum(len(q) for _, q in self._queues.values())

    def _drain(self) -> None:
        while (taken := self._take()) is not None:
            answer, block = taken
            if block:
                self._answer(answer, block)

    def _answer(self, answer: Answer, block: list[_Waiting]) -> None:
        try:
            lines = answer([(NO_ID, w.claim) for w in block])
        except BaseException as exc:  # noqa: BLE001 - answered again one by one: each request gets its own error
            if len(block) == 1:
                block[0].future.set_exception(exc)
                return
            log.debug("a block of %d claims failed (%s); answering them one by one", len(block), exc)
            for w in block:
                try:
                    w.future.set_result(answer([(NO_ID, w.claim)])[0])
                except BaseException as one:  # noqa: BLE001 - it reaches the request's error handler
                    w.future.set_exception(one)
            return
        with self._lock:
            self.blocks += 1
            self.claims += len(block)
            self._last = len(block)
        for w, line in zip(block, lines):
            w.future.set_result(line)
