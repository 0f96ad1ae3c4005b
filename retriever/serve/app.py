"""The FastAPI application: evidence search, pages, health and stats, reload, and the drop-in endpoints
(DSPy's ColBERTv2 client at ``/api/search``, a MediaWiki Action API subset at ``/w/api.php``).

Every search runs on the server's thread pool, holding a reference on the index generation it started on, with a
per-request timeout. Errors are JSON: ``{"error": {"type", "message"}, "message"}``, 4xx for bad requests, never a
traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import platform
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Annotated, Any

from fastapi import Body, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.exceptions import HTTPException as StarletteHTTPException

try:
    import orjson
except ImportError:  # the serve extra pins it; without it the standard library renders the answers
    orjson = None

from retriever import formats
from retriever import pages as page_lookup
from retriever.serve.coalesce import Coalescer
from retriever.serve.limits import Access, AccessCheck, BodyLimit, HttpLimits, batch_body_bytes
from retriever.serve.pools import DEFAULT_QUEUE, DEFAULT_THREADS, SlowPool
from retriever.serve.state import ServerState
from retriever.serve.views import public_stats
from retriever.service import FUSIONS, SearchOptions, answer, block_answerer, error_line
from wikiground.errors import (
    ConfigError,
    FallbackError,
    IndexChangedError,
    IndexMissingError,
    InputError,
    PlannerError,
    QueryError,
    ServerBusyError,
    WikigroundError,
)

log = logging.getLogger(__name__)

LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")
HTTP_ERROR_KINDS = {
    400: "InvalidRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    413: "BodyTooLarge",
}


class LineResponse(JSONResponse):
    """A search's output line as JSON, rendered by orjson where it is installed (the serve extra pins it): the
    event loop renders every answer, so rendering is on every request's path, and orjson is many times faster than
    the standard library. The JSON is the same object either way."""

    def render(self, content: Any) -> bytes:
        if orjson is None:
            return super().render(content)
        try:
            return orjson.dumps(content)
        except TypeError:  # what orjson refuses (an integer beyond 64 bits), the standard library writes
            return super().render(content)


class RequestTimeout(Exception):
    """A request ran past the server's per-request timeout."""


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    claim: str = Field(description="claim or question text")
    k: StrictInt | None = Field(None, description="evidence items (default: the server's --k)")
    indexes: str | list[str] | None = Field(None, description="channels, e.g. 'bm25,title' (default: the server's)")
    fusion: str | None = Field(None, description=f"{' or '.join(FUSIONS)} (default: the server's --fusion)")
    multihop: StrictBool | None = Field(None, description="iterative multi-hop retrieval")
    on_the_fly: StrictBool | None = Field(None, description="live fallback (needs a server started --on-the-fly)")
    passages: StrictBool | None = Field(None, description="the top k passages, not the top k pages")


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: Any = None
    claim: str | None = None
    question: str | None = None


class ColbertRequest(BaseModel):
    query: str
    k: StrictInt = 10
    fusion: str | None = None


def status_of(exc: WikigroundError) -> int:
    if isinstance(exc, IndexChangedError | ServerBusyError):
        return 503
    if isinstance(exc, FallbackError | PlannerError) and not isinstance(exc, ConfigError):
        return 502
    if isinstance(exc, QueryError | ConfigError | InputError | IndexMissingError):
        return 400
    return 500


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """``{"error": {"type", "message", ...}, "message"}``: the top-level ``message`` is what DSPy's ColBERTv2 client
    (and other clients that read ``message``) show."""
    return {"error": {"type": kind, "message": message, **extra}, "message": message}


