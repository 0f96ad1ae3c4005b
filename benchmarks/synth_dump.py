"""Synthetic enwiki-shaped MediaWiki XML dumps (bz2) made of real sentences, for the scale benchmark.

No download: every sentence comes from ``../shared/data`` (HotpotQA 2017 abstracts and the cleaned text of the
English fixture dumps). The pages have the shape of English Wikipedia articles: a bold-title lead, three
``== sections ==``, wiki links with anchors (four a section), categories, and a redirect for every other article;
with ``passage_words=100`` each article makes about 4 passages of ~100 words. The 10,033 real vital-article leads
are mixed in, spread evenly through the dump, so FEVER dev claims keep their gold pages; each links the vital
pages its lead names and has eight categories (facts for the kg channel; its clean text is the lead's). Their
sentences are kept out of the pool the synthetic articles draw from, so no gold text is copied into a distractor:
nor are the sentences of the pool's sources about the same subjects (the HotpotQA 2017 abstracts and gensim
fixture articles titled as a vital page: "Abraham Lincoln", "Aristotle"; 75 and 46 of them), nor any sentence
sharing a run of ``LEAK_SPAN`` words with a vital lead. Each such sentence, drawn ~100 times into 1M passages, put
the gold article's own text into a hundred distractors.

python -m benchmarks.synth_dump --passages 1M --out /work/scratch/scale/synth-1M.xml.bz2

The dump is written as one bz2 stream per shard (concatenated streams are one valid bz2 file), shards made in
parallel processes; the output is the same for any number of processes.
"""

from __future__ import annotations

import bz2
import html
import json
import random
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from wikiground.system import usable_cpus

SHARD_PAGES = 4000  # synthetic articles per bz2 stream / worker task
PASSAGES_PER_ARTICLE = 4  # lead + 3 sections, each under the 100-word chunk target
SECTION_WORDS = (60, 95)  # words per section: one passage each
HEADINGS = (
    "History",
    "Early life",
    "Career",
    "Geography",
    "Description",
    "Reception",
    "Legacy",
    "Background",
    "Production",
    "Personal life",
    "Etymology",
    "Demographics",
    "Economy",
    "Culture",
    "Later years",
    "Design",
    "Release",
    "Notes",
)
VITAL_CATEGORIES = 8  # an article's categories (enwiki: about 10); they add facts, not text, to the gold pages
LINKS_PER_SECTION = 4  # body links per ~100-word passage, about enwiki's density (templates and navboxes aside)
CATEGORY_SUFFIXES = ("people", "albums", "films", "villages", "rivers", "novels", "companies", "songs", "buildings")
_CAPITAL_WORD = re.compile(r"^[A-Z][a-z]{3,11}$")
_WORD = re.compile(r"\w+")
LEAK_SPAN = 10  # words: a longer run shared with a vital lead is a copy of it, not a common phrase
GENERATOR_VERSION = 3  # dumps made before (with the gold subjects' text in the pool) are made again
_SENTENCE_CUT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")

_HEADER = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">
  <siteinfo>
    <sitename>Wikipedia</sitename>
    <dbname>enwiki</dbname>
    <base>https://en.wikipedia.org/wiki/Main_Page</base>
    <generator>wikiground synth_dump (real sentences, synthetic layout)</generator>
    <case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" />
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""
_FOOTER = "</mediawiki>\n"


def parse_size(text: str) -> int:
    """``"20k"``, ``"0.5M"``, ``"1M"``, ``"1200000"`` -> a passage count."""
    t = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    return int(round(float(t[:-1] if scale > 1 else t) * scale))


@dataclass(frozen=True)
class Pool:
    """What the shards draw from: real sentences, capitalised words for titles, the vital leads."""

    sentences: tuple[str, ...]
    words: tuple[str, ...]
    vital: tuple[tuple[str, str], ...]  # (title, lead)


