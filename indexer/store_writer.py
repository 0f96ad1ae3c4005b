"""Pages to store rows (:func:`page_rows`, run in worker processes) and the DuckDB bulk writer.

The writer buffers rows per table and loads them in batches through Arrow tables
(``INSERT INTO t SELECT * FROM arrow``), never row by row. Redirects are staged and their chains
resolved in SQL at the end, so memory stays flat however many redirects a dump holds.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexer.parsed import ParsedChunk, ParsedPage, ParsedSection
from indexer.readers import ChunkPages, RawPage, XmlChunk, parse_xml_chunk
from wikiground.errors import BuildError, InputError
from wikiground.system import duckdb_size, quiet, usable_cpus
from wikiground.text import canonical_title, normalize_title, page_url

if TYPE_CHECKING:
    from indexer.triples import PageTriples

logger = logging.getLogger(__name__)

DEFAULT_MAX_PAGE_CHARS = 4_000_000  # the largest enwiki articles are ~1.3M bytes of wikitext
DEFAULT_PASSAGE_WORDS = 100
# Tables get row groups of ROW_GROUP_ROWS rows (DuckDB's default is 122,880), and a table's buffered rows
# are loaded in whole row groups. An insert of at least one row group is compressed and written straight
# to the database file (DuckDB's optimistic write), here in the main process while the workers clean the
# next pages; smaller inserts go to the WAL uncompressed and leave the compression to the final CHECKPOINT,
# which runs after the workers are done. Smaller groups move that work off the serial finish and overlap it
# with the workers, at the cost of a slightly larger store (benchmarks/RESULTS.md, ingest).
ROW_GROUP_ROWS = 32_768
FLUSH_ROWS = ROW_GROUP_ROWS  # rows per table per load
FLUSH_BYTES = 256 << 20  # ... or fewer rows when they hold this much (section texts are long)
LOAD_THREADS = 1  # DuckDB threads of the bulk load
# WAL size before DuckDB checkpoints on its own. The default (16 MB) checkpoints after nearly every
# flush, recompressing the tables' partly filled last row groups each time; finish() checkpoints once at the
# end anyway.
CHECKPOINT_THRESHOLD = "1GB"
MAX_REDIRECT_HOPS = 16  # longer chains are treated like loops


@dataclass(slots=True)
class PageRows:
    """Everything one input page contributes to the store (passage ids are assigned by the writer)."""

    page_id: int
    title: str
    namespace: int
    rev_id: int | None = None
    rev_timestamp: str | None = None
    source_file: str = ""
    url: str | None = None
    redirect: tuple[str, str | None] | None = None  # (target as written, fragment)
    is_disambiguation: bool = False
    lead: str = ""
    sections: list[tuple] = field(default_factory=list)  # (index, level, heading, parent, text, heading_path)
    passages: list[tuple] = field(default_factory=list)  # (section_index, text, heading_path, source,
    #                                                         sentence spans ((start, end), ...), page sentence indexes)
    categories: list[str] = field(default_factory=list)
    see_also: list[str] = field(default_factory=list)
    links: list[tuple] = field(default_factory=list)  # (target_title, anchor_text, section_index)
    infobox: list[tuple] = field(default_factory=list)  # (infobox_type, key, value)
    table_rows: list[tuple] = field(default_factory=list)  # (table_index, row_index, text)
    triples: PageTriples | None = None  # the page's facts, staged for the `triples` table
    warnings: list[str] = field(default_factory=list)
    truncated: bool = False
    skipped: str | None = None  # why the page was left out, if it was
    failed: bool = False


def page_rows(
    raw: RawPage, *, max_page_chars: int = DEFAULT_MAX_PAGE_CHARS, passage_words: int = DEFAULT_PASSAGE_WORDS
) -> PageRows:
    """Clean and chunk one page (wikitext, clean text or given sentences) into store rows."""
    rows = PageRows(
        page_id=raw.page_id,
        title=raw.title,
        namespace=raw.namespace,
        rev_id=raw.rev_id,
        rev_timestamp=raw.rev_timestamp,
        source_file=raw.source_file,
        url=page_url(raw.base_url, raw.title),
    )
    label = f"page {raw.title!r} (id {raw.page_id})"
    try:
        if raw.kind == "wikitext":
            _wikitext_rows(raw, rows, max_page_chars=max_page_chars, passage_words=passage_words, label=label)
        elif raw.kind == "sentences":
            _sentence_rows(raw, rows, passage_words=passage_words, label=label)
        else:
            _text_rows(raw, rows, max_page_chars=max_page_chars, passage_words=passage_words, label=label)
    except Exception as exc:  # noqa: BLE001 - one odd page must not sink a many-hour build
        rows.skipped = f"{label}: cleaner failed ({type(exc).__name__}: {exc}); page skipped"
        rows.failed = True
    return rows


def _truncate(text: str, rows: PageRows, *, max_chars: int, label: str) -> str:
    if len(text) <= max_chars:
        return text
    # Cut at a line break so the cleaner does not see half a template on the last line.
    cut = text.rfind("\n", 0, max_chars)
    cut = cut if cut > max_chars // 2 else max_chars
    rows.truncated = True
    rows.warnings.append(f"{label}: text of {len(text):,} chars truncated to {cut:,} (max_page_chars)")
    return text[:cut]


def _wikitext_rows(raw: RawPage, rows: PageRows, *, max_page_chars: int, passage_words: int, label: str) -> None:
    from indexer.chunking import chunk_page
    from indexer.wikitext import is_redirect, parse_wikitext

    text = raw.text
    hit = is_redirect(text) if text else None
    if hit is not None:
        rows.redirect = (canonical_title(hit[0]), hit[1] or None)
        return
    if raw.redirect:
        rows.redirect = (canonical_title(raw.redirect), None)
        return
    if not text or text.isspace():  # not text.strip(): that copies the whole page
        rows.skipped = f"{label}: empty text; page skipped"
        return
    text = _truncate(text, rows, max_chars=max_page_chars, label=label)
    parsed = parse_wikitext(text, title=raw.title)
    if parsed.redirect_target:
        rows.redirect = (canonical_title(parsed.redirect_target), parsed.redirect_fragment or None)
        return
    rows.warnings.extend(f"{label}: {w}" for w in parsed.warnings)
    chunks = chunk_page(parsed, target_words=passage_words)
    _parsed_rows(parsed, chunks, rows)
    _fill_triples(rows, parsed, chunks)


def _fill_triples(rows: PageRows, parsed: ParsedPage, chunks: list[ParsedChunk]) -> None:
    """The page's knowledge-graph triples (infobox fields, links with their sentence, "See also", categories)."""
    from indexer.triples import page_triples

    rows.triples = page_triples(parsed, chunks)


