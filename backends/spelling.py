"""A misspelt name resolved to the one title a single edit away ("Phillip Glass" -> "Philip Glass").

Claims misspell names (FEVER's annotators wrote "Phillip Glass" a dozen times), and a misspelt name matches no title,
so its page reaches the claim only through the text channels, where the name's parts ("Phillip", "Glass") match
every page that holds them, and more of them the bigger the corpus. Wikipedia carries redirects for the common
misspellings of its most visited pages, not for every one. A capitalised run of two words or more that resolves to
nothing is looked up again as every key one edit away (a letter deleted, inserted, changed, or two swapped, within
its words), and taken when exactly one page answers. Short names are left alone: too many titles lie one edit away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wikiground.text import normalize_title

if TYPE_CHECKING:
    from indexer.store import Resolution, Store

MIN_LETTERS = 8  # a name with fewer letters has too many titles one edit away to trust a single one
MAX_LETTERS = 40  # the variants grow with the name: past this length a name is not a typo of a title
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def one_edit_keys(key: str) -> list[str]:
    """The keys one edit from the normalised ``key``: a letter deleted, inserted, changed or two neighbours swapped,
    within its words (the spaces between words stay where they are)."""
    out: set[str] = set()
    n = len(key)
    for i in range(n + 1):
        before, after = key[:i], key[i:]
        inside = i < n and key[i] != " "
        # An insertion at i lies within a word when a letter is on either side of it.
        if (i > 0 and key[i - 1] != " ") or inside:
            out.update(before + c + after for c in _LETTERS)
        if not inside:
            continue
        word_left = i > 0 and key[i - 1] != " "
        word_right = i + 1 < n and key[i + 1] != " "
        if word_left or word_right:  # deleting a one-letter word would join two words
            out.add(before + after[1:])
        out.update(before + c + after[1:] for c in _LETTERS if c != key[i])
        if word_right and key[i] != key[i + 1]:
            out.add(before + key[i + 1] + key[i] + after[2:])
    out.discard(key)
    return sorted(out)


def misspelt_name(text: str, store: Store) -> Resolution | None:
    """The page a misspelt multi-word name means: the one page (not a disambiguation page) whose title or redirect
    lies one edit from ``text``; None when none does, or more than one, or a disambiguation page."""
    key = normalize_title(text)
    letters = sum(c.isalpha() for c in key)
    if " " not in key or not MIN_LETTERS <= letters <= MAX_LETTERS or not key.isascii():
        return None
    found = store.resolve_keys(one_edit_keys(key))
    pages = {r.page_id: r for r in found.values()}
    if len(pages) != 1:
        return None
    (res,) = pages.values()
    return None if res.is_disambiguation else res
