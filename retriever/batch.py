"""Batch answering for ``--queries``: into ``--out``, atomically and resumably, one failed claim answered by a
``status: error`` line while the others go on.

Claims go in blocks when they can (:class:`retriever.service.BlockAnswerer`: each channel searches a block at once,
two blocks in flight), else claim by claim (the live fallback, whose requests are one at a time and whose deadline
is per claim, and multi-hop retrieval); the output is the same either way, in query order."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from retriever.service import BLOCK_SIZE, error_line, json_line
from wikiground.errors import QueryError, WikigroundError
from wikiground.text import clean_surrogates

log = logging.getLogger("retriever.query")

__all__ = ["BatchRunner"]

BLOCKS_AHEAD = 2  # blocks in flight: one block's fusion (Python) overlaps the next one's searches


def _answer_one(answer: Callable[..., dict[str, Any]], id_: Any, text: str, where: str) -> tuple[dict[str, Any], str]:
    """The claim's result and its output line; a claim that fails gets a ``status: error`` line instead, and the
    batch goes on."""
    try:
        res = answer(text, id_)
        return res, json_line(res)
    except WikigroundError as exc:
        log.warning("%s: %s", where, exc)
        res = error_line(id_, text, str(exc))
    except Exception as exc:  # noqa: BLE001 - one claim must not sink the batch; the traceback is at debug
        log.debug("%s: unexpected error", where, exc_info=True)
        log.warning("%s: unexpected %s: %s (traceback with --verbose)", where, type(exc).__name__, exc)
        res = error_line(id_, text, f"unexpected {type(exc).__name__}: {exc}")
    return res, json_line(res)


class BatchRunner:
    """Answers a query file claim by claim, into ``--out`` (atomically, resumable) or stdout.

    With ``--out`` every answer goes to a journal beside it (:class:`_Journal`), flushed line by line, and
    ``--out`` is replaced only once every claim is answered: a batch cut off at any moment (kill, full disk)
    leaves the old ``--out`` as it was and a journal that ``--resume`` continues.
    """

    def __init__(
        self,
        answer: Callable[..., dict[str, Any]],
        queries: list[tuple[Any, str]],
        out: Path | None,
        *,
        resume: bool = False,
        quiet: bool = False,
        answer_block: Callable[[list[tuple[Any, str]]], list[dict[str, Any]]] | None = None,
        block_size: int | None = None,
        render: Callable[[dict[str, Any]], str] | None = None,
    ):
        self.answer = answer
        self.queries = queries
        self.out = out
        self.resume = resume
        self.quiet = quiet
        self.answer_block = answer_block
        self.block_size = max(1, int(block_size or getattr(answer_block, "size", BLOCK_SIZE)))
        self.render = render  # the output format's text of a line (None: the JSON line itself)
        self.requests = self.cache_hits = self.errors = 0

    def run(self, on_the_fly: bool = False) -> int:
        """Answer every claim not yet answered; 0 when all succeeded, 1 when some have ``status: error``."""
        from tqdm import tqdm

        journal = _Journal(self.out, self.queries, self.render) if self.out is not None else None
        kept = journal.start(self.resume) if journal is not None else set()
        if kept:
            print(f"resuming: {len(kept)} answers kept from {journal.source}", file=sys.stderr)
        todo = [i for i in range(len(self.queries)) if i not in kept]
        t0 = time.perf_counter()
        hidden = self.quiet or (not sys.stderr.isatty() and self.out is None)
        try:
            for i, res, line in tqdm(self._answers(todo), total=len(todo), unit="q", disable=hidden, file=sys.stderr):
                self._count(res)
                if journal is not None:
                    journal.append(i, line)
                else:
                    sys.stdout.write(line if self.render is None else self.render(res))
                    sys.stdout.flush()
            if journal is not None:
                journal.finish()
        except KeyboardInterrupt:
            if journal is not None:
                print(f"interrupted: the answers so far are in {journal.path}; rerun with --resume", file=sys.stderr)
            raise
        finally:
            if journal is not None:
                journal.close()
        self._report(len(todo), time.perf_counter() - t0, on_the_fly)
        return 1 if self.errors else 0

    def _answers(self, todo: list[int]) -> Iterator[tuple[int, dict[str, Any], str]]:
        """(position, result, output line) of each claim of ``todo``, in order: by blocks with ``answer_block``,
        else (and when a channel cannot load: each claim then gets its error line) one by one."""
        if self.answer_block is not None and len(todo) > 1:
            prepare = getattr(self.answer_block, "prepare", None)
            try:
                if prepare is not None:
                    prepare()
            except Exception as exc:  # noqa: BLE001 - reported per claim, by the claims' own answers
                log.debug("batch by blocks unavailable (%s); answering claim by claim", exc, exc_info=True)
            else:
                yield from self._blocks(todo)
                return
        for i in todo:
            yield (i, *self._one(self.answer, i))

    def _blocks(self, todo: list[int]) -> Iterator[tuple[int, dict[str, Any], str]]:
        """By blocks of ``block_size`` claims, ``BLOCKS_AHEAD`` of them in flight; a block that fails is answered
        again claim by claim, so only its failing claims get error lines."""
        from concurrent.futures import ThreadPoolExecutor

        blocks = [todo[a : a + self.block_size] for a in range(0, len(todo), self.block_size)]
        pool = ThreadPoolExecutor(BLOCKS_AHEAD, thread_name_prefix="batch")
        try:
            ahead = [pool.submit(self.answer_block, [self.queries[i] for i in b]) for b in blocks[:BLOCKS_AHEAD]]
            for n, block in enumerate(blocks):
                future = ahead.pop(0)
                if n + BLOCKS_AHEAD < len(blocks):
                    nxt = blocks[n + BLOCKS_AHEAD]
                    ahead.append(pool.submit(self.answer_block, [self.queries[i] for i in nxt]))
                yield from self._block_lines(block, future)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _block_lines(self, block: list[int], future: Any) -> Iterator[tuple[int, dict[str, Any], str]]:
        try:
            results = future.result()
            if len(results) != len(block):
                raise QueryError(f"{len(results)} answers to a block of {len(block)} claims")
        except Exception as exc:  # noqa: BLE001 - answered again one by one: only the failing claims fail
            log.debug("a block of %d claims failed (%s); answering them one by one", len(block), exc, exc_info=True)
            for i in block:
                yield (i, *self._one(self.answer, i))
            return
        for i, res in zip(block, results):
            yield (i, *self._one(lambda text, id_, res=res: res, i))

    def _one(self, answer: Callable[..., dict[str, Any]], i: int) -> tuple[dict[str, Any], str]:
        id_, text = self.queries[i]
        return _answer_one(answer, id_, text, clean_surrogates(f"query {i + 1} (id {id_!r})"))

    def _count(self, res: dict[str, Any]) -> None:
        self.requests += res.get("requests", 0)
        self.cache_hits += res.get("cache_hits", 0)
        self.errors += res.get("status") == "error"

    def _report(self, n: int, dt: float, on_the_fly: bool) -> None:
        msg = f"{n} queries in {dt:.1f} s ({n / dt if dt else 0:.1f}/s)"
        if on_the_fly:
            msg += f"; live requests {self.requests}, served from cache {self.cache_hits}"
        if self.errors:
            msg += f"; {self.errors} failed (status: error lines)"
        print(msg, file=sys.stderr)


class _Journal:
    """The answers of a batch into ``out`` so far: ``.OUT.partial`` beside it, one ``position<TAB>line`` per
    answered claim, appended and flushed one by one (a kill can only tear the last line, dropped on resume).

    ``--resume`` reads it (or, when there is none, a finished ``out``), keeps the answers whose position, id and
    query match the query file (the last one per position; ``status: error`` answers are asked again) and
    answers the rest; ``finish`` writes ``out`` in query order with an atomic rename and deletes the journal.
    Only one batch writes a journal at a time (an exclusive lock).
    """

    def __init__(
        self, out: Path, queries: list[tuple[Any, str]], render: Callable[[dict[str, Any]], str] | None = None
    ):
        self.out = out
        self.queries = queries
        self.render = render
        self.path = out.parent / f".{out.name}.partial"
        self.source: Path | None = None
        self._fh: Any = None
        self._at: dict[int, tuple[int, int]] = {}  # position -> (offset, length) of its answer in the journal

    def start(self, resume: bool) -> set[int]:
        """Open (and lock) the journal; the positions already answered."""
        existed = self.path.exists()
        try:
            self._fh = open(self.path, "a+b", buffering=0)  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise QueryError(f"{self.path}: cannot write the batch's answers: {exc.strerror or exc}") from exc
        self._lock()
        if existed and not resume:
            self.close()
            raise QueryError(
                f"{self.path}: an interrupted batch into {self.out} left its answers here: rerun with --resume to "
                "continue it, or delete it to start again"
            )
        if resume and existed:
            self.source = self.path
            self._load_journal()
        elif resume and self.out.exists() and self.render is None:  # a finished run in another format: asked again
            self.source = self.out
            self._load_out()
        else:
            self._fh.truncate(0)
        return set(self._at)

    def _lock(self) -> None:
        import fcntl

        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._fh.close()
            raise QueryError(f"{self.out}: another batch is writing it (its journal {self.path} is locked)") from exc

    def _load_journal(self) -> None:
        offset = 0
        with open(self.path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                head, tab, body = raw.partition(b"\t")
                obj = _parse_line(body) if tab and head.isdigit() and raw.endswith(b"\n") else None
                if obj is None:  # a torn last line (killed mid-write): dropped and answered again
                    self._fh.truncate(offset)
                    break
                self._keep(int(head), obj, offset + len(head) + 1, len(body) - 1, f"{self.path}:{lineno}")
                offset += len(raw)

    def _load_out(self) -> None:
        with open(self.out, "rb") as fh:
            for i, raw in enumerate(fh):
                obj = _parse_line(raw) if raw.endswith(b"\n") else None
                if obj is None:
                    break
                self._check(i, obj, f"{self.out}:{i + 1}")
                if obj.get("status") != "error":
                    self.append(i, raw.decode("utf-8"))

    def _keep(self, i: int, obj: dict[str, Any], offset: int, length: int, where: str) -> None:
        self._check(i, obj, where)
        if obj.get("status") == "error":
            self._at.pop(i, None)
        else:
            self._at[i] = (offset, length)

    def _check(self, i: int, obj: dict[str, Any], where: str) -> None:
        if i >= len(self.queries):
            raise QueryError(f"{where}: answer to query {i + 1}, but the query file has {len(self.queries)}")
        id_, text = self.queries[i]
        want = {"id": id_, "query": text}
        got = {"id": obj.get("id"), "query": obj.get("query")}
        if json_line(got) != json_line(want):
            raise QueryError(
                f"{where}: answers {json_line(got).strip()} but query {i + 1} is {json_line(want).strip()}: not "
                f"an answer to these queries (delete {self.source} or run without --resume)"
            )

    def append(self, i: int, line: str) -> None:
        data = f"{i}\t{line}".encode()
        try:
            offset = self._fh.seek(0, os.SEEK_END)
            view = memoryview(data)
            while view:
                view = view[self._fh.write(view) :]
        except OSError as exc:
            raise QueryError(
                f"{self.path}: cannot write ({exc.strerror or exc}); {self.out} is untouched and the "
                f"{len(self._at)} answers so far are kept: free space and rerun with --resume"
            ) from exc
        prefix = len(str(i)) + 1
        self._at[i] = (offset + prefix, len(data) - prefix - 1)

    def finish(self) -> None:
        """Write ``out`` in query order (atomically) from the journal, then delete the journal."""
        from wikiground.layout import atomic_path

        missing = [i + 1 for i in range(len(self.queries)) if i not in self._at]
        if missing:
            raise QueryError(f"{self.path}: queries {missing[:5]} have no answer")
        try:
            with atomic_path(self.out) as tmp, open(tmp, "wb") as dst:
                for i in range(len(self.queries)):
                    offset, length = self._at[i]
                    raw = os.pread(self._fh.fileno(), length, offset)
                    dst.write(raw + b"\n" if self.render is None else self.render(json.loads(raw)).encode())
                dst.flush()
                os.fsync(dst.fileno())
        except OSError as exc:
            raise QueryError(
                f"{self.out}: cannot write ({exc.strerror or exc}); the old file is untouched and every answer "
                f"is kept in {self.path}: free space and rerun with --resume"
            ) from exc
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()


def _parse_line(raw: bytes) -> dict[str, Any] | None:
    """An output line as written by a batch (valid UTF-8 JSON object with a status), else None."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and "status" in obj else None