def _install_handlers(app: FastAPI) -> None:
    @app.exception_handler(WikigroundError)
    async def wikiground_error(request: Request, exc: WikigroundError) -> JSONResponse:
        status = status_of(exc)
        if isinstance(exc, IndexChangedError):
            request.app.state.server.reload_soon()  # the folder was rebuilt: the next requests get the new build
        if status >= 500 and not isinstance(exc, ServerBusyError):
            log.error("%s %s: %s", request.method, request.url.path, exc)
        headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, ServerBusyError) else None
        return JSONResponse(error_body(type(exc).__name__, str(exc)), status_code=status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = HTTP_ERROR_KINDS
        message = exc.detail if isinstance(exc.detail, str) else "invalid request"
        if exc.status_code == 404:
            message = f"no route {request.url.path[:200]!r} (see /docs)"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path[:200]!r}"
        kind = kinds.get(exc.status_code, "HttpError")
        return JSONResponse(error_body(kind, message), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestTimeout)
    async def timeout_error(request: Request, exc: RequestTimeout) -> JSONResponse:
        return JSONResponse(error_body("Timeout", str(exc)), status_code=504)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder(exc.errors(), exclude={"input", "url", "ctx"})
        where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)
        return JSONResponse(error_body("InvalidRequest", where or "invalid request", details=errors), 422)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse(error_body("InternalError", "internal server error (see the server's log)"), 500)


class Runner:
    """Runs work against one index generation, under the per-request timeout: local searches on the server's
    thread pool, live-fallback and multi-hop ones on a pool and queue of their own (retriever/serve/pools.py)."""

    def __init__(self, state: ServerState, threads: int, slow: SlowPool | None = None):
        self.state = state
        self.executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="request")
        self.window = max(1, threads // 2)  # claims of one batch searched at once
        self.coalescer = Coalescer(self.executor)
        self.slow = slow or SlowPool()

    def submit(self, gen: Any, fn: Callable[[Any], Any], *, slow: bool = False, force: bool = False) -> Any:
        """``fn(retriever)`` on the pool (``slow``: the live and multi-hop pool; ``force``: past its full queue);
        the generation's reference (taken by the caller) is left when it ends."""

        def job() -> Any:
            try:
                return fn(gen.retriever)
            finally:
                gen.leave()

        try:
            return self.slow.submit(lambda: job(), force=force) if slow else self.executor.submit(job)
        except BaseException:
            gen.leave()
            raise

    async def within_timeout(self, fut: Any) -> Any:
        """The result of the pool's ``fut``, or RequestTimeout past the per-request timeout."""
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), self.state.limits.timeout)
        except TimeoutError:
            raise RequestTimeout(f"the request took longer than {self.state.limits.timeout:g} s") from None

    async def wait(self, gen: Any, fut: Any) -> Any:
        try:
            return await self.within_timeout(fut)
        finally:
            if not fut.done() and fut.cancel():
                gen.leave()  # never started: its job will not leave the generation

    async def run(self, fn: Callable[[Any], Any]) -> Any:
        gen = self.state.acquire()
        return await self.wait(gen, self.submit(gen, fn))

    async def search(self, claim: str, opts: SearchOptions) -> dict[str, Any]:
        """One claim's output line. Local single-shot searches go through the coalescer (answered in a block
        with the concurrent requests that share their options); multi-hop and live ones run on their own."""
        gen = self.state.acquire()
        try:
            blocks = block_answerer(gen.retriever, opts)
        except BaseException:
            gen.leave()
            raise
        if blocks is None:  # live or multi-hop: the slow pool
            work = self.submit(gen, lambda r: answer(r, claim, opts, planner=self.state.planner), slow=True)
            return await self.wait(gen, work)
        key = (gen.number, opts)  # claims asked with the same options are answered together
        try:
            fut = self.coalescer.submit(key, blocks, claim)
        except BaseException:
            gen.leave()
            raise
        fut.add_done_callback(lambda _: gen.leave())  # answered, failed or dropped: the reference ends with it
        try:
            return await self.within_timeout(fut)
        finally:
            fut.cancel()  # only one that has not started: its block drops it