def _parsed_rows(parsed: ParsedPage, chunks: list[ParsedChunk], rows: PageRows) -> None:
    rows.is_disambiguation = parsed.is_disambiguation
    paths = {s.index: s.heading_path for s in parsed.sections}
    rows.lead = next((s.text for s in parsed.sections if s.index == 0), "")
    rows.sections = [(s.index, s.level, s.heading, s.parent_index, s.text, s.heading_path) for s in parsed.sections]
    page_sentence = 0
    for chunk in chunks:
        n = len(chunk.sentences)
        rows.passages.append(
            (
                chunk.section_index,
                chunk.text,
                paths.get(chunk.section_index, ""),
                chunk.source,
                chunk.sentences,
                range(page_sentence, page_sentence + n),
            )
        )
        page_sentence += n
    rows.categories = list(dict.fromkeys(parsed.categories))
    rows.see_also = list(dict.fromkeys(parsed.see_also))
    rows.links = list(parsed.links)  # ParsedLink tuples are (target_title, anchor_text, section_index) rows
    rows.infobox = [(kind, key, value) for kind, fields in parsed.infoboxes for key, value in fields]
    rows.table_rows = [(t, r, text) for t, table in enumerate(parsed.tables) for r, text in enumerate(table)]


def _text_rows(raw: RawPage, rows: PageRows, *, max_page_chars: int, passage_words: int, label: str) -> None:
    """Clean prose (JSONL corpora): one section per (heading, text); chunked like wikitext pages."""
    from indexer.chunking import chunk_page

    if not any(text.strip() for _, text in raw.sections):
        rows.skipped = f"{label}: empty text; page skipped"
        return
    sections = []
    for index, (heading, text) in enumerate(raw.sections):
        text = _truncate(text, rows, max_chars=max_page_chars, label=label)
        lead = index == 0 and not heading
        sections.append(
            ParsedSection(
                index=index,
                level=1 if lead else 2,
                heading=heading,
                parent_index=None if lead else 0,
                heading_path=heading,
                text=text.strip(),
            )
        )
    parsed = ParsedPage(sections=tuple(sections))
    _parsed_rows(parsed, chunk_page(parsed, target_words=passage_words), rows)
    # The lead of a plain-text page is its first paragraph, not the whole text.
    rows.lead = rows.lead.split("\n\n", 1)[0].strip()


