"""The store's ``triples`` as memory-mapped adjacency arrays: a page's facts without a DuckDB round trip.

The kg channel reads, per claim, the facts of a few pages (hop 1) and those of the pages they lead to that reach
the claim (hop 2). As key-list queries each costs DuckDB milliseconds, most of it planning and scanning row
groups; here a page's facts are one binary search and a slice. ``triples`` is written ordered by
subject; the arrays hold the facts in :data:`FACT_ORDER`, the order the kg channel's SQL asks for, so both give
the same answers. The SQL over ``triples`` stays the reference: the live delta, and stores without these files,
are answered by it.

Files in ``DIR/lookups/`` (written with the other lookups, counted in their params.json as ``graph``):

- ``graph.subject_id.npy`` (int64, sorted) and ``graph.subject_start.npy`` (int64, subjects + 1): the facts of
  the i-th subject are rows ``subject_start[i]:subject_start[i + 1]``; ``graph.subject_title.*`` its title;
- per fact, in ``triples``' row order: ``graph.object.npy`` and ``graph.relation.npy`` (ids into the sorted
  dictionaries ``graph.objects.*`` and ``graph.relations.*``), ``graph.source.npy`` (into ``graph.sources.*``),
  ``graph.passage_id.npy``, ``graph.sentence_id.npy`` (-1 for NULL), and ``graph.start.npy`` / ``graph.end.npy``:
  where the stating sentence lies in its passage's text (-1 when no sentence states it). Each column is the
  narrowest signed integer type that holds its values in this store (:func:`column_types`): ids are most of the
  channel's bytes, and most columns need one or two bytes;
- ``graph.objects.*`` holds each distinct (object title, object page) pair, sorted, with the page id in
  ``graph.objects.page_id.npy`` (-1 when none): an object's page is the same for every fact naming it (but a
  category and an article of the same name), so it is stored once per object rather than once per fact;
- a dictionary ``{name}``: ``{name}.bin`` (UTF-8 strings, concatenated) and ``{name}.offsets.npy`` (int64).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wikiground.layout import append_blobs, atomic_path, map_bytes, npy_stream, save_npy

logger = logging.getLogger(__name__)

BATCH_ROWS = 100_000
SCAN_ROWS = 8_192  # hop-2 facts examined per step; the scan stops once the limit is reached
_DICTIONARIES = ("objects", "relations", "sources")
_DICTIONARY_SQL = {
    "objects": "SELECT object_title, page FROM (SELECT DISTINCT object_title, coalesce(object_page_id, -1) AS page "
    "FROM triples) ORDER BY object_title, page",
    "relations": "SELECT DISTINCT relation FROM triples ORDER BY relation",
    "sources": "SELECT DISTINCT source FROM triples ORDER BY source",
}
_INT_COLUMNS = ("object", "relation", "source", "passage_id", "sentence_id", "start", "end")
_SIGNED = (np.int8, np.int16, np.int32, np.int64)

# The facts' order: a total one (two facts equal in all of these are the same fact), which the kg channel's SQL
# over the live delta, and over stores without these files, uses too.
FACT_ORDER = ("subject_page_id", "source", "relation", "object_title", "passage_id", "sentence_id", "object_page_id")

# Ids of the dictionaries' strings (their rank in byte order), and each fact's sentence span, in FACT_ORDER.
_FACTS_SQL = """
WITH o AS (SELECT object_title, page, (row_number() OVER (ORDER BY object_title, page) - 1)::INTEGER AS i
           FROM (SELECT DISTINCT object_title, coalesce(object_page_id, -1) AS page FROM triples)),
     r AS (SELECT relation, (row_number() OVER (ORDER BY relation) - 1)::INTEGER AS i
           FROM (SELECT DISTINCT relation FROM triples)),
     s AS (SELECT source, (row_number() OVER (ORDER BY source) - 1)::INTEGER AS i
           FROM (SELECT DISTINCT source FROM triples))
