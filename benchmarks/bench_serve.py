"""The evidence server (issue 23): hot latency over HTTP against the in-process fused search (claim by claim, side
by side) and one CLI call, throughput and tail latency with concurrent clients, and cold start to "ready".

``main(shared, out, *, load_seconds=60.0, clients=8)`` returns the RESULTS.md section (``benchmarks.run`` calls it
with the defaults); ``measure(index_dir, claims, ...)`` returns the figures for any index folder.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import build, in_fresh_interpreter, latency, md_table, read_claims, vital_jsonl

log = logging.getLogger("benchmarks.serve")

ROOT = Path(__file__).resolve().parents[1]
K = 10


def start_server(index: Path, *extra: str, timeout: float = 600.0) -> tuple[subprocess.Popen, str, float]:
    """A server process on a free port; returns it, its URL and the wall seconds from launch to its ready line."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "retriever.serve", "--index", str(index), "--port", "0", "--k", str(K), *extra],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    while time.perf_counter() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("ready: "):
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep the pipe drained
            return proc, line.split()[1], time.perf_counter() - t0
    proc.kill()
    raise RuntimeError(f"the server did not get ready: {''.join(lines)[-2000:]}")


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=120)


def _titles(line: dict[str, Any]) -> list[str]:
    return [e["title"] for e in line["evidence"]]


def in_process_answers(index: Path, claims: Sequence[str]) -> dict[str, list[str]]:
    """Each claim's evidence titles, searched in this process (the answers to compare the server's with)."""
    from retriever.api import Retriever

    with Retriever.open(index) as r:
        return {c: [e.title for e in r.search(c, K).evidence] for c in claims}


def side_by_side(index: str, url: str, claims: list[str]) -> tuple[list[float], list[float], dict[str, list[str]]]:
    """Each claim searched in process and then over HTTP, claim by claim: the two sides of the hot-latency ratio
    taken in the same seconds of a host whose speed drifts (taken one after the other, 200 claims each, two runs of
    the same code read 1.46x and 0.98x). Returns both latency lists (ms) and the in-process answers."""
    import httpx

    from retriever.api import Retriever

    with Retriever.open(Path(index)) as r, httpx.Client(timeout=120) as h:
        r.warm_up(jit=True)  # as the server warms up: the same process state on both sides of the ratio
        r.search(claims[0], K)
        h.post(f"{url}/search", json={"claim": claims[0], "k": K}).raise_for_status()
        local, remote, expected = [], [], {}
        for c in claims:
            t0 = time.perf_counter()
            res = r.search(c, K)
            local.append((time.perf_counter() - t0) * 1000)
            expected[c] = [e.title for e in res.evidence]
            t0 = time.perf_counter()
            h.post(f"{url}/search", json={"claim": c, "k": K}).raise_for_status()
            remote.append((time.perf_counter() - t0) * 1000)
    return local, remote, expected


def cli_call_seconds(index: Path, claim: str, calls: int = 2) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "retriever.query", "--index", str(index), "--json", "--k", str(K), claim],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def http_latencies(url: str, claims: Sequence[str]) -> list[float]:
    import httpx

    with httpx.Client(timeout=120) as h:
        h.post(f"{url}/search", json={"claim": claims[0], "k": K})
        ms = []
        for c in claims:
            t0 = time.perf_counter()
            h.post(f"{url}/search", json={"claim": c, "k": K}).raise_for_status()
            ms.append((time.perf_counter() - t0) * 1000)
    return ms


def load(url: str, claims: Sequence[str], expected: dict[str, list[str]], *, clients: int, seconds: float) -> dict:
    """``clients`` threads, each with its own connection, asking claims round-robin for ``seconds``: answers,
    errors (a failed request or an answer unlike the in-process one), latencies."""
    import httpx

    stats = {"ok": 0, "errors": 0, "wrong": 0, "ms": []}
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def client(n: int) -> None:
        with httpx.Client(timeout=120) as h:
            i = n
            while time.perf_counter() < end:
                c = claims[i % len(claims)]
                i += clients
                t0 = time.perf_counter()
                try:
                    r = h.post(f"{url}/search", json={"claim": c, "k": K})
                    good, wrong = r.status_code == 200, r.status_code == 200 and _titles(r.json()) != expected[c]
                except httpx.HTTPError:
                    good, wrong = False, False
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    stats["ok" if good and not wrong else "errors"] += 1
                    stats["wrong"] += wrong
                    stats["ms"].append(ms)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats["seconds"] = time.perf_counter() - t0
    stats["per_second"] = stats["ok"] / stats["seconds"]
    return stats


