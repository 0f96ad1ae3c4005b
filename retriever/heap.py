"""Long-running query processes (the server, batch runs, the MCP server) keep what start-up made out of the cyclic
garbage collector's way.

Start-up leaves some 135k objects behind (the modules of scipy, scikit-learn, pandas, pyjnius, onnxruntime, and
the index's own). CPython's full collection, which the allocations of a few hundred claims trigger, walks them
all, for tens of milliseconds each time: in the loaded server that was where its slowest answers came from
(benchmarks/RESULTS.md). ``gc.freeze()`` moves them to a permanent generation that collections skip;
they are still freed by reference counting, and only reference cycles among them wait for the next
:func:`settle` (a reload of the server's index unfreezes, collects and freezes again).

The same processes collect the young generations less often (:data:`THRESHOLDS`). A search allocates and drops
thousands of small containers (hits, fused passages, evidence rows), nearly all freed by reference counting as it
ends, yet CPython's default (700, 10, 10) runs a collection every 700 net allocations: a loaded server ran
thousands of them a minute, each holding the GIL. With 20,000 net objects between collections (a few MB of garbage
cycles at most) it runs few, and its answers no longer wait behind them.

Only the commands call it: in a library user's process the heap is theirs. At exit the objects are given back to
the collector, so that extension modules (DuckDB's nanobind) find theirs released and stay quiet.
"""

from __future__ import annotations

import atexit
import gc

THRESHOLDS = (20_000, 50, 50)  # gc.set_threshold's: net allocations before a young collection, and the ratios


def settle() -> None:
    """Collect what start-up left as garbage, then take every object still alive out of future collections, and
    collect the young generations less often (:data:`THRESHOLDS`)."""
    gc.set_threshold(*THRESHOLDS)
    gc.unfreeze()  # what an earlier call froze (a retired index generation, say) can be collected again
    gc.collect()
    gc.freeze()
    atexit.unregister(gc.unfreeze)
    atexit.register(gc.unfreeze)
