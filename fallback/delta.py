"""Corrective ingest: pages fetched live go into ``INDEX/delta/wiki.duckdb`` (same schema, origin='live').

Passage ids start at ``LIVE_PASSAGE_ID_BASE`` so they never collide with the main store's
dense 0..N-1 ids; a page already stored with the same page id and revision is skipped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

from fallback.live import LivePage, chunk_text
from indexer.schema import DDL
from wikiground.errors import BuildError
from wikiground.layout import delta_path
from wikiground.text import normalize_title

log = logging.getLogger(__name__)

LIVE_PASSAGE_ID_BASE = 1_000_000_000
_SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+|$)\s*")


def _sentences(text: str) -> list[tuple[int, int]]:
    spans = []
    for m in _SENTENCE.finditer(text):
        start, end = m.start(), m.end()
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            spans.append((start, end))
    return spans


def write_live_pages(index_dir: Path, pages: Sequence[LivePage]) -> int:
    """Add live pages to the delta store; returns how many pages were written (duplicates skipped)."""
    import duckdb

    path = delta_path(index_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        raise BuildError(f"{path}: cannot open the delta store: {exc}") from exc
    try:
        if not con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'pages'").fetchone()[0]:
            con.execute("BEGIN")
            con.execute(DDL)
            con.execute("COMMIT")
        con.execute("BEGIN")
        next_pid = con.execute(
            "SELECT coalesce(max(passage_id) + 1, ?) FROM passages", [LIVE_PASSAGE_ID_BASE]
        ).fetchone()[0]
        next_pid = max(next_pid, LIVE_PASSAGE_ID_BASE)
        for page in pages:
            if page.pageid is None:
                continue
            row = con.execute("SELECT rev_id FROM pages WHERE page_id = ?", [page.pageid]).fetchone()
            if row is not None:
                if row[0] == page.rev_id:
                    continue
                # A newer (or other) revision replaces the stored one wholesale.
                old = [
                    r[0]
                    for r in con.execute("SELECT passage_id FROM passages WHERE page_id = ?", [page.pageid]).fetchall()
                ]
                if old:
                    con.execute(f"DELETE FROM sentences WHERE passage_id IN ({','.join('?' * len(old))})", old)
                for table in ("passages", "sections", "pages"):
                    con.execute(f"DELETE FROM {table} WHERE page_id = ?", [page.pageid])
            con.execute(
                "INSERT INTO pages (page_id, title, namespace, rev_id, rev_timestamp, is_disambiguation, url, lead,"
                " title_norm, source_file, origin) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?, 'live')",
                [
                    page.pageid,
                    page.title,
                    page.rev_id,
                    page.fetched_at,
                    page.is_disambiguation,
                    page.url,
                    page.intro,
                    normalize_title(page.title),
                    page.url,
                ],
            )
            sections = [("", page.intro), *page.sections]
            passage_index = 0
            for section_index, (heading, text) in enumerate(sections):
                con.execute(
                    "INSERT INTO sections VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        page.pageid,
                        section_index,
                        1 if section_index == 0 else 2,
                        heading,
                        None if section_index == 0 else 0,
                        text,
                        heading,
                    ],
                )
                page_sentence = 0
                for piece in chunk_text(text):
                    con.execute(
                        "INSERT INTO passages VALUES (?, ?, ?, ?, ?, ?, 'text', ?)",
                        [next_pid, page.pageid, section_index, piece, page.title, heading, passage_index],
                    )
                    for i, (s, e) in enumerate(_sentences(piece)):
                        con.execute(
                            "INSERT INTO sentences VALUES (?, ?, ?, ?, ?, ?)",
                            [next_pid, i, page_sentence, piece[s:e], s, e],
                        )
                        page_sentence += 1
                    next_pid += 1
                    passage_index += 1
            written += 1
        con.execute("COMMIT")
    except duckdb.Error as exc:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass
        raise BuildError(f"{path}: writing live pages failed: {exc}") from exc
    finally:
        con.close()
    log.info("delta store %s: %d live page(s) written", path, written)
    return written
