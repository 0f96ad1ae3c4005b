"""The ``wikiground`` command: one entry point over the project's command lines.

``wikiground index ...`` is ``python -m indexer build ...``, ``wikiground update ...`` is
``python -m indexer update ...``, ``wikiground compact ...`` is ``python -m indexer compact ...``,
``wikiground embed ...`` is
``python -m indexer.embed ...``, ``wikiground query ...`` is ``python -m retriever.query ...``,
``wikiground serve ...`` is ``python -m retriever.serve ...`` and ``wikiground mcp ...`` is
``python -m retriever.mcp ...``: the same
code, the same flags. Each subcommand imports its module only when it runs, so ``wikiground --help`` is quick.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from wikiground import __version__

USAGE = """usage: wikiground [--version] COMMAND [ARGS...]

commands:
  index   build an index folder from dumps or corpora   (python -m indexer build)
  update  apply newer dumps and page_change events       (python -m indexer update)
  compact fold the delta into the base channels           (python -m indexer compact)
  embed   dense embeddings in resumable shards           (python -m indexer.embed)
  query   evidence for claims from an index folder      (python -m retriever.query)
  serve   serve an index folder over HTTP               (python -m retriever.serve)
  mcp     serve an index folder to LLM agents over MCP  (python -m retriever.mcp)
  verify  check every file of an index folder           (python -m indexer.verify)
  eval    score a run against a gold file               (python -m retriever.evaluate)

`wikiground COMMAND --help` lists a command's options.
"""


def _index(argv: Sequence[str]) -> int:
    from indexer.__main__ import main

    return main(["build", *argv])


def _update(argv: Sequence[str]) -> int:
    from indexer.__main__ import main

    return main(["update", *argv])


def _compact(argv: Sequence[str]) -> int:
    from indexer.__main__ import main

    return main(["compact", *argv])


def _embed(argv: Sequence[str]) -> int:
    from indexer.embed import main

    return main(list(argv))


def _query(argv: Sequence[str]) -> int:
    from retriever.query import main

    return main(list(argv))


def _serve(argv: Sequence[str]) -> int:
    from retriever.serve.__main__ import main

    return main(list(argv))


def _mcp(argv: Sequence[str]) -> int:
    from retriever.serve.mcp import main

    return main(list(argv))


def _verify(argv: Sequence[str]) -> int:
    from indexer.verify import main

    return main(list(argv))


def _eval(argv: Sequence[str]) -> int:
    from retriever.evaluate import main

    return main(list(argv))


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "index": _index,
    "update": _update,
    "compact": _compact,
    "embed": _embed,
    "query": _query,
    "serve": _serve,
    "mcp": _mcp,
    "verify": _verify,
    "eval": _eval,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    if args[0] == "--version":
        print(f"wikiground {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"wikiground: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