def create_app(
    state: ServerState,
    *,
    threads: int = 8,
    reload_on_sighup: bool = False,
    http: HttpLimits = HttpLimits(),  # noqa: B008 - frozen: one shared default is safe
    access: Access = Access(),  # noqa: B008
    live_threads: int = DEFAULT_THREADS,
    live_queue: int = DEFAULT_QUEUE,
) -> FastAPI:
    """The application over a started :class:`ServerState` (closed when the application shuts down): local searches
    on ``threads`` threads, live and multi-hop ones on ``live_threads`` with ``live_queue`` more waiting; request
    bodies bounded by ``http`` and requests checked by ``access`` (retriever/serve/limits.py)."""
    runner = Runner(state, threads, SlowPool(live_threads, live_queue))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        hooked = reload_on_sighup and _hook_sighup(loop, runner)
        try:
            yield
        finally:
            if hooked:
                import signal

                loop.remove_signal_handler(signal.SIGHUP)
            runner.slow.shutdown(wait=True)
            runner.executor.shutdown(wait=True)
            state.close()

    app = FastAPI(
        title="wikiground",
        description="Evidence retrieval over a local Wikipedia index, with drop-in endpoints for DSPy and MediaWiki "
        "clients.",
        lifespan=lifespan,
    )
    app.state.server = state
    app.state.runner = runner
    _install_handlers(app)
    _search_routes(app, state, runner)
    _info_routes(app, state, runner)
    _dspy_routes(app, state, runner)
    from retriever.serve import retrieve
    from retriever.serve.explorer import install as install_explorer
    from retriever.serve.mediawiki import install

    retrieve.install(app, state, runner)
    install(app, state, runner)
    install_explorer(app, state, runner)
    lim = state.limits
    batch = batch_body_bytes(http, lim.max_batch, lim.max_claim_chars)
    app.add_middleware(BodyLimit, max_bytes=http.max_body_bytes, batch_bytes=batch, read_timeout=http.read_timeout)
    app.add_middleware(AccessCheck, access=access)  # the outer layer: a request for another host is not read on
    return app


def _hook_sighup(loop: asyncio.AbstractEventLoop, runner: Runner) -> bool:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGHUP"):
        return False

    def reload() -> None:
        try:
            number, seconds = runner.state.reload()
            log.warning("SIGHUP: reloaded the index (generation %d, %.1f s)", number, seconds)
        except Exception:
            log.exception("SIGHUP: reload failed; still serving the previous index")

    loop.add_signal_handler(signal.SIGHUP, lambda: loop.run_in_executor(runner.executor, reload))
    return True


def _search_routes(app: FastAPI, state: ServerState, runner: Runner) -> None:
    @app.post("/search", summary="Evidence for one claim: the JSON object of one CLI output line")
    async def search(req: SearchRequest) -> Any:
        state.count("search")
        claim = state.check_claim(req.claim)
        opts = state.defaults.merged(
            k=req.k,
            indexes=req.indexes,
            fusion=req.fusion,
            multihop=req.multihop,
            on_the_fly=req.on_the_fly,
            passages=req.passages,
        )
        opts = replace(opts, k=state.check_k(opts.k))
        return LineResponse(await runner.search(claim, opts))

    @app.post("/search/batch", summary="Evidence for many {id, claim}: NDJSON lines, as they finish")
    async def search_batch(
        items: Annotated[list[BatchItem], Body()],
        k: int | None = Query(None),
        indexes: str | None = Query(None),
        fusion: str | None = Query(None, description=" or ".join(FUSIONS)),
        multihop: bool | None = Query(None),
        on_the_fly: bool | None = Query(None),
        format: str = Query("jsonl", description="jsonl, trec, kilt, fever or hotpot (retriever/formats.py)"),
        run_tag: str = Query(formats.DEFAULT_RUN_TAG),
        docid: str = Query("title", description="trec: title, page_id or passage_id"),
    ) -> StreamingResponse:
        state.count("search/batch")
        render = formats.renderer(format, run_tag=run_tag, docid=docid)
        if len(items) > state.limits.max_batch:
            raise QueryError(f"the batch has {len(items)} claims; the limit is {state.limits.max_batch}")
        opts = state.defaults.merged(k=k, indexes=indexes, fusion=fusion, multihop=multihop, on_the_fly=on_the_fly)
        opts = replace(opts, k=state.check_k(opts.k))
        claims = []
        for n, item in enumerate(items):
            text = item.claim if item.claim is not None else item.question
            if text is None:
                raise QueryError(f"batch item {n}: no 'claim' or 'question' string")
            if isinstance(item.id, float) and not math.isfinite(item.id):
                raise QueryError(f"batch item {n}: the id {item.id!r} is not a finite number (JSON has none)")
            claims.append(
                (item.id if "id" in item.model_fields_set else n + 1, state.check_claim(text, what=f"item {n}"))
            )
        gen = state.acquire()
        try:
            if block_answerer(gen.retriever, opts) is None:
                runner.slow.check()  # a batch of live or multi-hop claims is refused while the slow queue is full
        finally:
            gen.leave()
        state.count("claims", len(claims))
        media = "text/plain" if format == "trec" else "application/x-ndjson"
        return StreamingResponse(_batch_lines(state, runner, claims, opts, render), media_type=media)


