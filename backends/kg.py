"""Knowledge-graph channel: 1- and 2-hop paths out of the claim's entities over the store's ``triples``.

The claim's entities are those the title channel resolves (its :meth:`mentions`, reused, never redone). The
store's graph lookups (``lookups/graph.*``; for the live delta, and stores without them, key-list queries of
``triples``) give the facts each entity states (hop 1) and the facts stated by the pages those lead to (hop 2)
that reach another of the claim's entities or share a word with the claim, with the sentences stating them. A
path scores by how well its relation, its object and its intermediate page match the rest of the claim (the
words the entity itself does not account for); the second hop counts for less. Each path gives hits: the
passage stating its last fact, carrying the path and the sentence or infobox row, and the page it ends on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from backends.entities import STOPWORDS, Mention
from backends.title import MAX_QUERY_CHARS, TitleBackend
from indexer.graph_lookups import FACT_ORDER
from indexer.store import DeltaShadow, Store, in_keys
from wikiground.layout import LIVE_PASSAGE_ID_BASE
from wikiground.records import Hit
from wikiground.text import words

HOP2_WEIGHT = 0.5  # a second hop is half as good as the same match one hop away
CONNECTS = 1.0  # a path that reaches another entity of the claim
SOURCE_PRIOR = {"infobox": 0.3, "link": 0.1, "see_also": 0.05, "category": 0.0}
MAX_HOP1 = 400  # facts read per entity (a huge page states thousands; its first ones are its lead and infobox)
MAX_HOP2 = 2000  # second-hop facts read per claim
MAX_PATHS = 50
# How claims phrase some relations: "born in" is birth_place, "wife of" spouse ...
RELATION_WORDS = {
    "birth": ("born",),
    "death": ("died", "dead"),
    "burial": ("buried",),
    "spouse": ("married", "wife", "husband"),
    "influences": ("influenced",),
    "influenced": ("influenced", "influence"),
    "occupation": ("worked", "profession", "job"),
    "nationality": ("citizen",),
    "founder": ("founded",),
    "founded": ("founded", "established"),
    "genre": ("genre",),
    "origin": ("from",),
}
_SPLIT = re.compile(r"[_\s]+")


def build(db_path: Path, out_dir: Path, *, progress: bool = False, **options) -> dict:
    """Nothing to build: the store's ``triples`` table (made with every store) serves this channel."""
    return {"type": "kg", "params": {"uses": "triples"}}


def _stem(word: str) -> str:
    return word[:5]


def claim_terms(query: str, skip: Iterable[str] = ()) -> set[str]:
    """Stems of the claim's content words, without those of ``skip`` (the entity a path starts from)."""
    drop = {_stem(w) for w in skip}
    return {_stem(w) for w in words(query) if w not in STOPWORDS and len(w) > 1} - drop


@lru_cache(maxsize=8192)  # a claim's facts repeat their sentences and objects; so do the claims of a session
def _terms(text: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in words(text) if w not in STOPWORDS and len(w) > 1)


def relation_terms(relation: str) -> set[str]:
    parts = [p for p in _SPLIT.split(relation.casefold()) if p]
    out = {_stem(p) for p in parts}
    for p in parts:
        out.update(_stem(w) for w in RELATION_WORDS.get(p, ()))
    return out


def _share(found: Set[str], of: Set[str]) -> float:
    return len(found & of) / len(of) if of else 0.0


@dataclass(frozen=True, slots=True)
class Fact:
    subject_id: int
    subject: str
    relation: str
    object: str
    object_id: int | None
    source: str
    passage_id: int | None
    sentence_id: int | None
    origin: str = "local"  # "live": stated by a page fetched live (the index's delta)


@dataclass(frozen=True, slots=True)
class KgPath:
    facts: tuple[Fact, ...]
    score: float
    entity: str  # the claim's mention the path starts from
    stated: str | None = None  # the sentence or infobox row stating the last fact

    @property
    def end_id(self) -> int | None:
        return self.facts[-1].object_id

    def triples(self) -> tuple[dict[str, Any], ...]:
        return tuple(
            {
                "subject": f.subject,
                "relation": f.relation,
                "object": f.object,
                "hop": i,
                "score": round(self.score, 4),
                "origin": f.origin,
            }
            for i, f in enumerate(self.facts, 1)
        )


# Plain lookups by key list (hop 1, hop 2, then the sentences' spans and their passages' text): DuckDB plans each in
# a fraction of the time it takes to plan one query joining them. `triples` is ordered by subject, so its row
# groups' min/max find a page's facts; the `sentences` view would read every passage of the store. In one total
# order: a parallel scan returns rows in any order, and the first MAX_HOP2 of them would differ from run to run.
_COLUMNS = "subject_page_id, subject_title, relation, object_title, object_page_id, source, passage_id, sentence_id"
_ORDER = ", ".join(FACT_ORDER)  # the graph lookups hold the facts in this order too


