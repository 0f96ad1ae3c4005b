"""Long-running query processes (the server, batch runs, the MCP server) keep what start-up made out of the cyclic
garbage collector's way.

Start-up leaves some 135k objects behind (the modules of scipy, scikit-learn, pandas, pyjnius, onnxruntime, and
the index's own). CPython's full collection, which the allocations of a few hundred claims trigger, walks them
all, for tens of milliseconds each time: in the loaded server that was where its slowest answers came from
(benchmarks/RESULTS.md). ``gc.freeze()`` moves them to a permanent generation that collections skip;
they are still freed by reference counting, and only reference cycles among them wait for the next
:func:`settle` (a reload of the server's index unfreezes, collects and freezes again).

Only the commands call it: in a library user's process the heap is theirs. At exit the objects are given back to
the collector, so that extension modules (DuckDB's nanobind) find theirs released and stay quiet.
"""

from __future__ import annotations

import atexit
import gc


def settle() -> None:
    """Collect what start-up left as garbage, then take every object still alive out of future collections."""
    gc.unfreeze()  # what an earlier call froze (a retired index generation, say) can be collected again
    gc.collect()
    gc.freeze()
    atexit.unregister(gc.unfreeze)
    atexit.register(gc.unfreeze)
