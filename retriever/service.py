"""The one place a claim becomes an answer.

Every front calls this module: the query command and its batch runner, the HTTP server, the MCP server, and the
DSPy and LangChain integrations. Two typed, frozen option objects travel between them: :class:`OpenOptions` (which
index, which channels, the default fusion, the live fallback's settings, the multi-hop planner) opens the index once;
:class:`SearchOptions` (k, channels, fusion, multi-hop, live fallback, passages) goes with each claim.
:func:`answer` turns one claim into its output line, :class:`BlockAnswerer` a block of claims into theirs, the same
lines.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fallback.settings import FallbackSettings
from retriever.api import MAX_K, NO_ID, Retriever, check_k, error_line, parse_channels, pending_channels
from retriever.fusion import FUSIONS, Fusion, check_fusion
from wikiground.errors import ConfigError, QueryError
from wikiground.text import clean_surrogates

__all__ = [
    "BLOCK_SIZE",
    "FUSIONS",
    "Fusion",
    "MAX_HOPS",
    "MAX_K",
    "NO_ID",
    "PLANNERS",
    "BlockAnswerer",
    "FallbackSettings",
    "OpenOptions",
    "SearchOptions",
    "answer",
    "block_answerer",
    "block_size",
    "check_fusion",
    "check_k",
    "error_line",
    "json_line",
    "parse_weights",
    "pending_channels",
    "warm_up",
]

MAX_HOPS = 10  # multi-hop iterations: each hop runs up to a dozen searches
PLANNERS = ("local", "dspy")
PLANNER_CACHE = "planner"  # the planner's answers: a folder of their own inside the live fallback's cache
BLOCK_SIZE = 64  # claims per block: enough for the channels' batch searches to fill both cores
BLOCK_ENV = "WIKIGROUND_BATCH_BLOCK"
WARM_UP_CLAIM = "Aristotle tutored Alexander the Great."


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """What one claim is searched with. ``indexes``: the channels (None: every channel the index was opened with);
    ``fusion``: one of ``retriever.fusion.FUSIONS`` (None: the one the Retriever was opened with); ``on_the_fly``:
    None asks the live fallback when the Retriever was opened with it."""

    k: int = 10
    indexes: str | None = None
    fusion: Fusion | None = None
    multihop: bool = False
    hops: int | None = None
    on_the_fly: bool | None = None
    passages: bool = False

    def merged(self, **given: Any) -> SearchOptions:
        """These options with the ``given`` ones that are not None (a request's options over a server's defaults);
        a list of channels becomes their comma list; a fusion is checked (QueryError)."""
        given = {key: value for key, value in given.items() if value is not None}
        if isinstance(given.get("indexes"), list | tuple):
            given["indexes"] = ",".join(str(c) for c in given["indexes"])
        if "fusion" in given:
            given["fusion"] = check_fusion(given["fusion"])
        return replace(self, **given) if given else self


@dataclass(frozen=True, slots=True)
class OpenOptions:
    """How to open an index: the Retriever's channels, fusion and live fallback, and the multi-hop planner.

    ``fallback``: the live fallback's settings (used when ``on_the_fly``; the dspy planner keeps its answers in
    their cache folder either way); None: the defaults and ``WIKIGROUND_*`` variables.
    """

    index: Path
    channels: str | None = "all"
    weights: dict[str, float] | None = None
    fusion: str = "rrf"
    on_the_fly: bool = False
    fallback: FallbackSettings | None = None
    ingest_live: bool = False
    live_bridges: bool = False
    check_fresh: bool = False
    planner: str = "local"
    lm: str | None = None
    lm_api_base: str | None = None
    http_client: Any = field(default=None, compare=False)  # replaces the fallback's HTTP client (tests, proxies)

    def settings(self) -> FallbackSettings:
        return self.fallback if self.fallback is not None else FallbackSettings.from_env()

    def open(self) -> Retriever:
        """A new Retriever over the index (the server calls it again on each reload)."""
        return Retriever.open(
            self.index,
            channels=self.channels,
            weights=self.weights,
            fusion=self.fusion,
            on_the_fly=self.on_the_fly,
            fallback=self.settings() if self.on_the_fly else None,
            ingest_live=self.ingest_live,
            live_bridges=self.live_bridges,
            check_fresh=self.check_fresh,
            http_client=self.http_client,
        )

    def open_planner(self) -> Any | None:
        """The multi-hop planner ``planner`` names; None for the local one (the pipeline's default).

        The dspy planner's answers go through the fallback cache's ``planner`` folder in its cache mode (record by
        default): a replay needs no LM, and answers as the recorded run did. Without a cache folder the LM is asked
        every time.
        """
        if self.planner == "local":
            return None
        if self.planner not in PLANNERS:
            raise ConfigError(f"unknown planner {self.planner!r}; expected one of {', '.join(PLANNERS)}")
        from retriever.multihop.llm import CachedLM, DSPyLM, LLMPlanner

        settings = self.settings()
        replay = settings.cache_mode == "replay"
        lm = None if replay else DSPyLM(model=self.lm, api_base=self.lm_api_base)
        if settings.cache_dir is None or settings.cache_mode == "off":
            if lm is None:
                raise ConfigError("--cache-mode replay needs --cache DIR")
            return LLMPlanner(lm)
        folder = Path(settings.cache_dir) / PLANNER_CACHE
        return LLMPlanner(CachedLM(lm, folder, mode=settings.cache_mode, model=self.lm))


def answer(
    retriever: Retriever,
    claim: str,
    options: SearchOptions = SearchOptions(),  # noqa: B008 - frozen: one shared default is safe
    *,
    planner: Any | None = None,
    id: Any = NO_ID,
) -> dict[str, Any]:
    """One claim's output line, exactly as ``wikiground query --json`` prints it. Without ``id`` the line has no id
    key; ``id=None`` is ``null``. Multi-hop is planned by ``planner`` (None: the local planner)."""
    o = options
    if o.multihop:
        from retriever.multihop import MultiHopParams, MultiHopRetriever

        extra: dict[str, Any] = {"hops": o.hops} if o.hops else {}
        if o.indexes:
            extra["channels"] = parse_channels(o.indexes)
        params = MultiHopParams(final_k=o.k, fusion=o.fusion, **extra)
        return MultiHopRetriever(retriever, params=params, planner=planner).search(claim).to_dict(id)
    found = retriever.search(
        claim, o.k, channels=o.indexes, on_the_fly=o.on_the_fly, passages=o.passages, fusion=o.fusion
    )
    return found.to_dict(id)


def json_line(obj: Any, *, indent: int | None = None) -> str:
    """``obj`` as one line of UTF-8-safe JSON: a lone surrogate anywhere (an id, a title) becomes U+FFFD."""
    return clean_surrogates(json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False)) + "\n"


def warm_up(retriever: Retriever, *, jit: bool = False, search: bool = False) -> None:
    """Load every channel (the JVM, the model) now; ``jit``: let the channels that compile as they run do so;
    ``search``: run one whole search off the clock (creates the channel pool, runs every code path once). Then keep
    what loading made out of the garbage collector's way (retriever/heap.py)."""
    from retriever import heap

    retriever.warm_up(jit=jit)
    if search:
        retriever.search(WARM_UP_CLAIM, 1, on_the_fly=False)
    heap.settle()


class BlockAnswerer:
    """``answer_block([(id, text), ...])`` -> their output lines, as :func:`answer` gives them one by one, from
    :func:`retriever.batch_search.search_many` (no live fallback, no multi-hop)."""

    def __init__(self, retriever: Retriever, options: SearchOptions = SearchOptions(), *, size: int = BLOCK_SIZE):  # noqa: B008
        self.retriever, self.options = retriever, replace(options, on_the_fly=False)
        self.size = size  # claims per block

    def prepare(self) -> None:
        """Load every channel in this thread, before blocks run on other threads."""
        warm_up(self.retriever)

    def __call__(self, items: list[tuple[Any, str]]) -> list[dict[str, Any]]:
        from retriever.batch_search import search_many

        if len(items) == 1:  # the same answer; a block's set-up (dry run, batch calls) costs more than it saves
            (id_, text) = items[0]
            return [answer(self.retriever, text, self.options, id=id_)]
        o = self.options
        texts = [text for _, text in items]
        results = search_many(self.retriever, texts, o.k, channels=o.indexes, passages=o.passages, fusion=o.fusion)
        return [res.to_dict(id_) for (id_, _), res in zip(items, results)]


def block_answerer(retriever: Retriever, options: SearchOptions = SearchOptions()) -> BlockAnswerer | None:  # noqa: B008
    """The block answerer for claims with these options, or None when they go one by one: multi-hop, and the live
    fallback (its requests go one at a time at the rate limit, and each claim has its own deadline)."""
    live = retriever.on_the_fly if options.on_the_fly is None else options.on_the_fly
    size = block_size()
    if options.multihop or live or size <= 1:
        return None
    return BlockAnswerer(retriever, options, size=size)


def block_size() -> int:
    """Claims per block: ``$WIKIGROUND_BATCH_BLOCK`` (0 or 1: claim by claim), else BLOCK_SIZE."""
    raw = os.environ.get(BLOCK_ENV, "").strip()
    if not raw:
        return BLOCK_SIZE
    if not raw.isdigit():
        raise ConfigError(f"{BLOCK_ENV}={raw!r}: expected a whole number of claims per block (0: one by one)")
    return int(raw)


def parse_weights(spec: str | None) -> dict[str, float] | None:
    """``title=1.5,dense=1`` -> weights, checked (known channels, finite, 0..MAX_WEIGHT)."""
    from retriever.fusion import check_weights

    if not spec:
        return None
    out: dict[str, float] = {}
    for part in spec.split(","):
        name, eq, val = part.partition("=")
        try:
            out[name.strip()] = float(val)
        except ValueError as exc:
            raise QueryError(f"--weights: expected name=number pairs, got {part!r}") from exc
        if not eq:
            raise QueryError(f"--weights: expected name=number pairs, got {part!r}")
    try:
        return check_weights(out)
    except ConfigError as exc:
        raise QueryError(f"--{exc}") from exc
