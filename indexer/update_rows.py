"""Delta rows of an update: pages parsed from a dump as the base build parses them (``indexer.store_writer``), a
page's rows copied from the index (a move, an undelete), retitled, and redirect rows."""

from __future__ import annotations

from collections.abc import Sequence

from indexer.delta_segment import delta_passage_id
from indexer.readers import RawPage
from indexer.store import Store, in_keys
from indexer.store_writer import PageRows, page_rows
from indexer.triples import RELATION_OF_SOURCE, SOURCES
from wikiground.text import normalize_title, page_url

PARALLEL_MIN_PAGES = 200  # from this many pages, the cleaner runs in worker processes


def _parse_chunk(batch: list[RawPage], max_page_chars: int | None, passage_words: int | None) -> list[PageRows]:
    options: dict[str, int] = {}
    if max_page_chars:
        options["max_page_chars"] = int(max_page_chars)
    if passage_words:
        options["passage_words"] = int(passage_words)
    return [page_rows(raw, **options) for raw in batch]


def parse_pages(
    pages: Sequence[RawPage], max_page_chars: int | None, passage_words: int | None, workers: int | None
) -> list[PageRows]:
    """The pages cleaned and chunked with the base build's options, on ``workers`` processes (default: the usable
    cores) when there are many."""
    from wikiground.system import usable_cpus

    n = usable_cpus() if workers is None else max(1, int(workers))
    if n <= 1 or len(pages) < PARALLEL_MIN_PAGES:
        return _parse_chunk(list(pages), max_page_chars, passage_words)
    from concurrent.futures import ProcessPoolExecutor

    size = max(16, len(pages) // (n * 4))
    chunks = [list(pages[i : i + size]) for i in range(0, len(pages), size)]
    with ProcessPoolExecutor(n) as pool:
        parts = pool.map(_parse_chunk, chunks, [max_page_chars] * len(chunks), [passage_words] * len(chunks))
        return [rows for part in parts for rows in part]


def page_tables(
    parsed: Sequence[PageRows], store: Store, *, base_url: str | None, origin: str
) -> dict[int, dict[str, list[tuple]]]:
    """page id -> the delta tables' rows of each parsed article (redirects and skipped pages have none); the
    objects of their facts resolved against the index and one another."""
    articles = [r for r in parsed if not r.skipped and r.redirect is None]
    wanted = {obj for r in articles if r.triples for obj in r.triples.objects}
    resolved = {t: res.page_id for t, res in store.resolve_titles(sorted(wanted), loose=False).items()}
    resolved.update((r.title, r.page_id) for r in articles if r.title in wanted)
    return {r.page_id: _article_tables(r, resolved, base_url, origin) for r in articles}


def _article_tables(rows: PageRows, resolved: dict[str, int], base_url: str | None, origin: str) -> dict:
    pid = rows.page_id
    url = rows.url or page_url(base_url, rows.title)
    out: dict[str, list[tuple]] = {
        "pages": [
            (pid, rows.title, rows.namespace, rows.rev_id, rows.rev_timestamp, rows.is_disambiguation, url)
            + (rows.lead, normalize_title(rows.title), rows.source_file, origin)
        ],
        "sections": [(pid, i, lvl, head, parent, text, path) for i, lvl, head, parent, text, path in rows.sections],
        "passages": [],
        "sentences": [],
        "categories": [(pid, c) for c in rows.categories],
        "see_also": [(pid, t) for t in rows.see_also],
        "links": [(pid, *link) for link in rows.links],
        "infobox": [(pid, *row) for row in rows.infobox],
        "table_rows": [(pid, *row) for row in rows.table_rows],
    }
    for index, (section, text, path, source, spans, page_indexes) in enumerate(rows.passages):
        passage_id = delta_passage_id(pid, index)
        out["passages"].append((passage_id, pid, section, text, rows.title, path, source, index))
        for n, ((start, end), page_sentence) in enumerate(zip(spans, page_indexes, strict=True)):
            out["sentences"].append((passage_id, n, page_sentence, text[start:end], start, end))
    out["triples"] = _triples(rows, resolved)
    return out


def _triples(rows: PageRows, resolved: dict[str, int]) -> list[tuple]:
    t = rows.triples
    if t is None:
        return []
    out = []
    for relation, obj, source, chunk, sentence in zip(t.relations, t.objects, t.sources, t.chunks, t.sentences):
        name = SOURCES[source]
        passage = None if chunk is None else delta_passage_id(rows.page_id, chunk)
        out.append(
            (rows.page_id, rows.title, relation or RELATION_OF_SOURCE[name], obj, resolved.get(obj), name)
            + (passage, sentence, rows.rev_id)
        )
    return out


# A page's rows in the tables' column order, read back from the index (the delta's copy when it holds the page).
_COPIED = {
    "pages": "SELECT * FROM pages WHERE page_id = ?",
    "sections": "SELECT * FROM sections WHERE page_id = ? ORDER BY section_index",
    "passages": "SELECT * FROM passages WHERE page_id = ? ORDER BY passage_index",
    "categories": "SELECT * FROM categories WHERE page_id = ?",
    "see_also": "SELECT * FROM see_also WHERE page_id = ?",
    "links": "SELECT * FROM links WHERE page_id = ?",
    "infobox": "SELECT * FROM infobox WHERE page_id = ?",
    "table_rows": "SELECT * FROM table_rows WHERE page_id = ?",
    "triples": "SELECT * FROM triples WHERE subject_page_id = ?",
}


def copied_tables(store: Store, page_id: int) -> dict[str, list[tuple]]:
    """The page's rows as the index holds it now ({} when it holds none), its passages renumbered as delta
    passages (the triples and sentences follow them)."""
    in_delta = bool(store.delta_rows("SELECT 1 FROM pages WHERE page_id = ?", [int(page_id)]))
    read = store.delta_rows if in_delta else store.rows
    out = {table: [tuple(r) for r in read(sql, [int(page_id)])] for table, sql in _COPIED.items()}
    if not out["pages"]:
        return {}
    ids = {r[0]: delta_passage_id(page_id, r[7]) for r in out["passages"]}
    out["passages"] = [(ids[r[0]], *r[1:]) for r in out["passages"]]
    out["triples"] = [(*r[:6], ids.get(r[6]), *r[7:]) for r in out["triples"]]
    out["sentences"] = []
    if ids:
        keys, params = in_keys(sorted(ids))
        sql = f"SELECT * FROM sentences WHERE passage_id IN {keys} ORDER BY passage_id, sentence_index"
        out["sentences"] = [(ids[r[0]], *r[1:]) for r in read(sql, params)]
    return out


def retitle(
    tables: dict[str, list[tuple]], *, title: str, rev_id: int | None, stamp: str, base_url: str | None
) -> dict:
    """A page's rows as a new revision under ``title`` (from an event: no text of its own)."""
    out = dict(tables)
    (page,) = tables["pages"]
    url = page_url(base_url, title) if base_url else page[6]
    out["pages"] = [
        (page[0], title, page[2], rev_id, stamp, page[5], url, page[7], normalize_title(title), page[9]) + ("update",)
    ]
    out["passages"] = [(*r[:4], title, *r[5:]) for r in tables["passages"]]
    out["triples"] = [(r[0], title, *r[2:8], rev_id) for r in tables["triples"]]
    return out


def redirect_row(
    store: Store, title: str, target: tuple[str, str | None], page_id: int | None, namespace: int
) -> tuple:
    """A ``redirects`` row from ``title`` to ``target`` ((title, fragment)), its target resolved in the index."""
    to, fragment = target
    res = store.resolve_titles([to], loose=False).get(to)
    final = res.title if res is not None else to
    return (title, final, fragment, normalize_title(title), page_id, namespace, to, res.page_id if res else None, False)


def moved_redirect(title: str, new_title: str, page_id: int, namespace: int) -> tuple:
    """The ``redirects`` row a move leaves at the old title."""
    return (title, new_title, None, normalize_title(title), None, namespace, new_title, page_id, False)