def _hop1_sql(entity_ids: list[int]) -> tuple[str, list]:
    subjects, params = in_keys(entity_ids)
    return f"SELECT {_COLUMNS} FROM triples WHERE subject_page_id IN {subjects} ORDER BY {_ORDER}", params


def _hop2_sql(mids: list[int], entity_ids: list[int], pattern: str, limit: int) -> tuple[str, list]:
    subjects, p1 = in_keys(mids)
    objects, p2 = in_keys(entity_ids)
    sql = (
        f"SELECT {_COLUMNS} FROM triples WHERE subject_page_id IN {subjects} AND (object_page_id IN {objects} "
        "OR regexp_matches(lower(object_title || ' ' || relation), ?)) "
        f"ORDER BY {_ORDER} LIMIT ?"
    )
    return sql, [*p1, *p2, pattern, limit]


def _spans_sql(passages: list[int]) -> tuple[str, list]:
    keys, params = in_keys(passages)
    sql = f"SELECT passage_id, page_sentence_index, start_char, end_char FROM sentence_spans WHERE passage_id IN {keys}"
    return sql, params


def _texts_sql(passages: list[int]) -> tuple[str, list]:
    keys, params = in_keys(passages)
    return f"SELECT passage_id, text FROM passages WHERE passage_id IN {keys}", params