async def _batch_lines(
    state: ServerState,
    runner: Runner,
    claims: list[tuple[Any, str]],
    opts: SearchOptions,
    render: Callable[[dict[str, Any]], str],
) -> AsyncIterator[str]:
    """One line per claim as each finishes. Every claim runs on the generation taken here, at most ``runner.window``
    at a time (a long batch leaves threads to other clients); a claim that fails is an error line. When no line has
    come for the request timeout, the claims left are answered "timed out"."""
    gen = state.acquire()
    todo = iter(claims)
    pending: dict[asyncio.Future, tuple[Any, Any, str]] = {}
    slow = block_answerer(gen.retriever, opts) is None  # live or multi-hop: the slow pool, a window of its threads
    window = min(runner.window, runner.slow.threads) if slow else runner.window

    def one(r: Any, id_: Any, text: str) -> dict[str, Any]:
        try:
            return answer(r, text, opts, planner=state.planner, id=id_)
        except WikigroundError as exc:
            return error_line(id_, text, str(exc))

    def submit_next() -> None:
        for id_, text in todo:
            gen.enter()
            fut = runner.submit(gen, lambda r, id_=id_, text=text: one(r, id_, text), slow=slow, force=True)
            pending[asyncio.wrap_future(fut)] = (fut, id_, text)
            return

    try:
        for _ in range(window):
            submit_next()
        while pending:
            done, _ = await asyncio.wait(pending, timeout=state.limits.timeout, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                left = [(id_, text) for _, id_, text in pending.values()] + list(todo)
                for id_, text in left:
                    yield render(error_line(id_, text, "timed out"))
                break
            for fut in done:
                _, id_, text = pending.pop(fut)
                if fut.exception() is not None:
                    log.error("batch claim %r failed", id_, exc_info=fut.exception())
                    line = error_line(id_, text, "internal error")
                else:
                    line = fut.result()
                yield render(line)
                submit_next()
    finally:
        for fut, _, _ in pending.values():
            if fut.cancel():
                gen.leave()
        gen.leave()


def _info_routes(app: FastAPI, state: ServerState, runner: Runner) -> None:
    @app.get("/pages/{title:path}", summary="A page after redirects: sections, categories, see also, infobox, links")
    async def page(title: str) -> Any:
        state.count("pages")
        title = state.check_claim(title, what="title")
        view = await runner.run(lambda r: page_lookup.page_view(r.store, title))
        if view is None:
            return JSONResponse(error_body("NotFound", f"no page or redirect titled {title!r}"), status_code=404)
        return view

    @app.get("/health", summary="Liveness: ok once the index is open")
    async def health() -> Any:
        gen = state.generation
        if gen is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        return {"status": "ok", "generation": gen.number}

    @app.get("/stats", summary="Manifest, counts, channels, versions, uptime and requests served")
    async def stats() -> dict[str, Any]:
        stats = await runner.run(lambda r: {**_stats(state, r), "coalesced": runner.coalescer.stats()})
        return public_stats({**stats, "slow_pool": runner.slow.stats()})

    @app.post("/reload", summary="Open the index folder again and swap it in (from 127.0.0.1 only)")
    async def reload(request: Request) -> Any:
        host = request.client.host if request.client else ""
        if host not in LOCAL_HOSTS:
            return JSONResponse(error_body("Forbidden", "reload is allowed from 127.0.0.1 only"), status_code=403)
        state.count("reload")
        loop = asyncio.get_running_loop()
        number, seconds = await loop.run_in_executor(runner.executor, state.reload)
        return {"status": "reloaded", "generation": number, "seconds": round(seconds, 3)}


def _stats(state: ServerState, retriever: Any) -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    from wikiground import __version__
    from wikiground.layout import MANIFEST_FILE

    manifest: Any = None
    if retriever.index_dir is not None:
        try:
            manifest = json.loads((retriever.index_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            manifest = {"error": f"cannot read the manifest ({type(exc).__name__})"}  # its message holds the path
    versions = {"wikiground": __version__, "python": platform.python_version()}
    for pkg in ("duckdb", "fastapi", "uvicorn", "pyserini", "faiss-cpu", "scikit-learn"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    counts = {t: retriever.store.count(t) for t in ("pages", "redirects", "passages", "categories", "links")}
    gen = state.generation
    return {
        "index": str(retriever.index_dir) if retriever.index_dir else None,
        "manifest": manifest,
        "counts": counts,
        "channels": list(retriever.channels),
        "pending": list(retriever.pending),
        "on_the_fly": retriever.fallback is not None,
        "versions": versions,
        "uptime_seconds": round(state.uptime(), 3),
        "ready_seconds": None if state.ready_seconds is None else round(state.ready_seconds, 3),
        "generation": gen.number if gen else None,
        "reloads": state.reloads,
        "requests": {"total": sum(v for k, v in state.requests.items() if k != "claims"), **state.requests},
        "limits": {
            "max_claim_chars": state.limits.max_claim_chars,
            "max_k": state.limits.max_k,
            "max_batch": state.limits.max_batch,
            "timeout_seconds": state.limits.timeout,
        },
    }


def colbert_topk(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A passage search's evidence as ColBERTv2 server passages, in the order of their scores: ``text`` is
    ``"Title | passage"`` (the convention of DSPy's Wikipedia abstracts server), ``prob`` a softmax of the scores
    over the list."""
    evidence = sorted(result["evidence"], key=lambda e: -e["score"])
    if not evidence:
        return []
    top = max(e["score"] for e in evidence)
    weights = [math.exp(e["score"] - top) for e in evidence]
    total = sum(weights)
    return [
        {
            "text": f"{e['title']} | {e['evidence_text']}",
            "pid": e["passage_id"],
            "rank": n,
            "score": e["score"],
            "prob": w / total,
            "title": e["title"],
            "url": e.get("url"),
            "page_id": e["page_id"],
            "section": e["section"],
            "origin": e["origin"],
        }
        for n, (e, w) in enumerate(zip(evidence, weights), start=1)
    ]


def _dspy_routes(app: FastAPI, state: ServerState, runner: Runner) -> None:
    async def topk(query: str, k: int, fusion: str | None) -> Any:
        state.count("api/search")
        claim = state.check_claim(query, what="query")
        k = state.check_k(k)
        opts = replace(state.defaults.merged(k=k, fusion=fusion), multihop=False, passages=True)  # as ColBERT gives
        result = await runner.search(claim, opts)
        return JSONResponse({"query": query, "topk": colbert_topk(result), "fusion": result.get("fusion")})

    @app.get("/api/search", summary="DSPy ColBERTv2 drop-in: GET ?query=...&k=...&fusion=... -> {topk: [...]}")
    async def colbert_get(
        query: str = Query(...), k: int = Query(10), fusion: str | None = Query(None, description=" or ".join(FUSIONS))
    ) -> Any:
        return await topk(query, k, fusion)

    @app.post("/api/search", summary="DSPy ColBERTv2 drop-in (post_requests=True): {query, k} -> {topk: [...]}")
    async def colbert_post(req: ColbertRequest) -> Any:
        return await topk(req.query, req.k, req.fusion)
