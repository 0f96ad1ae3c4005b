"""What the machine gives this process."""

from __future__ import annotations

import os
from typing import Any


def usable_cpus() -> int:
    """The cores this process may run on (its affinity where the OS tells it, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def total_memory() -> int:
    """Bytes of physical RAM (0 when the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``"4G"``, ``"512M"``, ``"3.5GB"``, ``"1024"`` (bytes) -> bytes; ValueError for anything else."""
    raw = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in _UNITS else (raw, "")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a size (e.g. 4G, 512M)") from None
    if not value > 0 or value != value:
        raise ValueError(f"{text!r} is not a positive size")
    return int(value * _UNITS[unit])


# A build's default memory: a sixth of the machine (the rest stays with the OS's file cache, which the build's
# reads and Lucene's merges lean on, and with whatever else runs), between these bounds.
BUILD_MEMORY_MIN = 1 << 30
BUILD_MEMORY_MAX = 4 << 30


def default_build_memory(total: int | None = None) -> int:
    """What a build may use without risk on this machine: a sixth of its RAM, within 1 to 4 GiB."""
    total = total_memory() if total is None else total
    if total <= 0:
        return BUILD_MEMORY_MIN
    return max(BUILD_MEMORY_MIN, min(BUILD_MEMORY_MAX, total // 6))


def duckdb_size(nbytes: int) -> str:
    """A byte count as DuckDB's ``memory_limit`` reads it (whole MiB, at least 64)."""
    return f"{max(64, int(nbytes) >> 20)}MiB"


def quiet(con: Any) -> Any:
    """``con`` (a DuckDB connection) without DuckDB's progress bar, which it prints to stdout for any query past two
    seconds: the library logs its progress and the CLI owns the output, and a build whose stdout is a pipe nobody
    reads would block on it. Cursors made from ``con`` afterwards inherit the setting."""
    con.execute("SET enable_progress_bar = false")
    return con