def _sentence_rows(raw: RawPage, rows: PageRows, *, passage_words: int, label: str) -> None:
    """Pre-split sentences (HotpotQA, FEVER): grouped into ~passage_words passages, given ids kept."""
    if not raw.sentences:
        rows.skipped = f"{label}: no sentences; page skipped"
        return
    lead_text = " ".join(s for _, s in raw.sentences)
    rows.lead = lead_text
    rows.sections = [(0, 1, "", None, lead_text, "")]
    group: list[tuple[int, str]] = []
    words = 0
    for sentence in raw.sentences:
        n = len(sentence[1].split())
        if group and words + n > passage_words:
            rows.passages.append(_sentence_passage(group))
            group, words = [], 0
        group.append(sentence)
        words += n
    if group:
        rows.passages.append(_sentence_passage(group))


def _sentence_passage(group: list[tuple[int, str]]) -> tuple:
    parts, spans, indexes, offset = [], [], [], 0
    for index, sentence in group:
        if parts:
            offset += 1  # the joining space
        spans.append((offset, offset + len(sentence)))
        indexes.append(index)
        parts.append(sentence)
        offset += len(sentence)
    return (0, " ".join(parts), "", "text", tuple(spans), tuple(indexes))


@dataclass(slots=True)
class RowBatch:
    """A batch of pages as Arrow tables, built in the worker so the main process only offsets ids and loads.

    ``passage_id`` (of ``passages``, ``sentence_spans`` and ``passage_joints``) and ``_redirect_raw.seq`` count
    from 0 within the batch; the writer shifts them by its running counters.
    """

    tables: dict[str, Any]
    pages: int = 0
    messages: list[str] = field(default_factory=list)  # warnings to log, "file: page ...: what"
    counts: dict[str, int] = field(default_factory=dict)
    read: ChunkPages | None = None  # input stats of an XML chunk (pages list emptied)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for one task.

    A task allocates millions of short-lived tuples, lists and strings, freed by reference counting;
    the collector, triggered every few hundred allocations, would only rescan them. Cycles made meanwhile
    are collected once it runs again, after the task.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def process_xml_chunk(chunk: XmlChunk, max_page_chars: int, passage_words: int) -> RowBatch:
    """Worker entry point for dumps: parse a chunk of ``<page>`` XML with mwxml, then clean and chunk it."""
    with _gc_paused():
        read = parse_xml_chunk(chunk)
        batch = _process_pages(read.pages, max_page_chars, passage_words)
    read.pages = []  # the texts need not travel back
    batch.read = read
    return batch


def process_batch(batch: list[RawPage], max_page_chars: int, passage_words: int) -> RowBatch:
    """Worker entry point: a batch of pages in, their store rows out as Arrow tables (order kept)."""
    with _gc_paused():
        return _process_pages(batch, max_page_chars, passage_words)


def _process_pages(batch: list[RawPage], max_page_chars: int, passage_words: int) -> RowBatch:
    return rows_to_batch([page_rows(raw, max_page_chars=max_page_chars, passage_words=passage_words) for raw in batch])


def rows_to_batch(batch: list[PageRows]) -> RowBatch:
    """Rows per table (local passage ids / redirect seq), converted to Arrow."""
    buf: dict[str, list[tuple]] = {name: [] for name in ("pages", "passages", "_redirect_raw")}
    # The big per-page tables are gathered column-wise: C-level extends beat a tuple per row.
    cols: dict[str, tuple[list, ...]] = {
        name: tuple([] for _ in _COLUMNS[name]) for name in _COLUMNS if name not in buf
    }
    counts = {"pages_skipped_empty": 0, "pages_failed": 0, "pages_truncated": 0, "warnings": 0}
    messages: list[str] = []
    passage_id = 0
    for rows in batch:
        messages.extend(f"{rows.source_file}: {w}" for w in rows.warnings)
        counts["warnings"] += len(rows.warnings) + bool(rows.skipped)
        counts["pages_truncated"] += rows.truncated
        if rows.skipped:
            messages.append(f"{rows.source_file}: {rows.skipped}")
            counts["pages_failed" if rows.failed else "pages_skipped_empty"] += 1
        elif rows.redirect is not None:
            target, fragment = rows.redirect
            redirects = buf["_redirect_raw"]
            redirects.append(
                (
                    len(redirects),
                    rows.title,
                    target,
                    fragment,
                    normalize_title(rows.title),
                    rows.page_id,
                    rows.namespace,
                )
            )
        else:
            passage_id = _page_to_rows(rows, passage_id, buf, cols)
    tables = {name: _arrow(name, rows) for name, rows in buf.items() if rows}
    tables.update({name: _arrow_columns(name, columns) for name, columns in cols.items() if columns[0]})
    return RowBatch(tables=tables, pages=len(batch), messages=messages, counts=counts)


