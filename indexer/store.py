"""Read side of the DuckDB store (``INDEX/wiki.duckdb``), plus the live delta (``INDEX/delta/wiki.duckdb``).

Accepts a path to an index folder, a path to a ``.duckdb`` file, or an open DuckDB connection
(sqlite-utils style). Everything returned is a record from :mod:`wikiground.records`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wikiground.errors import IndexCorruptError, IndexMissingError
from wikiground.layout import STORE_FILE, delta_path
from wikiground.records import Page, Passage
from wikiground.text import canonical_title, normalize_title

__all__ = ["Resolution", "Store"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Resolution:
    """A title string resolved to a page of the store."""

    query: str
    page_id: int
    title: str
    via_redirect: str | None = None  # the redirect title that led here
    fragment: str | None = None
    exact: bool = True  # False when matched only through the loose normalised key
    origin: str = "local"
    is_disambiguation: bool = False  # the page it resolves to


_PAGE_COLS = "page_id, title, namespace, rev_id, rev_timestamp, is_disambiguation, url, lead"
_PASSAGE_COLS = "passage_id, page_id, section_index, text, title, heading_path, source"


# resolve_titles in one round trip: rows (kind, key, redirect source, target title, fragment, page_id,
# is_disambiguation) of kind 0 exact title, 1 redirect, 2 normalised title, 3 normalised redirect ($1: canonical
# titles, $2: normalised keys). Several pages may share a normalised key ("Paris" / "PARIS"): the shortest title
# wins, then the lowest id.
_RESOLVE_SQL = """
SELECT 0, title, NULL, title, NULL, page_id, is_disambiguation FROM pages WHERE title IN (SELECT unnest($1))
UNION ALL
SELECT 1, r.source_title, r.source_title, r.target_title, r.target_fragment, p.page_id, p.is_disambiguation
FROM redirects r JOIN pages p ON p.title = r.target_title WHERE r.source_title IN (SELECT unnest($1))
UNION ALL
SELECT 2, title_norm, NULL, arg_min(title, length(title) * 1e12 + page_id), NULL,
       arg_min(page_id, length(title) * 1e12 + page_id), arg_min(is_disambiguation, length(title) * 1e12 + page_id)
FROM pages WHERE title_norm IN (SELECT unnest($2)) GROUP BY title_norm
UNION ALL
SELECT 3, r.source_norm, arg_min(r.source_title, r.source_title), arg_min(r.target_title, r.source_title),
       arg_min(r.target_fragment, r.source_title), arg_min(p.page_id, r.source_title),
       arg_min(p.is_disambiguation, r.source_title)
