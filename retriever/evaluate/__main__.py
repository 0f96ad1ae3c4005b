"""``python -m retriever.evaluate`` is ``wikiground eval``."""

from __future__ import annotations

import sys

from retriever.evaluate import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
