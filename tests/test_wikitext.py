"""The wikitext cleaner and the sentence splitter / chunker, on snippets and real pages."""

from __future__ import annotations

import bz2
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.chunking import chunk_page, chunk_section, split_sentences
from indexer.parsed import ParsedPage
from indexer.wikitext import DISAMBIGUATION_TEMPLATES, is_redirect, parse_wikitext
from tests.conftest import DATA, GENSIM_DUMP

MARKUP = re.compile(r"\{\{|\}\}|\[\[|\]\]|<ref|\{\|")
WIKITEXT_PAGES = DATA / "wikitext_pages"


def all_texts(page: ParsedPage) -> list[str]:
    out = [s.text for s in page.sections] + [s.heading for s in page.sections]
    out += [row for table in page.tables for row in table]
    out += [v for _, pairs in page.infoboxes for _, v in pairs]
    out += [link.anchor_text for link in page.links]
    return out


# ---------------------------------------------------------------------------------------------
# Snippets


def test_templates_refs_comments_removed_and_inline_templates_rendered():
    page = parse_wikitext(
        "'''Foo''' {{IPAc-en|f|uː}} is a {{convert|5|km|mi}} long<ref name=a>{{cite web|url=x}}"
        "</ref> river<ref name=a/> in {{lang|fr|la France}}<!-- hidden -->. "
        "It was {{nowrap|very {{small|old}}}} &nbsp;&amp; big.{{citation needed|date=2010}}"
    )
    text = page.sections[0].text
    assert text == "Foo is a 5 km long river in la France. It was very old & big."


def test_links_anchor_trail_files_categories_interwiki():
    page = parse_wikitext(
        "[[File:X.jpg|thumb|A caption with [[Hidden link]] and [[Other|text]]]] "
        "The [[Apple|apples]] and [[pear]]s of [[united_States#History|the US]]. "
        "[[Category:Fruits|sort key]] [[de:Apfel]] [[:Category:Trees|trees]] "
        "[[wikt:fruit|fruit]] [[Image:Y.png]] [http://example.org label] [http://x.org]"
    )
    text = page.sections[0].text
    assert text == "The apples and pears of the US. trees fruit label"
    assert [(l.target_title, l.anchor_text) for l in page.links] == [
        ("Apple", "apples"),
        ("Pear", "pears"),
        ("United States", "the US"),
    ]
    assert page.categories == ("Fruits",)


def test_sections_levels_parents_paths_and_clean_headings():
    wt = (
        "Lead text.\n== History ==\nH.\n=== Early [[life]] ===\nE.\n==== Deep {{x}} ====\nD.\n"
        "=== Later ===\nL.\n== See also ==\n* [[Alpha]]\n* [[beta|B]]\n{{Div col}}\n* [[Gamma]]\n"
        "{{Div col end}}\n{{Main|Not see also}}\n== References ==\n[[Delta]]"
    )
    page = parse_wikitext(wt)
    got = [(s.index, s.level, s.heading, s.parent_index, s.heading_path) for s in page.sections]
    assert got == [
        (0, 1, "", None, ""),
        (1, 2, "History", 0, "History"),
        (2, 3, "Early life", 1, "History > Early life"),
        (3, 4, "Deep", 2, "History > Early life > Deep"),
        (4, 3, "Later", 1, "History > Later"),
        (5, 2, "See also", 0, "See also"),
        (6, 2, "References", 0, "References"),
    ]
    assert page.see_also == ("Alpha", "Beta", "Gamma")
    assert page.sections[5].text == "Alpha.\nB.\nGamma."
    assert {l.target_title: l.section_index for l in page.links}["Delta"] == 6


def test_lists_become_sentences_and_paragraphs_are_lines():
    page = parse_wikitext(
        "Intro line one\ncontinues here.\n\n* first item\n* second item!\n# numbered:\n; Term : definition\nAfter."
    )
    assert page.sections[0].text.split("\n") == [
        "Intro line one continues here.",
        "first item.",
        "second item!",
        "numbered.",
        "Term: definition.",
        "After.",
    ]


