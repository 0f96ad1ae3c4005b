"""BM25 over passages with Pyserini/Anserini (Lucene), the page title indexed as its own field.

Each passage becomes one Lucene document ``{"id": passage_id, "contents": "title. heading. text",
"title": title, "page_id": page_id}``: ``contents`` and ``title`` are analysed (Porter stemming,
stopwords removed) and indexed with their term frequencies only. Lucene stores no positions (no feature runs
phrase or proximity queries), no document vectors (no query expansion reads them) and no raw JSON (a hit's page
and title come from the passage table, its text from the store), which keeps the index a fraction of the size.
Queries score both fields (bag of words; ``title`` weighted by ``title_boost``), so a claim naming an entity
favours that entity's page.

The index folder holds ``lucene/`` (the Lucene index), the passage table files (backends/passage_table.py),
``doc_passages.npy`` (each Lucene document's passage id) and ``params.json``.

Searching: Anserini's ``SimpleSearcher`` sorts its hits by score, then by the ``id`` field, which keeps Lucene from
skipping the documents that cannot reach the top k (block-max WAND), and reads each hit's stored document (its whole
text) back. So the index is searched with a plain ``IndexSearcher`` and ranked as Anserini ranks (scores rounded to
4 decimals, ties by id), the hit's passage id read from ``doc_passages.npy`` and its page from the passage table:
the same hits, without the exhaustive sort or a stored document read per hit.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wikiground.errors import (
    BuildError,
    IndexCorruptError,
    IndexFormatError,
    IndexMissingError,
    QueryError,
    WikigroundError,
)
from wikiground.layout import PARAMS_FILE, atomic_write_json, npy_stream, read_params, swap_folder
from wikiground.records import Hit
from wikiground.text import clean_surrogates

log = logging.getLogger(__name__)

NAME = "bm25"
FORMAT_VERSION = 1
LUCENE_DIR = "lucene"
DOC_PASSAGES_FILE = "doc_passages.npy"  # Lucene document number -> passage id

DEFAULT_K1 = 0.9  # Anserini's defaults for passage collections
DEFAULT_B = 0.4
DEFAULT_TITLE_BOOST = 1.0  # equal weight: higher helped FEVER claims but hurt HotpotQA questions
DEFAULT_THREADS = 2
DEFAULT_BATCH_SIZE = 5_000  # documents handed to Lucene per call
# Lucene refuses queries with more than 1024 clauses (terms x fields); claims need far fewer.
MAX_QUERY_TERMS = 256
MAX_QUERY_CHARS = 4_000
TIE_MARGIN = 10  # hits fetched beyond k to break ties at the k-th place as Anserini does
# Java compiles Lucene's search code while it runs it, so a fresh process's first few thousand searches also pay
# for the compiler. A long-running process (the server) runs this many searches of the index's own texts before its
# first query, or as many as WARM_SECONDS allow.
WARM_SEARCHES = 4_000
WARM_SECONDS = 3.0
WARM_BLOCK = 8  # searches per batch call, as a server's blocks of claims
WARM_WORDS = 15


def build(
    db_path: Path,
    out_dir: Path,
    *,
    progress: bool = False,
    threads: int = DEFAULT_THREADS,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    title_boost: float = DEFAULT_TITLE_BOOST,
    batch_size: int = DEFAULT_BATCH_SIZE,
    memory: int | None = None,
    **options: Any,
) -> dict:
    """Index the store's ``passages`` into ``out_dir`` (``lucene/`` + ``params.json``); ``memory``: the build's
    bytes, of which the JVM gets :data:`JVM_SHARE` (when this call starts it) and Lucene's buffer a part.

    The index is built next to ``out_dir`` and swapped in at the end, so a failed build leaves
    any previous index untouched. Returns the manifest entry for this index.
    """
    if options:
        log.debug("bm25.build ignores options meant for other backends: %s", sorted(options))
    _check_options(threads=threads, batch_size=batch_size, k1=k1, b=b, title_boost=title_boost)
    db_path, out_dir = Path(db_path), Path(out_dir)
    if not db_path.is_file():
        raise IndexMissingError(f"{db_path}: no store to index")
    started = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir()
    try:
        added = _index_passages(
            db_path, tmp_dir / LUCENE_DIR, threads=threads, batch_size=batch_size, progress=progress, memory=memory
        )
        _write_passage_table(db_path, tmp_dir)
        _write_doc_passages(tmp_dir / LUCENE_DIR, tmp_dir / DOC_PASSAGES_FILE, added)
        params = _params(k1=k1, b=b, title_boost=title_boost, documents=added, source=db_path)
        atomic_write_json(tmp_dir / PARAMS_FILE, params)
        swap_folder(tmp_dir, out_dir)
    except WikigroundError:  # already says what failed (a JVM that cannot start, a short index)
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    except Exception as exc:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise BuildError(f"bm25 build from {db_path} failed: {exc}") from exc
    seconds = round(time.perf_counter() - started, 3)
    log.info("bm25: indexed %d passages in %.1fs into %s", added, seconds, out_dir)
    return {
        "type": NAME,
        "engine": params["engine"],
        "params": {key: params[key] for key in ("k1", "b", "title_boost", "fields", "contents", "analyzer")},
        "documents": added,
        "build_seconds": seconds,
    }


def _check_options(*, threads: int, batch_size: int, k1: float, b: float, title_boost: float) -> None:
    if threads < 1 or batch_size < 1:
        raise BuildError(f"bm25: threads and batch_size must be >= 1 (got {threads}, {batch_size})")
    if k1 < 0 or not 0 <= b <= 1 or title_boost < 0:
        raise BuildError(f"bm25: need k1 >= 0, 0 <= b <= 1, title_boost >= 0 (got {k1}, {b}, {title_boost})")


def _index_passages(
    db_path: Path, lucene_dir: Path, *, threads: int, batch_size: int, progress: bool, memory: int | None = None
) -> int:
    """Feed every passage of the store to a new Lucene index at ``lucene_dir``; returns how many it holds."""
    from backends.jvm import ensure_jvm

    heap = None if memory is None else max(MIN_HEAP, int(memory * JVM_SHARE))
    ensure_jvm(heap=None if heap is None else f"{heap >> 20}m")
    from pyserini.index.lucene import LuceneIndexer

    total = _count_passages(db_path)
    args = ["-index", str(lucene_dir), "-fields", "title"]
    indexer = LuceneIndexer(args=args, threads=threads)
    _fit_buffer(indexer.object)
    added = 0
    try:
        batches = _json_batches(db_path, batch_size=batch_size)
        if progress:
            from tqdm import tqdm

            batches = tqdm(batches, total=-(-total // batch_size), unit="batch", desc="bm25")
        for batch in batches:
            added += int(indexer.object.addRawDocuments(batch))
    finally:
        indexer.close()
    _log_heap()
    if added != total:
        # Anserini logs and skips documents it cannot index rather than failing the call.
        raise BuildError(f"{db_path}: Lucene indexed {added} of {total} passages")
    return added


# The JVM's share of the build's memory when the BM25 build starts it (the store's reads and this process take
# most of the rest), and the part of the heap Lucene buffers documents in before it writes a segment: Anserini's
# indexer asks for a fixed 2 GB buffer, which a smaller heap cannot hold.
JVM_SHARE = 0.45
MIN_HEAP = 512 << 20
BUFFER_SHARE = 0.35


def _fit_buffer(indexer: Any) -> None:
    """Lucene's document buffer set to a part of the heap the JVM really has (a live setting of its writer)."""
    from jnius import autoclass, cast

    fields = autoclass("org.apache.commons.lang3.reflect.FieldUtils")  # in Anserini's jar; pyjnius' Field has no get
    writer = cast("org.apache.lucene.index.IndexWriter", fields.readField(indexer, "writer", True))
    heap_mb = autoclass("java.lang.Runtime").getRuntime().maxMemory() / (1 << 20)
    buffer_mb = max(16.0, min(2048.0, heap_mb * BUFFER_SHARE))
    writer.getConfig().setRAMBufferSizeMB(buffer_mb)
    log.debug("bm25: Lucene buffers %.0f MB of a %.0f MB heap", buffer_mb, heap_mb)