FROM redirects r JOIN pages p ON p.title = r.target_title WHERE r.source_norm IN (SELECT unnest($2))
GROUP BY r.source_norm
"""


def _page(row: Sequence[Any]) -> Page:
    return Page(
        page_id=int(row[0]),
        title=row[1],
        namespace=int(row[2]),
        rev_id=row[3],
        rev_timestamp=None if row[4] is None else str(row[4]),
        is_disambiguation=bool(row[5]),
        url=row[6],
        lead=row[7] or "",
    )


def _passage(row: Sequence[Any]) -> Passage:
    return Passage(
        passage_id=int(row[0]),
        page_id=int(row[1]),
        section_index=int(row[2]),
        text=row[3],
        title=row[4],
        heading_path=row[5],
        source=row[6],
    )


def _connect(path: Path):
    import duckdb

    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise IndexCorruptError(f"{path}: cannot open the store: {exc}") from exc


class Store:
    """Lookups over the store and its live delta. Thread-safe: each call uses its own cursor."""

    def __init__(self, con: Any, *, path: Path | None = None, delta: Any | None = None):
        self.path = path
        self._main = con
        self._delta = delta
        self._lock = threading.Lock()

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, where: str | Path | Any) -> Store:
        """Open from an index folder, a ``.duckdb`` file or a DuckDB connection."""
        if not isinstance(where, (str, Path)):
            return cls(where)
        p = Path(where)
        db = p / STORE_FILE if p.is_dir() or not p.suffix else p
        if not db.is_file():
            raise IndexMissingError(
                f"no store at {db}: build one with `python -m indexer build --dump DUMP --out {p}` (or `make index`)"
            )
        index_dir = db.parent
        delta_db = delta_path(index_dir)
        delta = _connect(delta_db) if delta_db.is_file() else None
        return cls(_connect(db), path=index_dir, delta=delta)

    def reload_delta(self) -> None:
        """Pick up a delta written since opening (corrective ingest)."""
        if self.path is None:
            return
        delta_db = delta_path(self.path)
        with self._lock:
            if self._delta is not None:
                self._delta.close()
            self._delta = _connect(delta_db) if delta_db.is_file() else None

    def close(self) -> None:
        for con in (self._main, self._delta):
            if con is not None:
                con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------
    def _cons(self) -> Iterator[Any]:
        yield self._main
        if self._delta is not None:
            yield self._delta

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        rows: list[tuple] = []
        for con in self._cons():
            rows.extend(con.cursor().execute(sql, list(params)).fetchall())
        return rows

    # -- pages and passages ------------------------------------------------------------------
    def count(self, table: str) -> int:
        return sum(con.cursor().execute(f"SELECT count(*) FROM {table}").fetchone()[0] for con in self._cons())

    def pages(self, page_ids: Iterable[int]) -> dict[int, Page]:
        ids = sorted({int(i) for i in page_ids})
        if not ids:
            return {}
        rows = self._all(f"SELECT {_PAGE_COLS} FROM pages WHERE page_id IN (SELECT unnest(?))", [ids])
        return {int(r[0]): _page(r) for r in rows}

    def page(self, page_id: int) -> Page | None:
        return self.pages([page_id]).get(int(page_id))

    def page_by_title(self, title: str) -> Page | None:
        res = self.resolve_title(title)
        return self.page(res.page_id) if res else None

    def passages(self, passage_ids: Iterable[int]) -> dict[int, Passage]:
        ids = sorted({int(i) for i in passage_ids})
        if not ids:
            return {}
        rows = self._all(f"SELECT {_PASSAGE_COLS} FROM passages WHERE passage_id IN (SELECT unnest(?))", [ids])
        return {int(r[0]): _passage(r) for r in rows}

    def passages_with_pages(self, passage_ids: Iterable[int]) -> dict[int, tuple[Passage, Page, list[int]]]:
        """Passages with their page and page-level sentence ids, in one round trip (the evidence path)."""
        ids = sorted({int(i) for i in passage_ids})
        if not ids:
            return {}
        cols = ", ".join(f"s.{c.strip()}" for c in _PASSAGE_COLS.split(","))
        pcols = ", ".join(f"p.{c.strip()}" for c in _PAGE_COLS.split(","))
        # The sentence ids are grouped for the wanted passages first: a subquery per row was planned as a join
        # with every sentence of the store (~20 ms a query on 10k passages, against ~6 ms).
        rows = self._all(
            f"WITH ids AS (SELECT unnest(?) AS passage_id), "
            f"sent AS (SELECT passage_id, list(page_sentence_index ORDER BY sentence_index) AS sids FROM sentences "
            f"WHERE passage_id IN (SELECT passage_id FROM ids) GROUP BY passage_id) "
            f"SELECT {cols}, {pcols}, sent.sids FROM passages s JOIN pages p ON p.page_id = s.page_id "
            f"LEFT JOIN sent ON sent.passage_id = s.passage_id WHERE s.passage_id IN (SELECT passage_id FROM ids)",
            [ids],
        )
        n = len(_PASSAGE_COLS.split(","))
        m = len(_PAGE_COLS.split(","))
        return {int(r[0]): (_passage(r[:n]), _page(r[n : n + m]), [int(x) for x in (r[n + m] or [])]) for r in rows}

    def page_passages(self, page_id: int, *, limit: int | None = None) -> list[Passage]:
        sql = f"SELECT {_PASSAGE_COLS} FROM passages WHERE page_id = ? ORDER BY passage_index"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_passage(r) for r in self._all(sql, [int(page_id)])]

    def lead_passages(self, page_ids: Iterable[int]) -> dict[int, Passage]:
        """First text passage of each page (its intro)."""
        ids = sorted({int(i) for i in page_ids})
        if not ids:
            return {}
        rows = self._all(
            f"SELECT {_PASSAGE_COLS} FROM passages WHERE page_id IN (SELECT unnest(?)) "
            "QUALIFY row_number() OVER (PARTITION BY page_id ORDER BY (source <> 'text'), passage_index) = 1",
            [ids],
        )
        return {int(r[1]): _passage(r) for r in rows}

    def sentences(self, passage_id: int) -> list[tuple[int, int, str]]:
        """(sentence_index, page_sentence_index, text) of a passage."""
        return [
            (int(a), int(b), c)
            for a, b, c in self._all(
                "SELECT sentence_index, page_sentence_index, text FROM sentences WHERE passage_id = ? "
                "ORDER BY sentence_index",
                [int(passage_id)],
            )
        ]

    def links(self, page_id: int) -> list[tuple[str, str]]:
        return [
            (t, a)
            for t, a in self._all("SELECT target_title, anchor_text FROM links WHERE page_id = ?", [int(page_id)])
        ]

    def see_also(self, page_id: int) -> list[str]:
        return [r[0] for r in self._all("SELECT target_title FROM see_also WHERE page_id = ?", [int(page_id)])]

    def categories(self, page_id: int) -> list[str]:
        return [r[0] for r in self._all("SELECT category FROM categories WHERE page_id = ?", [int(page_id)])]

    def infobox(self, page_id: int) -> list[tuple[str, str, str]]:
        return [
            tuple(r)
            for r in self._all("SELECT infobox_type, key, value FROM infobox WHERE page_id = ?", [int(page_id)])
        ]

    # -- titles ------------------------------------------------------------------------------
    def resolve_title(self, title: str) -> Resolution | None:
        return self.resolve_titles([title]).get(title)

    def resolve_titles(self, titles: Iterable[str], *, loose: bool = True) -> dict[str, Resolution]:
        """Resolve strings to pages: exact title, then redirect, then (``loose``) the normalised key.

        One query per store however many strings (the entity matcher sends every n-gram of a claim): each
        round trip costs DuckDB a few milliseconds, more than the lookups themselves.
        """
        wanted = [t for t in dict.fromkeys(titles) if t and t.strip()]
        if not wanted:
            return {}
        canon = {t: canonical_title(t) for t in wanted}
        norm = {t: normalize_title(t) for t in wanted} if loose else {}
        keys = sorted({k for k in norm.values() if k})
        out: dict[str, Resolution] = {}
        for con in self._cons():
            origin = "local" if con is self._main else "live"
            found: list[dict[str, tuple]] = [{}, {}, {}, {}]  # by kind: exact, redirect, loose title, loose redirect
            for kind, key, *rest in con.cursor().execute(_RESOLVE_SQL, [sorted(set(canon.values())), keys]).fetchall():
                found[kind][key] = (kind, *rest)
            for t in wanted:
                if t in out:
                    continue
                c, k = canon[t], norm.get(t)
                row = found[0].get(c) or found[1].get(c) or found[2].get(k) or found[3].get(k)
                if row is not None:
                    kind, source, target, frag, pid, dab = row
                    out[t] = Resolution(
                        t,
                        int(pid),
                        target,
                        via_redirect=source,
                        fragment=frag,
                        exact=kind < 2,
                        origin=origin,
                        is_disambiguation=bool(dab),
                    )
        return out

    def known_keys(self, keys: Iterable[str]) -> set[str]:
        """Which normalised keys name a page or a redirect (of any target, even one outside the store)."""
        ks = sorted({k for k in keys if k})
        if not ks:
            return set()
        found: set[str] = set()
        for con in self._cons():
            cur = con.cursor()
            found.update(
                r[0]
                for r in cur.execute(
                    "SELECT DISTINCT title_norm FROM pages WHERE title_norm IN (SELECT unnest(?))", [ks]
                ).fetchall()
            )
            found.update(
                r[0]
                for r in cur.execute(
                    "SELECT DISTINCT source_norm FROM redirects WHERE source_norm IN (SELECT unnest(?))", [ks]
                ).fetchall()
            )
        return found
