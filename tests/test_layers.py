"""The package layering: no import cycles among the project's modules, every import-linter contract kept,
and ``import retriever`` stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("wikiground", "indexer", "backends", "retriever", "fallback")


def _cycles(graph) -> list[tuple[str, ...]]:
    """Every import a -> b for which b also reaches a (top-level and in-function imports both count)."""
    found = []
    for a in sorted(graph.modules):
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            back = graph.find_shortest_chain(importer=b, imported=a)
            if back:
                found.append((a, *back))
    return found


def test_no_import_cycles():
    import grimp

    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    import grimp

    pkg = tmp_path / "cyclepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyclepkg import b\n")
    (pkg / "b.py").write_text("from cyclepkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclepkg", include_external_packages=False, cache_dir=None)
    assert _cycles(graph)


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_shipped_packages_hold_no_test_helpers():
    shipped = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    offenders = [
        str(p.relative_to(ROOT))
        for p in shipped
        if any(word in p.read_text(encoding="utf-8") for word in ("class FakeClock", "class FakeWiki"))
    ]
    assert offenders == []