def _log_heap() -> None:
    """The JVM heap's peak against its cap: the BM25 stage's memory grows with the corpus until the heap reaches
    its cap (Lucene's merges of larger segments), and no further."""
    from jnius import autoclass

    pools = autoclass("java.lang.management.ManagementFactory").getMemoryPoolMXBeans().toArray()
    heap = [p for p in pools if p.getType().name() == "HEAP"]
    peak = sum(p.getPeakUsage().getCommitted() for p in heap) / (1 << 20)
    cap = autoclass("java.lang.Runtime").getRuntime().maxMemory() / (1 << 20)
    log.info("bm25: the JVM heap peaked at %.0f MB committed, of its %.0f MB cap", peak, cap)


def _write_passage_table(db_path: Path, out_dir: Path) -> None:
    """passage id -> page id and title (backends/passage_table.py): a hit's page without Lucene's stored fields."""
    from backends.passage_table import connect
    from backends.passage_table import write as write_table

    con = connect(db_path)
    try:
        write_table(con, db_path, out_dir)
    finally:
        con.close()


def _write_doc_passages(lucene_dir: Path, path: Path, n: int) -> None:
    """Lucene document number -> passage id, read once from the ``id`` doc values: a search maps its hits with one
    array lookup instead of three calls into Java a hit, made under the backend's lock. Read after the build, as
    Lucene numbers the documents as its threads and merges add them; written as it is read (leaves in document
    order, each in slices), never held whole."""
    import numpy as np
    from jnius import autoclass

    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
        autoclass("org.apache.lucene.store.FSDirectory").open(autoclass("java.nio.file.Paths").get(str(lucene_dir)))
    )
    dtype = np.int32 if 0 < n < 2**31 else np.int64  # ids are 0..n-1
    try:
        if int(reader.maxDoc()) != n:
            raise BuildError(f"{lucene_dir}: {reader.maxDoc()} Lucene documents for {n} passages")
        end = autoclass("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
        missing, done = 0, 0
        with npy_stream(path, dtype, n) as write:
            for leaf in reader.leaves().toArray():
                base, size = int(leaf.docBase), int(leaf.reader().maxDoc())
                if base != done:
                    raise BuildError(f"{lucene_dir}: a leaf starts at document {base}, after {done}")
                values = leaf.reader().getBinaryDocValues("id")
                doc = values.nextDoc() if values is not None else end
                for lo in range(0, size, DOC_SLICE):
                    out = np.full(min(DOC_SLICE, size - lo), -1, dtype=np.int64)
                    while doc != end and doc < lo + len(out):
                        out[doc - lo] = int(values.binaryValue().utf8ToString())
                        doc = values.nextDoc()
                    missing += int((out < 0).sum())
                    if len(out) and int(out.max()) >= np.iinfo(dtype).max:
                        raise BuildError(f"{lucene_dir}: passage id {int(out.max())} does not fit {np.dtype(dtype)}")
                    write(out)
                done += size
            if missing:
                raise BuildError(f"{lucene_dir}: {missing} Lucene documents without an id")
    finally:
        reader.close()


DOC_SLICE = 1 << 20  # documents mapped at a time


def _params(*, k1: float, b: float, title_boost: float, documents: int, source: Path) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "type": NAME,
        "engine": engine(),
        "k1": k1,
        "b": b,
        "title_boost": title_boost,
        "fields": {"contents": 1.0, "title": title_boost},
        "contents": "title. heading_path. text",
        "analyzer": "Anserini DefaultEnglishAnalyzer (Porter stemmer, stopwords removed)",
        "documents": documents,
        "source": str(source),
    }