def test_infobox_type_and_clean_values():
    page = parse_wikitext(
        "{{Infobox philosopher\n| name = [[Aristotle|Aristotélēs]]\n| birth_date = "
        "{{birth date|df=y|1900|1|2}}\n| influences = {{hlist|[[Plato]]|Socrates}}\n"
        "| image = \n}}\nText."
    )
    assert page.infoboxes == (
        ("philosopher", (("name", "Aristotélēs"), ("birth_date", "2 January 1900"), ("influences", "Plato, Socrates"))),
    )
    assert page.sections[0].text == "Text."


def test_tables_rows_and_removed_from_prose():
    wt = (
        'Before.\n{| class="wikitable"\n|+ Caption\n! Year !! Title\n|-\n| 1999 || [[Foo|The Foo]]\n'
        '|-\n| style="x" | 2001\n| Bar<ref>r</ref>\n|}\nAfter.'
    )
    page = parse_wikitext(wt)
    assert page.tables == (("Year | Title", "1999 | The Foo", "2001 | Bar"),)
    assert page.sections[0].text == "Before.\nAfter."


def test_nested_tables_both_parsed():
    wt = "{|\n| outer\n{|\n| inner\n|}\n|-\n| second\n|}\nText"
    page = parse_wikitext(wt)
    assert ("inner",) in page.tables
    assert ("outer", "second") in page.tables
    assert page.sections[0].text == "Text"


@pytest.mark.parametrize(
    "wt,expected",
    [
        ("#REDIRECT [[Target page#Section]]", ("Target page", "Section")),
        ("#redirect:[[target_page]]\n{{R from move}}", ("Target page", None)),
        ("  #Redirect [[A]]", ("A", None)),
        ("Not a #REDIRECT [[A]]", None),
        ("#REDIRECT", None),
    ],
)
def test_is_redirect(wt, expected):
    assert is_redirect(wt) == expected
    page = parse_wikitext(wt)
    assert (page.redirect_target, page.redirect_fragment) == (expected or (None, None))


def test_disambiguation_detection():
    assert parse_wikitext("A may be:\n* [[A (x)]]\n{{Disambiguation|geo}}").is_disambiguation
    assert parse_wikitext("x {{hndis|Smith}}").is_disambiguation
    assert parse_wikitext("x __DISAMBIG__").is_disambiguation
    assert not parse_wikitext("x {{set index article}}").is_disambiguation
    assert not parse_wikitext("x {{disambiguation needed|date=May 2020}}").is_disambiguation
    assert {"disambiguation", "disambig", "dab", "hndis", "geodis"} <= DISAMBIGUATION_TEMPLATES
    assert "set index article" not in DISAMBIGUATION_TEMPLATES


def test_unclosed_markup_does_not_swallow_the_page():
    page = parse_wikitext(
        "Start {{unclosed template\n== Next ==\nSafe text. [[Broken link\n"
        "{|\n| cell\n== After table ==\nStill here.<ref>dangling"
    )
    texts = " ".join(s.text for s in page.sections)
    assert "Safe text." in texts and "Still here." in texts
    assert [s.heading for s in page.sections] == ["", "Next", "After table"]
    assert any("unclosed table" in w for w in page.warnings)
    assert any("unclosed <ref>" in w for w in page.warnings)
    assert not any(MARKUP.search(t) for t in all_texts(page))


def test_an_unclosed_template_is_not_indexed_as_its_arguments():
    """Issue 40, item 17: an unclosed ``{{`` made its arguments (20 KB of ``b|b|b``) the page's text."""
    page = parse_wikitext("Aristotle was a philosopher. {{" + "b|" * 10000 + "\nHe tutored Alexander the Great.")
    text = " ".join(s.text for s in page.sections)
    assert text == "Aristotle was a philosopher. He tutored Alexander the Great."
    box = parse_wikitext("Intro. {{Infobox person\n| name = Plato\n| era = Ancient" + "|b" * 5000 + "\n\nProse after.")
    assert " ".join(box.sections[0].text.split()) == "Intro. Prose after."
    assert any("1 unclosed {{" in w for w in page.warnings + box.warnings)


