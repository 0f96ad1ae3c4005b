"""The `wikiground` command runs the same code as the `python -m` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import DUMPS, ROOT

WIKIBRAIN = DUMPS / "wikibrain-en_test.xml"


def _run(*args: str, tool: str | None = None) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name(tool)), *args] if tool else [sys.executable, "-m", "wikiground", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_version_and_usage():
    from wikiground import __version__

    out = _run("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"wikiground {__version__}"
    bad = _run("frobnicate")
    assert bad.returncode == 2 and "unknown command" in bad.stderr and "index" in bad.stderr
    assert _run().returncode == 2


def test_subcommands_are_the_module_commands(tmp_path):
    """`wikiground index` builds like `python -m indexer build`, and `wikiground query` answers from it."""
    index = tmp_path / "index"
    built = _run(
        "index", "--dump", str(WIKIBRAIN), "--out", str(index), "--indexes", "none", "--quiet", tool="wikiground"
    )
    assert built.returncode == 0, built.stderr
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["counts"]["pages"] > 0
    answer = _run(
        "query",
        "--index",
        str(index),
        "--indexes",
        "title",
        "--json",
        "--k",
        "3",
        "Pretoria is a city in South Africa.",
    )
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["evidence"][0]["title"] == "Pretoria"
    helped = _run("embed", "--help")
    assert helped.returncode == 0 and "--assemble" in helped.stdout


def test_query_options_are_bounded(gensim_store, capsys):
    """`--k 1000000000` gave a Java error and `--weights title=nan` was accepted: both are refused, clearly."""
    import pytest

    from retriever.api import Retriever
    from retriever.query import main
    from wikiground.errors import QueryError

    bad = [
        (["--k", "1000000000"], "--k must be a whole number from 1 to 1000"),
        (["--k", "0"], "--k must be a whole number from 1 to 1000"),
        (["--weights", "title=nan"], "title must be a finite number"),
        (["--weights", "title=inf"], "title must be a finite number"),
        (["--weights", "bm25=-1"], "bm25 must be a finite number from 0"),
        (["--weights", "nosuch=1"], "unknown channel 'nosuch'"),
        (["--weights", "title"], "expected name=number pairs"),
        (["--multihop", "--hops", "0"], "--hops must be a whole number from 1 to 10"),
        (["--multihop", "--hops", "11"], "--hops must be a whole number from 1 to 10"),
    ]
    for args, message in bad:
        assert main(["--index", str(gensim_store), *args, "Aristotle"]) == 2, args
        assert message in capsys.readouterr().err, args
    assert main(["--index", str(gensim_store), "--k", "1000", "--weights", "title=0", "--json", "Aristotle"]) == 0
    with Retriever.open(gensim_store) as r:
        with pytest.raises(QueryError, match="from 1 to 1000"):
            r.search("Aristotle", 10**9)


def test_server_takes_the_query_commands_search_options():
    """The server's request defaults are the query command's options, defined once: it lacked --live-deadline and
    did not check --hops; every query flag but the ones about one run's input and output (a batch request names its
    own format) is the server's too."""
    from retriever.query import build_parser as query_parser
    from retriever.serve.__main__ import build_parser as serve_parser

    def flags(parser) -> dict:
        return {s: a for a in parser._actions for s in a.option_strings}

    query, served = flags(query_parser()), flags(serve_parser())
    own = {"--json", "--queries", "--out", "--resume", "--quiet", "-h", "--help", "--format", "--run-tag", "--docid"}
    missing = set(query) - own - set(served)
    assert not missing, f"the server lacks {sorted(missing)}"
    for name in set(query) - own:
        q, s = query[name], served[name]
        assert (q.dest, q.default, q.type, q.choices, type(q)) == (s.dest, s.default, s.type, s.choices, type(s)), name
    for name in ("--planner", "--lm", "--lm-api-base", "--live-deadline", "--indexes", "--multihop", "--k"):
        assert name in served