class KgBackend:
    """Entity paths as evidence. ``mentions`` is the title channel's; the retriever hands its mentions over."""

    name = "kg"
    wants_query = True  # search_mentions scores paths against the claim's words

    def __init__(self, store: Store, *, title: TitleBackend | None = None):
        self.store = store
        self.title = title or TitleBackend(store)

    def mentions(self, query: str) -> list[Mention]:
        return self.title.mentions(query)

    def search(self, query: str, k: int = 10) -> list[Hit]:
        if not query or not query.strip() or k <= 0:
            return []
        return self.search_mentions(self.mentions(query), k, query_length=len(query), query=query)

    def search_mentions(
        self, mentions: Sequence[Mention], k: int = 10, *, query_length: int, query: str = ""
    ) -> list[Hit]:
        """Hits of the best paths out of the resolved ``mentions`` (``query``: the claim, for scoring)."""
        if k <= 0:
            return []
        paths = self.paths(mentions, query[:MAX_QUERY_CHARS])
        return self._hits(paths, k)

    def paths(self, mentions: Sequence[Mention], query: str, *, limit: int = MAX_PATHS) -> list[KgPath]:
        """The best 1- and 2-hop paths out of the claim's resolved entities, best first."""
        entities: dict[int, str] = {}
        for m in mentions:
            if m.resolution is not None and not m.resolution.is_disambiguation:
                entities.setdefault(m.resolution.page_id, m.text)
        return self.paths_from(entities, query, limit=limit)

    def paths_from(self, entities: dict[int, str], query: str, *, limit: int = MAX_PATHS) -> list[KgPath]:
        """The best paths out of ``entities`` (page id -> the name the claim gives it), best first."""
        if not entities:
            return []
        rows, stated = self._facts(list(entities), claim_terms(query))
        return rank_paths(rows, entities, query, stated)[:limit]

    def _facts(self, entity_ids: list[int], terms: set[str]) -> tuple[list[tuple[int, Fact]], dict[tuple, str]]:
        """Hop-1 and hop-2 facts, and the sentence or infobox row stating each: (passage_id, sentence_id) -> text.
        Hop 2 keeps the facts that reach one of the entities or share a word with the claim. The main store's
        facts come from its graph lookups where it has them, the delta's from its own (``Store.delta_graph``);
        without them, from SQL."""
        graph = self.store.graph
        pattern = r"\b(" + "|".join(sorted(re.escape(t) for t in terms)) + ")" if terms else None
        # RE2's \b, which DuckDB's regexp_matches uses, is an ASCII word boundary
        regex = re.compile(pattern, re.ASCII) if pattern else None
        shadow = self.store.shadow
        hop1 = _hop1_sql(entity_ids)
        base = graph.facts(entity_ids, per_subject=MAX_HOP1) if graph else _asking(self.store.base_rows(*hop1))
        rows = _unshadowed(base, shadow) + self._delta_facts(
            entity_ids, shadow, _hop1_sql, lambda g, held: g.facts(held, per_subject=MAX_HOP1)
        )
        per_entity: dict[int, int] = {}
        first: list[tuple] = []
        for r in rows:
            n = per_entity[r[0]] = per_entity.get(r[0], 0) + 1
            if n <= MAX_HOP1:
                first.append(r)
        mids = sorted({r[4] for r in first if r[4] is not None} - set(entity_ids))
        second: list[tuple] = []
        if mids:
            hop2 = _hop2_sql(mids, entity_ids, pattern or r"^\b$", MAX_HOP2)
            if graph is None:
                base = _asking(self.store.base_rows(*hop2))
            else:
                base = graph.facts_reaching(mids, entity_ids, regex, MAX_HOP2)
            hop2_sql = partial(_hop2_sql, entity_ids=entity_ids, pattern=pattern or r"^\b$", limit=MAX_HOP2)
            reaching = lambda g, held: g.facts_reaching(held, entity_ids, regex, MAX_HOP2)  # noqa: E731
            second = _unshadowed(base, shadow) + self._delta_facts(mids, shadow, hop2_sql, reaching)
        sentences = self._sentences([*first, *second])
        facts1 = [Fact(*r[:8]) for r in first]
        facts2 = [Fact(*r[:8]) for r in second]
        origins = self.store.delta_origins({f.subject_id for f in (*facts1, *facts2)})
        if origins:
            facts1, facts2 = _marked_origin(facts1, origins), _marked_origin(facts2, origins)
        return [(1, f) for f in facts1] + [(2, f) for f in facts2], sentences

    def _delta_facts(self, subjects: Sequence[int], shadow: DeltaShadow, sql: Any, ask: Any) -> list[tuple]:
        """The delta's facts of ``subjects``: ``ask(graph, held)`` of the delta's graph lookups, else
        ``sql(held)``; asked only of the subjects the delta holds, the only ones it has facts of."""
        held = [s for s in subjects if s in shadow.replaced]
        if not held:
            return []
        graph = self.store.delta_graph
        return ask(graph, held) if graph is not None else _asking(self.store.delta_rows(*sql(held)))

    def _sentences(self, rows: list[tuple]) -> dict[tuple, str]:
        """(passage_id, page-level sentence id) -> sentence, for the facts ``rows``: their passages' text, cut where
        the graph lookups say, else where ``sentence_spans`` does (two lookups by key: joined in SQL, the join is
        planned as a hash join over both scans, slower than the two). Each store is asked for its own passages
        (the delta's ids start at LIVE_PASSAGE_ID_BASE)."""
        passages = sorted({r[6] for r in rows if r[6] is not None})
        if not passages:
            return {}
        texts = self._texts(passages)
        out: dict[tuple, str] = {}
        ask: set[int] = set()
        for r in rows:
            if r[8] is _ASK:
                if r[6] is not None:
                    ask.add(r[6])
            elif r[8] is not None and r[6] in texts:
                out[(r[6], r[7])] = texts[r[6]][r[8][0] : r[8][1]]
        if ask:
            for p, s, a, b in self.store.rows(*_spans_sql(sorted(ask))):
                if p in texts:
                    out[(p, s)] = texts[p][a:b]
        return out

    def _texts(self, passages: list[int]) -> dict[int, str]:
        base = [p for p in passages if p < LIVE_PASSAGE_ID_BASE]
        delta = [p for p in passages if p >= LIVE_PASSAGE_ID_BASE]
        texts = dict(self.store.base_rows(*_texts_sql(base))) if base else {}
        if delta:
            texts.update(self.store.delta_rows(*_texts_sql(delta)))
        return texts

    def _hits(self, paths: Sequence[KgPath], k: int) -> list[Hit]:
        """A path's hits: the passage stating its last fact (with that sentence or infobox row), the page it ends on."""
        if not paths:
            return []
        ends = {p.end_id for p in paths if p.end_id is not None}
        ends.update(p.facts[-1].subject_id for p in paths if p.facts[-1].passage_id is None)
        leads = self.store.lead_passage_ids(ends)  # page id -> (lead passage id, title)
        hits: list[Hit] = []
        seen: set[int] = set()
        for path in paths:
            last = path.facts[-1]
            triples = path.triples()
            if last.passage_id is not None:
                items = [(last.passage_id, last.subject_id, last.subject, path.stated)]
            else:
                lead = leads.get(last.subject_id)
                items = [(lead[0], last.subject_id, last.subject, None)] if lead else []
            end = leads.get(path.end_id) if path.end_id is not None else None
            if end is not None:
                items.append((end[0], path.end_id, end[1], None))
            for passage_id, page_id, title, text in items:
                if passage_id in seen:
                    continue
                seen.add(passage_id)
                hits.append(Hit(passage_id, page_id, path.score, len(hits) + 1, self.name, title, None, triples, text))
            if len(hits) >= k:
                break
        return hits[:k]

    def search_batch(self, queries: list[str], k: int = 10) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]

    def close(self) -> None:
        pass


_ASK = object()  # a fact read in SQL: where its sentence lies is asked of ``sentence_spans``


