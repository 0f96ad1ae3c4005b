"""The evidence server: ``python -m retriever.serve --index DIR [--host 127.0.0.1] [--port 8765]``.

One process loads the index once (the JVM, the model, every channel) and answers many clients over HTTP:
``POST /search`` (one CLI output line), ``POST /search/batch`` (NDJSON), ``GET /pages/{title}``, ``GET /health``,
``GET /stats``, ``POST /reload`` (or SIGHUP), DSPy's ColBERTv2 client at ``GET /api/search`` and a MediaWiki Action
API subset at ``/w/api.php``. FastAPI and uvicorn are imported only by :mod:`retriever.serve.app` and the command.
"""

from __future__ import annotations

__all__ = ["create_app", "ServerState"]


def __getattr__(name: str):
    if name == "create_app":
        from retriever.serve.app import create_app

        return create_app
    if name == "ServerState":
        from retriever.serve.state import ServerState

        return ServerState
    raise AttributeError(name)
