"""Every command that README.md and docs/*.md show runs as written.

The checks read the fenced blocks (```sh, ```sql, ```json, ```python) and the inline `wikiground ...` and
`python -m ...` spans:

- A shell line that is cheap and needs no network runs for real: `--help` and `--version`, and the query commands
  on `data/index` without `--on-the-fly` or an LLM planner. Each runs in the test process, in an empty folder that
  holds a `claims.jsonl` of two claims, with `data/index` replaced by the session's test index (`gensim_index`:
  the gensim sample dump, as `make index` builds it, with BM25, dense and TF-IDF).
- A `curl` line runs against a real `wikiground serve` on that index, with `http://127.0.0.1:8765` replaced by the
  server's address (it listens on a free port).
- Every other `wikiground X ...` or `python -m M ...` line is parsed by the command's own argparse parser: its main
  runs until the parser has parsed the line, and stops there.
- An inline command must exist, and each `--flag` it names must be one of the command's options.
- `make` targets and `VAR=` names must exist in the Makefile; `pip install` extras in pyproject.toml.
- SQL runs on the test index's store and must return rows; JSON must parse; Python blocks run (on the test index).
- The README's JSON answer has the keys of a real answer to its own claim.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from .conftest import ROOT

README = ROOT / "README.md"
DOC_FILES = [README, *sorted((ROOT / "docs").glob("*.md"))]
DEFAULT_INDEX = "data/index"  # the index folder the documented commands name
DEFAULT_SERVER = "http://127.0.0.1:8765"  # the address the documented HTTP examples name
PYTHONS = ("python", "python3", ".venv/bin/python")
CLAIMS = ("Aristotle tutored Alexander the Great.", "Achilles fought at Troy.")
MAX_README_LINES = 200


@dataclass(frozen=True)
class Snippet:
    """A fenced block (``lang`` its info string) or one shell line of one, or an inline command (``lang`` "inline")."""

    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Snippet]:
    out, lang, start, body = [], None, 0, []
    for no, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), no, []
            else:
                out.append(Snippet(path, start, lang, "\n".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{path}:{start}: a fenced block is not closed"
    return out


def _shell_lines(block: Snippet) -> list[Snippet]:
    """The block's commands: continuation lines joined, comments and blank lines dropped, quoted as shlex quotes."""
    out, pending, first = [], "", 0
    for offset, line in enumerate(block.text.splitlines(), 1):
        if not pending:
            first = block.line + offset
        try:  # a quote left open: the shell keeps a backslash and line break inside quotes
            shlex.split(line.rstrip("\\"), comments=True)
        except ValueError as exc:
            raise AssertionError(f"{block.path}:{block.line + offset}: {exc}") from None
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            tokens = shlex.split(pending, comments=True)
            if tokens:
                out.append(Snippet(block.path, first, "sh", shlex.join(tokens)))
            pending = ""
    return out


def _inline(path: Path) -> list[Snippet]:
    """Inline `wikiground ...` and `python -m ...` spans outside fenced blocks."""
    out, fenced = [], False
    for no, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            for span in re.findall(r"`([^`]+)`", line):
                if re.match(r"(wikiground|python -m) ", span) or span == "wikiground":
                    out.append(Snippet(path, no, "inline", span))
    return out


BLOCKS = [b for p in DOC_FILES for b in _blocks(p)]
SHELL = [s for b in BLOCKS if b.lang in ("sh", "bash", "console") for s in _shell_lines(b)]
INLINE = [s for p in DOC_FILES for s in _inline(p)]


def _ids(snippets: list[Snippet]) -> list[str]:
    return [f"{s.where} {s.text[:60]}" for s in snippets]


def _is_query(tokens: list[str]) -> bool:
    return tokens[:2] == ["wikiground", "query"] or (tokens[0] in PYTHONS and tokens[1:3] == ["-m", "retriever.query"])


def _runs(tokens: list[str]) -> bool:
    """Cheap, and no network: help and version, and local queries of the default index."""
    if {"--help", "-h", "--version"} & set(tokens) or tokens == ["wikiground"]:
        return True
    return _is_query(tokens) and DEFAULT_INDEX in tokens and not {"--on-the-fly", "--planner"} & set(tokens)


