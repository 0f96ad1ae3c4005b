"""The gensim enwiki fragment ingested into a store (conftest ``gensim_store``): counts, pages, redirects, manifest."""

from __future__ import annotations

import bz2
import hashlib
import json
import re

import duckdb
import pytest

from indexer.schema import SCHEMA_VERSION, TABLES
from wikiground.text import normalize_title


@pytest.fixture(scope="module")
def con(gensim_store):
    c = duckdb.connect(str(gensim_store / "wiki.duckdb"), read_only=True)
    yield c
    c.close()


@pytest.fixture(scope="module")
def manifest(gensim_store):
    return json.loads((gensim_store / "manifest.json").read_text())


def one(con, sql, *params):
    return con.execute(sql, list(params)).fetchone()[0]


def page_id(con, title):
    return one(con, "SELECT page_id FROM pages WHERE title = ?", title)


def test_counts_match_the_fragment(con, gensim_dump):
    # The fragment: 205 pages in namespace 0, 99 of them redirects; the other 106 are articles.
    raw = bz2.decompress(gensim_dump.read_bytes()).decode()
    assert raw.count("<ns>0</ns>") == 205
    assert one(con, "SELECT count(*) FROM pages") == 106
    assert one(con, "SELECT count(*) FROM redirects") == 99
    assert one(con, "SELECT count(*) FROM pages WHERE is_disambiguation") == 8
    assert one(con, "SELECT count(DISTINCT page_id) FROM see_also") == 78
    assert one(con, "SELECT count(*) FROM pages WHERE namespace <> 0") == 0
    # Redirect pages are not articles.
    assert one(con, "SELECT count(*) FROM pages p JOIN redirects r ON r.source_title = p.title") == 0


def test_page_row(con):
    row = con.execute(
        "SELECT page_id, namespace, rev_id, rev_timestamp, url, title_norm, source_file, origin, lead "
        "FROM pages WHERE title = 'Aristotle'"
    ).fetchone()
    pid, ns, rev_id, stamp, url, norm, source, origin, lead = row
    assert (pid, ns) == (308, 0)
    assert rev_id > 0 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert url == "https://en.wikipedia.org/wiki/Aristotle"
    assert norm == normalize_title("Aristotle") == "aristotle"
    assert source.startswith("gensim-enwiki") and origin == "local"
    assert "Greek philosopher" in lead and "{{" not in lead and "[[" not in lead
    assert lead == one(con, "SELECT text FROM sections WHERE page_id = ? AND section_index = 0", pid)


def test_aristotle_sections(con):
    pid = page_id(con, "Aristotle")
    rows = con.execute(
        "SELECT section_index, level, heading, parent_index, heading_path FROM sections "
        "WHERE page_id = ? ORDER BY section_index",
        [pid],
    ).fetchall()
    assert rows[0] == (0, 1, "", None, "")
    headings = [r[2] for r in rows]
    for heading in ("Life", "Thought", "Logic", "Metaphysics", "Legacy", "See also", "Further reading"):
        assert heading in headings
    by_heading = {r[2]: r for r in rows}
    logic = by_heading["Logic"]
    assert logic[1] == 3 and logic[4] == "Thought > Logic"
    assert rows[logic[3]][2] == "Thought"
    assert [r[0] for r in rows] == list(range(len(rows)))


def test_categories_see_also_infobox(con):
    pid = page_id(con, "Aristotle")
    categories = {r[0] for r in con.execute("SELECT category FROM categories WHERE page_id = ?", [pid]).fetchall()}
    assert {"Ancient Greek philosophers", "4th-century BC philosophers"} <= categories
    assert not any(c.startswith("Category:") for c in categories)
    see_also = {r[0] for r in con.execute("SELECT target_title FROM see_also WHERE page_id = ?", [pid]).fetchall()}
    assert {"Aristotelian physics", "Pseudo-Aristotle", "List of writers influenced by Aristotle"} <= see_also
    infobox = dict(con.execute("SELECT key, value FROM infobox WHERE page_id = ?", [pid]).fetchall())
    assert infobox["name"] == "Aristotle"
    assert "Plato" in infobox["influences"]
    assert one(con, "SELECT count(DISTINCT page_id) FROM infobox") >= 40


def test_disambiguation_pages(con):
    titles = {r[0] for r in con.execute("SELECT title FROM pages WHERE is_disambiguation").fetchall()}
    assert {"Aberdeen (disambiguation)", "Alien", "Ada"} <= titles
    # A disambiguation page's options are its links.
    assert one(con, "SELECT count(*) FROM links WHERE page_id = ?", page_id(con, "Alien")) >= 5