def test_max_chars_truncates_with_warning():
    page = parse_wikitext("word " * 1000, max_chars=100)
    assert any("truncated" in w for w in page.warnings)
    assert len(page.sections[0].text) <= 100


def test_linear_time_on_pathological_input():
    # Deep nesting and long unclosed runs: quadratic scanners would take minutes here.
    for wt in (
        "{{" * 20000 + "x",
        "[[" * 20000,
        "<!--" + "a" * 100000,
        "{|\n" * 5000,
        "=" * 50000 + "x",
        "[http://" + "a" * 100000,
        "''" * 50000,
        "<ref>" * 20000,
        "{{a|" * 10000 + "}}" * 10000,
        "(" + " ;" * 50000,
        "<nowiki>" * 20000,
    ):
        start = time.perf_counter()
        parse_wikitext(wt)
        assert time.perf_counter() - start < 2.0, wt[:20]


FRAGMENTS = st.sampled_from(
    [
        "{{",
        "}}",
        "{{cite web|url=x}}",
        "{{Infobox person|name=[[A|b]]|x=",
        "[[",
        "]]",
        "[[A|b]]",
        "[[File:x.jpg|thumb|cap [[y]]]]",
        "[[Category:C]]",
        "<ref>",
        "</ref>",
        "<ref name=a/>",
        "<!--",
        "-->",
        "{|",
        "|}",
        "|-",
        "||",
        "!",
        "\n",
        "\n== H ==\n",
        "=",
        "'''",
        "''",
        "*",
        "#",
        ":",
        ";",
        "&nbsp;",
        "&lt;ref&gt;",
        "<br/>",
        "<math>x</math>",
        "<nowiki>[[x]]</nowiki>",
        "[http://a.b c]",
        "{{{1|d}}}",
        "|",
        "{{!}}",
        "__TOC__",
        "#REDIRECT [[X]]",
        "<span>",
        "</span>",
        "{",
        "}",
        "[",
        "]",
        "<",
        ">",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=12)), max_size=40))
def test_fuzz_never_raises_and_leaves_no_markup(parts):
    page = parse_wikitext("".join(parts))
    assert isinstance(page, ParsedPage)
    for text in all_texts(page):
        assert not MARKUP.search(text), text
    for chunk in chunk_page(page, target_words=20):
        for s, e in chunk.sentences:
            assert chunk.text[s:e].strip() == chunk.text[s:e] != ""


# ---------------------------------------------------------------------------------------------
# Real pages: the gensim fixture dump


@pytest.fixture(scope="module")
def gensim_pages() -> list[tuple[str, int, bool, str]]:
    import mwxml

    with bz2.open(GENSIM_DUMP, "rb") as fh:
        return [(p.title, p.namespace, bool(p.redirect), r.text or "") for p in mwxml.Dump.from_file(fh) for r in p]


@pytest.fixture(scope="module")
def gensim_parsed(gensim_pages) -> dict[str, ParsedPage]:
    return {
        title: parse_wikitext(text, title=title)
        for title, ns, redirect, text in gensim_pages
        if ns == 0 and not redirect
    }


def test_gensim_counts(gensim_pages, gensim_parsed):
    assert len(gensim_parsed) == 106
    assert sum(p.is_disambiguation for p in gensim_parsed.values()) == 8
    assert sum(any(s.heading == "See also" for s in p.sections) for p in gensim_parsed.values()) == 78
    assert sum(bool(p.see_also) for p in gensim_parsed.values()) == 78
    redirects = [is_redirect(text) for _, ns, _, text in gensim_pages if ns == 0]
    assert sum(r is not None for r in redirects) == 99
    # The dump's own <redirect title> agrees with ours for every ns-0 redirect.
    for title, ns, redirect, text in gensim_pages:
        if ns == 0:
            assert redirect == (is_redirect(text) is not None), title
    assert sum(bool(p.categories) for p in gensim_parsed.values()) >= 99


