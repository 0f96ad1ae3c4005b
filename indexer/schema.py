"""The store's public schema (DuckDB). Table and column names here are public API: add, never rename."""

from __future__ import annotations

SCHEMA_VERSION = 4  # 2: `sentences` a view over `sentence_spans`; 3: `sections` over `section_heads`; 4: `triples`

TABLES_DDL = """
CREATE TABLE pages (
    page_id           BIGINT PRIMARY KEY,
    title             VARCHAR NOT NULL,
    namespace         INTEGER NOT NULL,
    rev_id            BIGINT,
    rev_timestamp     VARCHAR,          -- ISO 8601, as in the dump
    is_disambiguation BOOLEAN NOT NULL,
    url               VARCHAR,
    lead              VARCHAR,          -- clean text of the lead section
    title_norm        VARCHAR NOT NULL, -- wikiground.text.normalize_title(title)
    source_file       VARCHAR,          -- input file the page came from
    origin            VARCHAR NOT NULL DEFAULT 'local'  -- 'local' | 'live' (delta store)
);
CREATE TABLE redirects (
    source_title     VARCHAR NOT NULL,
    target_title     VARCHAR,           -- final target after resolving chains; NULL for a loop
    target_fragment  VARCHAR,
    source_norm      VARCHAR NOT NULL,
    source_page_id   BIGINT,
    namespace        INTEGER NOT NULL,
    direct_target    VARCHAR NOT NULL,  -- the target as written on the redirect page
    target_page_id   BIGINT,            -- NULL when the target is not in the store
    is_loop          BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE TABLE passages (
    passage_id    BIGINT PRIMARY KEY,   -- dense, 0..N-1 in build order: shard embedding by id range
    page_id       BIGINT NOT NULL,
    section_index INTEGER NOT NULL,
    -- The one copy of the text (the sections and sentences views slice it), and most of the store's bytes:
    -- compressed as DuckDB chooses (FSST), which costs the writer CPU and a point lookup little (docs/scale.md).
    -- zstd would halve it again but makes every evidence lookup decompress whole blocks.
    text          VARCHAR NOT NULL,
    title         VARCHAR NOT NULL,
    heading_path  VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,     -- 'text' | 'table' | 'info'
    passage_index INTEGER NOT NULL      -- order within the page
);
CREATE TABLE categories (page_id BIGINT NOT NULL, category VARCHAR NOT NULL);
CREATE TABLE see_also   (page_id BIGINT NOT NULL, target_title VARCHAR NOT NULL);
CREATE TABLE links (
    page_id       BIGINT NOT NULL,
    target_title  VARCHAR NOT NULL,
    anchor_text   VARCHAR NOT NULL,
    section_index INTEGER
);
CREATE TABLE infobox (
    page_id      BIGINT NOT NULL,
    infobox_type VARCHAR NOT NULL,
    key          VARCHAR NOT NULL,
    value        VARCHAR NOT NULL
);
CREATE TABLE table_rows (
    page_id     BIGINT NOT NULL,
    table_index INTEGER NOT NULL,
    row_index   INTEGER NOT NULL,
    text        VARCHAR NOT NULL
);
"""

# Knowledge-graph facts from the pages' own structure (indexer/triples.py). Part of every store.
TRIPLES_DDL = """
-- Infobox fields (relation normalised, one row per linked title), links ('mentions', with the sentence holding
-- them), "See also" and categories. passage_id/sentence_id say where the fact is stated (sentence_id is the
-- page-level sentence number, NULL when no passage states it).
CREATE TABLE triples (
    subject_page_id BIGINT NOT NULL,
    subject_title   VARCHAR NOT NULL,
    relation        VARCHAR NOT NULL,   -- 'birth_place', 'influences', ..., 'mentions', 'see_also', 'category'
    object_title    VARCHAR NOT NULL,
    object_page_id  BIGINT,             -- the object's page after redirects; NULL when it has none
    source          VARCHAR NOT NULL,   -- 'infobox' | 'link' | 'see_also' | 'category'
    passage_id      BIGINT,
    sentence_id     INTEGER,
    rev_id          BIGINT              -- the subject page's revision
);
"""
TABLES_DDL += TRIPLES_DDL

# Tables: row-by-row writers (the live delta store) insert sections and sentences with their text.
SECTIONS_TABLE_DDL = """
CREATE TABLE sections (
    page_id       BIGINT NOT NULL,
    section_index INTEGER NOT NULL,     -- 0 is the lead
    level         INTEGER NOT NULL,     -- 1 for the lead, 2 for ==h==, ...
    heading       VARCHAR NOT NULL,     -- '' for the lead
    parent_index  INTEGER,              -- enclosing section (NULL for the lead)
    text          VARCHAR NOT NULL,
    heading_path  VARCHAR NOT NULL      -- 'History > Early life'
);
"""
SENTENCES_TABLE_DDL = """
CREATE TABLE sentences (
    passage_id          BIGINT NOT NULL,
    sentence_index      INTEGER NOT NULL,   -- within the passage
    page_sentence_index INTEGER NOT NULL,   -- within the page (HoVer/HotpotQA sentence ids)
    text                VARCHAR NOT NULL,
    start_char          INTEGER NOT NULL,   -- offsets into passages.text
    end_char            INTEGER NOT NULL
);
"""

