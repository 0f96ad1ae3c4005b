"""Readable where it matters: no function of the product packages runs over 60 lines, and no comment there
quotes a dev-set claim (examples belong in tests, figures in benchmarks/RESULTS.md)."""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wikiground", "indexer", "backends", "retriever", "fallback")
MAX_LINES = 60


def _product_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _long_functions(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                out.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_over_60_lines():
    long = [f for p in _product_files() for f in _long_functions(p.read_text("utf-8"), str(p.relative_to(ROOT)))]
    assert long == []


def test_the_length_check_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert _long_functions(f"def f():\n{body}\n", "m.py") == [f"m.py:1 f ({MAX_LINES + 1} lines)"]


def _comment_quotes(source: str) -> list[tuple[int, str]]:
    """Quoted phrases of eight characters or more in comments and docstrings (a comment block read as one)."""
    blocks: list[tuple[int, str]] = []
    last_comment_line = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if tok.start[0] == last_comment_line + 1 and blocks:
                blocks[-1] = (blocks[-1][0], blocks[-1][1] + " " + text)
            else:
                blocks.append((tok.start[0], text))
            last_comment_line = tok.start[0]
        elif tok.type == tokenize.STRING and tok.string.lstrip("rb").startswith(('"""', "'''")):
            blocks.append((tok.start[0], " ".join(tok.string.split())))
    return [
        (line, q.strip()) for line, text in blocks for q in re.findall(r"[\"\u201c]([^\"\u201d]{8,})[\"\u201d]", text)
    ]


def test_no_comment_quotes_a_dev_claim(data_dir):
    claims_dir = data_dir / "claims"
    if not claims_dir.is_dir():
        pytest.skip(f"no dev claims at {claims_dir}")
    texts = []
    for path in claims_dir.glob("*.jsonl"):
        for line in path.open(encoding="utf-8"):
            row = json.loads(line)
            texts.append(row.get("claim") or row.get("question") or "")
    # A whole claim, or a long part of one, quoted in a comment: the rule should be stated instead.
    quoted = [
        f"{p.relative_to(ROOT)}:{line}: {q}"
        for p in _product_files()
        for line, q in _comment_quotes(p.read_text("utf-8"))
        if len(q.split()) >= 5 and any(q in t for t in texts)
    ]
    assert quoted == []


# A measured change quoted in prose: "10.1 -> 6.0 ms", "12 → 9 s", "1.7-2.0 -> 1.0-1.2 s", "from 40 to 25 ms".
_FIGURE = r"~?\d[\d,.]*(?:\s*-\s*\d[\d,.]*)?"
_UNIT = r"(?:\s*(?:%|x\b|×|[a-zA-Zµ]+(?:/[a-zA-Z]+)?))?"
_BEFORE_AFTER = re.compile(rf"{_FIGURE}{_UNIT}\s*(?:->|→)\s*{_FIGURE}")
_TIME_UNIT = r"(?:ns|µs|us|ms|s|sec|seconds?|minutes?|min|h|hours?)\b"
_FROM_TO = re.compile(rf"\bfrom\s+{_FIGURE}(?:\s*{_TIME_UNIT})?\s+to\s+{_FIGURE}\s*{_TIME_UNIT}", re.IGNORECASE)


def _prose_lines(source: str) -> list[list[tuple[int, str]]]:
    """Comments and triple-quoted strings (docstrings, SQL with its comments) as blocks of (line number, text):
    consecutive comment lines form one block, so a figure split over two lines is still read whole."""
    blocks: list[list[tuple[int, str]]] = []
    last_comment_line = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line = (tok.start[0], tok.string.lstrip("#").strip())
            if tok.start[0] == last_comment_line + 1 and blocks:
                blocks[-1].append(line)
            else:
                blocks.append([line])
            last_comment_line = tok.start[0]
        elif tok.type == tokenize.STRING and tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            blocks.append([(tok.start[0] + i, text.strip()) for i, text in enumerate(tok.string.splitlines())])
    return blocks


def _before_after_figures(source: str) -> list[tuple[int, str]]:
    """(line, phrase) of each before -> after figure in the comments and docstrings of ``source``."""
    found = []
    for block in _prose_lines(source):
        text, starts = "", []
        for line, part in block:
            starts.append((len(text), line))
            text += part + " "
        for pattern in (_BEFORE_AFTER, _FROM_TO):
            for m in pattern.finditer(text):
                line = max(ln for at, ln in starts if at <= m.start())
                found.append((line, m.group(0).strip()))
    return sorted(found)


def test_no_comment_quotes_a_before_after_figure():
    """Comments say why; what a change measured (before -> after) lives in its commit message and RESULTS.md."""
    found = [
        f"{p.relative_to(ROOT)}:{line}: {phrase}"
        for p in _product_files()
        for line, phrase in _before_after_figures(p.read_text("utf-8"))
    ]
    assert found == []


def test_the_figure_check_finds_before_after_figures_and_leaves_other_numbers():
    source = (
        "X = 5  # p50 10.1 -> 6.0 ms for 100 hits\n"
        "# the writer's CPU 1.7-2.0\n"
        "# -> 1.0-1.2 s\n"
        'def f():\n    """Went from 40 to 25 ms; 12 → 9 s."""\n'
        "LIMIT = 1024  # Lucene refuses more than 1024 clauses; ids 0..N-1 map passage -> page\n"
        "Y = 3  # at most 3 tries, 2 s apart, then 10 % of the rate\n"
    )
    assert _before_after_figures(source) == [
        (1, "10.1 -> 6.0"),
        (2, "1.7-2.0 -> 1.0-1.2"),
        (5, "12 → 9"),
        (5, "from 40 to 25 ms"),
    ]