def _asking(rows: list[tuple]) -> list[tuple]:
    return [(*r, _ASK) for r in rows]


def _unshadowed(rows: list[tuple], shadow: DeltaShadow) -> list[tuple]:
    """The base's facts less those of pages the delta replaced or deleted (the delta states their facts now); a
    fact whose object page was deleted keeps its object's title, not the page."""
    hidden, deleted = shadow.hidden, shadow.deleted
    if not hidden:
        return rows
    return [(*r[:4], None, *r[5:]) if r[4] in deleted else r for r in rows if r[0] not in hidden]


def _marked_origin(facts: list[Fact], origins: Mapping[int, tuple[str, str | None]]) -> list[Fact]:
    """``facts`` with the origin (``update`` or ``live``) of those stated by a page of the delta."""
    return [replace(f, origin=origins[f.subject_id][0]) if f.subject_id in origins else f for f in facts]


def rank_paths(
    rows: Sequence[tuple[int, Fact]],
    entities: dict[int, str],
    query: str,
    sentences: dict[tuple, str],
) -> list[KgPath]:
    """Paths from the hop-1 and hop-2 facts, scored against the claim, best first (one per end and route)."""
    first = [f for hop, f in rows if hop == 1]
    second = [f for hop, f in rows if hop == 2]
    terms_of = {pid: claim_terms(query, words(name)) for pid, name in entities.items()}
    into: dict[int, list[tuple[float, Fact]]] = {}  # intermediate page -> (hop-1 score, fact) into it
    paths: list[KgPath] = []
    for f in first:
        terms = terms_of.get(f.subject_id, set())
        text = sentences.get((f.passage_id, f.sentence_id), "") if f.passage_id is not None else ""
        m = fact_match(f, terms, text, entities)
        s = SOURCE_PRIOR.get(f.source, 0.0) + m
        if m > 0:  # a fact that matches nothing of the claim is no evidence for it (it may still lead on)
            paths.append(KgPath((f,), s, entities[f.subject_id], text or None))
        if f.object_id is not None and f.object_id not in entities:
            into.setdefault(f.object_id, []).append((s, f))
    for mid, found in into.items():
        paths.extend(_meeting_paths(mid, found, entities, sentences))
    for g in second:
        for s1, f in sorted(into.get(g.subject_id, ()), key=lambda x: -x[0])[:1]:
            if g.object_id == f.subject_id:
                continue
            terms = terms_of.get(f.subject_id, set())
            text = sentences.get((g.passage_id, g.sentence_id))
            m2 = fact_match(g, terms, text or "", entities)
            if m2 > 0:
                s2 = SOURCE_PRIOR.get(g.source, 0.0) + m2
                paths.append(KgPath((f, g), HOP2_WEIGHT * (s1 + s2), entities[f.subject_id], text))
    paths.sort(key=lambda p: (-p.score, len(p.facts), p.facts[-1].object))
    best: dict[tuple, KgPath] = {}
    for p in paths:
        best.setdefault((p.facts[0].subject_id, p.end_id or p.facts[-1].object, len(p.facts)), p)
    return list(best.values())


def _meeting_paths(
    mid: int, found: list[tuple[float, Fact]], entities: dict[int, str], sentences: dict[tuple, str]
) -> list[KgPath]:
    """Two of the claim's entities pointing at one page: a 2-hop path between them through it."""
    by_subject: dict[int, tuple[float, Fact]] = {}
    for s, f in found:
        if f.subject_id not in by_subject or s > by_subject[f.subject_id][0]:
            by_subject[f.subject_id] = (s, f)
    if len(by_subject) < 2:
        return []
    (s1, f1), (s2, f2) = sorted(by_subject.values(), key=lambda x: (-x[0], x[1].subject_id))[:2]
    text = sentences.get((f2.passage_id, f2.sentence_id))
    return [KgPath((f1, f2), HOP2_WEIGHT * (s1 + s2 + CONNECTS), entities[f1.subject_id], text)]


def fact_match(f: Fact, terms: set[str], sentence: str, entities: dict[int, str]) -> float:
    """How well one fact matches the claim's other words: its relation, its object (another of the claim's
    entities most), the sentence stating it."""
    score = 0.0
    if f.object_id is not None and f.object_id in entities and f.object_id != f.subject_id:
        score += CONNECTS
    else:
        score += _share(terms, _terms(f.object))
    if f.relation not in ("mentions", "see_also", "category"):
        score += 0.5 * (1.0 if relation_terms(f.relation) & terms else 0.0)
    if sentence:
        score += 0.5 * _share(_terms(sentence), terms)
    return score


def load(index_dir: Path, *, store: Store | None = None) -> KgBackend:
    return KgBackend(store or Store.open(index_dir))