RUN = [s for s in SHELL if shlex.split(s.text)[0] in ("wikiground", *PYTHONS) and _runs(shlex.split(s.text))]
HTTP = [s for s in SHELL if shlex.split(s.text)[0] == "curl"]
PARSE = [s for s in SHELL if s not in RUN and s not in HTTP]


def _params(snippets: list[Snippet]) -> list:
    return [pytest.param(s, id=i) for s, i in zip(snippets, _ids(snippets))]


# -- the commands and their parsers -------------------------------------------------------------------------------


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace | None):
        super().__init__(parser.prog)
        self.parser, self.namespace = parser, namespace


def _main_of(tokens: list[str]):
    """The command's ``main`` and the arguments it takes: the `wikiground` command, or `python -m MODULE`."""
    if tokens[0] == "wikiground":
        from wikiground import cli

        return cli.main, tokens[1:]
    assert tokens[0] in PYTHONS and tokens[1:2] == ["-m"], f"not a command of this project: {shlex.join(tokens)}"
    spec = importlib.util.find_spec(tokens[2])
    assert spec is not None, f"no module {tokens[2]}"
    module = importlib.import_module(tokens[2] + (".__main__" if spec.submodule_search_locations else ""))
    return module.main, tokens[3:]


def _parser_run(tokens: list[str], *, parse: bool) -> _Parsed:
    """Run the command's main until its argparse parser is called; ``parse``: let it parse the arguments first.

    A bad flag is the parser's own error (SystemExit 2, its message on stderr)."""
    main, argv = _main_of(tokens)
    real = argparse.ArgumentParser.parse_args

    def intercept(self, args=None, namespace=None):
        raise _Parsed(self, real(self, args, namespace) if parse else None)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", intercept):
        try:
            rc = main(argv)
        except _Parsed as parsed:
            return parsed
    raise AssertionError(f"{shlex.join(tokens)}: no parser was called (exit status {rc})")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    out = set()
    for action in parser._actions:
        out.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= _options(sub)
    return out


def _makefile() -> tuple[set[str], dict[str, str]]:
    text = (ROOT / "Makefile").read_text("utf-8")
    targets = {t for line in re.findall(r"^([\w .-]+):(?!=)", text, re.M) for t in line.split()}
    variables = dict(re.findall(r"^(\w+)\s*[:?]?=\s*(.*?)\s*$", text, re.M))
    return targets, variables


def _check_make(tokens: list[str]) -> None:
    targets, variables = _makefile()
    for arg in tokens[1:]:
        name = arg.split("=", 1)[0]
        if "=" in arg:
            assert name in variables, f"make: no variable {name} in the Makefile"
        else:
            assert name in targets, f"make: no target {name} in the Makefile"


def _check_pip(tokens: list[str]) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]
    assert tokens[1] == "install" and len(tokens) > 2, shlex.join(tokens)
    for req in tokens[2:]:
        match = re.fullmatch(r"(\.|wikiground)\[([\w,-]+)\]", req)
        assert match, f"pip: {req} is not this project with extras"
        assert set(match[2].split(",")) <= set(extras), f"pip: unknown extra in {req}"


def _check_activate(tokens: list[str]) -> None:
    _, variables = _makefile()
    assert len(tokens) == 2 and tokens[1] == f"{variables['VENV']}/bin/activate", shlex.join(tokens)


@pytest.mark.parametrize("line", _params(PARSE))
def test_documented_command_parses(line: Snippet):
    tokens = shlex.split(line.text)
    checks = {"make": _check_make, "pip": _check_pip, ".": _check_activate, "source": _check_activate}
    if tokens[0] in checks:
        checks[tokens[0]](tokens)
        return
    try:
        _parser_run(tokens, parse=True)
    except SystemExit as exc:
        pytest.fail(f"{line.where}: the parser refuses `{line.text}` (exit status {exc.code})")


