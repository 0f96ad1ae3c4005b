"""Plain-text view of a multi-hop result's hops (for the CLI's table output)."""

from __future__ import annotations

from typing import Any, TextIO


def write_hops(result: dict[str, Any], out: TextIO, *, width: int = 100) -> None:
    """Each hop's queries by kind with the titles they returned, then the hop that found each page."""
    for h in result.get("hops", []):
        out.write(f"hop {h['hop']} ({h.get('ms', 0):.0f} ms), new pages: {len(h.get('new_titles', []))}\n")
        for kind, qs in h.get("queries", {}).items():
            for q in qs:
                titles = ", ".join(q["titles"])
                line = f"  {kind:<9} k={q['k']:<2} {q['query']!r} -> {titles}"
                out.write(line[:width] + ("…" if len(line) > width else "") + "\n")
    found = [
        f"{e['title']} (hop {e.get('hop')}{', via ' + e['via'] if e.get('via') else ''})"
        for e in result.get("evidence", [])
    ]
    if found:
        out.write("found: " + "; ".join(found) + "\n")
