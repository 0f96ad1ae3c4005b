"""Parameters of ``/w/api.php`` refused before any work, as MediaWiki refuses them: an integer parameter that is not
ASCII digits (``badinteger``: Python's ``int`` reads ``"²"`` and other Unicode digits, the API does not), and a search
text over CirrusSearch's length bound."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The integer parameters read as offsets or continuations (limits are read leniently, with a warning, as MediaWiki
# does for "max" and for values over the bound).
INTEGER_PARAMS = ("sroffset", "gsroffset", "excontinue", "exlimit", "srlimit", "gsrlimit")
# Other integer parameters (lists of ids among them, "1|2"): refused only for digits other than ASCII ones.
INTEGER_SUFFIXES = ("limit", "offset", "chars", "sentences")
INTEGER_LISTS = ("pageids", "revids", "pageid", "oldid", "section", "rvsection")
SEARCH_PARAMS = ("srsearch", "gsrsearch")
MAX_SEARCH_CHARS = 300  # CirrusSearch's bound on a search text


def is_integer(raw: str) -> bool:
    """ASCII digits only, as the API reads integers."""
    return raw.isascii() and raw.isdigit()


def refused(p: Mapping[str, str]) -> tuple[str, str] | None:
    """(code, info) of the first parameter the API refuses outright, or None."""
    for name in INTEGER_PARAMS:
        raw = p.get(name)
        if raw and raw != "max" and not is_integer(raw):
            return "badinteger", f'Invalid value "{raw[:50]}" for integer parameter "{name}".'
    for name, raw in p.items():
        if name.endswith(INTEGER_SUFFIXES) or name in INTEGER_LISTS:
            if any(ch.isdigit() and not ch.isascii() for ch in raw):
                return "badinteger", f'Invalid value "{raw[:50]}" for integer parameter "{name}".'
    for name in SEARCH_PARAMS:
        text = p.get(name) or ""
        if len(text) > MAX_SEARCH_CHARS:
            info = f"Search request is longer than the maximum allowed length. ({len(text)} > {MAX_SEARCH_CHARS})"
            return "cirrussearch-query-too-long", info
    return None


def check(p: Mapping[str, str], error: Any) -> dict[str, Any] | None:
    """The API's error body for a refused parameter (``error(code, info)`` makes it), or None."""
    found = refused(p)
    return error(*found) if found else None