@pytest.mark.parametrize("span", _params(INLINE))
def test_inline_command_and_its_flags_exist(span: Snippet):
    tokens = span.text.split()
    flags = {t.split("=", 1)[0] for t in tokens if t.startswith("--")}
    if tokens[0] != "wikiground" and not flags:
        assert importlib.util.find_spec(tokens[2]) is not None, f"{span.where}: no module {tokens[2]}"
        return
    if tokens == ["wikiground"]:
        return
    parsed = _parser_run(tokens[:2] if tokens[0] == "wikiground" else tokens[:3], parse=False)
    assert flags <= _options(parsed.parser), f"{span.where}: unknown flags {sorted(flags - _options(parsed.parser))}"


# -- commands that run ----------------------------------------------------------------------------------------------


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty folder to run in, holding the `claims.jsonl` that the batch examples read."""
    (tmp_path / "claims.jsonl").write_text(
        "".join(json.dumps({"id": i, "claim": c}) + "\n" for i, c in enumerate(CLAIMS, 1)), "utf-8"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_main(tokens: list[str], capsys) -> tuple[int, str, str]:
    main, argv = _main_of(tokens)
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's --help
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _answers(tokens: list[str], stdout: str, workdir: Path) -> list[dict]:
    """The answers a query command wrote: on stdout with --json, one JSON line each in --out for a batch."""
    if "--out" in tokens:
        return [json.loads(line) for line in (workdir / tokens[tokens.index("--out") + 1]).read_text().splitlines()]
    return [json.loads(stdout)] if "--json" in tokens else []  # one claim: one object, indented


def _check_scorer_format(line: Snippet, tokens: list[str], workdir: Path) -> None:
    """A batch in a scorer's format (retriever/formats.py): TREC rows of six columns, or one JSON line per claim."""
    fmt = tokens[tokens.index("--format") + 1]
    text = (workdir / tokens[tokens.index("--out") + 1]).read_text()
    if fmt == "trec":
        rows = [r.split() for r in text.splitlines()]
        assert rows and all(len(r) == 6 for r in rows) and {r[0] for r in rows} == {"1", "2"}, line.where
    else:
        ids = [json.loads(x).get("id", json.loads(x).get("_id")) for x in text.splitlines()]
        assert ids == [1, 2], line.where


@pytest.mark.parametrize("line", _params(RUN))
def test_documented_command_runs(line: Snippet, gensim_index, workdir, capsys):
    tokens = [str(gensim_index) if t == DEFAULT_INDEX else t for t in shlex.split(line.text)]
    rc, out, err = _run_main(tokens, capsys)
    assert rc == 0, f"{line.where}: `{line.text}` exited {rc}: {err[-2000:]}"
    if not _is_query(tokens) or "--help" in tokens:
        assert out.strip(), f"{line.where}: `{line.text}` printed nothing"
        return
    if "--format" in tokens and tokens[tokens.index("--format") + 1] != "jsonl":
        _check_scorer_format(line, tokens, workdir)
        return
    answers = _answers(tokens, out, workdir)
    if "--queries" in tokens:
        assert [a["id"] for a in answers] == [1, 2] and {a["status"] for a in answers} == {"ok"}
    elif "--json" in tokens:
        assert len(answers) == 1 and answers[0]["status"] == "ok"
    else:
        assert "status: ok" in out, out
    assert all(a["evidence"] for a in answers), f"{line.where}: an answer without evidence"
    k = int(tokens[tokens.index("--k") + 1]) if "--k" in tokens else 10
    assert all(len(a["evidence"]) <= k for a in answers)