SELECT t.subject_page_id, o.i AS object, r.i AS relation, s.i::UTINYINT AS source,
       coalesce(t.passage_id, -1) AS passage_id,
       coalesce(t.sentence_id, -1) AS sentence_id,
       coalesce(sp.start_char, -1) AS start, coalesce(sp.end_char, -1) AS "end"
FROM triples t
JOIN o ON o.object_title = t.object_title AND o.page = coalesce(t.object_page_id, -1)
JOIN r USING (relation) JOIN s USING (source)
LEFT JOIN sentence_spans sp ON sp.passage_id = t.passage_id AND sp.page_sentence_index = t.sentence_id
ORDER BY {order}
""".format(order=", ".join(f"t.{c}" for c in FACT_ORDER))


class _Mismatch(Exception):
    """The facts read are not the table's (a sentence span that is not unique): no arrays are written."""


def write(con: Any, folder: Path) -> int:
    """Write the arrays of the store ``con``'s ``triples`` into ``folder``; returns the facts written (0, and no
    files, if a fact's sentence span is ambiguous). Streams: a batch of rows in memory at a time."""
    n = con.execute("SELECT count(*) FROM triples").fetchall()[0][0]
    (pages,) = _write_strings(con, folder, "graph.objects", _DICTIONARY_SQL["objects"], keep=(1,))
    save_npy(folder / "graph.objects.page_id.npy", pages.astype(narrowest(-1, int(pages.max(initial=-1)))))
    for name in ("relations", "sources"):
        _write_strings(con, folder, f"graph.{name}", _DICTIONARY_SQL[name])
    subjects = _write_strings(
        con,
        folder,
        "graph.subject_title",
        "SELECT subject_page_id, min(subject_title), count(*) FROM triples GROUP BY 1 ORDER BY 1",
        keep=(0, 2),
    )
    ids, counts = subjects
    start = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    try:
        _write_facts(con, folder, n)
    except _Mismatch:
        for f in folder.glob("graph.*"):
            f.unlink()
        logger.warning("%s: sentence spans are not unique; the kg channel reads the triples in the store", folder)
        return 0
    save_npy(folder / "graph.subject_id.npy", ids)
    save_npy(folder / "graph.subject_start.npy", start)
    return int(n)


def _write_strings(con: Any, folder: Path, name: str, sql: str, keep: tuple[int, ...] = ()) -> list[np.ndarray]:
    """A dictionary file pair from ``sql``'s string column (the one column not in ``keep``), in order; returns the
    ``keep`` columns as arrays."""
    kept: list[list[np.ndarray]] = [[] for _ in keep]
    offsets = [np.zeros(1, dtype=np.int64)]
    end = 0
    reader = con.sql(sql).to_arrow_reader(BATCH_ROWS)
    text_col = next(i for i in range(len(keep) + 1) if i not in keep)
    with atomic_path(folder / f"{name}.bin") as tmp, open(tmp, "wb") as out:
        for batch in reader:
            end = append_blobs(out, [s.encode("utf-8") for s in batch.column(text_col).to_pylist()], offsets, end)
            for arrays, col in zip(kept, keep, strict=True):
                arrays.append(batch.column(col).to_numpy().astype(np.int64))
    save_npy(folder / f"{name}.offsets.npy", np.concatenate(offsets))
    return [np.concatenate(a) if a else np.zeros(0, dtype=np.int64) for a in kept]


def narrowest(low: int, high: int) -> type:
    """The narrowest signed integer type holding ``low`` and ``high``."""
    return next(t for t in _SIGNED if np.iinfo(t).min <= low and high <= np.iinfo(t).max)


def column_types(con: Any) -> dict[str, type]:
    """Each per-fact column's type: the narrowest that holds every value of this store (-1 standing for NULL)."""
    objects, relations, passage, sentence = con.execute(
        "SELECT (SELECT count(*) FROM (SELECT DISTINCT object_title, object_page_id FROM triples)),"
        " count(DISTINCT relation), max(passage_id), max(sentence_id) FROM triples"
    ).fetchall()[0]
    (end,) = con.execute("SELECT max(end_char) FROM sentence_spans").fetchall()[0]
    top = {
        "object": objects - 1,
        "relation": relations - 1,
        "passage_id": passage,
        "sentence_id": sentence,
        "start": end,
        "end": end,
    }
    types: dict[str, type] = {name: narrowest(-1, int(v or 0)) for name, v in top.items()}
    types["source"] = np.uint8
    return types