_WARMED = threading.Event()  # Java's compiler has seen this process's warm-up searches


def load(index_dir: Path) -> BM25Backend:
    """Open a built BM25 index folder; starts the JVM on first use."""
    return BM25Backend(Path(index_dir))


class BM25Backend:
    """Searches one Lucene index as Anserini's ``SimpleSearcher`` ranks it (BM25, title + contents)."""

    name = NAME

    def __init__(self, index_dir: Path):
        self.index_dir = index_dir
        self.params = read_params(index_dir, NAME, FORMAT_VERSION, required=("k1", "b", "fields"))
        lucene_dir = index_dir / LUCENE_DIR
        if not lucene_dir.is_dir():
            raise IndexCorruptError(f"{lucene_dir}: missing (rebuild the bm25 index)")

        from backends.jvm import ensure_jvm

        ensure_jvm()
        # Not pyserini.search.lucene.LuceneSearcher: importing that package pulls in torch and an
        # OpenAI client (see retriever/jvm.py). SimpleSearcher is the Java class it wraps.
        from jnius import autoclass

        try:
            self._searcher = autoclass("io.anserini.search.SimpleSearcher")(str(lucene_dir))
        except Exception as exc:
            raise IndexCorruptError(f"{lucene_dir}: Lucene cannot open the index: {exc}") from exc
        self._searcher.set_bm25(float(self.params["k1"]), float(self.params["b"]))
        jfloat = autoclass("java.lang.Float")
        self._fields = autoclass("java.util.HashMap")()
        for field, weight in self.params["fields"].items():
            if weight > 0:
                self._fields.put(field, jfloat(float(weight)))
        self.documents = int(self._searcher.get_total_num_docs())
        # Java objects may not be called from several Python threads at once: concurrent searches returned another
        # query's hits or a NullPointerException, with Anserini's searcher and with Lucene's (whose Java side is
        # thread-safe), so the Python binding is the cause. One search at a time (each takes milliseconds).
        self._lock = threading.Lock()
        self._topk = _TopK(self._searcher, index_dir, self.params)

    def __enter__(self) -> BM25Backend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """Top ``k`` passages for ``query``; [] for a blank query. Lucene syntax is not parsed."""
        self._open_searcher()
        k = _check_k(k)
        return self._search(prepare_query(query), k)

    def _search(self, text: str, k: int) -> list[Hit]:
        self._open_searcher()
        while text:
            try:
                with self._lock:
                    return self._topk.search(text, self._fields, k)
            except Exception as exc:
                text = _shorter_after(exc, text)
        return []

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        """``search`` for many queries at once; results in input order, each list equal to ``search``'s.

        One query after another: Lucene's top-k search on one core takes less than Anserini's exhaustive batch
        search on several, and Java may be called from one Python thread at a time (see ``__init__``).
        """
        self._open_searcher()
        k = _check_k(k)
        return [self._search(text, k) if text else [] for text in map(prepare_query, queries)]

    def warm(self, *, searches: int = WARM_SEARCHES, seconds: float = WARM_SECONDS, k: int = 50) -> int:
        """Search the titles of the index's own pages (at most ``WARM_WORDS`` words), spread over the corpus, until
        ``searches`` are done or ``seconds`` have passed, so that Java has compiled the search code before the
        first real query. Once a process: compiled code outlives an index
        (a reloaded one is not warmed again). Returns the searches run."""
        self._open_searcher()
        if _WARMED.is_set() or not self.documents:
            return 0
        t0 = time.monotonic()
        done = 0
        while done < searches and time.monotonic() - t0 < seconds:
            texts = [self._opening((done + i) * 7919 % self.documents) for i in range(WARM_BLOCK)]  # spread out
            self.search_batch(texts, k)
            done += WARM_BLOCK
        _WARMED.set()
        log.debug("bm25: %d searches to warm Java's compiler, %.1f s", done, time.monotonic() - t0)
        return done

    def _opening(self, doc: int) -> str:
        """A query for document ``doc``: its page's title (what a claim names first)."""
        try:
            passage = int(self._topk.doc_passages[doc])
            (title,) = self._topk.table.pages_and_titles([passage])[1]
        except Exception:  # noqa: BLE001 - a document without a title warms nothing; the search still runs
            return "warm up"
        return " ".join(title.split()[:WARM_WORDS]) or "warm up"

    def close(self) -> None:
        """Release the Lucene reader; the backend cannot search afterwards."""
        searcher, self._searcher = self._searcher, None
        self._topk = None
        if searcher is not None:
            searcher.close()

    def _open_searcher(self):
        if self._searcher is None:
            raise QueryError(f"{self.index_dir}: the bm25 backend is closed")
        return self._searcher