@pytest.fixture(scope="module")
def server(gensim_index):
    """`wikiground serve` on the test index, on a free port: its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wikiground", "serve", "--index", str(gensim_index), "--port", "0"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(300, proc.kill)  # a server that never gets ready
    timer.start()
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("ready: "):
                break
        timer.cancel()
        assert lines and lines[-1].startswith("ready: "), "".join(lines)[-3000:]
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its pipe from filling
        yield lines[-1].split()[1]
    finally:
        timer.cancel()
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.parametrize("line", _params(HTTP))
def test_documented_http_example_answers(line: Snippet, server):
    assert DEFAULT_SERVER in line.text, f"{line.where}: the example names another server"
    tokens = [t.replace(DEFAULT_SERVER, server) for t in shlex.split(line.text)]
    assert "-sf" in tokens, f"{line.where}: without -f, curl succeeds on an HTTP error"
    done = subprocess.run(tokens, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{line.where}: curl exited {done.returncode}: {done.stderr}"
    body = done.stdout.strip()
    answers = [json.loads(part) for part in body.splitlines()]  # one object, or NDJSON
    assert answers and all(isinstance(a, dict) and "error" not in a for a in answers), body[:2000]


# -- SQL, JSON and Python blocks ---------------------------------------------------------------------------------


def _of(lang: str) -> list:
    return _params([b for b in BLOCKS if b.lang == lang])


@pytest.mark.parametrize("block", _of("sql"))
def test_documented_sql_answers(block: Snippet, gensim_index):
    import duckdb

    statements = [s for s in block.text.split(";") if s.strip()]
    with duckdb.connect(str(gensim_index / "wiki.duckdb"), read_only=True) as con:
        for sql in statements:
            assert con.execute(sql).fetchall(), f"{block.where}: no rows from\n{sql}"


@pytest.mark.parametrize("block", _of("json"))
def test_documented_json_parses(block: Snippet):
    obj = json.loads(block.text)
    for name, server in obj.get("mcpServers", {}).items():  # an MCP client's configuration: its command parses
        assert server["command"] == "wikiground", name
        try:
            _parser_run([server["command"], *server["args"]], parse=True)
        except SystemExit as exc:
            pytest.fail(f"{block.where}: the parser refuses {server['args']} (exit status {exc.code})")


@pytest.mark.parametrize("block", _of("python"))
def test_documented_python_runs(block: Snippet, gensim_index, workdir, capsys):
    code = block.text.replace(f'"{DEFAULT_INDEX}"', repr(str(gensim_index)))
    exec(compile(code, block.where, "exec"), {"__name__": "docs"})  # noqa: S102 - the documented code itself


def test_readme_answer_is_a_real_answer(gensim_index, capsys):
    """The README's example has the keys of a real answer to its claim, and the same first page."""
    (example,) = [json.loads(b.text) for b in BLOCKS if b.path == README and b.lang == "json"]
    tokens = ["wikiground", "query", "--index", str(gensim_index), "--json", example["query"]]
    rc, out, err = _run_main(tokens, capsys)
    assert rc == 0, err
    real = json.loads(out)
    assert set(example) == set(real)
    assert set(example["evidence"][0]) == set(real["evidence"][0])
    assert example["evidence"][0]["title"] == real["evidence"][0]["title"]
    assert {e["mention"] for e in example["entities"]} == {e["mention"] for e in real["entities"]}


# -- the README's shape ------------------------------------------------------------------------------------------


def test_readme_is_short_and_links_every_doc():
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    assert "../shared" not in text  # a user has no shared folder; `make bench` takes SHARED=
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", text))
    assert linked == {str(p.relative_to(ROOT)) for p in DOC_FILES[1:]}


def test_relative_links_resolve():
    for path in DOC_FILES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text("utf-8")):
            assert (path.parent / target).exists(), f"{path.relative_to(ROOT)}: broken link {target}"


def test_every_command_is_checked():
    """The snippets found, and each shell line checked one way or another (no line is skipped silently)."""
    assert RUN and HTTP and PARSE and INLINE
    assert any(s.text.startswith("wikiground query --index data/index") for s in RUN)
    assert len(RUN) + len(HTTP) + len(PARSE) == len(SHELL)


# -- the checker catches what it should ----------------------------------------------------------------------------


def test_the_checks_refuse_bad_commands():
    with pytest.raises(SystemExit):
        _parser_run(["wikiground", "query", "--index", DEFAULT_INDEX, "--no-such-flag", "claim"], parse=True)
    with pytest.raises(AssertionError, match="no parser"):
        _parser_run(["wikiground", "frobnicate"], parse=True)
    with pytest.raises(AssertionError, match="no target"):
        _check_make(["make", "no-such-target"])
    with pytest.raises(AssertionError, match="no variable"):
        _check_make(["make", "index", "NO_SUCH_VAR=1"])
    with pytest.raises(AssertionError, match="unknown extra"):
        _check_pip(["pip", "install", ".[no-such-extra]"])
    assert "--assemble" in _options(_parser_run(["wikiground", "embed"], parse=False).parser)
    assert "--dense-scope" in _options(_parser_run(["python", "-m", "indexer", "build"], parse=False).parser)