def test_gensim_aristotle(gensim_parsed):
    page = gensim_parsed["Aristotle"]
    headings = [s.heading for s in page.sections]
    assert "See also" in headings and "Life" in headings
    assert "Ancient Greek philosophers" in page.categories
    assert page.infoboxes[0][0] == "philosopher"
    box = dict(page.infoboxes[0][1])
    assert box["name"] == "Aristotle"
    assert box["birth_date"].startswith("384 BC")
    assert "Plato" in box["influences"]
    lead = page.sections[0].text
    assert lead.startswith("Aristotle (")
    assert "was a Greek philosopher and scientist born in the city of Stagira" in lead
    anchors = {(l.target_title, l.anchor_text) for l in page.links}
    assert ("Greeks", "Greek") in anchors
    assert ("Stagira (ancient city)", "Stagira") in anchors
    assert all(l.target_title and ":" not in l.target_title[:9] for l in page.links)
    assert "Pseudo-Aristotle" in page.see_also
    assert [s.heading_path for s in page.sections if s.heading == "Logic"] == ["Thought > Logic"]


def test_gensim_text_has_no_markup(gensim_parsed):
    for title, page in gensim_parsed.items():
        for text in all_texts(page):
            assert not MARKUP.search(text), (title, MARKUP.search(text))
            assert "'''" not in text and "<!--" not in text and "&nbsp;" not in text, title
    disambig = [t for t, p in gensim_parsed.items() if p.is_disambiguation]
    assert "Alien" in disambig and "Aa River" in disambig


# ---------------------------------------------------------------------------------------------
# Real pages: single wikitext pages


def test_wikitext_pages_parse_cleanly():
    files = sorted(WIKITEXT_PAGES.glob("*.txt"))
    assert len(files) == 71
    with_tables = 0
    for f in files:
        wt = f.read_text(encoding="utf-8")
        page = parse_wikitext(wt, title=f.stem)
        for text in all_texts(page):
            assert not MARKUP.search(text), (f.name, text[:200])
        if re.search(r"^\s*\{\|", wt, re.M):
            with_tables += 1
            assert page.tables, f.name
    assert with_tables >= 20
    redirect = parse_wikitext((WIKITEXT_PAGES / "redirect.txt").read_text(encoding="utf-8"))
    assert redirect.redirect_target is not None


def test_wikitext_pages_see_also_and_tables():
    anarchism = parse_wikitext((WIKITEXT_PAGES / "anarchism.txt").read_text(encoding="utf-8"))
    assert anarchism.see_also[:3] == ("Anarchist economics", "Anarchist symbolism", "Libertarianism")
    nationals = parse_wikitext((WIKITEXT_PAGES / "washington-nationals.txt").read_text(encoding="utf-8"))
    assert len(nationals.tables) >= 5
    header = "# | Date | Opponent | Score | Win | Loss | Save | Attendance | Record"
    logs = [t for t in nationals.tables if t[0] == header]
    assert len(logs) >= 5
    assert logs[0][1] == ("1 | April 3 | Marlins | 4–2 | Strasburg (1–0) | Phelps (0–1) | Treinen (1) | 42,744 | 1–0")
    assert nationals.tables[0][:2] == ("Legend", "Nationals win")


# ---------------------------------------------------------------------------------------------
# Sentences and chunks


