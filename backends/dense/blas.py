"""numpy's BLAS on one thread once the dense channel is open for searching.

A claim's products are small (a few queries against the rows of one block, or a few hundred re-ranked rows), and
the retriever already runs its channels side by side on the cores. OpenBLAS's helper threads add nothing to such
products, and after each one they spin for a while before they sleep, taking the cores that the encoder, Lucene
and TF-IDF are using at that moment, so a fused search finishes sooner without them (benchmarks/RESULTS.md).
Limiting them only around the channel's own products does not help: OpenBLAS starts its threads again, spinning,
each time the count is raised back.

So the limit is process-wide, like the torch encoder's ``torch.set_num_threads``: it is set once, when a dense
index is loaded for searching (builds keep their threads). ``WIKIGROUND_BLAS_THREADS`` sets another count.
threadpoolctl is imported on first use.
"""

from __future__ import annotations

import logging
import os
import threading

from wikiground.errors import ConfigError

log = logging.getLogger(__name__)

ENV = "WIKIGROUND_BLAS_THREADS"
_lock = threading.Lock()
_done = False


def limit_threads() -> None:
    """Set numpy's BLAS threads for this process (once): ``$WIKIGROUND_BLAS_THREADS``, else 1."""
    global _done
    with _lock:
        if _done:
            return
        raw = os.environ.get(ENV, "").strip() or "1"
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"{ENV}={raw!r}: expected a whole number of threads, at least 1")
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=int(raw), user_api="blas")
        log.debug("numpy's BLAS set to %s thread(s) for this process", raw)
        _done = True
