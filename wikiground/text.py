"""Small text helpers shared by indexer and retriever (no heavy imports)."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["canonical_title", "normalize_title", "words", "page_url", "clean_surrogates"]

_WS = re.compile(r"\s+")
_NON_WORD = re.compile(r"[^\w\s]", re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)
_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical_title(title: str) -> str:
    """MediaWiki's canonical form: underscores to spaces, collapsed spaces, first letter upper."""
    t = _WS.sub(" ", title.replace("_", " ")).strip()
    return t[:1].upper() + t[1:] if t else t


def is_disambiguation_title(title: str) -> bool:
    """Whether ``title`` is Wikipedia's title for a disambiguation page beside a primary topic ("Mercury
    (disambiguation)"): a list of the pages sharing a name, none of them, and never a claim's evidence."""
    return title.endswith("(disambiguation)")


def normalize_title(title: str) -> str:
    """Loose key for title matching: casefolded, accents and punctuation removed.

    "Schrödinger's cat" and "schrodingers cat" share a key; so do "U.S.A." and "USA".
    """
    t = unicodedata.normalize("NFKD", title.replace("_", " "))
    t = "".join(ch for ch in t if not unicodedata.combining(ch))
    t = t.replace("'", "").replace("\u2019", "").replace(".", "")
    t = _NON_WORD.sub(" ", t.casefold())
    return _WS.sub(" ", t).strip()


def words(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _WORD.findall(text.casefold())


def page_url(base_url: str | None, title: str) -> str | None:
    """URL of a page from the site's base URL (siteinfo ``base``, e.g. .../wiki/Main_Page)."""
    if not base_url:
        return None
    from urllib.parse import quote

    root = base_url.rsplit("/", 1)[0] if "/wiki/" in base_url else base_url.rstrip("/")
    path = quote(title.replace(" ", "_"), safe="()_,:!$*;@/'")
    return f"{root}/{path}"


def clean_surrogates(text: str) -> str:
    """``text`` with lone surrogates (valid in JSON's ``\\ud800`` escapes, not in UTF-8) replaced by U+FFFD.

    Lucene, the tokenizer, DuckDB and UTF-8 output all refuse them, so text from outside is cleaned once,
    where it comes in.
    """
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text
