"""The evidence explorer (issue 42), measured in headless Chromium: the claim view's render time of a k=10 answer
after the server's answer (parse, HTML, layout), the run view's load and summary of a 10,000-claim run with its gold
file, and the misses filter; and a screenshot of each view.

``main(shared, out)`` returns the RESULTS.md section; ``python -m benchmarks.bench_explorer [--shared DIR] [--out DIR]``
runs it alone (screenshots in ``OUT/*.png``, figures in ``OUT/explorer.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_serve import start_server, stop
from benchmarks.common import build, md_table, read_claims

GENSIM = "dumps/gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
CLAIMS = "claims/fever_dev_fixture_dumps.jsonl"
CHANNELS = "tfidf,title,kg"
RUN_CLAIMS = 10_000
K = 10


def _claim_renders(page: Any, url: str, claims: list[dict[str, Any]]) -> list[float]:
    """The claim view's render time (ms) of each claim's k=10 answer, opened from its URL."""
    times = []
    for c in claims:
        page.goto(f"{url}/?claim={_quote(c['claim'])}&k={K}")
        page.wait_for_selector("#claim-results[data-render-ms]")
        times.append(float(page.locator("#claim-results").get_attribute("data-render-ms")))
    return times


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _batch(url: str, claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import httpx

    items = [{"id": c["id"], "claim": c["claim"]} for c in claims]
    r = httpx.post(f"{url}/search/batch", params={"k": K}, json=items, timeout=600)
    r.raise_for_status()
    return [json.loads(line) for line in r.text.splitlines()]


def _big_run(answers: list[dict[str, Any]], claims: list[dict[str, Any]], out: Path) -> tuple[Path, Path]:
    """A run of RUN_CLAIMS lines and its gold: the real answers repeated under new ids (each copy keeps its claim's
    gold pages), so the file has real answers' size and shape."""
    gold_of = {c["id"]: c["gold_titles"] for c in claims}
    run_path, gold_path = out / "run_10k.jsonl", out / "gold_10k.jsonl"
    with run_path.open("w", encoding="utf-8") as run, gold_path.open("w", encoding="utf-8") as gold:
        for n in range(RUN_CLAIMS):
            a = answers[n % len(answers)]
            new_id = f"{a['id']}-{n}"
            run.write(json.dumps({**a, "id": new_id}, ensure_ascii=False) + "\n")
            gold.write(json.dumps({"id": new_id, "claim": a["query"], "gold_titles": gold_of[a["id"]]}) + "\n")
    return run_path, gold_path


def _run_view(page: Any, url: str, run_path: Path, gold_path: Path) -> dict[str, float]:
    """Load and summary (ms, measured in the page) and the wall time around it; the misses filter's time."""
    page.goto(f"{url}/?view=run")
    page.locator("#gold-file").set_input_files(str(gold_path))
    t0 = time.perf_counter()
    page.locator("#run-file").set_input_files(str(run_path))
    page.wait_for_selector("#run-summary[data-load-ms]")
    wall = (time.perf_counter() - t0) * 1000
    load = float(page.locator("#run-summary").get_attribute("data-load-ms"))
    # Each filter is timed to its table laid out (the layout is forced inside the timing, as the claim view's is).
    toggle = (
        "() => { const t = performance.now(); document.querySelector('#run-misses').click();"
        " void document.body.offsetHeight; return performance.now() - t; }"
    )
    misses_on = page.evaluate(toggle)
    misses = page.locator("#run-count").inner_text()
    misses_off = page.evaluate(toggle)
    # The text filter runs 120 ms after the last key; its work is the filter the k choice runs at once.
    text = (
        "(needle) => { document.querySelector('#run-filter').value = needle; const t = performance.now();"
        " document.querySelector('#run-k').dispatchEvent(new Event('change'));"
        " void document.body.offsetHeight; return performance.now() - t; }"
    )
    text_ms = page.evaluate(text, "alexander")
    text_count = page.locator("#run-count").inner_text()
    page.evaluate(text, "")
    page.locator("#run-misses").check()
    return {
        "load_ms": load,
        "wall_ms": wall,
        "filter_on_ms": misses_on,
        "filter_off_ms": misses_off,
        "filter_text_ms": text_ms,
        "filter_text_count": text_count,
        "misses": misses,
    }


