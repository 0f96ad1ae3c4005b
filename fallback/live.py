"""Tiered live retrieval for the claim's entities that the local index lacks.

Attempt 1: title lookup + intro of each missing entity (disambiguation pages resolved
against the claim); a name with no page of its own searched alone (an empty search retried with
its suggestion); a keyword search's top M intros; then the bridge hop: names in the sentences of
the best pages closest to the claim, resolved in one request. Attempt 2: alternative search
terms (the search suggestion, fewer terms) and sections of partially relevant pages,
chosen by overlap with the claim. Attempt 3: categories and "See also" of partially
relevant pages → their intros. Per-claim state means no request is made twice; a claim
with no relevant evidence after ``max_attempts`` gets ``EVIDENCE_RETRIEVAL_FAILED_WIKIPEDIA``.
All of a claim's lookups share one live deadline; when it is spent, or the client's circuit breaker is
open, the claim stops asking and keeps what it found (``live_status`` says which).
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import httpx

from backends.entities import NAME_JOINTS, fold_plural, names_in, strip_disambiguator
from fallback.client import PageInfo, PageSections, WikiApi
from fallback.clock import Clock
from fallback.planner import ClaimState, KeywordPlanner, QueryPlanner
from fallback.relevance import OverlapScorer, RelevanceScorer, content_words
from fallback.settings import FallbackSettings
from wikiground.errors import (
    ApiError,
    CircuitOpenError,
    DeadlineExceededError,
    FallbackError,
    ForbiddenHostError,
    ResponseTooLargeError,
    RetryExhaustedError,
    TransportError,
)
from wikiground.records import Evidence
from wikiground.text import canonical_title, normalize_title

log = logging.getLogger(__name__)

STATUS_FOUND = "EVIDENCE_FOUND_WIKIPEDIA"
STATUS_FAILED = "EVIDENCE_RETRIEVAL_FAILED_WIKIPEDIA"
# How the claim's live lookups ended: all tried, cut by the claim's live deadline, or skipped by the circuit breaker.
LIVE_OK = "ok"
LIVE_DEADLINE = "deadline_exceeded"
LIVE_CIRCUIT_OPEN = "circuit_open"
MAX_ATTEMPTS = 3
DEFAULT_SEARCH_TOP_M = 3
DEFAULT_MIN_RELEVANCE = 0.5  # default scorer: half of the claim's content words present
CHUNK_WORDS = 120  # evidence granularity, close to the local passages' ~100 words
SECTIONS_PER_PAGE = 2
BRIDGE_PAGES = 2  # pages the claim names whose intros are read for the next hop's names
BRIDGE_SENTENCES = 3  # their sentences sharing most words with the claim
BRIDGE_TITLES = 20  # names asked for at once: one request
BRIDGE_LOCAL_PAGES = 1  # best local evidence items read the same way
PAGES_TO_EXPAND = 2
DISAMBIGUATION_OPTIONS = 20
RELATED_TITLES = 10
SKIP_HEADINGS = frozenset(
    {
        "see also",
        "references",
        "external links",
        "notes",
        "further reading",
        "bibliography",
        "sources",
        "citations",
        "footnotes",
    }
)
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[A-Z]\.)\s+")  # not after an initial: "Henry J. Kaiser"
# One failed request must not sink the claim. A spent deadline or an open circuit breaker ends its lookups instead.
_Soft = (ApiError, RetryExhaustedError, TransportError, ForbiddenHostError, ResponseTooLargeError)


@dataclass(frozen=True, slots=True)
class LivePage:
    """A page fetched live, with the provenance the evidence and the delta store carry."""

    title: str
    pageid: int | None
    rev_id: int | None
    url: str | None
    fetched_at: str | None
    intro: str
    sections: tuple[tuple[str, str], ...] = ()  # (heading, text) fetched beyond the intro
    is_disambiguation: bool = False
    retrieved_for_entity: str | None = None
    attempt: int = 1
    links: tuple[str, ...] = ()  # article links, for the kg channel (LiveFallback.with_structure)
    categories: tuple[str, ...] = ()  # visible categories, without "Category:"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sections"] = [list(s) for s in self.sections]
        d["links"], d["categories"] = list(self.links), list(self.categories)
        return d


@dataclass(frozen=True, slots=True)
class LiveResult:
    status: str
    evidence: tuple[Evidence, ...]
    attempts: int
    requests: int
    cache_hits: int
    state: ClaimState
    pages: tuple[LivePage, ...]
    cache_misses: int = 0
    live_status: str = LIVE_OK
    refreshed: tuple[str, ...] = ()  # local titles whose newer revision was read (LiveFallback.refresh)

    @property
    def found(self) -> bool:
        return self.status == STATUS_FOUND

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "attempts": self.attempts,
            "requests": self.requests,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "live_status": self.live_status,
            "evidence": [e.to_dict() for e in self.evidence],
            "state": self.state.to_dict(),
            "pages": [p.to_dict() for p in self.pages],
            "refreshed": list(self.refreshed),
        }


@dataclass
class _Candidate:
    title: str
    section: str
    text: str
    entity: str | None
    attempt: int
    pageid: int | None
    rev_id: int | None
    url: str | None
    fetched_at: str | None
    score: float = 0.0
    keep: bool = False  # evidence whatever its score: the intro of a page the claim names or of a bridge page

    @property
    def names_page(self) -> bool:
        """The intro of a page the claim names: kept, and fetched for one of its missing names."""
        return self.keep and self.entity is not None


def same_name(name: str, title: str, *, min_ratio: float = 0.85) -> bool:
    """A title names ``name``: equal up to case, plurals, a disambiguator and small misspellings."""

    def key(text: str) -> str:
        text = strip_disambiguator(text)
        return " ".join(fold_plural(w) for w in content_words(text) or text.casefold().split())

    a, b = key(name), key(title)
    return bool(a and b) and (a == b or difflib.SequenceMatcher(None, a, b).ratio() >= min_ratio)


def chunk_text(text: str, *, max_words: int = CHUNK_WORDS) -> list[str]:
    """Paragraphs, split at sentence ends into pieces of at most about ``max_words`` words."""
    out: list[str] = []
    for para in (p.strip() for p in text.split("\n")):
        if not para:
            continue
        current: list[str] = []
        count = 0
        for sentence in _SENTENCE_END.split(para):
            n = len(sentence.split())
            if current and count + n > max_words:
                out.append(" ".join(current))
                current, count = [], 0
            current.append(sentence)
            count += n
        if current:
            out.append(" ".join(current))
    # Short paragraphs (list items, one-liners) are merged so a chunk has some context.
    merged: list[str] = []
    for piece in out:
        if merged and len(merged[-1].split()) + len(piece.split()) <= max_words // 2:
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


class LiveFallback:
    """Live MediaWiki retrieval for entity mentions missing from the local index."""

    def __init__(
        self,
        api: WikiApi,
        *,
        scorer: RelevanceScorer | None = None,
        planner: QueryPlanner | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        search_top_m: int = DEFAULT_SEARCH_TOP_M,
        min_relevance: float = DEFAULT_MIN_RELEVANCE,
    ):
        self.api = api
        self.scorer = scorer or OverlapScorer()
        self.planner = planner or KeywordPlanner()
        self.max_attempts = max(1, max_attempts)
        self.search_top_m = search_top_m
        self.min_relevance = min_relevance

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> LiveFallback:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def with_structure(self, pages: Sequence[LivePage]) -> list[LivePage]:
        """``pages`` with their article links and visible categories, from two requests per 50 pages (cached and
        rate-limited like the rest), for the kg channel's paths. When the API cannot answer, the pages are
        returned as they are: their text is still evidence."""
        titles = [p.title for p in pages if p.pageid is not None]
        if not titles:
            return list(pages)
        try:
            links = self.api.links_of(titles)
            categories = self.api.categories_of(titles)
        except FallbackError as exc:
            log.warning("links and categories of %d live page(s) not fetched: %s", len(titles), exc)
            return list(pages)
        return [
            replace(p, links=tuple(links.get(p.title, ())), categories=tuple(categories.get(p.title, ())))
            for p in pages
        ]

    # -- the tiers ------------------------------------------------------------------------------

    def retrieve(
        self, claim: str, missing_entities: Sequence[str], *, k: int = 10, context: Sequence[tuple[str, str]] = ()
    ) -> LiveResult:
        """Live evidence for ``claim``'s missing entities. ``context``: the best local evidence as (title, text),
        whose sentences may name the bridge entity too (read only when the claim is looked up anyway)."""
        api = self.api
        start = api.counts_here()
        entities = list(dict.fromkeys(e.strip() for e in missing_entities if e and e.strip()))
        state = ClaimState(claim)
        run = _Run(self, claim, entities, state, context=list(context)[:BRIDGE_LOCAL_PAGES])
        return self._result(run, start, k, self._bounded(run, lambda: self._attempts(run)))

    def _attempts(self, run: _Run) -> None:
        for attempt in range(1, self.max_attempts + 1):
            run.state.attempts = attempt
            if attempt == 1:
                run.attempt1()
            elif attempt == 2:
                run.attempt2()
            else:
                run.attempt3()
            run.score_new()
            if run.done():
                break

    def _bounded(self, run: _Run, work: Callable[[], None]) -> str:
        """Run a claim's lookups under its live deadline; a spent deadline or an open circuit breaker ends them,
        and what was found before is kept. Returns the live status."""
        try:
            with self.api.deadline_scope():
                work()
        except DeadlineExceededError as exc:
            run._soft(exc)
            status = LIVE_DEADLINE
        except CircuitOpenError as exc:  # the breaker said so once when it opened; each claim only records it
            run.state.errors.append(f"{type(exc).__name__}: {exc}")
            log.debug("live fallback: %s", exc)
            status = LIVE_CIRCUIT_OPEN
        else:
            return LIVE_OK
        run.score_new()
        return status

    def bridge(
        self,
        claim: str,
        context: Sequence[tuple[str, str]],
        *,
        k: int = 10,
        known: Callable[[list[str]], set[str]] | None = None,
    ) -> LiveResult:
        """The second hop alone, for a claim whose entities are all local: the names in the sentences closest to
        the claim of the best local evidence (``context``, as (title, text)) that ``known`` does not return (the
        names the local index has), in one request; every page found is evidence. No search, no other attempt."""
        api = self.api
        start = api.counts_here()
        state = ClaimState(claim, attempts=1)
        run = _Run(self, claim, [], state, context=list(context)[:BRIDGE_LOCAL_PAGES])
        live_status = self._bounded(run, lambda: run._bridges(known=known))
        run.score_new()
        return self._result(run, start, k, live_status)

    def refresh(self, claim: str, local: Sequence[tuple[str, int | None]], *, k: int = 10) -> LiveResult:
        """The pages among ``local`` ((title, the revision the index holds): a claim's top local evidence) that
        changed since: their latest revision ids asked with ``prop=info`` (50 titles a request), the newer ones
        read (intro, then the sections closest to the claim) as live evidence; ``refreshed`` names them by their
        local titles. Under the claim's live deadline, rate limit and cache, as every lookup."""
        start = self.api.counts_here()
        run = _Run(self, claim, [], ClaimState(claim, attempts=1))
        live_status = self._bounded(run, lambda: run.refresh(local))
        run.score_new()
        return replace(self._result(run, start, k, live_status), refreshed=tuple(run.refreshed))

    def _result(self, run: _Run, start: tuple[int, int, int], k: int, live_status: str = LIVE_OK) -> LiveResult:
        api, state = self.api, run.state
        # A page the claim names is evidence about that entity even when its intro shares few words with
        # the claim, and so is a bridge page (the second hop, named by the sentence of a page that is closest to
        # the claim: the host a question asks for, named in the intro of the event it names); anything else must
        # pass the relevance threshold.
        relevant = sorted(
            (c for c in run.candidates if c.score >= self.min_relevance or c.keep),
            key=lambda c: (not c.names_page, -c.score, c.attempt, c.title, c.section),
        )
        evidence = tuple(
            Evidence(
                title=c.title,
                page_id=c.pageid,
                passage_id=None,
                section=c.section,
                evidence_text=c.text,
                source="text",
                score=round(c.score, 6),
                ranks={"live": rank},
                url=c.url,
                rev_id=c.rev_id,
                origin="live",
                retrieved_for_entity=c.entity,
                fetched_at=c.fetched_at,
                rev_timestamp=c.fetched_at,  # the API's extracts carry no revision time: when it was read
                attempt=c.attempt,
            )
            for rank, c in enumerate(relevant[:k], start=1)
        )
        now = api.counts_here()
        return LiveResult(
            status=STATUS_FOUND if evidence else STATUS_FAILED,
            evidence=evidence,
            attempts=state.attempts,
            requests=now[0] - start[0],
            cache_hits=now[1] - start[1],
            state=state,
            pages=tuple(run.live_pages()),
            cache_misses=now[2] - start[2],
            live_status=live_status,
        )


def _joined_parts(name: str, names: Sequence[str]) -> tuple[str, str] | None:
    """ "Star and Dagger" -> ("Star", "Dagger") when both words are among ``names``."""
    for joint in NAME_JOINTS:
        left, sep, right = name.partition(joint)
        if sep and left in names and right in names:
            return left, right
    return None


class _Run:
    """One claim's retrieval: candidates, pages and state."""

    def __init__(
        self,
        fb: LiveFallback,
        claim: str,
        entities: list[str],
        state: ClaimState,
        *,
        context: Sequence[tuple[str, str]] = (),
    ):
        self.fb, self.api, self.claim, self.entities, self.state = fb, fb.api, claim, entities, state
        self.context = context
        self.candidates: list[_Candidate] = []
        self.pages: dict[str, dict[str, Any]] = {}  # title -> LivePage fields (sections appended)
        self._scored = 0
        self._section_lists: dict[str, PageSections] = {}
        self.refreshed: list[str] = []  # local titles found changed live (refresh)

    # attempts

    def attempt1(self) -> None:
        infos = self._intros(self.entities)
        # "Star and Dagger", asked for beside "Star" and "Dagger": with a page, it is the name and they are not
        # names of their own; without, they are.
        joined = {e: parts for e in self.entities if (parts := _joined_parts(e, self.entities))}
        found = {e for e in joined if (i := infos.get(e)) is not None and not (i.missing or i.invalid)}
        dropped = {p for e in found for p in joined[e]} | (joined.keys() - found)
        self.entities = [e for e in self.entities if e not in dropped]
        unmatched: list[str] = []
        for entity in self.entities:
            info = infos.get(entity)
            if info is None or info.missing or info.invalid:
                unmatched.append(entity)
            elif info.is_disambiguation:
                self._disambiguate(info, entity)
            else:
                self._add_page(info, entity, keep=True)
        # A name with no page of its own is searched for by itself, as a reader would type it into the search
        # box: this finds "Philip Glass" for "Phillip Glass" (via the suggestion), "Polar bear" for "Polar bears".
        for entity in unmatched:
            self._search(entity, entity=entity)
        self._search_round()
        self._bridges()

    def attempt2(self) -> None:
        self._search_round()
        for title in self._partially_relevant():
            self._expand_sections(title)

    def attempt3(self) -> None:
        related: list[str] = []
        titles = self._partially_relevant()
        try:  # the pages' categories in one request
            cats = self.api.categories_of(titles) if titles else {}
        except _Soft as exc:
            self._soft(exc)
            cats = {}
        for title in titles:
            self.state.categories.extend(c for c in cats.get(title, []) if c not in self.state.categories)
            try:
                see_also = [s for s in self._sections(title).sections if s.heading.strip().casefold() == "see also"]
                if see_also:
                    related.extend(self.api.section_links(title, see_also[0].index))
            except _Soft as exc:
                self._soft(exc)
        infos = self._intros(related[:RELATED_TITLES])
        for info in infos.values():
            if not (info.missing or info.invalid or info.is_disambiguation):
                self._add_page(info, self._entity_for(info.title, info.extract or ""))
        self._search_round()

    def refresh(self, local: Sequence[tuple[str, int | None]]) -> None:
        """The pages of ``local`` whose live revision is newer than the index's, read as candidates."""
        held: dict[str, int] = {}
        for title, rev_id in local:
            if title and rev_id is not None:
                held.setdefault(title, int(rev_id))
        if not held:
            return
        try:
            infos = self.api.resolve(list(held))
        except _Soft as exc:
            self._soft(exc)
            return
        newer = {
            t: i
            for t, i in infos.items()
            if not (i.missing or i.invalid) and i.rev_id is not None and i.rev_id > held[t]
        }
        self.refreshed.extend(newer)
        for info in self._intros([i.title for i in newer.values()]).values():
            if not (info.missing or info.invalid or info.is_disambiguation):
                self._add_page(info, None, keep=True)
        self.score_new()
        for title in self._partially_relevant():
            self._expand_sections(title)

    # steps

    def _soft(self, exc: Exception) -> None:
        log.warning("live fallback: %s", exc)
        self.state.errors.append(f"{type(exc).__name__}: {exc}")

    def _untried(self, titles: Sequence[str]) -> list[str]:
        """The titles not tried yet for this claim, now marked tried."""
        fresh = [t for t in dict.fromkeys(titles) if canonical_title(t) not in self.state.titles]
        self.state.titles.extend(canonical_title(t) for t in fresh)
        return fresh

    def _intros(self, titles: Sequence[str]) -> dict[str, PageInfo]:
        """Intros of the titles not tried yet."""
        return self._fetch_intros(self._untried(titles))

    def _fetch_intros(self, titles: Sequence[str]) -> dict[str, PageInfo]:
        if not titles:
            return {}
        try:
            infos = self.api.intros(titles)
        except _Soft as exc:
            self._soft(exc)
            return {}
        for info in infos.values():  # redirect targets count as tried too
            if info.title not in self.state.titles:
                self.state.titles.append(info.title)
        return infos

    def _search_round(self) -> None:
        for query in self.fb.planner.queries(self.claim, self.entities, attempt=self.state.attempts, state=self.state):
            self._search(query)

    def _search(self, query: str, *, entity: str | None = None) -> None:
        """One search (never repeated) and the intros of its top M hits, in one request; a search that finds
        nothing is retried once with its "did you mean" suggestion, as the search page itself does."""
        if not query or query in self.state.search_terms:
            return
        self.state.search_terms.append(query)
        try:  # the hits and their intros in one request
            result, infos = self.api.search_intros(query, limit=self.fb.search_top_m)
        except _Soft as exc:
            self._soft(exc)
            return
        if result.suggestion and result.suggestion not in self.state.suggestions:
            self.state.suggestions.append(result.suggestion)
            if not result.hits:
                self._search(result.suggestion, entity=entity)
                return
        fresh = self._untried([h.title for h in result.hits])
        # A hit the generator did not return a page for (its index changed between the two) is asked for by title.
        infos.update(self._fetch_intros([t for t in fresh if t not in infos]))
        for rank, hit in enumerate(result.hits):
            info = infos.get(hit.title)
            if info is None or info.missing or info.invalid or hit.title not in fresh:
                continue
            for_entity = entity or self._entity_for(info.title, info.extract or "")
            if info.is_disambiguation:
                self._disambiguate(info, for_entity)
            else:
                # The top hit for a name alone, titled like it, is that name's page ("Phillip Glass" -> "Philip
                # Glass"): evidence about the entity even when its intro shares few words with the claim.
                self._add_page(
                    info, for_entity, keep=rank == 0 and entity is not None and same_name(entity, info.title)
                )

    def _bridges(self, *, known: Callable[[list[str]], set[str]] | None = None) -> None:
        """The second hop of a bridge claim: names in the sentences, closest to the claim, of the best pages so
        far ("Kaiser Ventures ... was founded by an American industrialist": the intro of "Kaiser Ventures"
        names "Henry J. Kaiser"). One request resolves them all; every page found is evidence, ranked by the scorer.
        ``known``: of a list of names, those the local index has (not asked for)."""
        claim_words = set(content_words(self.claim))
        claim_key = f" {normalize_title(self.claim)} "
        names: list[str] = []
        self.score_new()
        # The first hop is a page the claim names; search hits come after it.
        named = list(dict.fromkeys(c.title for c in self.candidates if c.names_page))
        ranked = list(dict.fromkeys([*named, *self._partially_relevant()]))[:BRIDGE_PAGES]
        sources = [(self.pages[t]["title"], self.pages[t]["intro"]) for t in ranked]
        # Pages the claim names, then the best local evidence, then search hits: a keyword hit is the first hop
        # less often than what the local index ranked first for the whole claim.
        n_named = sum(t in named for t in ranked)
        closest: list[list[tuple[str, str]]] = []
        for title, text in [*sources[:n_named], *self.context, *sources[n_named:]]:
            # The page's own name is in its first sentence anyway: what counts is the rest of the claim.
            wanted = claim_words - set(content_words(title))
            sentences = [x for x in _SENTENCE_END.split(text) if x.strip()]
            sentences.sort(key=lambda x: -len(wanted & set(content_words(x))))
            closest.append([(title, x) for x in sentences[:BRIDGE_SENTENCES]])
        # The best sentence of every source before the second best of any: the request takes BRIDGE_TITLES names,
        # and the local evidence, read last, must not lose its best sentence to a live page's third.
        for rank in range(BRIDGE_SENTENCES):
            for title, sentence in (c[rank] for c in closest if rank < len(c)):
                names += [
                    n
                    for n in names_in(sentence)
                    if f" {normalize_title(n)} " not in claim_key and canonical_title(n) != canonical_title(title)
                ]
        # A page a search already fetched is a bridge page all the same: its intro is evidence whatever its score.
        fetched = {canonical_title(n) for n in names} & self.pages.keys()
        intros: dict[str, _Candidate] = {}
        for cand in self.candidates:
            intros.setdefault(cand.title, cand)  # a page's first candidate is its intro's first chunk
        for title in fetched & intros.keys():
            intros[title].keep = True
        names = list(dict.fromkeys(n for n in names if canonical_title(n) not in self.pages))
        if known is not None and names:
            local = known(names)
            names = [n for n in names if n not in local]
        if not names:
            return
        for info in self._intros(names[:BRIDGE_TITLES]).values():
            if not (info.missing or info.invalid or info.is_disambiguation):
                self._add_page(info, None, keep=True)  # found for the claim, not for one of its missing names

    def _disambiguate(self, info: PageInfo, entity: str | None) -> None:
        """Follow the disambiguation option whose intro best matches the claim."""
        try:  # the options and their intros in one request
            linked = self.api.linked_intros(info.title, limit=DISAMBIGUATION_OPTIONS)
        except _Soft as exc:
            self._soft(exc)
            return
        fresh = self._untried(list(linked))
        infos = [linked[t] for t in fresh if not linked[t].is_disambiguation]
        if not infos:
            return
        scores = self.fb.scorer.score(self.claim, [f"{i.title}. {i.extract or ''}" for i in infos])
        best, score = max(zip(infos, scores), key=lambda pair: pair[1])
        if score <= 0:
            return
        if entity:
            self.state.disambiguated[entity] = best.title
        self._add_page(best, entity)

    def _add_page(self, info: PageInfo, entity: str | None, *, keep: bool = False) -> None:
        if info.title in self.pages:
            return
        self.pages[info.title] = dict(  # noqa: C408 - keyword form mirrors the API's field names
            title=info.title,
            pageid=info.pageid,
            rev_id=info.rev_id,
            url=info.url,
            fetched_at=info.fetched_at,
            intro=info.extract or "",
            sections=[],
            is_disambiguation=info.is_disambiguation,
            retrieved_for_entity=entity,
            attempt=self.state.attempts,
        )
        for i, piece in enumerate(chunk_text(info.extract or "")):
            self.candidates.append(
                _Candidate(
                    info.title,
                    "",
                    piece,
                    entity,
                    self.state.attempts,
                    info.pageid,
                    info.rev_id,
                    info.url,
                    info.fetched_at,
                    keep=keep and i == 0,
                )
            )

    def _sections(self, title: str) -> PageSections:
        """A page's section list, asked for once per claim (attempts 2 and 3 both need it)."""
        if title not in self._section_lists:
            self._section_lists[title] = self.api.sections(title)
        return self._section_lists[title]

    def _expand_sections(self, title: str) -> None:
        page = self.pages[title]
        try:
            parsed = self._sections(title)
        except _Soft as exc:
            self._soft(exc)
            return
        claim_words = set(content_words(self.claim))
        usable = [
            s
            for s in parsed.sections
            if s.heading.strip().casefold() not in SKIP_HEADINGS and f"{title}#{s.index}" not in self.state.sections
        ]
        usable.sort(key=lambda s: (-len(claim_words & set(content_words(s.heading))), s.index))
        for section in usable[:SECTIONS_PER_PAGE]:
            self.state.sections.append(f"{title}#{section.index}")
            try:
                text = self.api.section_text(title, section.index)
            except _Soft as exc:
                self._soft(exc)
                continue
            if not text:
                continue
            page["sections"].append((section.heading, text))
            rev_id = parsed.rev_id or page["rev_id"]
            for piece in chunk_text(text):
                self.candidates.append(
                    _Candidate(
                        title,
                        section.heading,
                        piece,
                        page["retrieved_for_entity"],
                        self.state.attempts,
                        page["pageid"],
                        rev_id,
                        page["url"],
                        parsed.fetched_at or page["fetched_at"],
                    )
                )

    # scoring

    def _entity_for(self, title: str, text: str) -> str | None:
        """The missing entity a fetched page most plausibly serves (title first, then text)."""
        if not self.entities:
            return None
        title_words, text_words = set(content_words(title)), set(content_words(text))

        def fit(entity: str) -> tuple[float, float]:
            ew = set(content_words(entity)) or {entity.casefold()}
            return len(ew & title_words) / len(ew), len(ew & text_words) / len(ew)

        best = max(self.entities, key=fit)
        return best if fit(best) > (0.0, 0.0) else None

    def score_new(self) -> None:
        fresh = self.candidates[self._scored :]
        if fresh:
            scores = self.fb.scorer.score(
                self.claim,
                [f"{c.title}. {c.section}. {c.text}" if c.section else f"{c.title}. {c.text}" for c in fresh],
            )
            for cand, score in zip(fresh, scores):
                cand.score = float(score)
        self._scored = len(self.candidates)

    def _best_by_page(self) -> dict[str, float]:
        best: dict[str, float] = {}
        for c in self.candidates:
            best[c.title] = max(best.get(c.title, 0.0), c.score)
        return best

    def _partially_relevant(self) -> list[str]:
        """Pages worth expanding: some overlap with the claim, best first."""
        best = self._best_by_page()
        ranked = sorted((t for t, s in best.items() if s > 0), key=lambda t: (-best[t], t))
        return ranked[:PAGES_TO_EXPAND]

    def done(self) -> bool:
        relevant = [c for c in self.candidates if c.score >= self.fb.min_relevance]
        if not relevant:
            return False
        if not self.entities:
            return True
        covered = {c.entity for c in relevant}
        return all(e in covered for e in self.entities)

    def live_pages(self) -> list[LivePage]:
        return [
            LivePage(
                title=p["title"],
                pageid=p["pageid"],
                rev_id=p["rev_id"],
                url=p["url"],
                fetched_at=p["fetched_at"],
                intro=p["intro"],
                sections=tuple(p["sections"]),
                is_disambiguation=p["is_disambiguation"],
                retrieved_for_entity=p["retrieved_for_entity"],
                attempt=p["attempt"],
            )
            for p in self.pages.values()
        ]


def open_fallback(
    settings: FallbackSettings,
    *,
    http_client: httpx.Client | None = None,
    clock: Clock | None = None,
    scorer: RelevanceScorer | None = None,
    planner: QueryPlanner | None = None,
    max_attempts: int = MAX_ATTEMPTS,
    search_top_m: int = DEFAULT_SEARCH_TOP_M,
    min_relevance: float = DEFAULT_MIN_RELEVANCE,
) -> LiveFallback:
    """A ready LiveFallback on ``settings`` (``FallbackSettings.from_env()`` reads ``WIKIGROUND_*`` variables; an
    override is ``dataclasses.replace(settings, ...)``). ``http_client`` and ``clock`` replace the network and time."""
    api = WikiApi(settings, http_client=http_client, clock=clock)
    return LiveFallback(
        api,
        scorer=scorer,
        planner=planner,
        max_attempts=max_attempts,
        search_top_m=search_top_m,
        min_relevance=min_relevance,
    )
