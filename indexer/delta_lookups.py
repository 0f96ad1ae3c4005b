"""The merged delta (``indexer.store.open_delta``) made ready for the lookups every query makes of it.

The base answers titles from memory-mapped lookups and facts from triples ordered by subject. The delta is an
in-memory DuckDB merged from its segments in segment order, without indexes: each title resolution, lead passage
and fact lookup of a query scanned every delta row, and with a day's or a week's delta that cost a query more than
the base's search. So, once per delta read, what a query asks by key goes into dicts: the titles and redirects
(:class:`DeltaTitles`, answering as ``indexer.store``'s ``_RESOLVE_SQL`` does), each page's origin and lead
passage. The page-keyed tables get the base's indexes, and the triples and sentences are ordered by subject and by
passage, so that DuckDB's row-group min/max find a page's facts and a passage's sentences, as in the base.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexer.graph_lookups import Graph

# Rows of resolve_titles: (kind, key, redirect source, target title, fragment, page_id, is_disambiguation).
Row = tuple


class DeltaTitles:
    """The delta's titles: exact (kind 0), redirects to a delta page (1), normalised titles (2: the shortest title,
    then the lowest page id) and normalised redirects (3: the lowest source title)."""

    def __init__(self, pages: Iterable[Sequence[Any]], redirects: Iterable[Sequence[Any]]):
        self.exact: dict[str, Row] = {}
        self.redirect: dict[str, Row] = {}
        self.loose: dict[str, tuple[tuple, Row]] = {}
        self.loose_redirect: dict[str, Row] = {}
        self.norms: set[str] = set()  # normalised keys of every title and redirect (known_keys)
        by_title: dict[str, tuple[int, bool]] = {}
        for page_id, title, norm, dab in pages:
            pid, dab = int(page_id), bool(dab)
            by_title[title] = (pid, dab)
            self.exact[title] = (0, title, None, title, None, pid, dab)
            if norm:
                self.norms.add(norm)
                rank = (len(title), pid)
                held = self.loose.get(norm)
                if held is None or rank < held[0]:
                    self.loose[norm] = (rank, (2, norm, None, title, None, pid, dab))
        for source, norm, target, fragment in redirects:
            if norm:
                self.norms.add(norm)
            found = by_title.get(target)
            if found is None:
                continue
            pid, dab = found
            self.redirect[source] = (1, source, source, target, fragment, pid, dab)
            if norm and (norm not in self.loose_redirect or source < self.loose_redirect[norm][2]):
                self.loose_redirect[norm] = (3, norm, source, target, fragment, pid, dab)

    @classmethod
    def of(cls, con: Any) -> DeltaTitles:
        cur = con.cursor()
        pages = cur.execute("SELECT page_id, title, title_norm, is_disambiguation FROM pages").fetchall()
        redirects = cur.execute("SELECT source_title, source_norm, target_title, target_fragment FROM redirects")
        return cls(pages, redirects.fetchall())

    def rows(self, titles: Iterable[str], keys: Iterable[str]) -> list[Row]:
        """The rows ``_RESOLVE_SQL`` answers for canonical ``titles`` and normalised ``keys``."""
        out: list[Row] = []
        for t in titles:
            out.extend(r for r in (self.exact.get(t), self.redirect.get(t)) if r is not None)
        for k in keys:
            loose = self.loose.get(k)
            out.extend(r for r in (loose[1] if loose else None, self.loose_redirect.get(k)) if r is not None)
        return out


@dataclass(frozen=True, slots=True)
class DeltaLookups:
    """What a query asks of the delta by key, read once: its titles, each page's origin and revision time, each
    page's lead passage (id and title) as ``indexer.store``'s ``_LEAD_SQL`` picks it, and its facts by subject as
    the base's graph lookups hold them (None: the kg channel asks the delta's ``triples`` in SQL)."""

    titles: DeltaTitles
    origins: dict[int, tuple[str, str | None]]
    leads: dict[int, tuple[int, str]]
    graph: Graph | None = None
    # Every sentence's passage id (ascending) and page-level sentence id, in passage and sentence order.
    sentences: tuple[Any, Any] | None = None
    # page_id -> the page's row as evidence shows it (the columns ``prepare`` was given; None: ask in SQL)
    pages: dict[int, tuple] | None = None

    def sentence_ids(self, passage_ids: Iterable[int]) -> dict[int, list[int]] | None:
        """passage_id -> its page-level sentence ids, in order, for those of ``passage_ids`` with sentences (the
        lookups of the main store's evidence; None: not read, ask the delta in SQL)."""
        if self.sentences is None:
            return None
        import numpy as np

        owners, ids = self.sentences
        wanted = np.asarray(sorted(set(passage_ids)), dtype=np.int64)
        starts, ends = np.searchsorted(owners, wanted, "left"), np.searchsorted(owners, wanted, "right")
        return {p: ids[a:b].tolist() for p, a, b in zip(wanted.tolist(), starts.tolist(), ends.tolist()) if a < b}


# The base's page-keyed indexes (indexer.schema.INDEXES) a query still reaches in SQL (titles and redirects are
# answered from DeltaTitles).
_INDEXES = (
    "CREATE INDEX pages_title ON pages(title)",
    "CREATE INDEX passages_page ON passages(page_id)",
    "CREATE INDEX links_page ON links(page_id)",
    "CREATE INDEX categories_page ON categories(page_id)",
)


# Tables ordered once by the key a query looks them up by: the row groups' min/max of the key then find its rows,
# as in the base (an index over them costs more memory, and they are the delta's largest).
_ORDERED = {"triples": "subject_page_id, passage_id", "sentences": "passage_id, sentence_index"}


_LEADS_SQL = (
    "SELECT page_id, passage_id, title FROM passages "
    "QUALIFY row_number() OVER (PARTITION BY page_id ORDER BY (source <> 'text'), passage_index) = 1"
)


def prepare(con: Any, page_columns: str | None = None) -> DeltaLookups:
    """Index the merged delta ``con`` for lookups (its triples ordered by subject, its sentences by passage) and
    return what is looked up in memory; with ``page_columns`` (a select list starting with ``page_id``), each
    page's row of them, which evidence asks for every claim that finds a delta passage (a round trip to DuckDB
    cost more than the rest of the delta's evidence)."""
    for table, key in _ORDERED.items():
        con.execute(f"CREATE TABLE {table}_ordered AS SELECT * FROM {table} ORDER BY {key}")
        con.execute(f"DROP TABLE {table}")
        con.execute(f"ALTER TABLE {table}_ordered RENAME TO {table}")
    for sql in _INDEXES:
        con.execute(sql)
    cur = con.cursor()
    origins = {int(a): (b, c) for a, b, c in cur.execute("SELECT page_id, origin, rev_timestamp FROM pages").fetchall()}
    leads = {int(a): (int(b), c) for a, b, c in cur.execute(_LEADS_SQL).fetchall()}
    sql = "SELECT passage_id, page_sentence_index FROM sentences ORDER BY passage_id, sentence_index"
    columns = cur.execute(sql).fetchnumpy()
    sentences = (columns["passage_id"].astype("int64"), columns["page_sentence_index"].astype("int64"))
    pages = None
    if page_columns is not None:
        pages = {int(r[0]): r for r in cur.execute(f"SELECT {page_columns} FROM pages").fetchall()}
    return DeltaLookups(DeltaTitles.of(con), origins, leads, delta_graph(con), sentences, pages)


def delta_graph(con: Any) -> Graph | None:
    """The delta's facts as the base's graph lookups hold them (``indexer.graph_lookups``): a query's facts of a
    delta page are then a binary search and a slice, not two SQL scans of the delta's triples, which cost a claim
    more than the base's search with a large delta. The arrays are written to a scratch folder, mapped, and the
    folder removed at once (the maps keep the files until the graph goes). None without facts, or where their
    sentence spans are ambiguous (then the kg channel asks the delta in SQL)."""
    from indexer import graph_lookups

    if not con.execute("SELECT count(*) FROM triples").fetchall()[0][0]:
        return None
    folder = Path(tempfile.mkdtemp(prefix="wikiground-delta-graph-"))
    try:
        return graph_lookups.Graph(folder) if graph_lookups.write(con, folder) else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
