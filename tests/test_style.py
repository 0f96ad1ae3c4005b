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