# The bulk-built store keeps only the sentences' offsets: their text is a slice of the passage's text,
# so storing it again would double the text loaded and compressed at build time. The view keeps
# `sentences(passage_id, sentence_index, page_sentence_index, text, start_char, end_char)` readable as
# before. substr counts characters (code points), as Python's str offsets do.
SENTENCE_SPANS_DDL = """
CREATE TABLE sentence_spans (
    passage_id          BIGINT NOT NULL,
    sentence_index      INTEGER NOT NULL,   -- within the passage
    page_sentence_index INTEGER NOT NULL,   -- within the page (HoVer/HotpotQA sentence ids)
    start_char          INTEGER NOT NULL,   -- offsets into passages.text: text[start_char:end_char]
    end_char            INTEGER NOT NULL
);
CREATE VIEW sentences AS
SELECT s.passage_id, s.sentence_index, s.page_sentence_index,
       substr(p.text, s.start_char + 1, s.end_char - s.start_char) AS text, s.start_char, s.end_char
FROM sentence_spans s JOIN passages p ON p.passage_id = s.passage_id;
"""

# The bulk-built store does not store a section's text either: its 'text' passages are consecutive slices of
# it, so the text is those passages joined by what lies between them (`passage_joints.joint`, usually one
# space or newline). Stored, the section texts were 60% of the store and a fifth of the text loaded at build
# time. A section whose passages do not spell it out keeps its text in `section_heads.text`. The view keeps
# `sections(page_id, section_index, level, heading, parent_index, text, heading_path)` readable as before.
SECTION_HEADS_DDL = """
CREATE TABLE section_heads (
    page_id       BIGINT NOT NULL,
    section_index INTEGER NOT NULL,
    level         INTEGER NOT NULL,
    heading       VARCHAR NOT NULL,
    parent_index  INTEGER,
    heading_path  VARCHAR NOT NULL,
    text          VARCHAR               -- NULL when the section's passages spell out its text
);
CREATE TABLE passage_joints (
    passage_id    BIGINT NOT NULL,      -- a 'text' passage of a section that section_heads.text leaves NULL
    page_id       BIGINT NOT NULL,
    section_index INTEGER NOT NULL,
    joint         VARCHAR NOT NULL      -- the section's text between the previous passage and this one
);
CREATE VIEW sections AS
SELECT h.page_id, h.section_index, h.level, h.heading, h.parent_index,
       coalesce(h.text, t.text, '') AS text, h.heading_path
FROM section_heads h
LEFT JOIN (SELECT j.page_id, j.section_index, string_agg(j.joint || p.text, '' ORDER BY j.passage_id) AS text
           FROM passage_joints j JOIN passages p ON p.passage_id = j.passage_id
           GROUP BY j.page_id, j.section_index) t
       ON t.page_id = h.page_id AND t.section_index = h.section_index;
"""

# Row-by-row stores (the delta) name their sentence offsets `sentence_spans` too, as the bulk-built store does: a
# lookup of sentences by passage then reads the offsets and the passages' text with a key filter on each (the
# `sentences` view of the bulk-built store joins every passage).
SPANS_VIEW_DDL = """
CREATE VIEW sentence_spans AS
SELECT passage_id, sentence_index, page_sentence_index, start_char, end_char FROM sentences;
"""

DDL = TABLES_DDL + SECTIONS_TABLE_DDL + SENTENCES_TABLE_DDL + SPANS_VIEW_DDL  # same public tables, all writable
STORE_DDL = TABLES_DDL + SECTION_HEADS_DDL + SENTENCE_SPANS_DDL  # what indexer.build writes

# One row naming the build that wrote the store. The same id is in manifest.json and in each channel's
# params.json: a reader checks them against one another, so it never mixes two builds of one folder.
BUILD_INFO_DDL = """
CREATE TABLE build_info (
    build_id   VARCHAR NOT NULL,
    built_at   VARCHAR NOT NULL         -- ISO 8601, UTC
);
"""

# Created after the bulk load (faster than maintaining them row by row). `sentence_spans` has none: its rows are
# written in passage_id order (ids are given in load order), so DuckDB's per-row-group min/max of passage_id find a
# passage's spans as an index would, while an ART index costs ~45 bytes of RAM per span while it is built (about
# five spans a passage: ~9 GB at whole-enwiki scale) and grows the query process as it is read.
INDEXES = """
CREATE INDEX pages_title ON pages(title);
CREATE INDEX pages_title_norm ON pages(title_norm);
CREATE INDEX redirects_source ON redirects(source_title);
CREATE INDEX redirects_source_norm ON redirects(source_norm);
CREATE INDEX passages_page ON passages(page_id);
CREATE INDEX links_page ON links(page_id);
CREATE INDEX categories_page ON categories(page_id);
CREATE INDEX see_also_page ON see_also(page_id);
CREATE INDEX infobox_page ON infobox(page_id);
"""

# `triples` has no index either: it is written ordered by subject (indexer.store_writer.fill_triples), so the
# row groups' min/max of subject_page_id find a page's facts. An ART index scan fetches them row by row, slower for
# a page stating hundreds of facts, and costs ~45 bytes of RAM per row while built (whole enwiki states hundreds of
# millions of facts).

# Public names (`sections` and `sentences` may be views); the manifest counts rows of each.
TABLES = (
    "pages",
    "redirects",
    "sections",
    "passages",
    "sentences",
    "categories",
    "see_also",
    "links",
    "infobox",
    "table_rows",
    "triples",
)
