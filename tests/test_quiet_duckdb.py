"""The library never prints: DuckDB prints a progress bar to stdout for a query past two seconds, so every connection
the project opens turns it off (``wikiground.system.quiet``). A build whose stdout was a pipe nobody read blocked on
it at 20M passages."""

from __future__ import annotations

import ast

import duckdb

from wikiground.system import quiet

from .conftest import ROOT

SLOW = "SELECT sum(hash(i)) FROM range(200000000) t(i)"
PRODUCT = ("wikiground", "indexer", "backends", "retriever", "fallback")


def test_a_quiet_connection_and_its_cursors_print_no_progress_bar(capfd):
    loud = duckdb.connect()
    loud.execute("SET progress_bar_time = 1")
    loud.execute(SLOW).fetchall()
    printed = capfd.readouterr().out
    con = duckdb.connect()
    con.execute("SET progress_bar_time = 1")  # before: setting it turns the bar back on
    quiet(con).execute(SLOW).fetchall()
    con.cursor().execute(SLOW).fetchall()  # a cursor (a reader thread's) inherits both
    assert "%" in printed and capfd.readouterr().out == ""


def test_every_connection_the_project_opens_is_quiet():
    loud = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            quieted = {
                id(arg)
                for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "quiet"
                for arg in node.args
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "connect"
                    and getattr(node.func.value, "id", None) == "duckdb"
                    and id(node) not in quieted
                ):
                    loud.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not loud, f"duckdb.connect() without wikiground.system.quiet(): {loud}"