def test_redirects_resolved(con):
    rows = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT source_title, target_title, direct_target, target_page_id, source_page_id, is_loop, source_norm "
            "FROM redirects"
        ).fetchall()
    }
    # Written in the dump as <redirect title="..."/>; target present in the fragment.
    assert rows["AynRand"][:4] == ("Ayn Rand", "Ayn Rand", 339, 255)
    assert rows["ANOVA"][:3] == ("Analysis of variance", "Analysis of variance", 634)
    # Target not in the fragment: kept, with no target page id.
    assert rows["AccessibleComputing"][:4] == ("Computer accessibility", "Computer accessibility", None, 10)
    assert rows["AccessibleComputing"][5] == "accessiblecomputing"
    assert sum(1 for r in rows.values() if r[2] is not None) == 13
    assert not any(r[4] for r in rows.values())
    # Every resolved target that is in the store points at the right page.
    bad = one(
        con,
        "SELECT count(*) FROM redirects r JOIN pages p ON p.page_id = r.target_page_id WHERE p.title <> r.target_title",
    )
    assert bad == 0


def test_passages_and_sentences(con):
    n = one(con, "SELECT count(*) FROM passages")
    assert n > 1000
    assert con.execute(
        "SELECT min(passage_id), max(passage_id), count(DISTINCT passage_id) FROM passages"
    ).fetchone() == (0, n - 1, n)
    # Build order: passage ids rise with (page order, passage_index).
    assert (
        one(
            con,
            """SELECT count(*) FROM (SELECT passage_id, passage_index,
                  lag(passage_index) OVER (PARTITION BY page_id ORDER BY passage_id) AS prev FROM passages)
                  WHERE prev IS NOT NULL AND passage_index <> prev + 1""",
        )
        == 0
    )
    assert one(con, "SELECT count(*) FROM passages p JOIN pages g USING (page_id) WHERE p.title <> g.title") == 0
    assert one(con, "SELECT count(*) FROM passages WHERE source = 'info'") >= 40
    # Sentence offsets address the passage text.
    assert (
        one(
            con,
            """SELECT count(*) FROM sentences s JOIN passages p USING (passage_id)
                  WHERE substr(p.text, s.start_char + 1, s.end_char - s.start_char) <> s.text""",
        )
        == 0
    )
    assert (
        one(con, "SELECT count(*) FROM passages p LEFT JOIN sentences s USING (passage_id) WHERE s.passage_id IS NULL")
        < n // 20
    )
    pid = page_id(con, "Aristotle")
    idx = [
        r[0]
        for r in con.execute(
            """SELECT page_sentence_index FROM sentences JOIN passages USING (passage_id)
               WHERE page_id = ? ORDER BY passage_id, sentence_index""",
            [pid],
        ).fetchall()
    ]
    assert idx == list(range(len(idx))) and len(idx) > 100
    paths = {r[0] for r in con.execute("SELECT heading_path FROM passages WHERE page_id = ?", [pid]).fetchall()}
    assert "Thought > Logic" in paths


def test_sentences_view_slices_passage_text(con):
    # The store keeps sentence offsets (sentence_spans); `sentences` is a view slicing passages.text.
    kinds = dict(
        con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_name IN ('sentences', 'sentence_spans')"
        ).fetchall()
    )
    assert kinds == {"sentences": "VIEW", "sentence_spans": "BASE TABLE"}
    assert one(con, "SELECT count(*) FROM sentences") == one(con, "SELECT count(*) FROM sentence_spans")
    # DuckDB's substr and Python's str slicing must agree on non-ASCII text (both count code points).
    rows = con.execute("""SELECT passage_id, text FROM passages WHERE strlen(text) > length(text)
                          ORDER BY passage_id LIMIT 200""").fetchall()
    assert len(rows) >= 50
    for passage_id, text in rows:
        got = con.execute(
            "SELECT text, start_char, end_char FROM sentences WHERE passage_id = ? ORDER BY sentence_index",
            [passage_id],
        ).fetchall()
        assert got and all(t == text[a:b] for t, a, b in got)


