"""``python -m retriever.mcp``: the MCP server's command (:mod:`retriever.serve.mcp`), kept under its first name."""

from __future__ import annotations

import sys

from retriever.serve.mcp import build_server, main

__all__ = ["build_server", "main"]

if __name__ == "__main__":
    sys.exit(main())