def test_split_sentences_abbreviations():
    text = (
        "Mr. Smith met Dr. J. R. R. Tolkien in the U.S. on Jan. 5. It cost 3.5 million, "
        "e.g. for approx. three years! Did it? Yes (see Fig. 3).\nA list item\nEnd."
    )
    got = [text[s:e] for s, e in split_sentences(text)]
    assert got == [
        "Mr. Smith met Dr. J. R. R. Tolkien in the U.S. on Jan. 5.",
        "It cost 3.5 million, e.g. for approx. three years!",
        "Did it?",
        "Yes (see Fig. 3).",
        "A list item",
        "End.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        'One. Two.. Three...\nfour." five.) Six." \n. .\n\n..x. y.\tz.\u00a0w. ',
        "A. b! C? d\u2026 e\u3002 f.! g",
        ".",
        "\n",
        "",
        "no cut here",
        "3.14 and 2. \nx",
    ],
)
def test_cut_scan_matches_the_single_regex(text):
    from indexer.chunking import _CUT, _cuts

    assert _cuts(text) == [m.span() for m in _CUT.finditer(text)]


def test_table_tokens_do_not_overlap():
    from indexer.wikitext import _table_tokens

    # One scan for either token would take "{|" and resume after it, never seeing the "|}" inside "{|}".
    assert [(at, tok) for _, at, tok in _table_tokens("{|}\n|}\n {|\n|}")] == [
        (0, "{|"),
        (4, "|}"),
        (8, "{|"),
        (11, "|}"),
    ]


def test_chunk_section_sizes_and_exact_offsets():
    sentences = [f"Sentence number {i} has exactly seven words." for i in range(60)]
    text = " ".join(sentences)
    chunks = chunk_section(text, section_index=3, target_words=50)
    assert all(c.section_index == 3 and c.source == "text" for c in chunks)
    assert [len(c.text.split()) for c in chunks[:-1]] == [56] * (len(chunks) - 1)
    rebuilt = []
    for c in chunks:
        assert text.find(c.text) >= 0
        rebuilt += [c.text[s:e] for s, e in c.sentences]
    assert rebuilt == sentences


def test_long_sentence_split_only_above_twice_target():
    long = " ".join(f"W{i}" for i in range(250)) + "."
    chunks = chunk_section("Short one. " + long, section_index=0, target_words=100)
    pieces = [c.text[s:e] for c in chunks for s, e in c.sentences]
    assert pieces[0] == "Short one."
    assert [len(p.split()) for p in pieces[1:]] == [100, 100, 50]
    medium = " ".join(f"w{i}" for i in range(150)) + "."
    assert [len(c.sentences) for c in chunk_section(medium, section_index=0)] == [1]


def test_chunk_page_sections_info_and_tables(gensim_parsed):
    page = gensim_parsed["Aristotle"]
    chunks = chunk_page(page)
    by_source = {src: [c for c in chunks if c.source == src] for src in ("text", "info", "table")}
    assert by_source["text"] and by_source["info"]
    sections = {s.index: s.text for s in page.sections}
    for c in by_source["text"]:
        assert c.text in sections[c.section_index]  # never crosses a section
        for s, e in c.sentences:
            assert c.text[s:e] and c.text[s:e] == c.text[s:e].strip()
    words = [len(c.text.split()) for c in by_source["text"]]
    assert 60 <= sum(words) / len(words) <= 130
    assert by_source["info"][0].text.startswith("name: Aristotle; ")
    table_page = next(p for p in gensim_parsed.values() if p.tables)
    tables = [c for c in chunk_page(table_page) if c.source == "table"]
    assert tables and all(c.text[s:e] for c in tables for s, e in c.sentences)


def test_every_rendered_template_is_listed():
    """Templates not in _RENDERED are dropped before _render_template sees them: every name it compares
    ``name`` with must be listed, or the template silently vanishes from the prose."""
    import ast
    import inspect

    from indexer import wikitext

    compared: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(wikitext._render_template))):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "name":
            for c in node.comparators:
                consts = c.elts if isinstance(c, ast.Tuple) else [c]
                compared |= {x.value for x in consts if isinstance(x, ast.Constant) and isinstance(x.value, str)}
    assert compared and compared <= wikitext._RENDERED