def test_sections_view_rebuilds_the_cleaned_text(con, gensim_dump):
    # The store keeps section heads and what lies between a section's passages; `sections` is a view that joins
    # the passages back into each section's text, exactly as the cleaner made it.
    from indexer.readers import InputReader
    from indexer.wikitext import parse_wikitext

    kinds = dict(
        con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_name IN ('sections', 'section_heads', 'passage_joints')"
        ).fetchall()
    )
    assert kinds == {"sections": "VIEW", "section_heads": "BASE TABLE", "passage_joints": "BASE TABLE"}
    assert one(con, "SELECT count(*) FROM sections") == one(con, "SELECT count(*) FROM section_heads") > 1000
    assert one(con, "SELECT count(*) FROM section_heads WHERE text IS NOT NULL") == 0  # all spelled out
    titles = {"Aristotle", "Alabama", "Anarchism", "Autism", "Algeria", "Andorra"}
    raws = [p for p in InputReader(gensim_dump) if p.title in titles]
    assert len(raws) == len(titles)
    for raw in raws:
        parsed = parse_wikitext(raw.text, title=raw.title)
        got = con.execute(
            "SELECT section_index, level, heading, parent_index, text, heading_path FROM sections "
            "WHERE page_id = ? ORDER BY section_index",
            [raw.page_id],
        ).fetchall()
        assert got == [(s.index, s.level, s.heading, s.parent_index, s.text, s.heading_path) for s in parsed.sections]


def test_a_section_its_passages_do_not_spell_keeps_its_text(tmp_path):
    from indexer.store_writer import PageRows, StoreWriter

    rows = PageRows(page_id=7, title="T", namespace=0, lead="One. Two.")
    rows.sections = [
        (0, 1, "", None, "One. Two.", ""),
        (1, 2, "H", 0, "Three.\nFour.", "H"),
        (2, 2, "Empty", 0, "", "Empty"),
    ]
    # Section 0 is spelled by its passages; section 1's passage was changed after chunking.
    rows.passages = [
        (0, "One.", "", "text", ((0, 4),), range(0, 1)),
        (0, "Two.", "", "text", ((0, 4),), range(1, 2)),
        (1, "Three. Four.", "H", "text", ((0, 12),), range(2, 3)),
        (0, "k: v", "", "info", ((0, 4),), range(3, 4)),
    ]
    writer = StoreWriter(tmp_path / "wiki.duckdb")
    writer.add(rows)
    writer.finish()
    c = duckdb.connect(str(tmp_path / "wiki.duckdb"), read_only=True)
    try:
        assert c.execute("SELECT section_index, text FROM sections ORDER BY section_index").fetchall() == [
            (0, "One. Two."),
            (1, "Three.\nFour."),
            (2, ""),
        ]
        assert c.execute("SELECT section_index, text IS NULL FROM section_heads ORDER BY section_index").fetchall() == [
            (0, True),
            (1, False),
            (2, True),
        ]
        assert c.execute("SELECT passage_id, joint FROM passage_joints ORDER BY passage_id").fetchall() == [
            (0, ""),
            (1, " "),
        ]
    finally:
        c.close()


def test_table_rows(con):
    assert one(con, "SELECT count(DISTINCT page_id) FROM table_rows") >= 20
    assert one(con, "SELECT count(*) FROM table_rows WHERE text LIKE '%|%'") > 100


def test_manifest(manifest, gensim_dump, con):
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["tool_version"] == __import__("retriever").__version__
    (entry,) = manifest["inputs"]
    assert entry["name"] == gensim_dump.name
    assert entry["size"] == gensim_dump.stat().st_size
    assert entry["sha256"] == hashlib.sha256(gensim_dump.read_bytes()).hexdigest()
    assert entry["format"] == "mediawiki-xml"
    assert entry["siteinfo"]["dbname"] == "enwiki"
    assert entry["siteinfo"]["base"] == "https://en.wikipedia.org/wiki/Main_Page"
    assert entry["siteinfo"]["case"] == "first-letter"
    assert entry["siteinfo"]["generator"].startswith("MediaWiki")
    assert (entry["pages_read"], entry["pages_kept"]) == (206, 205)
    assert manifest["newest_rev_timestamp"] == one(con, "SELECT max(rev_timestamp) FROM pages")
    assert manifest["newest_rev_timestamp"].startswith("2016-")
    for table in TABLES:
        assert manifest["counts"][table] == one(con, f"SELECT count(*) FROM {table}")
    assert manifest["redirect_loops"] == 0
    assert manifest["parameters"]["namespaces"] == [0] and manifest["parameters"]["indexes"] == []
    assert manifest["build"]["seconds"] > 0 and manifest["build"]["started"] <= manifest["build"]["finished"]
    assert manifest["indexes"] == {}


def test_store_has_the_secondary_indexes(con):
    names = {r[0] for r in con.execute("SELECT index_name FROM duckdb_indexes()").fetchall()}
    assert {"pages_title", "pages_title_norm", "redirects_source_norm", "passages_page"} <= names
    assert "_redirect_raw" not in {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
