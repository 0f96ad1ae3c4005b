"""Malformed and enormous pages: the cleaner is linear in each pattern's size, a page's text is cut while it is
read, and a page whose cleaning runs past its time bound keeps the clean text of its beginning."""

from __future__ import annotations

import bz2
import gc
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer import readers, wikitext
from indexer.readers import InputReader, RawPage
from indexer.store_writer import DEFAULT_MAX_PAGE_CHARS, page_rows
from indexer.wikitext import parse_wikitext
from wikiground.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def _repeat(unit: str, prefix: str = "", suffix: str = "") -> Callable[[int], str]:
    return lambda size: prefix + unit * max(1, (size - len(prefix) - len(suffix)) // len(unit)) + suffix


def _nested(opening: str, closing: str) -> Callable[[int], str]:
    return lambda size: opening * (n := size // (len(opening) + len(closing))) + "x" + closing * n


def _numbered(template: str, prefix: str = "") -> Callable[[int], str]:
    """Distinct items (``{}`` is the item's number) up to about ``size`` characters."""

    def make(size: int) -> str:
        n = size // len(template.format(10**5))
        return prefix + "".join(template.format(i) for i in range(n))

    return make


# Each pattern: size in characters -> page. Every one was quadratic (or worse) in the cleaner once.
PATTERNS: dict[str, Callable[[int], str]] = {
    "unclosed external links": _repeat("[http://a.b "),
    "external links in an unclosed link": _repeat("[[a|[http://x "),
    "unclosed <ref>": _repeat("<ref>"),
    "unclosed <ref> with attributes": _repeat('<ref name="x">'),
    "unclosed {{": _repeat("{{a|"),
    "unclosed [[": _repeat("[[a b "),
    "unclosed [[ in template names": _repeat("{{[[a|"),
    "unclosed {|": _repeat("{|\n"),
    "unclosed {| with templates": _repeat("{|\n|{{a|"),
    "runs of '''''": _repeat("'''''a''"),
    "sibling headings": _repeat("== H ==\n"),
    "sibling See also headings": _repeat("\n== See also ==\n{{a}}[[b]]\n"),
    "deep nesting of templates shown": _nested("{{nowrap|a ", "}}"),
    "deep nesting of links": _nested("[[a|b ", "]]"),
    "deep nesting of templates and links": _nested("{{nowrap|[[a|b ", "]]}}"),
    "deep unclosed templates and links": _repeat("{{a|[[b|"),
    "unclosed file links, one a line": _repeat("[[File:x|\n"),
    "table tokens on one line": _repeat("a{|"),
    "a table cell of many lines": _repeat("b\n", "{|\n| a\n", "\n|}"),
    "distinct See also links": _numbered("[[A{}]]\n", "== See also ==\n"),
    "distinct categories": _numbered("[[Category:C{}]]"),
    "commas and wide spaces in a table cell": _repeat("\u2003", "{|\n| a,,", "b\n|}"),
    "runs of <": _repeat("<"),
}


def _cpu_seconds(text: str, runs: int = 3) -> float:
    """Best CPU time of ``runs`` cleanings, the collector paused as in the build's workers (store_writer)."""
    best = float("inf")
    gc.disable()
    try:
        for _ in range(runs):
            start = time.process_time()
            parse_wikitext(text, title="T")
            best = min(best, time.process_time() - start)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("name", PATTERNS)
def test_doubling_the_page_at_most_doubles_the_time(name):
    make = PATTERNS[name]
    small, large = _cpu_seconds(make(100_000)), _cpu_seconds(make(200_000))
    # 10 ms of slack: below it CPU timers and caches are noise; a quadratic pattern takes seconds here.
    assert large <= 2.5 * small + 0.01, f"{name}: {small:.3f} s -> {large:.3f} s"


def test_the_reported_page_is_fast():
    # The page of issue 38 (about 38 s before).
    assert _cpu_seconds("[http://a.b " * 20000, runs=1) < 0.5


def test_deep_nesting_past_the_limit_shows_nothing():
    shallow = "{{nowrap|" * 3 + "x" + "}}" * 3
    deep = "{{nowrap|" * (wikitext.MAX_NESTING + 1) + "x" + "}}" * (wikitext.MAX_NESTING + 1)
    assert parse_wikitext(shallow).sections[0].text == "x"
    assert parse_wikitext(deep).sections[0].text == ""
    links = parse_wikitext("[[A|" * 3 + "b" + "]]" * 3).links
    assert [link.target_title for link in links] == ["A", "A", "A"]


def test_many_warnings_are_summed_up():
    page = parse_wikitext("<ref>" * 100)
    assert len(page.warnings) == 21 and page.warnings[-1] == "and 80 more warnings"


# ---------------------------------------------------------------------------------------------
# The time bound


def _big_page(data_dir) -> str:
    text = (data_dir / "wikitext_pages" / "anarchism.txt").read_text(encoding="utf-8")
    return "\n".join([text] * 8)


def test_a_page_past_the_time_bound_keeps_its_beginning(data_dir, monkeypatch, caplog):
    text = _big_page(data_dir)
    full = parse_wikitext(text)
    monkeypatch.setattr(wikitext, "PAGE_TIME_LIMIT_S", 0.02)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="indexer.wikitext"):
        page = parse_wikitext(text, title="Anarchism", page_id=12)
    assert time.monotonic() - start < 1.0  # twice the bound, and what a check may overrun
    assert any(
        "'Anarchism' (id 12)" in r.getMessage() and "PAGE_TIME_LIMIT_S" in r.getMessage() for r in caplog.records
    )
    assert any("PAGE_TIME_LIMIT_S" in w for w in page.warnings)
    # The sections before the cut are those of the whole page.
    assert 0 < len(page.sections) < len(full.sections)
    assert [s.text for s in page.sections[:-1]] == [s.text for s in full.sections[: len(page.sections) - 1]]


def test_the_build_goes_on_past_the_time_bound(data_dir, monkeypatch):
    monkeypatch.setattr(wikitext, "PAGE_TIME_LIMIT_S", 0.02)
    rows = page_rows(RawPage(12, "Anarchism", 0, "wikitext", text=_big_page(data_dir)))
    assert not rows.failed
    assert any("(id 12)" in w and "PAGE_TIME_LIMIT_S" in w for w in rows.warnings)


def test_no_time_left_leaves_the_page_empty(monkeypatch):
    monkeypatch.setattr(wikitext, "PAGE_TIME_LIMIT_S", 0.0)
    page = parse_wikitext("== A ==\ntext\n" * 1000, title="T")
    assert page.sections == () and "page left empty" in page.warnings[-1]


# ---------------------------------------------------------------------------------------------
# Pages cut while read

HEAD = (
    b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
    b"<siteinfo><sitename>W</sitename><dbname>w</dbname></siteinfo>\n"
    b"<page><title>Huge</title><ns>0</ns><id>7</id><revision><id>1</id>"
    b'<text xml:space="preserve">== A ==\n'
)
NEXT_PAGE = b"</text></revision></page>\n<page><title>Next</title><ns>0</ns><id>8</id><revision><id>2</id>"
UNIT = "a word &amp; [[link]] \u00e9t\u00e9 &#8212;\n".encode()  # 26 characters once parsed


def test_the_reader_keeps_the_store_writers_limit():
    assert DEFAULT_MAX_PAGE_CHARS < readers.TEXT_READ_CHARS <= DEFAULT_MAX_PAGE_CHARS + 4096


def test_a_text_is_cut_to_whole_characters(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(readers, "TEXT_READ_CHARS", 1001)
    path = tmp_path / "d.xml"
    path.write_bytes(HEAD + UNIT * 200 + NEXT_PAGE + b"<text>ok</text></revision></page></mediawiki>\n")
    with caplog.at_level(logging.WARNING, logger="indexer.readers"):
        pages = list(InputReader(path))
    huge = "== A ==\n" + (UNIT * 200).decode().replace("&amp;", "&").replace("&#8212;", "\u2014")
    assert [p.title for p in pages] == ["Huge", "Next"]
    assert pages[0].text == huge[:1001] and pages[1].text == "ok"
    assert any("page 'Huge' (id 7)" in r.getMessage() for r in caplog.records)


def test_errors_after_a_cut_text_name_their_line(tmp_path, monkeypatch):
    path = tmp_path / "d.xml"
    path.write_bytes(HEAD + UNIT * 50 + NEXT_PAGE + b"\n<text>ok</txet></revision></page></mediawiki>\n")
    wheres = []
    for limit in (10_000, 100):  # the whole text, then a cut one
        monkeypatch.setattr(readers, "TEXT_READ_CHARS", limit)
        with pytest.raises(InputError) as error:
            list(InputReader(path))
        wheres.append(error.value.where)
    assert wheres[0] == wheres[1] and "line 56," in wheres[0]


def test_a_small_dump_of_one_enormous_page_reads_in_bounded_memory(tmp_path):
    # 128 MB of one page in a few KB of bz2 (streams of the same bytes, concatenated); read in a fresh process.
    path = tmp_path / "huge.xml.bz2"
    unit = bz2.compress(UNIT * ((4 << 20) // len(UNIT)))
    with path.open("wb") as f:
        f.write(bz2.compress(HEAD))
        f.write(unit * 32)
        f.write(bz2.compress(NEXT_PAGE + b"<text>ok</text></revision></page></mediawiki>\n"))
    assert path.stat().st_size < 100_000
    script = (
        "import resource, sys\n"
        "from indexer.readers import InputReader\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "pages = [(p.title, len(p.text)) for p in InputReader(sys.argv[1])]\n"
        "print(pages, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    pages, grown_mb = done.stdout.rsplit(" ", 1)
    assert pages == str([("Huge", readers.TEXT_READ_CHARS), ("Next", 2)])
    assert int(grown_mb) < 100, f"peak RSS grew by {grown_mb} MB"


def test_a_multistream_group_that_expands_without_bound_is_an_error(monkeypatch):
    monkeypatch.setattr(readers, "MAX_GROUP_BYTES", 1 << 20)
    data = bz2.compress(b"a" * (2 << 20))
    assert readers.decompress_group("d.xml.bz2", 0, bz2.compress(b"a" * 1000), len(data)) == b"a" * 1000
    with pytest.raises(InputError, match="expand past 1 MB"):
        readers.decompress_group("d.xml.bz2", 0, data, len(data))


def test_an_infobox_repeating_a_linked_key_is_linear():
    """Each repeat of a key made all the key's link targets again (the triples of an infobox: page_rows)."""
    from indexer import triples

    def facts(n: int) -> tuple[float, int]:
        text = "{{Infobox person\n" + "".join(f"| spouse = [[Person {i}]]\n" for i in range(n)) + "}}\nText."
        parsed = parse_wikitext(text, title="T")
        start = time.process_time()
        found = list(triples.infobox_triples(parsed, [], []))
        return time.process_time() - start, len(found)

    (small, n_small), (large, n_large) = facts(4000), facts(8000)
    assert (n_small, n_large) == (4000, 8000)  # every target once, as before
    assert large <= 2.5 * small + 0.01, f"{small:.3f} s -> {large:.3f} s"
