"""The evidence explorer: a read-only web page at ``/`` for looking at why a claim got its evidence.

The page (``static/``: plain HTML, CSS and JavaScript modules, no build step, nothing fetched from another origin)
calls the server's own routes: ``POST /search``, ``GET /pages/{title}``, and the three small ones installed here
under ``/explorer/api/``: the server's request defaults, passages by id (an item's ``more_passages``), and pages'
revisions (the date beside each ``rev_id``). A batch output and a gold file are read in the browser, never uploaded.
"""

from __future__ import annotations

from retriever.serve.explorer.routes import STATIC, install

__all__ = ["STATIC", "install"]