def _page_to_rows(
    rows: PageRows, passage_id: int, buf: dict[str, list[tuple]], cols: dict[str, tuple[list, ...]]
) -> int:
    """Add an article's rows (its passages numbered from ``passage_id``); returns the next passage id."""
    pid = rows.page_id
    buf["pages"].append(
        (
            pid,
            rows.title,
            rows.namespace,
            rows.rev_id,
            rows.rev_timestamp,
            rows.is_disambiguation,
            rows.url,
            rows.lead,
            normalize_title(rows.title),
            rows.source_file,
            "local",
        )
    )
    _section_rows(pid, rows.sections, rows.passages, passage_id, cols["section_heads"], cols["passage_joints"])
    span_cols = cols["sentence_spans"]
    for passage_index, (section_index, text, heading_path, source, spans, page_indexes) in enumerate(rows.passages):
        buf["passages"].append((passage_id, pid, section_index, text, rows.title, heading_path, source, passage_index))
        if spans:  # offsets only: the store's `sentences` view slices the passage text
            n = len(spans)
            starts, ends = zip(*spans)
            span_cols[0].extend([passage_id] * n)
            span_cols[1].extend(range(n))
            span_cols[2].extend(page_indexes)
            span_cols[3].extend(starts)
            span_cols[4].extend(ends)
        passage_id += 1
    for name, values in (("categories", rows.categories), ("see_also", rows.see_also)):
        if values:
            cols[name][0].extend([pid] * len(values))
            cols[name][1].extend(values)
    _extend_rows(cols["links"], pid, rows.links)
    _extend_rows(cols["infobox"], pid, rows.infobox)
    _extend_rows(cols["table_rows"], pid, rows.table_rows)
    _staged_triple_rows(cols["_staged_triples"], pid, rows.triples, passage_id - len(rows.passages))
    return passage_id


def _staged_triple_rows(
    columns: tuple[list, ...], page_id: int, triples: PageTriples | None, first_passage_id: int
) -> None:
    """``_staged_triples`` rows of a page (:class:`indexer.triples.PageTriples`): chunk indexes become (batch-local)
    passage ids."""
    if triples is None or not triples.objects:
        return
    columns[0].extend([page_id] * len(triples.objects))
    columns[1].extend(triples.relations)
    columns[2].extend(triples.objects)
    columns[3].extend(triples.sources)
    columns[4].extend([None if chunk is None else first_passage_id + chunk for chunk in triples.chunks])
    columns[5].extend(triples.sentences)


def _section_rows(
    page_id: int,
    sections: list[tuple],
    passages: list[tuple],
    first_passage_id: int,
    heads: tuple[list, ...],
    joints: tuple[list, ...],
) -> None:
    """A page's ``section_heads`` rows, and the ``passage_joints`` that rebuild each section's text from its
    'text' passages; a section they do not rebuild exactly keeps its text in ``section_heads.text``.

    The passages come as chunking makes them: each section's 'text' passages in order, consecutive slices
    of its text, sections in order (then 'info' and 'table' passages).
    """
    n = len(passages)
    i = 0
    head_rows = []
    for section in sections:
        index, text = section[0], section[4]
        first = i
        while i < n and passages[i][0] == index and passages[i][3] == "text":
            i += 1
        at, found, spelled = 0, [], True
        for passage in passages[first:i]:
            piece = passage[1]
            # The joint is nearly always '' or one space or newline: startswith compares in place, while find
            # first preprocesses a long needle.
            if text.startswith(piece, at):
                start = at
            elif text.startswith(piece, at + 1):
                start = at + 1
            else:
                start = text.find(piece, at)
                if start < 0:
                    spelled = False
                    break
            found.append(text[at:start])
            at = start + len(piece)
        spelled = spelled and at == len(text)
        head_rows.append((index, section[1], section[2], section[3], section[5], None if spelled else text))
        if spelled and found:
            joints[0].extend(range(first_passage_id + first, first_passage_id + i))
            joints[1].extend([page_id] * len(found))
            joints[2].extend([index] * len(found))
            joints[3].extend(found)
    _extend_rows(heads, page_id, head_rows)


def _extend_rows(columns: tuple[list, ...], page_id: int, items: list[tuple]) -> None:
    """Append one page's row tuples (without the page id) to a table's column lists."""
    if items:
        columns[0].extend([page_id] * len(items))
        for column, values in zip(columns[1:], zip(*items)):
            column.extend(values)


def _arrow(table: str, rows: list[tuple]):
    return _arrow_columns(table, list(zip(*rows)))


def _arrow_columns(table: str, values: Sequence[Sequence]):
    import pyarrow as pa

    columns = _COLUMNS[table]
    arrays = [pa.array(column, type=getattr(pa, kind)()) for (_, kind), column in zip(columns, values)]
    return pa.Table.from_arrays(arrays, names=[name for name, _ in columns])