def kill_and_restart(
    index: Path, claims: Sequence[str], expected: dict[str, list[str]], *, seconds: float, cache: Path
) -> dict:
    """Clients asking while the server is killed (SIGKILL) a third of the way in and started again: they may see
    connection errors, never a wrong answer; the index opens and answers as before afterwards, and the live
    fallback's cache, written to while the server was killed, holds only whole entries.

    The killed server runs ``--on-the-fly`` in record mode against a second server's ``/w/api.php`` (title channel
    only) on 127.0.0.1: one client asks with ``on_the_fly`` (names the vital index lacks are looked up and cached),
    the others without, so their answers can be compared with the in-process ones."""
    import httpx

    helper, api, _ = start_server(index, "--indexes", "title")
    live = ["--on-the-fly", "--api-url", f"{api}/w/api.php", "--contact", "bench@example.org"]
    live += ["--cache", str(cache), "--cache-mode", "record", "--rate", "50"]
    proc, url, _ = start_server(index, *live)
    port = url.rsplit(":", 1)[1]
    stats = {"ok": 0, "connection_errors": 0, "wrong": 0, "live_ok": 0, "live_failed": 0}
    lock = threading.Lock()
    end = time.perf_counter() + seconds

    def client(n: int) -> None:
        i = n
        while time.perf_counter() < end:
            c = claims[i % len(claims)]
            i += 4
            try:
                r = httpx.post(f"{url}/search", json={"claim": c, "k": K, "on_the_fly": n == 0}, timeout=60)
                if n == 0:
                    key = "live_ok" if r.status_code == 200 else "live_failed"
                else:
                    key = "ok" if r.status_code == 200 and _titles(r.json()) == expected[c] else "wrong"
            except httpx.HTTPError:
                key = "connection_errors"
                time.sleep(0.1)
            with lock:
                stats[key] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(seconds / 3)
    proc.kill()
    proc.wait()
    proc, _, _ = start_server(index, *live, "--port", port)  # the same port: the clients carry on
    for t in threads:
        t.join()
    stop(proc)
    stop(helper)
    stats["intact_after"] = in_process_answers(index, claims[:20]) == {c: expected[c] for c in claims[:20]}
    stats["cache_entries"], stats["cache_unreadable"] = cache_check(cache)
    return stats


def cache_check(cache: Path) -> tuple[int, int]:
    """(entries, unreadable entries) of a live cache folder: each entry file must be a whole JSON entry."""
    entries = unreadable = 0
    for path in cache.glob("*/*.json"):
        entries += 1
        try:
            data = json.loads(path.read_bytes())
            if not isinstance(data, dict) or not {"key", "status", "body"} <= set(data):
                unreadable += 1
        except ValueError:
            unreadable += 1
    return entries, unreadable


def measure(
    index: Path, claims: Sequence[str], *, load_seconds: float = 60.0, clients: int = 8, work: Path | None = None
) -> dict[str, Any]:
    """Every figure of the section, for one index folder and its claims (``work``: a scratch folder)."""
    import tempfile

    # httpx logs every request at INFO: the clients' own logging would share the cores with the server.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    cli_s = cli_call_seconds(index, claims[0])
    proc, url, ready_s = start_server(index)
    try:
        # In a process of its own: the in-process search's JVM and threads stay out of the clients' process.
        local, before, expected = in_fresh_interpreter(
            "benchmarks.bench_serve", "side_by_side", str(index), url, list(claims)
        )
        one = load(url, claims, expected, clients=1, seconds=max(5.0, load_seconds / 4))
        many = load(url, claims, expected, clients=clients, seconds=load_seconds)
        after = http_latencies(url, claims)
    finally:
        code = stop(proc)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        killed = kill_and_restart(index, claims, expected, seconds=max(10.0, load_seconds / 3), cache=Path(tmp))
    under = latency(many.pop("ms"))
    one.pop("ms")
    return {
        "in_process_fused_p50_ms": latency(local)["p50"],
        "cli_call_s": cli_s,
        "http_hot_ms": latency(before),
        # Idle before the loaded runs and after them, pooled: the load's minute lies between the two.
        "http_idle_ms": latency(before + after),
        "http_idle_after_ms": latency(after),
        "cold_start_to_ready_s": ready_s,
        "one_client": one,
        "loaded": {**many, "latency_ms": under, "clients": clients},
        "throughput_ratio": many["per_second"] / one["per_second"] if one["per_second"] else float("nan"),
        "sigterm_exit_code": code,
        "kill_restart": killed,
    }


