"""Title channel: entity mentions of the claim resolved to local pages (exact, redirect, normalised).

A claim that names an entity whose page exists surfaces that page's intro passage; after the named entities, the
pages of the common nouns it uses in lower case ("the heart beats ..." -> "Heart"), matched exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from backends.entities import Mention, concept_words, find_mentions
from indexer.store import Store
from wikiground.records import Hit

MAX_QUERY_CHARS = 2000  # entity matching looks at the start of very long inputs only


def build(db_path: Path, out_dir: Path, *, progress: bool = False, **options) -> dict:
    """Nothing to build: the store's title and redirect indexes serve this channel."""
    return {"type": "title", "params": {"uses": "pages.title, pages.title_norm, redirects"}}


class TitleBackend:
    name = "title"
    wants_query = True  # search_mentions adds the claim's lowercase concept words

    def __init__(self, store: Store, *, max_ngram: int = 8):
        self.store = store
        self.max_ngram = max_ngram

    def mentions(self, query: str) -> list[Mention]:
        if not query or not query.strip():
            return []
        return find_mentions(query[:MAX_QUERY_CHARS], self.store, max_ngram=self.max_ngram)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        if not query or not query.strip() or k <= 0:
            return []
        query = query[:MAX_QUERY_CHARS]
        return self.search_mentions(self.mentions(query), k, query_length=len(query), query=query)

    def search_mentions(
        self, mentions: Sequence[Mention], k: int = 10, *, query_length: int, query: str | None = None
    ) -> list[Hit]:
        """Hits for mentions already found (the retriever finds them once per claim); with the ``query`` they
        came from, its concept words' pages after them."""
        if k <= 0:
            return []
        named = [m for m in mentions if m.resolution]
        # Exact, direct, multi-word matches first, and earlier mentions before later ones: a claim's
        # subject usually comes first ("X worked with Y" is evidence on X's page).
        scored = []
        span = max(query_length, 1)
        for m in named:
            res = m.resolution
            n_words = min(len(m.text.split()), 4)
            score = (
                2.0
                + (0.5 if res.exact else 0.0)
                + (0.25 if res.via_redirect is None else 0.0)
                + 0.2 * (n_words - 1)
                - 1.0 * (m.start / span)
            )
            if res.is_disambiguation:
                score -= 1.0  # a disambiguation page is a weaker answer than the entity itself
            scored.append((score, m.start, res.page_id, m.text))
        if query:
            scored += self._concepts(query[:MAX_QUERY_CHARS], mentions, span)
        scored.sort(key=lambda x: (-x[0], x[1]))
        seen: set[int] = set()
        ordered = []
        for score, _, pid, text in scored:
            if pid in seen:
                continue
            seen.add(pid)
            ordered.append((score, pid, text))
        leads = self.store.lead_passage_ids([pid for _, pid, _ in ordered])
        hits: list[Hit] = []
        for score, pid, text in ordered:
            lead = leads.get(pid)
            if lead is None:
                continue
            hits.append(Hit(lead[0], pid, float(score), 0, self.name, title=lead[1], matched=text))
        hits.sort(key=lambda h: -h.score)
        return [
            Hit(h.passage_id, h.page_id, h.score, r, h.channel, h.title, h.matched) for r, h in enumerate(hits[:k], 1)
        ]

    def _concepts(self, query: str, mentions: Sequence[Mention], span: int) -> list[tuple[float, int, int, str]]:
        """(score, offset, page id, word) of the concept words naming a page exactly (title or redirect, the word
        as written before its singular), no disambiguation pages. Scores lie in (-1, 0], below every mention's
        (above 0): a named entity is the stronger clue, and earlier words come first."""
        words = concept_words(query, mentions)
        if not words:
            return []
        # The store's one lookup for titles (the loose key's matches are left out below): a block of claims
        # answers it from one query (retriever.batch_search).
        found = self.store.resolve_titles([v for _, vs in words for v in vs])
        out = []
        for start, variants in words:
            res = next((r for v in variants if (r := found.get(v)) is not None and r.exact), None)
            if res is not None and not res.is_disambiguation:
                out.append((-(start / span), start, res.page_id, query[start : start + len(variants[0])]))
        return out

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]

    def close(self) -> None:
        pass


def load(index_dir: Path, *, store: Store | None = None) -> TitleBackend:
    return TitleBackend(store or Store.open(index_dir))
