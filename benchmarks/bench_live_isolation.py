"""Live claims beside local ones (issue 40): a server started ``--on-the-fly`` against a MediaWiki API on 127.0.0.1
that answers at once, 16 live claims sent together, and a client asking local claims (``on_the_fly: false``) one
after another while they run. Reports the local latency idle (p50) and under the live load (p95), and how the live
claims ended (live_status, or the HTTP status of a refusal). The idle latency is measured before and after the live
load, as long each time (``--idle-seconds``): on a shared machine the other jobs' load moves in minutes, and an idle
phase on one side only has been seen slower than the load itself.

``python -m benchmarks.bench_live_isolation [--rate 1] [--live 16] [--idle-seconds 30] [-- SERVER FLAGS...]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from benchmarks.bench_serve import start_server, stop

ROOT = Path(__file__).resolve().parents[1]
LOCAL = {"claim": "Aristotle tutored Alexander the Great.", "on_the_fly": False}
LIVE_TITLES = ("Mogadishu", "Socrates", "Beethoven", "Napoleon", "Jupiter", "Tokyo", "Penicillin", "Mount Everest")


def live_claims(n: int) -> list[dict]:
    """``n`` claims about pages the gensim index lacks (each asked live)."""
    return [{"claim": f"{LIVE_TITLES[i % len(LIVE_TITLES)]} was discussed by Zorblax Quintero {i}."} for i in range(n)]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def idle_phase(client: httpx.Client, seconds: float) -> list[float]:
    """Local claims one after another for ``seconds``, paced as under the live load (so both see the machine's other
    work alike); their latencies."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(out) < 20:
        t0 = time.perf_counter()
        client.post("/search", json=LOCAL).raise_for_status()
        out.append(time.perf_counter() - t0)
        time.sleep(0.05)
    return out


def run(
    index: Path, api_url: str, cache: Path, *, rate: float, live: int, idle_seconds: float, extra: list[str]
) -> dict:
    flags = ["--on-the-fly", "--api-url", api_url, "--contact", "bench@example.org", "--cache", str(cache)]
    proc, url, _ = start_server(index, *flags, "--rate", str(rate), "--timeout", "600", *extra)
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            idle_phase(client, 2)  # warm-up
            before = idle_phase(client, idle_seconds)
            loaded: list[float] = []
            done = threading.Event()

            def local_client() -> None:
                while not done.is_set():
                    t0 = time.perf_counter()
                    client.post("/search", json=LOCAL).raise_for_status()
                    loaded.append(time.perf_counter() - t0)
                    time.sleep(0.05)

            watcher = threading.Thread(target=local_client)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(live) as pool:
                futures = [pool.submit(client.post, "/search", json=c) for c in live_claims(live)]
                time.sleep(0.2)
                watcher.start()
                answers = [f.result() for f in futures]
            live_seconds = time.perf_counter() - t0
            done.set()
            watcher.join()
            after = idle_phase(client, idle_seconds)
    finally:
        stop(proc)
    ended = Counter(
        a.json().get("live_status", "no live lookup") if a.status_code == 200 else f"http {a.status_code}"
        for a in answers
    )
    idle = before + after
    return {
        "idle_p50_ms": round(pct(idle, 0.5) * 1000, 1),
        "idle_p95_ms": round(pct(idle, 0.95) * 1000, 1),
        "idle_before_p50_p95_ms": [round(pct(before, q) * 1000, 1) for q in (0.5, 0.95)],
        "idle_after_p50_p95_ms": [round(pct(after, q) * 1000, 1) for q in (0.5, 0.95)],
        "loaded_p50_ms": round(pct(loaded, 0.5) * 1000, 1),
        "loaded_p95_ms": round(pct(loaded, 0.95) * 1000, 1),
        "loaded_p95_over_idle_p50": round(pct(loaded, 0.95) / pct(idle, 0.5), 2),
        "loaded_max_ms": round(max(loaded) * 1000, 1),
        "local_requests_under_load": len(loaded),
        "live_claims": live,
        "live_ended": dict(ended),
        "live_wall_seconds": round(live_seconds, 1),
        "rate": rate,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, default=1.0, help="the live client's requests per second (default 1)")
    p.add_argument("--live", type=int, default=16, help="live claims sent together")
    p.add_argument(
        "--idle-seconds",
        type=float,
        default=30.0,
        help="local claims alone before and after the live load (default 30)",
    )
    p.add_argument("extra", nargs="*", help="more server flags (after --)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from indexer.build import build_index
    from tests.support.fakewiki import FakeWiki, pages_from_vital

    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "index"
        build_index(
            [ROOT / "data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"], index, indexes=()
        )
        pages = pages_from_vital(ROOT / "data/vital_articles_summaries.json", titles=LIVE_TITLES)
        with FakeWiki(pages) as wiki:
            result = run(
                index,
                wiki.api_url,
                Path(tmp) / "cache",
                rate=args.rate,
                live=args.live,
                idle_seconds=args.idle_seconds,
                extra=args.extra,
            )
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
