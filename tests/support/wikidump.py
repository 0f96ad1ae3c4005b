"""Update inputs written as Wikimedia writes them, from real pages: adds-changes dumps (``pages-meta-hist-incr``:
several ``<revision>``s per ``<page>``, oldest first, export-0.11) and ``mediawiki.page_change.v1`` events (JSON
lines). The pages' text comes from the test fixtures (a dump's pages, vital-article summaries); the edits are
an editor's: a sentence changed, a section added."""

from __future__ import annotations

import bz2
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

HEAD = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" \
xsi:schemaLocation="http://www.mediawiki.org/xml/export-0.11/ http://www.mediawiki.org/xml/export-0.11.xsd" \
version="0.11" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>MediaWiki 1.43.0-wmf.5</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="1" case="first-letter">Talk</namespace>
    </namespaces>
  </siteinfo>
"""


@dataclass(frozen=True, slots=True)
class Revision:
    rev_id: int
    timestamp: str  # 2026-11-26T10:00:00Z
    text: str
    comment: str = ""
    user: str = "ExampleEditor"


@dataclass(frozen=True, slots=True)
class DumpPage:
    page_id: int
    title: str
    revisions: Sequence[Revision]
    namespace: int = 0
    redirect: str | None = None


@dataclass(slots=True)
class Events:
    """page_change events, one JSON object a line, in the shape of the stream's schema."""

    lines: list[dict] = field(default_factory=list)

    def add(self, kind: str, page_id: int, title: str, rev_id: int, dt: str, *, prior_title: str | None = None):
        event = {
            "$schema": "/mediawiki/page/change/1.1.0",
            "meta": {"stream": "mediawiki.page_change.v1", "domain": "en.wikipedia.org", "dt": dt},
            "dt": dt,
            "wiki_id": "enwiki",
            "page_change_kind": kind,
            "changelog_kind": {"delete": "delete", "undelete": "insert", "create": "insert"}.get(kind, "update"),
            "page": {
                "page_id": page_id,
                "page_title": title.replace(" ", "_"),
                "namespace_id": 0,
                "is_redirect": False,
            },
            "performer": {"user_text": "ExampleEditor", "user_is_bot": False},
            "revision": {"rev_id": rev_id, "rev_dt": dt, "is_minor_edit": False},
        }
        if kind == "move":
            event["prior_state"] = {"page": {"page_title": (prior_title or "").replace(" ", "_")}}
            event["page"]["redirect_page_link"] = {
                "page_title": (prior_title or "").replace(" ", "_"),
                "namespace_id": 0,
                "is_redirect": True,
            }
        self.lines.append(event)
        return self

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(e) + "\n" for e in self.lines), encoding="utf-8")
        return path


def _revision_xml(rev: Revision, parent: int | None) -> str:
    sha1 = hashlib.sha1(rev.text.encode("utf-8")).hexdigest()
    parent_xml = f"      <parentid>{parent}</parentid>\n" if parent else ""
    return (
        f"    <revision>\n      <id>{rev.rev_id}</id>\n{parent_xml}      <timestamp>{rev.timestamp}</timestamp>\n"
        f"      <contributor>\n        <username>{escape(rev.user)}</username>\n        <id>1</id>\n"
        f"      </contributor>\n      <comment>{escape(rev.comment)}</comment>\n      <model>wikitext</model>\n"
        f"      <format>text/x-wiki</format>\n"
        f'      <text bytes="{len(rev.text.encode("utf-8"))}" xml:space="preserve">{escape(rev.text)}</text>\n'
        f"      <sha1>{sha1}</sha1>\n    </revision>\n"
    )


def write_dump(path: Path, pages: Iterable[DumpPage]) -> Path:
    """An XML dump of ``pages`` (bz2-compressed when the name ends with .bz2), each revision in order."""
    parts = [HEAD]
    for page in pages:
        redirect = f"    <redirect title={quoteattr(page.redirect)} />\n" if page.redirect else ""
        parts.append(
            f"  <page>\n    <title>{escape(page.title)}</title>\n    <ns>{page.namespace}</ns>\n"
            f"    <id>{page.page_id}</id>\n{redirect}"
        )
        parent = None
        for rev in page.revisions:
            parts.append(_revision_xml(rev, parent))
            parent = rev.rev_id
        parts.append("  </page>\n")
    parts.append("</mediawiki>\n")
    data = "".join(parts).encode("utf-8")
    path.write_bytes(bz2.compress(data) if path.name.endswith(".bz2") else data)
    return path


def read_pages(dump: Path, titles: Iterable[str]) -> dict[str, tuple[int, int, str, str]]:
    """title -> (page id, rev id, timestamp, wikitext) of ``titles`` in a fixture dump."""
    import mwxml

    wanted = set(titles)
    out = {}
    with bz2.open(dump, "rb") as fh:
        for page in mwxml.Dump.from_file(fh).pages:
            if page.title in wanted:
                rev = list(page)[-1]
                out[page.title] = (page.id, rev.id, rev.timestamp.long_format(), rev.text or "")
    return out


def lead_wikitext(title: str, extract: str) -> str:
    """A new article's wikitext from a summary: bold title, the summary as its lead."""
    first, _, rest = extract.partition(title)
    if not _:
        return f"'''{title}''' {extract}"
    return f"{first}'''{title}'''{rest}"