class _TopK:
    """Lucene's top-k search (block-max WAND) over the index's reader, hits mapped to passages without reading
    stored documents. Called under the backend's lock."""

    def __init__(self, searcher, index_dir: Path, params: dict[str, Any]):
        import numpy as np
        from jnius import autoclass

        from backends.passage_table import FILES, PassageTable

        missing = [f for f in (*FILES, DOC_PASSAGES_FILE) if not (index_dir / f).is_file()]
        if missing:  # the passage table and doc_passages.npy came with the top-k search; older indexes have neither
            raise IndexFormatError(
                index_dir,
                f"format {FORMAT_VERSION} without {', '.join(missing)}",
                f"format {FORMAT_VERSION} with them",
            )
        self._generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")
        self._analyzer = searcher.get_analyzer()
        self._searcher = autoclass("org.apache.lucene.search.IndexSearcher")(searcher.reader)
        similarity = autoclass("org.apache.lucene.search.similarities.BM25Similarity")
        self._searcher.setSimilarity(similarity(float(params["k1"]), float(params["b"])))
        n = int(searcher.get_total_num_docs())
        self.table = PassageTable(index_dir)
        if len(self.table) != n:
            raise IndexCorruptError(f"{index_dir}: the passage table and the Lucene index disagree on the count")
        self.doc_passages = np.load(index_dir / DOC_PASSAGES_FILE, mmap_mode="r", allow_pickle=False)
        if len(self.doc_passages) != n:
            found = len(self.doc_passages)
            raise IndexCorruptError(f"{index_dir / DOC_PASSAGES_FILE}: {found} entries for {n} documents")

    def search(self, text: str, fields, k: int) -> list[Hit]:
        query = self._generator().buildQuery(fields, self._analyzer, text)
        # A few more than k: Lucene breaks exact ties by its document order, Anserini by the id string, so the k-th
        # place of a tie is chosen here as Anserini chooses it.
        scored = [(int(d.doc), float(d.score)) for d in self._searcher.search(query, k + TIE_MARGIN).scoreDocs]
        ids = self._passage_ids(sorted(doc for doc, _ in scored))
        top = sorted(((score, ids[doc]) for doc, score in scored), key=lambda x: (-x[0], str(x[1])))[:k]
        # As Anserini ranks (its ScoreTiesAdjusterReranker): scores rounded to 4 decimals, ties by the id string.
        ranked = sorted(((round(score, 4), pid) for score, pid in top), key=lambda x: (-x[0], str(x[1])))
        pages, titles = self.table.pages_and_titles([pid for _, pid in ranked])
        return [
            Hit(pid, page, score, rank, NAME, title=title)
            for rank, ((score, pid), page, title) in enumerate(zip(ranked, pages, titles), start=1)
        ]

    def _passage_ids(self, docs: list[int]) -> dict[int, int]:
        """Lucene document -> passage id, from the build's array."""
        return dict(zip(docs, self.doc_passages[docs].tolist(), strict=True))


