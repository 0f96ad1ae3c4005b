"""Ingest throughput vs. raw bz2 decompression and mwparserfromhell ``strip_code``.

    python -m benchmarks.bench_ingest --shared ../shared/data [--out benchmarks/out/ingest] [--copies 20]

The input is the gensim enwiki fragment repeated ``copies`` times (new page ids and titles per copy,
redirects re-pointed inside their copy), written once as a bz2 XML dump in ``out``.
"""

from __future__ import annotations

import argparse
import bz2
import logging
import re
import shutil
import sys
import time
from pathlib import Path

log = logging.getLogger("benchmarks.ingest")

GENSIM = "dumps/gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
ID_STRIDE = 10_000_000
TARGETS = {"ingest_vs_strip_code": 5.0, "ingest_vs_decompression": 2.0}


def make_dump(shared: Path, out: Path, *, copies: int = 20) -> Path:
    """The fixture pages repeated ``copies`` times as one bz2 dump (cached in ``out``)."""
    dst = out / f"gensim-x{copies}.xml.bz2"
    if dst.exists():
        return dst
    xml = bz2.decompress((shared / GENSIM).read_bytes()).decode("utf-8")
    head_end = xml.index("<page>")
    head, body = xml[:head_end], xml[head_end:xml.rindex("</mediawiki>")]
    pages = re.findall(r"<page>.*?</page>\s*", body, flags=re.S)
    tmp = dst.with_suffix(".part")
    with bz2.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(head)
        for copy in range(copies):
            suffix = f" (copy {copy})" if copy else ""
            for page in pages:
                if copy:
                    page = re.sub(r"<title>(.*?)</title>", lambda m: f"<title>{m.group(1)}{suffix}</title>", page, count=1)
                    page = re.sub(r"(</ns>\s*<id>)(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + copy * ID_STRIDE}",
                                  page, count=1)
                    page = re.sub(r'<redirect title="(.*?)"', lambda m: f'<redirect title="{m.group(1)}{suffix}"', page)
                f.write(page)
        f.write("</mediawiki>\n")
    tmp.replace(dst)
    return dst


def decompression(dump: Path) -> dict:
    """Raw bz2 decompression of the whole file in 1 MB reads."""
    start, size = time.perf_counter(), 0
    with bz2.open(dump, "rb") as f:
        while chunk := f.read(1 << 20):
            size += len(chunk)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "mb": size / 1e6, "mb_s": size / 1e6 / seconds}


def wikitext_of(dump: Path) -> tuple[list[str], int]:
    """Article wikitext (namespace 0, not redirects) and the count of all ns-0 pages."""
    import mwxml

    texts, pages = [], 0
    with bz2.open(dump, "rb") as f:
        for page in mwxml.Dump.from_file(f):
            if page.namespace != 0:
                continue
            pages += 1
            for revision in page:
                if not page.redirect and revision.text:
                    texts.append(revision.text)
    return texts, pages


def strip_code(texts: list[str]) -> dict:
    """mwparserfromhell ``parse(text).strip_code()``, single core."""
    import mwparserfromhell

    start = time.perf_counter()
    for text in texts:
        mwparserfromhell.parse(text).strip_code()
    seconds = time.perf_counter() - start
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return {"seconds": seconds, "mb": mb, "mb_s": mb / seconds, "pages_s": len(texts) / seconds}


def ingest(dump: Path, out: Path, *, workers: int) -> dict:
    from indexer.build import build_index

    target = out / f"store-w{workers}"
    start = time.perf_counter()
    manifest = build_index([dump], target, indexes=(), workers=workers)
    seconds = time.perf_counter() - start
    shutil.rmtree(target, ignore_errors=True)
    return {"seconds": seconds, "pages": manifest["inputs"][0]["pages_kept"], "counts": manifest["counts"]}


def main(shared: Path, out: Path, *, copies: int = 20) -> str:
    out.mkdir(parents=True, exist_ok=True)
    dump = make_dump(Path(shared), out, copies=copies)
    dec = decompression(dump)
    texts, ns0_pages = wikitext_of(dump)
    wikitext_mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    # strip_code on one copy is enough for its rate (the copies are identical wikitext).
    base = strip_code(texts[: len(texts) // copies])
    runs = {w: ingest(dump, out, workers=w) for w in (2, 1)}
    lines = [
        "## Ingest (`indexer.build`, store only)",
        "",
        f"Input: gensim enwiki fragment x{copies} as one bz2 dump: {dump.stat().st_size / 1e6:.1f} MB compressed, "
        f"{dec['mb']:.1f} MB XML, {ns0_pages:,} ns-0 pages ({len(texts):,} articles, {wikitext_mb:.1f} MB wikitext).",
        "",
        "| step | seconds | MB/s (wikitext) | pages/s |",
        "|---|---:|---:|---:|",
        f"| bz2 decompression (1 MB reads; MB/s of XML) | {dec['seconds']:.2f} | {dec['mb_s']:.1f} (XML) | - |",
        f"| mwparserfromhell strip_code, 1 core (one copy, {base['mb']:.1f} MB) | {base['seconds']:.2f} | "
        f"{base['mb_s']:.2f} | {base['pages_s']:.1f} |",
    ]
    for workers, run in runs.items():
        lines.append(f"| ingest, workers={workers} | {run['seconds']:.2f} | {wikitext_mb / run['seconds']:.2f} | "
                     f"{run['pages'] / run['seconds']:.0f} |")
    best = runs[2]
    vs_strip = (wikitext_mb / best["seconds"]) / base["mb_s"]
    vs_dec = best["seconds"] / dec["seconds"]
    counts = best["counts"]
    lines += [
        "",
        f"- ingest (workers=2) / strip_code throughput: **{vs_strip:.1f}x** (target >= {TARGETS['ingest_vs_strip_code']:.0f}x)"
        f" {'met' if vs_strip >= TARGETS['ingest_vs_strip_code'] else 'MISSED'}",
        f"- ingest time / bz2 decompression time: **{vs_dec:.1f}x** (target <= {TARGETS['ingest_vs_decompression']:.0f}x)"
        f" {'met' if vs_dec <= TARGETS['ingest_vs_decompression'] else 'MISSED'}",
        f"- workers=2 vs workers=1: {runs[1]['seconds'] / best['seconds']:.2f}x faster",
        f"- store: {counts['pages']:,} pages, {counts['redirects']:,} redirects, {counts['passages']:,} passages, "
        f"{counts['sentences']:,} sentences",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_ingest")
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "ingest")
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(main(args.shared, args.out, copies=args.copies))
    sys.exit(0)
