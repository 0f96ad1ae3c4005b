"""What the machine gives this process."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The cores this process may run on (its affinity where the OS tells it, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
