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
