"""A misspelt name resolved to the one title a single edit away (backends.spelling), over the gensim fixture store."""

from __future__ import annotations

import pytest

from backends.entities import find_mentions
from backends.spelling import misspelt_name, one_edit_keys
from indexer.store import Store


def test_one_edit_keys_edit_letters_within_words_only():
    keys = set(one_edit_keys("ab cd"))
    assert {"b cd", "ba cd", "xb cd", "abx cd", "ab xcd", "ab cdx", "ab dc", "ab c"} <= keys
    assert "ab cd" not in keys
    assert not {"abcd", "ab  cd", "abx  cd", " ab cd"} & keys  # the space between the words never moves
    assert len(one_edit_keys("phillip glass")) < 26 * 2 * 13 + 2 * 13  # linear in the name's length


def _sql(store: Store, fn):
    saved, store._lookups = store._lookups, None
    try:
        return fn()
    finally:
        store._lookups = saved


@pytest.mark.parametrize(
    "claim, name, title",
    [
        ("Abraham Lincon was a president.", "Abraham Lincon", "Abraham Lincoln"),  # a letter dropped
        ("Andrei Tarkovksy directed films.", "Andrei Tarkovksy", "Andrei Tarkovsky"),  # two letters swapped
        ("Arthur Schopenhaur was a philosopher.", "Arthur Schopenhaur", "Arthur Schopenhauer"),
    ],
)
def test_a_misspelt_name_resolves_to_its_page(gensim_store, claim, name, title):
    with Store.open(gensim_store) as store:
        mentions = find_mentions(claim, store)
        # The whole name is one mention, not "Abraham" or "Lincoln" alone; the match is not an exact one.
        found = [m for m in mentions if m.resolution is not None]
        assert [(m.text, m.resolution.title, m.resolution.exact) for m in found] == [(name, title, False)]
        assert _sql(store, lambda: misspelt_name(name, store)) == misspelt_name(name, store)


def test_names_too_short_too_far_or_exact_are_left_alone(gensim_store):
    with Store.open(gensim_store) as store:
        assert misspelt_name("Apolo 11", store) is None  # fewer letters than a safe match needs
        assert misspelt_name("Abrahm Lincon", store) is None  # two edits
        assert misspelt_name("Lincoln", store) is None  # one word
        assert misspelt_name("Zyxw Qwerty", store) is None  # nothing near
        # An unknown name stays a missing entity, for the live fallback to look up.
        mentions = find_mentions("Zyxwvut Qwertyuiop met Ayn Rand.", store)
        assert [(m.text, m.resolved) for m in mentions] == [("Zyxwvut Qwertyuiop", False), ("Ayn Rand", True)]


def test_resolve_keys_answers_as_the_store_does(gensim_store):
    with Store.open(gensim_store) as store:
        keys = one_edit_keys("abraham lincon") + one_edit_keys("ayn randd") + ["abraham lincoln", "no such key"]
        got = store.resolve_keys(keys)
        assert got == _sql(store, lambda: store.resolve_keys(keys))
        assert {r.title for r in got.values()} == {"Abraham Lincoln", "Ayn Rand"}
        assert not any(r.exact for r in got.values())