# -- the DuckDB writer -------------------------------------------------------------------------------

_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "pages": (
        ("page_id", "int64"),
        ("title", "string"),
        ("namespace", "int32"),
        ("rev_id", "int64"),
        ("rev_timestamp", "string"),
        ("is_disambiguation", "bool_"),
        ("url", "string"),
        ("lead", "string"),
        ("title_norm", "string"),
        ("source_file", "string"),
        ("origin", "string"),
    ),
    "section_heads": (
        ("page_id", "int64"),
        ("section_index", "int32"),
        ("level", "int32"),
        ("heading", "string"),
        ("parent_index", "int32"),
        ("heading_path", "string"),
        ("text", "string"),
    ),
    "passage_joints": (("passage_id", "int64"), ("page_id", "int64"), ("section_index", "int32"), ("joint", "string")),
    "passages": (
        ("passage_id", "int64"),
        ("page_id", "int64"),
        ("section_index", "int32"),
        ("text", "string"),
        ("title", "string"),
        ("heading_path", "string"),
        ("source", "string"),
        ("passage_index", "int32"),
    ),
    "sentence_spans": (
        ("passage_id", "int64"),
        ("sentence_index", "int32"),
        ("page_sentence_index", "int32"),
        ("start_char", "int32"),
        ("end_char", "int32"),
    ),
    "categories": (("page_id", "int64"), ("category", "string")),
    "see_also": (("page_id", "int64"), ("target_title", "string")),
    "links": (("page_id", "int64"), ("target_title", "string"), ("anchor_text", "string"), ("section_index", "int32")),
    "infobox": (("page_id", "int64"), ("infobox_type", "string"), ("key", "string"), ("value", "string")),
    "table_rows": (("page_id", "int64"), ("table_index", "int32"), ("row_index", "int32"), ("text", "string")),
    "_staged_triples": (  # relation given for infobox facts only; source: its index in indexer.triples.SOURCES
        ("subject_page_id", "int64"),
        ("relation", "string"),
        ("object_title", "string"),
        ("source", "uint8"),
        ("passage_id", "int64"),
        ("sentence_id", "int32"),
    ),
    "_redirect_raw": (
        ("seq", "int64"),
        ("source_title", "string"),
        ("direct_target", "string"),
        ("target_fragment", "string"),
        ("source_norm", "string"),
        ("source_page_id", "int64"),
        ("namespace", "int32"),
    ),
}

_REDIRECT_RAW_DDL = """
CREATE TABLE _redirect_raw (
    seq BIGINT, source_title VARCHAR, direct_target VARCHAR, target_fragment VARCHAR,
    source_norm VARCHAR, source_page_id BIGINT, namespace INTEGER
);
"""