def _screenshots(browser: Any, url: str, claim: str, run_path: Path, gold_path: Path, out: Path) -> list[str]:
    shots = []
    for name, size in (("desktop", {"width": 1280, "height": 900}), ("phone", {"width": 390, "height": 844})):
        ctx = browser.new_context(viewport=size, device_scale_factor=1)
        page = ctx.new_page()
        page.goto(f"{url}/?claim={_quote(claim)}&k={K}")
        page.wait_for_selector("#claim-results[data-render-ms]")
        page.screenshot(path=str(out / f"claim_{name}.png"))
        page.goto(f"{url}/?page=Aristotle")
        page.wait_for_selector("#page-title")
        page.screenshot(path=str(out / f"page_{name}.png"))
        _run_view(page, url, run_path, gold_path)
        page.screenshot(path=str(out / f"run_{name}.png"))
        shots += [f"claim_{name}.png", f"page_{name}.png", f"run_{name}.png"]
        ctx.close()
    return shots


def measure(index: Path, claims: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    from tests.support.browser import chromium, chromium_path

    proc, url, _ = start_server(index, "--indexes", CHANNELS)
    try:
        answers = _batch(url, claims)
        run_path, gold_path = _big_run(answers, claims, out)
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            renders = _claim_renders(page, url, claims)
            runs = [_run_view(page, url, run_path, gold_path) for _ in range(3)]
            shots = _screenshots(browser, url, claims[2]["claim"], run_path, gold_path, out)
            version = browser.version
    finally:
        stop(proc)
    return {
        "browser": f"Chromium {version} ({chromium_path()})",
        "claims": len(claims),
        "render_ms": {
            "median": statistics.median(renders),
            "p95": sorted(renders)[int(0.95 * (len(renders) - 1))],
            "max": max(renders),
        },
        "run": {"claims": RUN_CLAIMS, "bytes": run_path.stat().st_size + gold_path.stat().st_size, "tries": runs},
        "screenshots": shots,
    }


def section(m: dict[str, Any]) -> str:
    r = m["render_ms"]
    runs = m["run"]["tries"]
    rows = [
        ["claim view: render of a k=10 answer after the server's answer", f"{r['median']:.1f} ms median", "≤ 100 ms"],
        ["", f"{r['p95']:.1f} ms p95, {r['max']:.1f} ms max ({m['claims']} claims)", ""],
        [
            f"run view: load and summary of {m['run']['claims']:,} claims with gold",
            f"{min(x['load_ms'] for x in runs):.0f}–{max(x['load_ms'] for x in runs):.0f} ms (3 loads)",
            "≤ 2 s",
        ],
        ["", f"wall from choosing the file: {max(x['wall_ms'] for x in runs):.0f} ms max", ""],
        [
            "run view: misses filter on / off",
            f"{runs[-1]['filter_on_ms']:.0f} / {runs[-1]['filter_off_ms']:.0f} ms",
            "",
        ],
        [
            "run view: text filter (without its 120 ms typing pause)",
            f"{max(x['filter_text_ms'] for x in runs):.0f} ms max ({runs[-1]['filter_text_count']})",
            "",
        ],
    ]
    return (
        "## Evidence explorer (issue 42)\n\n"
        f"{m['browser']}, headless; the gensim index with {CHANNELS}; the run file and its gold "
        f"{m['run']['bytes'] / 2**20:.0f} MiB together ({runs[-1]['misses']} misses at k=10).\n\n"
        + md_table(["measure", "result", "target"], rows)
        + "\n\nScreenshots: "
        + ", ".join(f"`{s}`" for s in m["screenshots"])
        + "\n"
    )


def main(shared: Path, out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index"
    build([shared / GENSIM], index, indexes=("tfidf", "kg"))
    m = measure(index, read_claims(shared / CLAIMS), out)
    (out / "explorer.json").write_text(json.dumps(m, indent=1), "utf-8")
    return section(m)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_explorer")
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "explorer")
    args = ap.parse_args()
    print(main(args.shared, args.out))
