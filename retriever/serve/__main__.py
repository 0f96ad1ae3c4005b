"""``python -m retriever.serve --index DIR [--host 127.0.0.1] [--port 8765]``: serve an index over HTTP.

Takes the query command's options (``--indexes``, ``--k``, ``--multihop``, ``--on-the-fly`` and its flags) as the
defaults of every request. Loads everything before it listens, then prints one line on stderr:
``ready: http://HOST:PORT in N.N s``. SIGTERM or Ctrl-C stops it gracefully (requests in flight finish); SIGHUP,
or ``POST /reload`` from 127.0.0.1, opens the index folder again and swaps it in.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from typing import Any

from wikiground.errors import ConfigError, QueryError, WikigroundError

log = logging.getLogger("retriever.serve")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def build_parser() -> argparse.ArgumentParser:
    from retriever.cli_options import add_search_options
    from retriever.serve.state import Limits

    lim = Limits()
    p = argparse.ArgumentParser(prog="python -m retriever.serve", description=__doc__.split("\n")[0])
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--threads", type=int, default=8, help="requests searched at once (default 8)")
    p.add_argument("--timeout", type=float, default=lim.timeout, help=f"seconds per request (default {lim.timeout:g})")
    p.add_argument("--max-claim-chars", type=int, default=lim.max_claim_chars, help="longest claim accepted")
    p.add_argument("--max-batch", type=int, default=lim.max_batch, help="most claims in one /search/batch")
    _bound_options(p)
    add_search_options(p, title="request defaults (the query command's options)")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    return p


def _bound_options(p: argparse.ArgumentParser) -> None:
    from retriever.serve.limits import HttpLimits
    from retriever.serve.pools import DEFAULT_QUEUE, DEFAULT_THREADS

    http = HttpLimits()
    g = p.add_argument_group("bounds and access (what the server refuses before it works)")
    g.add_argument("--live-threads", type=int, default=DEFAULT_THREADS, help="live or multi-hop searches at once")
    g.add_argument(
        "--live-queue", type=int, default=DEFAULT_QUEUE, help="live or multi-hop searches waiting; more: 503"
    )
    g.add_argument("--max-header-bytes", type=int, default=http.max_header_bytes, help="request head bound (431)")
    g.add_argument("--max-body-bytes", type=int, default=http.max_body_bytes, help="request body bound (413)")
    g.add_argument(
        "--read-timeout", type=float, default=http.read_timeout, help="seconds to send a request's head or body"
    )
    g.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to answer besides 127.0.0.1, localhost and --host (repeatable)",
    )
    g.add_argument("--cors", metavar="ORIGIN", help="allow cross-origin requests from this origin only")


def _check(args: argparse.Namespace) -> None:
    from retriever.cli_options import check_search_options

    check_search_options(args)
    if args.threads < 1 or args.timeout <= 0 or args.max_claim_chars < 1 or args.max_batch < 1:
        raise QueryError("--threads, --timeout, --max-claim-chars and --max-batch must be positive")
    if min(args.live_threads, args.max_header_bytes, args.max_body_bytes) < 1 or args.read_timeout <= 0:
        raise QueryError("--live-threads, --max-header-bytes, --max-body-bytes and --read-timeout must be positive")
    if args.live_queue < 0:
        raise QueryError("--live-queue must be 0 or more")
    if args.cors is not None and not args.cors.startswith(("http://", "https://")):
        raise QueryError(f"--cors takes an origin such as http://localhost:3000, got {args.cors!r}")
    if not 0 <= args.port <= 65535:
        raise QueryError(f"--port must be 0..65535, got {args.port}")


def make_state(args: argparse.Namespace) -> Any:
    """The server's state from the command line (the index is not opened yet: ``state.start()`` does)."""
    from retriever.cli_options import open_options, search_options
    from retriever.serve.state import Limits, ServerState

    opening = open_options(args)
    limits = Limits(
        max_claim_chars=args.max_claim_chars,
        max_k=max(args.k, Limits().max_k),
        max_batch=args.max_batch,
        timeout=args.timeout,
    )
    planner = opening.open_planner()
    return ServerState(opening.open, defaults=search_options(args), limits=limits, planner=planner)


def serve(args: argparse.Namespace, t0: float) -> int:
    try:
        import uvicorn

        from retriever.serve.app import create_app
    except ImportError as exc:
        raise ConfigError(
            f"the HTTP server needs the serve extra ({exc.name} is missing): pip install 'wikiground[serve]'"
        ) from exc

    from retriever.serve.limits import Access, HttpLimits, protocol_class

    state = make_state(args)
    state.start()
    http = HttpLimits(args.max_header_bytes, args.max_body_bytes, read_timeout=args.read_timeout)
    access = Access(hosts=(args.host, *args.allow_host), cors=args.cors)
    app = create_app(
        state,
        threads=args.threads,
        reload_on_sighup=True,
        http=http,
        access=access,
        live_threads=args.live_threads,
        live_queue=args.live_queue,
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                port = self.servers[0].sockets[0].getsockname()[1] if self.servers else args.port
                host = f"[{args.host}]" if ":" in args.host else args.host
                print(f"ready: http://{host}:{port} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM:
                # uvicorn raises the signal again once it has shut down; after a graceful stop the exit status is 0.
                self._captured_signals = [s for s in self._captured_signals if s != signal.SIGTERM]

    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="info" if args.verbose else "warning",
        timeout_graceful_shutdown=args.timeout,
        access_log=args.verbose,
        http=protocol_class(http),
    )
    Server(config).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    t0 = time.perf_counter()
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        _check(args)
        if args.host not in ("127.0.0.1", "localhost", "::1"):
            print(
                f"warning: binding {args.host}: the server has no authentication, and anyone who can reach this "
                "address can query it",
                file=sys.stderr,
            )
        return serve(args, t0)
    except WikigroundError as exc:
        if args.verbose:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