class StoreWriter:
    """Creates ``wiki.duckdb`` with the public schema and bulk-loads :class:`PageRows` into it.

    Loads during ingest use ``threads`` DuckDB threads (the worker pool has the other cores);
    :meth:`finish` uses ``finish_threads`` (default: the usable CPUs), as the pool is idle by then.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        flush_rows: int = FLUSH_ROWS,
        flush_bytes: int = FLUSH_BYTES,
        threads: int = LOAD_THREADS,
        memory_limit: int | None = None,
        finish_threads: int | None = None,
    ):
        import duckdb

        from indexer.schema import STORE_DDL

        self.db_path = Path(db_path)
        self.flush_rows = max(1, int(flush_rows))
        self.flush_bytes = max(1, int(flush_bytes))
        self.finish_threads = usable_cpus() if finish_threads is None else int(finish_threads)
        self.next_passage_id = 0
        self.counts = {"pages_skipped_empty": 0, "pages_failed": 0, "pages_truncated": 0, "warnings": 0}
        self._buffers: dict[str, list] = {name: [] for name in _COLUMNS}  # Arrow tables per store table
        self._buffered: dict[str, list[int]] = {name: [0, 0] for name in _COLUMNS}  # [rows, bytes] per table
        self._redirect_seq = 0
        # The facts wait for every page (their objects resolve against all titles) in a file of their own, beside
        # the store: writing Parquet costs a fraction of loading a DuckDB table that is read once and dropped.
        self.staged_triples = Path(str(self.db_path) + ".triples.parquet")
        self._staged_writer: Any = None
        try:
            # ROW_GROUP_SIZE is an ATTACH option, hence an in-memory connection that attaches the file.
            self._con = quiet(duckdb.connect())
            self._con.execute(f"ATTACH {_sql_string(str(self.db_path))} AS store (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
            self._con.execute("USE store")
            # Spill files beside the store (inside the build's temporary folder), not in the working directory.
            self._con.execute(f"SET temp_directory = {_sql_string(str(self.db_path) + '.tmp')}")
            # One thread: the loads run beside the worker pool, and DuckDB's extra threads only
            # fight the workers for the cores.
            self._con.execute(f"SET threads = {int(threads)}")
            if memory_limit is not None:  # the build's share for the store: past it DuckDB spills to temp_directory
                self._con.execute(f"SET memory_limit = '{duckdb_size(memory_limit)}'")
            self._con.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
            self._con.execute(STORE_DDL)
            self._con.execute(_REDIRECT_RAW_DDL)
        except duckdb.Error as exc:
            raise BuildError(f"{self.db_path}: cannot create the store ({exc})") from exc

    def add(self, rows: PageRows) -> None:
        """Add one page's rows (convenience for callers without a worker pool)."""
        self.add_batch(rows_to_batch([rows]))

    def add_batch(self, batch: RowBatch) -> None:
        import pyarrow.compute as pc

        for message in batch.messages:
            logger.warning("%s", message)
        for key, value in batch.counts.items():
            self.counts[key] += value
        tables = dict(batch.tables)
        # Batch-local ids become global: passage ids stay dense in build order.
        if "passages" in tables:
            n = tables["passages"].num_rows
            for name in ("passages", "sentence_spans", "passage_joints", "_staged_triples"):
                if name in tables:
                    t = tables[name]
                    shifted = pc.add(t.column("passage_id"), _int64_scalar(self.next_passage_id))
                    tables[name] = t.set_column(t.schema.get_field_index("passage_id"), "passage_id", shifted)
            self.next_passage_id += n
        if "_redirect_raw" in tables:
            t = tables["_redirect_raw"]
            shifted = pc.add(t.column("seq"), _int64_scalar(self._redirect_seq))
            tables["_redirect_raw"] = t.set_column(0, "seq", shifted)
            self._redirect_seq += t.num_rows
        for name, table in tables.items():
            self._buffers[name].append(table)
            buffered = self._buffered[name]
            buffered[0] += table.num_rows
            buffered[1] += table.nbytes
            if buffered[0] >= self.flush_rows or buffered[1] >= self.flush_bytes:
                self._load(name, whole_groups=buffered[1] < self.flush_bytes)

    def flush(self) -> None:
        """Load every buffered row."""
        for table in _COLUMNS:
            if self._buffers[table]:
                self._load(table, whole_groups=False)

    def _load(self, table: str, *, whole_groups: bool) -> None:
        """Insert a table's buffered rows; with ``whole_groups``, a multiple of ``flush_rows`` of them
        (the rest stays buffered, so the table's row groups fill up and are written compressed)."""
        import duckdb
        import pyarrow as pa

        parts = self._buffers[table]
        arrow = pa.concat_tables(parts)
        rest = None
        if whole_groups:
            cut = arrow.num_rows - arrow.num_rows % self.flush_rows
            arrow, rest = arrow.slice(0, cut), arrow.slice(cut)
        if table == "_staged_triples":
            self._stage_triples(arrow)
        else:
            names = ", ".join(name for name, _ in _COLUMNS[table])
            try:
                self._con.register("_batch", arrow)
                self._con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _batch")
            except duckdb.ConstraintException as exc:
                raise self._constraint_error(table, exc) from exc
            except duckdb.Error as exc:
                raise BuildError(f"{self.db_path}: bulk load into {table} failed ({exc})") from exc
            finally:
                self._con.unregister("_batch")
        parts.clear()
        if rest is not None and rest.num_rows:
            parts.append(rest)
        self._buffered[table] = [rest.num_rows, rest.nbytes] if rest is not None else [0, 0]

    def _stage_triples(self, arrow: Any) -> None:
        import pyarrow.parquet as pq

        try:
            if self._staged_writer is None:
                self._staged_writer = pq.ParquetWriter(self.staged_triples, arrow.schema, compression="zstd")
            self._staged_writer.write_table(arrow)
        except OSError as exc:
            raise BuildError(f"{self.staged_triples}: cannot stage the triples ({exc})") from exc

    def _constraint_error(self, table: str, exc: Exception) -> InputError:
        if table == "pages":
            dupes = self._con.execute(
                "SELECT b.page_id, b.title, b.source_file, p.title, p.source_file FROM _batch b "
                "JOIN pages p USING (page_id) LIMIT 1"
            ).fetchall()
            if not dupes:  # the duplicate is within the batch itself
                dupes = self._con.execute(
                    "SELECT a.page_id, a.title, a.source_file, b.title, b.source_file FROM "
                    "(SELECT *, row_number() OVER () AS n FROM _batch) a JOIN "
                    "(SELECT *, row_number() OVER () AS n FROM _batch) b ON a.page_id = b.page_id AND a.n > b.n "
                    "LIMIT 1"
                ).fetchall()
            if dupes:
                page_id, title, source, other_title, other_source = dupes[0]
                return InputError(
                    f"duplicate page id {page_id}: {title!r} and {other_title!r} (from {other_source})",
                    path=source,
                    where=f"page {title!r}",
                )
        return InputError(f"duplicate key while loading {table} ({exc})")

    def finish(self, *, build_info: tuple[str, str] | None = None) -> dict[str, Any]:
        """Flush, resolve redirects, create the secondary indexes, record ``build_info`` (build id, start time),
        close. Returns counts.

        The build id is written here, before the one checkpoint: opening the finished store again to add it
        would make DuckDB rewrite the tables at the next checkpoint, nearly doubling the file."""
        import duckdb

        from indexer.schema import INDEXES, TABLES

        try:
            # The workers are done by now: the last load, the index builds and the checkpoint (which
            # compresses everything loaded since the last one) may use every core. Row order is
            # unaffected (preserve_insertion_order stays on).
            self._con.execute(f"SET threads = {max(1, self.finish_threads)}")
        except duckdb.Error as exc:
            raise BuildError(f"{self.db_path}: cannot configure the store ({exc})") from exc
        logger.info("finishing the store: %d passages (redirects, indexes, checkpoint)", self.next_passage_id)
        self.flush()
        try:
            loops = self._resolve_redirects()
            self._resolve_triples()
            self._con.execute(INDEXES)
            # The views' rows are counted without their joins: every span has its passage, every section a head.
            counts = {t: self._con.execute(f"SELECT count(*) FROM {_COUNTED.get(t, t)}").fetchone()[0] for t in TABLES}
            counts["disambiguation_pages"] = self._con.execute(
                "SELECT count(*) FROM pages WHERE is_disambiguation"
            ).fetchone()[0]
            if build_info is not None:
                from indexer.schema import BUILD_INFO_DDL

                self._con.execute(BUILD_INFO_DDL)
                self._con.execute("INSERT INTO build_info VALUES (?, ?)", list(build_info))
            self._con.execute("CHECKPOINT store")
        except duckdb.Error as exc:
            raise BuildError(f"{self.db_path}: finishing the store failed ({exc})") from exc
        finally:
            self.close()
        return {"counts": counts, "redirect_loops": loops, **self.counts}

    def _resolve_redirects(self) -> int:
        con = self._con
        # One target per source title (the first seen wins if a title repeats across inputs).
        con.execute("""
            CREATE TEMP TABLE _rmap AS
            SELECT source_title, arg_min(direct_target, seq) AS direct_target
            FROM _redirect_raw GROUP BY source_title""")
        con.execute("""
            CREATE TEMP TABLE _res AS
            SELECT DISTINCT r.source_title, m.direct_target AS cur
            FROM _redirect_raw r JOIN _rmap m USING (source_title)""")
        for _ in range(MAX_REDIRECT_HOPS):
            # Follow one more hop for every row still pointing at a redirect.
            changed = con.execute("""
                UPDATE _res SET cur = m.direct_target FROM _rmap m
                WHERE _res.cur = m.source_title""").fetchone()[0]
            if not changed:
                break
        con.execute("""
            INSERT INTO redirects
            SELECT r.source_title,
                   CASE WHEN l.source_title IS NULL THEN s.cur END,
                   r.target_fragment, r.source_norm, r.source_page_id, r.namespace, r.direct_target,
                   CASE WHEN l.source_title IS NULL THEN p.page_id END,
                   l.source_title IS NOT NULL
            FROM _redirect_raw r
            JOIN _res s USING (source_title)
            LEFT JOIN _rmap l ON l.source_title = s.cur
            LEFT JOIN (SELECT title, min(page_id) AS page_id FROM pages GROUP BY title) p ON p.title = s.cur
            ORDER BY r.seq""")
        loops = con.execute("SELECT count(*) FROM redirects WHERE is_loop").fetchone()[0]
        if loops:
            sample = [
                row[0]
                for row in con.execute(
                    "SELECT source_title FROM redirects WHERE is_loop ORDER BY source_title LIMIT 5"
                ).fetchall()
            ]
            logger.warning(
                "%d redirect(s) form loops or chains longer than %d hops (e.g. %s); stored with is_loop",
                loops,
                MAX_REDIRECT_HOPS,
                ", ".join(map(repr, sample)),
            )
        con.execute("DROP TABLE _redirect_raw; DROP TABLE _rmap; DROP TABLE _res")
        return loops

    def _resolve_triples(self) -> None:
        writer, self._staged_writer = self._staged_writer, None
        if writer is not None:
            writer.close()
        fill_triples(self._con, self.staged_triples if writer is not None else None)

    def close(self) -> None:
        con, self._con = getattr(self, "_con", None), None
        if con is not None:
            con.close()
        writer, self._staged_writer = getattr(self, "_staged_writer", None), None
        if writer is not None:
            writer.close()
        staged = getattr(self, "staged_triples", None)
        if staged is not None:
            staged.unlink(missing_ok=True)


