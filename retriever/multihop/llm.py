"""An LLM-backed planner: DSPy signatures for decomposition, entity titles, attributes, gaps and 1-10 relevance.

Optional (``pip install wikiground[llm]``): dspy is imported only by :class:`DSPyLM`. Every LM answer
goes through the record/replay :class:`fallback.cache.ResponseCache` (key = the LM's name, the method and its
inputs), so a recorded run replays offline, bit for bit, with no LM at all.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from retriever.multihop.params import MultiHopParams
from retriever.multihop.scoring import LocalScorer
from retriever.multihop.state import ClaimState, HopPlan
from wikiground.errors import CacheMissError, ConfigError, PlannerError, QueryError, WikigroundError

log = logging.getLogger(__name__)

CACHE_MODES = ("record", "replay", "off")
CONTEXT_CHARS = 600  # per page handed to the LM as context
RERANK = 30  # candidates the LM scores (the rest keep their local order below them)
LM_WEIGHT = 0.5  # share of the final score from the LM's 1-10 relevance
ENDPOINT = "planner"  # cache key prefix; a named LM's answers are kept apart as "planner:<model>"
ENV_LM_API_KEY = "WIKIGROUND_LM_API_KEY"
LOCAL_API_KEY = "unused"  # what a local OpenAI-compatible server that checks no key is sent


class PlannerLM(Protocol):
    """What an LLM planner must answer. Lists are best first."""

    def decompose(self, claim: str, context: str) -> list[str]: ...
    def entity_titles(self, claim: str, context: str) -> list[str]: ...
    def attributes(self, claim: str, context: str) -> list[str]: ...
    def gaps(self, claim: str, context: str) -> list[str]: ...
    def relevance(self, claim: str, title: str, text: str) -> int: ...


METHODS = ("decompose", "entity_titles", "attributes", "gaps", "relevance")


def _answer_problem(status: Any, body: Any) -> str | None:
    """An LM answer is usable when it was recorded as a success; its shape is checked where it is read."""
    return None if status == 200 and body is not None else f"status {status!r}, body {type(body).__name__}"


class CachedLM:
    """Record/replay wrapper: ``record`` answers from the cache or asks and stores; ``replay`` never asks.

    ``model`` names the LM in the cache keys (default: the inner LM's ``name``), so two LMs' answers never mix in
    one folder. In replay without a name, the one LM the cache holds answers from is replayed.
    """

    def __init__(
        self, inner: PlannerLM | None, cache_dir: str | Path, *, mode: str = "record", model: str | None = None
    ):
        if mode not in CACHE_MODES:
            raise ConfigError(f"planner cache mode {mode!r}; choose one of {', '.join(CACHE_MODES)}")
        if inner is None and mode != "replay":
            raise ConfigError("a planner LM is needed unless the cache mode is 'replay'")
        from fallback.cache import ResponseCache

        self.inner = inner
        self.mode = mode
        self.cache = ResponseCache(Path(cache_dir), check=_answer_problem)
        self.model = model if model is not None else getattr(inner, "name", None)
        self.endpoint = self._endpoint()
        self.calls = 0
        self.hits = 0
        self._lock = threading.Lock()  # the server's threads share one cache

    def _endpoint(self) -> str:
        if self.model is not None:
            return f"{ENDPOINT}:{self.model}"
        if self.mode != "replay":
            return ENDPOINT
        recorded = sorted(e for e in self.cache.endpoints() if e.split(":", 1)[0] == ENDPOINT)
        if len(recorded) > 1:
            names = ", ".join(e.partition(":")[2] or "(unnamed)" for e in recorded)
            raise ConfigError(
                f"the planner cache {self.cache.root} holds answers of {len(recorded)} LMs ({names}): "
                "name one with --lm"
            )
        return recorded[0] if recorded else ENDPOINT

    def _ask(self, method: str, **inputs: Any) -> Any:
        from fallback.cache import request_key

        params = {k: json.dumps(v, ensure_ascii=False) for k, v in inputs.items()}
        key = request_key(self.endpoint, {"method": method, **params})
        if self.mode != "off":
            entry = self.cache.get(key)
            if entry is not None:
                with self._lock:
                    self.hits += 1
                return entry.body
            if self.mode == "replay":
                raise CacheMissError(f"planner {method}: no recorded answer in {self.cache.root} (replay mode)")
        with self._lock:
            self.calls += 1
        answer = getattr(self.inner, method)(**inputs)
        if self.mode == "record":
            with self._lock:
                self.cache.put(key, status=200, fetched_at=datetime.now(UTC).isoformat(timespec="seconds"), body=answer)
        return answer

    def decompose(self, claim: str, context: str) -> list[str]:
        return _strings(self._ask("decompose", claim=claim, context=context), "decompose")

    def entity_titles(self, claim: str, context: str) -> list[str]:
        return _strings(self._ask("entity_titles", claim=claim, context=context), "entity_titles")

    def attributes(self, claim: str, context: str) -> list[str]:
        return _strings(self._ask("attributes", claim=claim, context=context), "attributes")

    def gaps(self, claim: str, context: str) -> list[str]:
        return _strings(self._ask("gaps", claim=claim, context=context), "gaps")

    def relevance(self, claim: str, title: str, text: str) -> int:
        return _rating(self._ask("relevance", claim=claim, title=title, text=text))


class LLMPlanner:
    """Planner and scorer backed by a :class:`PlannerLM` (wrap it in :class:`CachedLM` for reproducible runs)."""

    def __init__(
        self, lm: PlannerLM, *, rerank: int = RERANK, lm_weight: float = LM_WEIGHT, local: LocalScorer | None = None
    ):
        self.lm = lm
        self.rerank = rerank
        self.lm_weight = lm_weight
        self.local = local or LocalScorer()

    def plan(
        self, claim: str, state: ClaimState, *, hop: int, params: MultiHopParams, evidence: Sequence[tuple[str, str]]
    ) -> HopPlan:
        context = "\n".join(f"[{t}] {x[:CONTEXT_CHARS]}" for t, x in evidence)
        semantic = self.lm.decompose(claim, context) if hop == 1 else self.lm.gaps(claim, context)
        return HopPlan(
            semantic=tuple(semantic),
            entity=tuple(self.lm.entity_titles(claim, context)),
            attribute=tuple(self.lm.attributes(claim, context)),
        )

    def score(self, state: ClaimState, texts: Mapping[str, str]) -> None:
        """Local score, then the LM's 1-10 relevance for the best ``rerank`` candidates, blended."""
        self.local.score(state, texts)
        ranked = state.ranked()
        top = max((c.score for c in ranked), default=0.0) or 1.0
        for i, c in enumerate(ranked):
            local = c.score / top
            if i < self.rerank:
                r = self.lm.relevance(state.claim, c.title, texts.get(c.title, "")[:CONTEXT_CHARS])
                c.features["lm_relevance"] = float(r)
                c.score = (1 - self.lm_weight) * local + self.lm_weight * r / 10
            else:
                c.score = (1 - self.lm_weight) * local  # below every LM-rated page of equal local score


def _strings(value: Any, method: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise QueryError(f"planner {method}: expected a list of strings, got {type(value).__name__}")
    return [v.strip() for v in value if v.strip()]


def _rating(value: Any) -> int:
    try:
        r = int(round(float(value)))
    except (TypeError, ValueError) as exc:
        raise QueryError(f"planner relevance: expected a number 1-10, got {value!r}") from exc
    return min(10, max(1, r))


class DSPyLM:
    """:class:`PlannerLM` over DSPy signatures, each a ``dspy.Predict`` bound to ``lm``.

    ``lm``: a ``dspy.LM`` (or any DSPy LM, e.g. ``dspy.utils.DummyLM``); or ``model``, a ``dspy.LM`` model string
    (``"openai/NAME"`` with ``api_base`` for a local OpenAI-compatible server); neither: dspy's configured LM. The
    LM is bound to the predictors, not configured globally, so the server's threads can all use it.
    """

    def __init__(
        self, lm: Any | None = None, *, model: str | None = None, api_base: str | None = None, **lm_options: Any
    ):
        dspy = import_dspy()
        if lm is None and model is not None:
            lm = _make_lm(dspy, model, api_base, lm_options)
        self.lm = lm
        self.name: str | None = model if model is not None else getattr(lm, "model", None)
        self._programs = _signatures(dspy)
        if lm is not None:
            for program in self._programs.values():
                program.lm = lm

    def _call(self, name: str, field: str, **inputs: Any) -> Any:
        try:
            return getattr(self._programs[name](**inputs), field)
        except WikigroundError:
            raise
        except Exception as exc:  # noqa: BLE001 - the LM's transport and parse errors have no common base
            raise PlannerError(
                f"planner {name}: the LM {self.name or '(dspy default)'} failed: {type(exc).__name__}: {exc}"
            ) from exc

    def decompose(self, claim: str, context: str) -> list[str]:
        return _strings(self._call("decompose", "sub_questions", claim=claim, context=context), "decompose")

    def entity_titles(self, claim: str, context: str) -> list[str]:
        return _strings(self._call("entity_titles", "titles", claim=claim, context=context), "entity_titles")

    def attributes(self, claim: str, context: str) -> list[str]:
        return _strings(self._call("attributes", "queries", claim=claim, context=context), "attributes")

    def gaps(self, claim: str, context: str) -> list[str]:
        return _strings(self._call("gaps", "queries", claim=claim, context=context), "gaps")

    def relevance(self, claim: str, title: str, text: str) -> int:
        return _rating(self._call("relevance", "rating", claim=claim, title=title, text=text))


def import_dspy() -> Any:
    """dspy, set to read its model metadata from the copy it ships (by default it fetches it from GitHub)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import dspy
    except ImportError as exc:
        raise ConfigError("the LLM planner needs dspy: pip install 'wikiground[llm]'") from exc
    return dspy


def _make_lm(dspy: Any, model: str, api_base: str | None, options: Mapping[str, Any]) -> Any:
    """A ``dspy.LM`` for ``model``; its own response cache is off (answers are cached by :class:`CachedLM`)."""
    kwargs: dict[str, Any] = {"cache": False, **options}
    if api_base is not None:
        kwargs["api_base"] = api_base
        # A local server usually checks no key, but the provider client wants one.
        kwargs.setdefault("api_key", os.environ.get(ENV_LM_API_KEY) or LOCAL_API_KEY)
    elif os.environ.get(ENV_LM_API_KEY):
        kwargs.setdefault("api_key", os.environ[ENV_LM_API_KEY])
    try:
        return dspy.LM(model, **kwargs)
    except Exception as exc:  # noqa: BLE001 - dspy refuses a bad model string with various errors
        raise ConfigError(f"--lm {model!r}: dspy cannot use it: {type(exc).__name__}: {exc}") from exc


def _signatures(dspy: Any) -> dict[str, Any]:
    class Decompose(dspy.Signature):
        """Split a multi-hop claim into up to 3 short search questions, one per fact to verify."""

        claim: str = dspy.InputField()
        context: str = dspy.InputField(desc="pages found so far (may be empty)")
        sub_questions: list[str] = dspy.OutputField()

    class EntityTitles(dspy.Signature):
        """Up to 3 exact Wikipedia article titles needed to verify the claim, including ones the context implies."""

        claim: str = dspy.InputField()
        context: str = dspy.InputField()
        titles: list[str] = dspy.OutputField()

    class Attributes(dspy.Signature):
        """Up to 4 queries pairing an entity with a temporal or relational qualifier ("<entity> 1974 season")."""

        claim: str = dspy.InputField()
        context: str = dspy.InputField()
        queries: list[str] = dspy.OutputField()

    class Gaps(dspy.Signature):
        """What the pages found so far do not yet establish about the claim, as up to 3 search questions."""

        claim: str = dspy.InputField()
        context: str = dspy.InputField()
        queries: list[str] = dspy.OutputField()

    class Relevance(dspy.Signature):
        """How useful this page is for verifying the claim, from 1 (useless) to 10 (essential)."""

        claim: str = dspy.InputField()
        title: str = dspy.InputField()
        text: str = dspy.InputField()
        rating: int = dspy.OutputField()

    return {
        "decompose": dspy.Predict(Decompose),
        "entity_titles": dspy.Predict(EntityTitles),
        "attributes": dspy.Predict(Attributes),
        "gaps": dspy.Predict(Gaps),
        "relevance": dspy.Predict(Relevance),
    }
