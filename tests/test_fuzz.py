"""Fuzzing (hypothesis) of what reads text from outside: the wikitext cleaner, the batch query reader and the
JSONL corpus reader. Whatever they are given, they either work or raise the project's own errors."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.readers import InputReader, RawPage
from indexer.store_writer import page_rows
from indexer.wikitext import parse_wikitext
from retriever.query import read_queries
from wikiground.errors import WikigroundError

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Any code point, lone surrogates and control characters included.
ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=300)
MARKUP = st.sampled_from(
    [
        "{{", "}}", "[[", "]]", "{|", "|}", "|-", "||", "!", "|", "=", "==", "\n", "''", "'''", "<ref>", "</ref>",
        "<!--", "-->", "<nowiki>", "</nowiki>", "<br/>", "<math>", "#REDIRECT [[", "File:", "Category:", "*", "#",
        "{{Infobox person\n|name=", "{{convert|", "&amp;", "&#", "\ud800", "\x00", "\r", "__DISAMBIG__", "http://",
    ]
)  # fmt: skip
WIKITEXT = st.lists(st.one_of(MARKUP, ANY_TEXT), max_size=40).map("".join)


def _nested(depth: int) -> str:
    return "{{a|" * depth + "[[b|" * depth + "x" + "]]" * depth + "}}" * depth


@FUZZ
@given(WIKITEXT)
def test_wikitext_cleaner_never_fails(text):
    parsed = parse_wikitext(text, title="Fuzz")
    assert not any(w.startswith("parse failed") for w in parsed.warnings), parsed.warnings
    rows = page_rows(RawPage(1, "Fuzz", 0, "wikitext", text=text))
    assert not rows.failed, rows.skipped


@FUZZ
@given(st.integers(min_value=1, max_value=3000))
def test_wikitext_cleaner_survives_deep_nesting(depth):
    parsed = parse_wikitext(_nested(depth) + "{{" * depth + "[[" * depth, title="Deep")
    assert not any(w.startswith("parse failed") for w in parsed.warnings), parsed.warnings


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)
QUERY_LINES = st.one_of(
    st.fixed_dictionaries({"id": JSON_VALUES, "claim": ANY_TEXT}).map(json.dumps),
    st.fixed_dictionaries({}, optional={"id": JSON_VALUES, "question": JSON_VALUES}).map(json.dumps),
    JSON_VALUES.map(json.dumps),
    ANY_TEXT,
    st.integers(1, 50_000).map(lambda n: "[" * n),
)


def _write(path, lines: list[str]) -> None:
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))


@FUZZ
@given(lines=st.lists(QUERY_LINES, max_size=6))
def test_batch_reader_never_fails_but_with_query_errors(tmp_path, lines):
    src = tmp_path / "q.jsonl"
    _write(src, lines)
    try:
        queries = list(read_queries(src))
    except WikigroundError:
        return
    for _, text in queries:
        text.encode("utf-8")  # no lone surrogate gets through


CORPUS_LINES = st.one_of(
    st.fixed_dictionaries({"title": JSON_VALUES, "text": JSON_VALUES}).map(json.dumps),
    st.fixed_dictionaries({"title": ANY_TEXT, "sentences": st.lists(JSON_VALUES, max_size=3)}).map(json.dumps),
    st.fixed_dictionaries({"id": JSON_VALUES, "lines": JSON_VALUES, "text": JSON_VALUES}).map(json.dumps),
    st.fixed_dictionaries({"wikipedia_id": JSON_VALUES, "wikipedia_title": ANY_TEXT, "text": JSON_VALUES}).map(
        json.dumps
    ),
    JSON_VALUES.map(json.dumps),
    ANY_TEXT,
    st.integers(1, 50_000).map(lambda n: '{"a": ' * n),
)


@FUZZ
@given(lines=st.lists(CORPUS_LINES, min_size=1, max_size=6))
def test_jsonl_corpus_reader_never_fails_but_with_input_errors(tmp_path, lines):
    src = tmp_path / "corpus.jsonl"
    _write(src, lines)
    try:
        for page in InputReader(src):
            assert isinstance(page, RawPage)
    except WikigroundError:
        pass