_COUNTED = {"sentences": "sentence_spans", "sections": "section_heads"}


def _triples_sql(staged: str) -> str:
    """The facts of the query ``staged`` as ``triples`` rows: source and relation named (staged as a code, and
    for infobox facts only), subject title and revision from ``pages``, the object's page after redirects."""
    from indexer.triples import RELATION_OF_SOURCE, SOURCES

    source = "CASE t.source " + " ".join(f"WHEN {i} THEN '{s}'" for i, s in enumerate(SOURCES)) + " END"
    relation = (
        "CASE t.source "
        + " ".join(f"WHEN {SOURCES.index(s)} THEN '{r}'" for s, r in RELATION_OF_SOURCE.items())
        + " ELSE t.relation END"
    )
    category = SOURCES.index("category")
    return f"""
INSERT INTO triples
SELECT t.subject_page_id, p.title, {relation}, t.object_title, coalesce(o.page_id, r.page_id),
       {source}, t.passage_id, t.sentence_id, p.rev_id
FROM ({staged}) t
JOIN pages p ON p.page_id = t.subject_page_id
LEFT JOIN (SELECT title, min(page_id) AS page_id FROM pages GROUP BY title) o
       ON o.title = CASE WHEN t.source = {category} THEN 'Category:' || t.object_title ELSE t.object_title END
LEFT JOIN (SELECT source_title, min(target_page_id) AS page_id FROM redirects
           WHERE target_page_id IS NOT NULL GROUP BY source_title) r
       ON r.source_title = t.object_title AND t.source <> {category}
WHERE coalesce(o.page_id, r.page_id) IS DISTINCT FROM t.subject_page_id  -- no page points at itself
ORDER BY t.subject_page_id  -- what the zone maps need; readers order a page's facts themselves (FACT_ORDER)
"""