def section(r: dict[str, Any]) -> str:
    hot, idle, loaded = r["http_hot_ms"], r["http_idle_ms"], r["loaded"]
    rows = [
        (
            "hot p50 over HTTP / in-process fused p50 (claim by claim, side by side)",
            f"{hot['p50']:.1f} / {r['in_process_fused_p50_ms']:.1f} ms",
            f"{hot['p50'] / r['in_process_fused_p50_ms']:.2f}x",
            "<= 1.3x",
        ),
        (
            "one CLI call / hot p50 over HTTP",
            f"{r['cli_call_s']:.2f} s / {hot['p50']:.1f} ms",
            f"{r['cli_call_s'] * 1000 / hot['p50']:.0f}x faster",
            ">= 50x",
        ),
        (
            f"{loaded['clients']} clients, {loaded['seconds']:.0f} s: errors",
            f"{loaded['errors']} ({loaded['wrong']} wrong)",
            "",
            "0",
        ),
        (
            "throughput, loaded / one client",
            f"{loaded['per_second']:.1f} / {r['one_client']['per_second']:.1f} claims/s",
            f"{r['throughput_ratio']:.2f}x",
            ">= 1.6x",
        ),
        (
            "p95 under load / idle p50 (idle: before and after the loaded runs, pooled)",
            f"{loaded['latency_ms']['p95']:.1f} / {idle['p50']:.1f} ms (before {hot['p50']:.1f}, after "
            f"{r['http_idle_after_ms']['p50']:.1f})",
            f"{loaded['latency_ms']['p95'] / idle['p50']:.2f}x",
            "<= 4x",
        ),
        ("cold start to ready", f"{r['cold_start_to_ready_s']:.1f} s", "", "<= 15 s"),
        (
            "killed (SIGKILL) and restarted mid-run: wrong answers / connection errors / index intact",
            f"{r['kill_restart']['wrong']} / {r['kill_restart']['connection_errors']} / {r['kill_restart']['intact_after']}",
            "",
            "0 wrong, intact",
        ),
        (
            "same run, live fallback cache (record): entries / unreadable",
            f"{r['kill_restart']['cache_entries']} / {r['kill_restart']['cache_unreadable']}",
            "",
            "0 unreadable",
        ),
    ]
    return md_table(("measure", "figures", "ratio", "target"), rows) + "\n"


def measure_apart(
    index: Path, claims: Sequence[str], *, load_seconds: float, clients: int, work: Path
) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter (the in-process search in one more): its clients then run as in a
    user's process, not in the long-lived bench process, whose earlier benches' objects the collector keeps walking
    (seen as 1-2 ms more a request over HTTP in ``make bench`` than in this bench alone)."""
    return in_fresh_interpreter(
        "benchmarks.bench_serve", "_measure_child", str(index), list(claims), load_seconds, clients, str(work)
    )


def _measure_child(index: str, claims: list[str], load_seconds: float, clients: int, work: str) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    return measure(Path(index), claims, load_seconds=load_seconds, clients=clients, work=Path(work))


def main(shared: Path, out: Path, *, load_seconds: float = 60.0, clients: int = 8, claims_limit: int = 200) -> str:
    out.mkdir(parents=True, exist_ok=True)
    # The retrieval bench's vital index, when it is there: same corpus file, so the build is reused.
    retrieval = out.parent / "retrieval"
    retrieval.mkdir(parents=True, exist_ok=True)
    index = retrieval / "vital_index"
    build([vital_jsonl(shared, retrieval)], index)
    claims = [c["claim"] for c in read_claims(shared / "claims" / "fever_dev_vital.jsonl", claims_limit)]
    results = measure_apart(index, claims, load_seconds=load_seconds, clients=clients, work=out)
    (out / "serve.json").write_text(json.dumps(results, indent=2))
    return (
        "## Serving: one process, many clients (issue 23)\n\n"
        f"Vital index, {len(claims)} FEVER claims, k={K}, server on 127.0.0.1 (default options); the clients run in a "
        "fresh interpreter, the in-process search in another, claim by claim beside the server's idle answers.\n\n"
        + section(results)
    )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "serve")
    ap.add_argument("--seconds", type=float, default=60.0, help="duration of the loaded run")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--claims", type=int, default=200)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    print(main(a.shared, a.out, load_seconds=a.seconds, clients=a.clients, claims_limit=a.claims))