def load_pool(shared: Path) -> Pool:
    vital_raw = json.loads((shared / "corpora" / "vital_articles_summaries.json").read_text(encoding="utf-8"))
    vital = tuple(
        (rec.get("title") or key, (rec.get("extract") or "").strip())
        for key, rec in vital_raw.items()
        if (rec.get("extract") or "").strip()
    )
    vital_sentences = {s for _, lead in vital for s in _SENTENCE_CUT.split(lead)}
    vital_spans = {span for _, lead in vital for span in _spans(lead)}
    vital_titles = {title for title, _ in vital}
    sentences: list[str] = []
    with (shared / "corpora" / "hotpotqa2017_abstracts.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["title"] not in vital_titles:
                sentences.extend(s.strip() for s in rec["sentences"])
    sentences.extend(_dump_sentences(shared / "dumps", skip=vital_titles))
    keep = sorted(
        {
            s
            for s in sentences
            if 6 <= len(s.split()) <= 45
            and s not in vital_sentences
            and "\n" not in s
            and vital_spans.isdisjoint(_spans(s))
        }
    )
    words = sorted({w for s in keep for w in s.split() if _CAPITAL_WORD.match(w)})
    return Pool(sentences=tuple(keep), words=tuple(words), vital=vital)


def _spans(text: str) -> set[tuple[str, ...]]:
    """Every run of LEAK_SPAN words of ``text``, lower-cased, punctuation left out."""
    w = _WORD.findall(text.lower())
    return {tuple(w[i : i + LEAK_SPAN]) for i in range(len(w) - LEAK_SPAN + 1)}


def _dump_sentences(folder: Path, *, skip: set[str]) -> list[str]:
    """Sentences of the English fixture dumps' articles (but those titled as in ``skip``), cleaned by the project's
    own wikitext parser."""
    from indexer.wikitext import parse_wikitext

    out: list[str] = []
    for name in ("gensim-enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",):
        path = folder / name
        if not path.is_file():
            continue
        xml = bz2.decompress(path.read_bytes()).decode("utf-8")
        for title, raw in re.findall(r"<title>(.*?)</title>.*?<text[^>]*>(.*?)</text>", xml, flags=re.S):
            if html.unescape(title) in skip:
                continue
            page = parse_wikitext(html.unescape(raw))
            for section in page.sections:
                out.extend(s.strip() for s in _SENTENCE_CUT.split(section.text.replace("\n", " ")))
    return out


class Titles:
    """Article ``i``'s title, unique by construction: two or three capitalised words picked by ``i``'s digits
    in base ``len(words)`` (so no set of every title is needed), with a qualifier when it names a vital page."""

    def __init__(self, words: tuple[str, ...], vital_titles: set[str]):
        self.words = words
        self.n = len(words)
        self.vital = vital_titles

    def __call__(self, i: int) -> str:
        n = self.n
        a, b = i % n, (i // n) % n
        parts = [self.words[(a * 7919) % n], self.words[(b * 104729 + a) % n]]
        if i >= n * n:
            parts.append(self.words[(i // (n * n)) % n])
        title = " ".join(parts)
        return f"{title} (topic)" if title in self.vital else title


@dataclass(frozen=True)
class Layout:
    """Where pages go: synthetic article slots, a vital page every ``vital_every`` slots."""

    articles: int
    vital_every: int
    seed: int


def plan(passages: int, pool: Pool, seed: int = 21) -> Layout:
    articles = max(1, (passages - len(pool.vital)) // PASSAGES_PER_ARTICLE)
    return Layout(articles=articles, vital_every=max(1, articles // max(1, len(pool.vital))), seed=seed)


def _xml_page(title: str, page_id: int, text: str, *, redirect: str | None = None) -> str:
    red = f'    <redirect title="{html.escape(redirect)}" />\n' if redirect else ""
    return (
        f"  <page>\n    <title>{html.escape(title)}</title>\n    <ns>0</ns>\n    <id>{page_id}</id>\n{red}"
        f"    <revision>\n      <id>{page_id + 1_000_000_000}</id>\n"
        f"      <timestamp>2024-06-01T00:00:00Z</timestamp>\n      <model>wikitext</model>\n"
        f"      <format>text/x-wiki</format>\n"
        f'      <text bytes="{len(text)}" xml:space="preserve">{html.escape(text, quote=False)}</text>\n'
        f"    </revision>\n  </page>\n"
    )


def _section(rng: random.Random, pool: Pool, titles: Titles, articles: int) -> str:
    """~60-95 words of real sentences; up to LINKS_PER_SECTION capitalised words become links to other articles
    (the anchor is the word itself, so the clean text is that of the sentences)."""
    want = rng.randint(*SECTION_WORDS)
    out: list[str] = []
    words = 0
    while words < want:
        s = pool.sentences[rng.randrange(len(pool.sentences))]
        words += len(s.split())
        out.append(s)
    if words > SECTION_WORDS[1] + 20 and len(out) > 1:
        out.pop()  # stay under the chunk target: one passage per section
    text = " ".join(out)
    words = list(re.finditer(r" ([A-Z][a-z]{3,})\b", text))
    picked = sorted(rng.sample(range(len(words)), min(LINKS_PER_SECTION, len(words))))
    parts, last = [], 0
    for j in picked:
        m = words[j]
        parts.append(f"{text[last : m.start(1)]}[[{titles(rng.randrange(articles))}|{m.group(1)}]]")
        last = m.end(1)
    parts.append(text[last:])
    return "".join(parts)


def link_titles(text: str, titles: frozenset[str], *, own: str = "", max_words: int = 4) -> str:
    """``text`` with the first naming of each title of ``titles`` made a link (``[[Title]]``): a vital lead links
    the other vital pages it names, as its article's text would. The clean text stays the same."""
    ws = text.split(" ")
    out: list[str] = []
    seen = {own}
    i = 0
    while i < len(ws):
        found = None
        if ws[i][:1].isupper() and i > 0:
            for n in range(min(max_words, len(ws) - i), 0, -1):
                name = " ".join(ws[i : i + n])
                core = name.rstrip(".,;:)")
                if core in titles and core not in seen:
                    found = (n, core, name[len(core) :])
                    break
        if found is None:
            out.append(ws[i])
            i += 1
            continue
        n, core, tail = found
        seen.add(core)
        out.append(f"[[{core}]]{tail}")
        i += n
    return " ".join(out)


def _article(i: int, rng: random.Random, pool: Pool, titles: Titles, layout: Layout) -> str:
    title = titles(i)
    lead = _section(rng, pool, titles, layout.articles)
    parts = [f"'''{title}''' {lead[0].lower()}{lead[1:]}" if lead else f"'''{title}'''"]
    for heading in rng.sample(HEADINGS, 3):
        parts.append(f"== {heading} ==\n{_section(rng, pool, titles, layout.articles)}")
    parts.extend(_categories(rng, pool, 2))
    return "\n\n".join(parts)


def _categories(rng: random.Random, pool: Pool, n: int) -> list[str]:
    return [
        f"[[Category:{pool.words[rng.randrange(len(pool.words))]} {rng.choice(CATEGORY_SUFFIXES)}]]" for _ in range(n)
    ]


def _vital_page(v: int, rng: random.Random, pool: Pool, vital_titles: frozenset[str]) -> str:
    title, lead = pool.vital[v]
    text = "\n\n".join([link_titles(lead, vital_titles, own=title), *_categories(rng, pool, VITAL_CATEGORIES)])
    return _xml_page(title, 1_000_000_000 + v, text)


def render_shard(shard: int, pool: Pool, layout: Layout) -> bytes:
    """Articles [shard * SHARD_PAGES, ...) with their redirects and the vital pages of those slots, as one bz2
    stream. Page ids: article i is 2i + 1, its redirect 2i + 2, vital page v is 1e9 + v."""
    rng = random.Random(layout.seed * 1_000_003 + shard)
    vital_titles = frozenset(t for t, _ in pool.vital)
    titles = Titles(pool.words, set(vital_titles))
    chunks: list[str] = []
    lo = shard * SHARD_PAGES
    for i in range(lo, min(lo + SHARD_PAGES, layout.articles)):
        title = titles(i)
        chunks.append(_xml_page(title, 2 * i + 1, _article(i, rng, pool, titles, layout)))
        if i % 2 == 0:
            alias = title.replace(" ", "-", 1)
            chunks.append(_xml_page(alias, 2 * i + 2, f"#REDIRECT [[{title}]]", redirect=title))
        if i % layout.vital_every == 0 and i // layout.vital_every < len(pool.vital):
            v = i // layout.vital_every
            chunks.append(_vital_page(v, rng, pool, vital_titles))
    if lo + SHARD_PAGES >= layout.articles:  # the last shard carries vital pages the slots did not place
        first = (layout.articles - 1) // layout.vital_every + 1
        for v in range(first, len(pool.vital)):
            chunks.append(_vital_page(v, rng, pool, vital_titles))
    return bz2.compress("".join(chunks).encode("utf-8"), 9)


_POOL: Pool | None = None


def _init(pool: Pool) -> None:
    global _POOL
    _POOL = pool


def _render(args: tuple[int, Layout]) -> bytes:
    assert _POOL is not None
    return render_shard(args[0], _POOL, args[1])


def generate(shared: Path, out: Path, passages: int, *, workers: int | None = None, seed: int = 21) -> dict:
    """Write the dump to ``out`` (atomically) and return what it holds."""
    pool = load_pool(shared)
    layout = plan(passages, pool, seed)
    shards = (layout.articles + SHARD_PAGES - 1) // SHARD_PAGES
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    workers = workers or usable_cpus()
    with tmp.open("wb") as fh, ProcessPoolExecutor(workers, initializer=_init, initargs=(pool,)) as ex:
        fh.write(bz2.compress(_HEADER.encode("utf-8"), 9))
        for data in ex.map(_render, [(s, layout) for s in range(shards)], chunksize=1):
            fh.write(data)
        fh.write(bz2.compress(_FOOTER.encode("utf-8"), 9))
    tmp.replace(out)
    info = {
        "dump": str(out),
        "bytes": out.stat().st_size,
        "target_passages": passages,
        "synthetic_articles": layout.articles,
        "redirects": (layout.articles + 1) // 2,
        "vital_pages": len(pool.vital),
        "sentence_pool": len(pool.sentences),
        "seed": seed,
        "generator": GENERATOR_VERSION,
    }
    out.with_name(out.name + ".json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return info


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.synth_dump")
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--passages", default="20k", help="target passage count: 20k, 0.5M, 1M, ...")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=21)
    a = ap.parse_args(argv)
    print(json.dumps(generate(a.shared, a.out, parse_size(a.passages), workers=a.workers, seed=a.seed), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