def fill_triples(con: Any, staged: Path | None = None) -> int:
    """``triples`` from the facts staged in the Parquet file ``staged`` (deleted once read): subject title and
    revision from ``pages``, the object's page after redirects (NULL when it has none), ordered by subject so a
    lookup by subject reads few row groups (by subject only: each reader orders a page's facts itself, and sorting
    on their strings too would make this step slower for no reader). A store without links (clean text, given sentences)
    gets the titles its sentences name (:func:`indexer.triples.text_mention_rows`). Returns the rows added."""
    parts = []
    if staged is not None:
        parts.append(f"SELECT * FROM read_parquet({_sql_string(str(staged))})")
    mentions = None if con.execute("SELECT count(*) FROM links").fetchone()[0] else _text_mentions(con)
    if mentions is not None:
        con.register("_mentions", mentions)
        parts.append("SELECT * FROM _mentions")
    try:
        if not parts:
            return 0
        return int(con.execute(_triples_sql(" UNION ALL ".join(parts))).fetchone()[0])
    finally:
        if mentions is not None:
            con.unregister("_mentions")
        if staged is not None:
            staged.unlink(missing_ok=True)


def _text_mentions(con: Any) -> Any:
    """The staged-fact rows of the titles each page's text names, as an Arrow table (None when none is named)."""
    from indexer.triples import text_mention_rows

    titles = [r[0] for r in con.execute("SELECT title FROM pages").fetchall()]
    rows = con.execute("""
        SELECT p.page_id, s.passage_id, s.page_sentence_index,
               substr(p.text, s.start_char + 1, s.end_char - s.start_char)
        FROM sentence_spans s JOIN passages p USING (passage_id)
        WHERE p.source = 'text' ORDER BY s.passage_id, s.sentence_index""").fetchall()
    columns = text_mention_rows(titles, rows)
    return _arrow_columns("_staged_triples", columns) if columns[0] else None


def _int64_scalar(value: int):
    """An Arrow int64 scalar built from its bytes: ``pa.scalar`` (and ``pc.add`` given a Python int) imports
    pandas to rule out pandas inputs, ~0.4 CPU-s in the main process, which otherwise never needs pandas."""
    import array

    import pyarrow as pa

    return pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(array.array("q", [value]))])[0]


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
