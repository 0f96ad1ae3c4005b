"""Tables a delta segment holds beside the store's (``INDEX/delta/*.duckdb``): what an update removed, noted and
applied. A segment written before these tables existed reads as having none of them."""

from __future__ import annotations

# tombstones: a page deleted since the base (newest-wins against the pages of every segment, as an edit is);
# stale_pages: pages an events file says changed without giving their text (the live fallback may fetch them);
# delta_files: one row per applied input file, the manifest's ``updates`` list is read from them.
DELTA_EXTRA_DDL = """
CREATE TABLE tombstones (
    page_id       BIGINT NOT NULL,
    title         VARCHAR,
    rev_id        BIGINT,
    rev_timestamp VARCHAR,
    reason        VARCHAR NOT NULL          -- 'delete'
);
CREATE TABLE stale_pages (
    page_id       BIGINT NOT NULL,
    title         VARCHAR,
    rev_id        BIGINT,
    rev_timestamp VARCHAR
);
CREATE TABLE delta_files (
    name             VARCHAR NOT NULL,
    sha256           VARCHAR NOT NULL,
    kind             VARCHAR NOT NULL,      -- 'dump' | 'events'
    max_rev_id       BIGINT,
    newest_timestamp VARCHAR,
    pages_added      INTEGER NOT NULL,
    pages_changed    INTEGER NOT NULL,
    pages_deleted    INTEGER NOT NULL,
    pages_moved      INTEGER NOT NULL,
    pages_undeleted  INTEGER NOT NULL,
    pages_stale      INTEGER NOT NULL,
    skipped_older    INTEGER NOT NULL,
    applied_at       VARCHAR NOT NULL
);
"""

DELTA_EXTRA_TABLES = ("tombstones", "stale_pages", "delta_files")

# Origins of the delta's pages: 'update' (from a dump or events file), 'live' (fetched by the live fallback).
ORIGIN_UPDATE = "update"
ORIGIN_LIVE = "live"