def _write_facts(con: Any, folder: Path, n: int) -> None:
    """The per-fact arrays, each streamed to its file as DuckDB's batches arrive: never an array of every fact,
    nor a memory map whose written pages count in the build's RSS until the kernel writes them back."""
    types = column_types(con)
    reader = con.sql(_FACTS_SQL).to_arrow_reader(BATCH_ROWS)
    with contextlib.ExitStack() as stack:
        writers = {
            name: stack.enter_context(npy_stream(folder / f"graph.{name}.npy", types[name], n)) for name in _INT_COLUMNS
        }
        pos = 0
        for batch in reader:
            m = batch.num_rows
            if pos + m > n:
                raise _Mismatch  # more rows than facts: the span join matched twice (never in a built store)
            for name, write in writers.items():
                write(batch.column(name).to_numpy(zero_copy_only=False))
            pos += m
        if pos != n:
            raise _Mismatch


# -- reading ------------------------------------------------------------------------------------------------------


class _Strings:
    def __init__(self, folder: Path, name: str):
        self.offsets = np.load(folder / f"{name}.offsets.npy", mmap_mode="r", allow_pickle=False)
        self.blob = map_bytes(folder / f"{name}.bin")
        if int(self.offsets[-1]) != len(self.blob):
            raise ValueError(f"{name}: .bin does not end where its offsets do")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return bytes(self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])]).decode("utf-8")