def prepare_query(query: str) -> str:
    """The query text handed to Lucene: whitespace-normalised and cut to a sane length.

    Anserini's bag-of-words generator analyses the text rather than parsing Lucene syntax, so
    quotes, colons, brackets, ``AND`` or ``*`` are plain characters and need no escaping. A lone surrogate,
    which Java's UTF-16 cannot carry, becomes U+FFFD.
    """
    if not isinstance(query, str):
        raise QueryError(f"bm25: query must be a string, not {type(query).__name__}")
    tokens = clean_surrogates(query).split()[:MAX_QUERY_TERMS]
    return " ".join(tokens)[:MAX_QUERY_CHARS]


def engine() -> str:
    """``"pyserini 1.6.0 / Lucene 9.9.1"``: the versions that wrote or read the index (JVM running)."""
    from importlib.metadata import version

    from jnius import autoclass

    lucene = autoclass("org.apache.lucene.util.Version").LATEST.toString()
    return f"pyserini {version('pyserini')} / Lucene {lucene}"


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise QueryError(f"bm25: k must be a positive integer, not {k!r}")
    return k


def _shorter_after(exc: Exception, text: str) -> str:
    """Half of ``text`` if Lucene refused it for too many clauses (a term-dense script); else re-raise."""
    if "TooManyClauses" not in str(exc) and "maxClauseCount" not in str(exc):
        raise QueryError(f"bm25: Lucene failed on the query {text[:80]!r}: {exc}") from exc
    tokens = text.split()
    shorter = " ".join(tokens[: len(tokens) // 2]) if len(tokens) > 1 else text[: len(text) // 2]
    log.debug("bm25: query too long for Lucene (%d chars); retrying with %d", len(text), len(shorter))
    return shorter


def _count_passages(db_path: Path) -> int:
    with _connect(db_path) as con:
        return int(con.execute("SELECT count(*) FROM passages").fetchone()[0])


def _json_batches(db_path: Path, *, batch_size: int) -> Iterator[list[str]]:
    """The store's passages as Anserini JsonCollection documents, ``batch_size`` at a time, by id ranges: one
    ORDER BY over the whole table would have DuckDB sort every passage's text at once."""
    sql = (
        "SELECT passage_id, page_id, title, heading_path, text FROM passages "
        "WHERE passage_id >= ? AND passage_id < ? ORDER BY passage_id"
    )
    with _connect(db_path) as con:
        (top,) = con.execute("SELECT coalesce(max(passage_id) + 1, 0) FROM passages").fetchone()
        for lo in range(0, int(top), batch_size):
            rows = con.execute(sql, [lo, lo + batch_size]).fetchall()
            if rows:
                yield [_document(*row) for row in rows]


def _document(passage_id: int, page_id: int, title: str, heading_path: str, text: str) -> str:
    contents = ". ".join(part for part in (title, heading_path, text) if part)
    return json.dumps(
        {"id": str(passage_id), "contents": contents or " ", "title": title, "page_id": page_id},
        ensure_ascii=False,
    )


def _connect(db_path: Path):
    import duckdb

    from backends.passage_table import read_config
    from wikiground.system import quiet

    try:
        return quiet(duckdb.connect(str(db_path), read_only=True, config=read_config()))
    except duckdb.Error as exc:
        raise BuildError(f"{db_path}: cannot open the store read-only: {exc}") from exc