class Graph:
    """The facts of the main store by subject, memory-mapped. Thread-safe (reads only).

    A fact is the tuple ``(subject_page_id, subject_title, relation, object_title, object_page_id, source,
    passage_id, sentence_id)`` that ``triples`` holds (None for NULL), followed by its sentence's ``(start, end)``
    in the passage's text (None when no sentence states it)."""

    def __init__(self, folder: Path):
        def load(name: str) -> np.ndarray:
            return np.load(folder / f"graph.{name}.npy", mmap_mode="r", allow_pickle=False)

        self.subject_id = load("subject_id")
        self.subject_start = load("subject_start")
        self.columns = {name: load(name) for name in _INT_COLUMNS}
        self.strings = {name: _Strings(folder, f"graph.{name}") for name in (*_DICTIONARIES, "subject_title")}
        self.object_page = np.load(folder / "graph.objects.page_id.npy", mmap_mode="r", allow_pickle=False)
        # Few relations and sources (normalised infobox keys): read once, and matched once a claim.
        self.relations = [self.strings["relations"][i] for i in range(len(self.strings["relations"]))]
        self.sources = [self.strings["sources"][i] for i in range(len(self.strings["sources"]))]
        n = len(self.subject_start) - 1
        if n != len(self.subject_id) or n != len(self.strings["subject_title"]):
            raise ValueError("graph: subject arrays of different lengths")
        if any(len(a) != len(self) for a in self.columns.values()):
            raise ValueError("graph: fact arrays of different lengths")
        if len(self.object_page) != len(self.strings["objects"]):
            raise ValueError("graph: objects and their pages of different lengths")

    def __len__(self) -> int:
        return int(self.subject_start[-1])

    def _ranges(self, subject_ids: Iterable[int]) -> list[tuple[int, int, int]]:
        """(subject index, first row, end row) of each of ``subject_ids`` that states facts, by ascending id."""
        ids = np.unique(np.asarray(list(subject_ids), dtype=np.int64))
        if not len(ids) or not len(self.subject_id):
            return []
        at = np.minimum(np.searchsorted(self.subject_id, ids), len(self.subject_id) - 1)
        found = at[self.subject_id[at] == ids]
        return [(int(i), int(self.subject_start[i]), int(self.subject_start[i + 1])) for i in found]

    def facts(self, subject_ids: Iterable[int], *, per_subject: int | None = None) -> list[tuple]:
        """The facts of ``subject_ids`` (at most ``per_subject`` each, the first ones), by subject id."""
        owners: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for i, a, b in self._ranges(subject_ids):
            if per_subject is not None:
                b = min(b, a + per_subject)
            rows.append(np.arange(a, b))
            owners.append(np.full(b - a, i))
        return self._rows(np.concatenate(owners), np.concatenate(rows)) if rows else []

    def facts_reaching(
        self, subject_ids: Iterable[int], object_ids: Sequence[int], pattern: re.Pattern | None, limit: int
    ) -> list[tuple]:
        """The first ``limit`` facts of ``subject_ids`` (by subject id, then row) whose object page is one of
        ``object_ids`` or whose ``lower(object_title || ' ' || relation)`` ``pattern`` finds (as DuckDB's
        ``regexp_matches``; None finds nothing)."""
        targets = np.asarray(sorted(set(object_ids)), dtype=np.int64)
        rel_hit = np.zeros(len(self.relations), dtype=bool)
        if pattern is not None:
            rel_hit[:] = [pattern.search(_lower(r)) is not None for r in self.relations]
        owners: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        found = 0
        ranges = self._ranges(subject_ids)
        j = 0
        while j < len(ranges) and found < limit:
            step: list[tuple[int, int, int]] = []
            scanned = 0
            while j < len(ranges) and (not step or scanned < SCAN_ROWS):
                step.append(ranges[j])
                scanned += ranges[j][2] - ranges[j][1]
                j += 1
            idx = np.concatenate([np.arange(a, b) for _, a, b in step])
            owner = np.repeat([i for i, _, _ in step], [b - a for _, a, b in step])
            objects = self.columns["object"][idx]
            hit = np.isin(self.object_page[objects], targets) | rel_hit[self.columns["relation"][idx]]
            if pattern is not None:
                hit |= self._objects_matching(objects, pattern)
            take = min(int(hit.sum()), limit - found)
            owners.append(owner[hit][:take])
            rows.append(idx[hit][:take])
            found += take
        return self._rows(np.concatenate(owners), np.concatenate(rows)) if rows else []

    def _objects_matching(self, objects: np.ndarray, pattern: re.Pattern) -> np.ndarray:
        """Per entry of ``objects`` (object title ids): whether ``pattern`` finds something in the lower-cased
        title. The distinct titles are matched in one pass over them joined by newlines."""
        uniq, inverse = np.unique(objects, return_inverse=True)
        names = self.strings["objects"]
        titles = [_lower(names[int(u)]) for u in uniq]
        ends = np.cumsum([len(t) + 1 for t in titles]).tolist()
        found = np.zeros(len(uniq), dtype=bool)
        for m in pattern.finditer("\n".join(titles)):
            found[bisect.bisect_right(ends, m.start())] = True
        return found[inverse]

    def _rows(self, subjects: np.ndarray, rows: np.ndarray) -> list[tuple]:
        """The facts at ``rows``, each stated by the subject of index ``subjects[k]``."""
        c = {name: arr[rows].tolist() for name, arr in self.columns.items()}
        object_page = self.object_page[self.columns["object"][rows]].tolist()
        ids = self.subject_id[subjects].tolist()
        titles = {int(i): self.strings["subject_title"][int(i)] for i in np.unique(subjects)}
        objects = self.strings["objects"]
        out = []
        for k, subject in enumerate(subjects.tolist()):
            start = c["start"][k]
            out.append(
                (
                    ids[k],
                    titles[subject],
                    self.relations[c["relation"][k]],
                    objects[c["object"][k]],
                    _none(object_page[k]),
                    self.sources[c["source"][k]],
                    _none(c["passage_id"][k]),
                    _none(c["sentence_id"][k]),
                    None if start < 0 else (start, c["end"][k]),
                )
            )
        return out


def _lower(text: str) -> str:
    """``text`` lower-cased as DuckDB's ``lower`` does: one character for one (Python maps U+0130, I with a dot
    above, to two: "i" and a combining dot, which splits a word for an ASCII word boundary)."""
    return text.replace("\u0130", "i").lower()


def _none(value: int) -> int | None:
    return None if value < 0 else value
