"""Ingest of every supported input shape: plain/.gz/multistream XML, several inputs, folders, JSONL corpora, CLI."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import re
import subprocess
import sys

import duckdb
import pytest

from indexer.build import build_index
from indexer.schema import TABLES
from tests.conftest import DATA, DUMPS, GENSIM_DUMP, ROOT

LTG = DUMPS / "dumpster-dive-smallwiki-ltgwiki-pages-articles.xml.bz2"
WIKIBRAIN = DUMPS / "wikibrain-en_test.xml"
W2V = DUMPS / "wikipedia2vec-enwiki-pages-articles-sample.xml.bz2"
HOTPOT = DATA / "corpora" / "hotpotqa2017_abstracts.jsonl"
VITAL = DATA / "corpora" / "vital_articles_summaries.json"


def query(path, sql, *params):
    con = duckdb.connect(str(path / "wiki.duckdb"), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def count(path, table, where="TRUE"):
    return query(path, f"SELECT count(*) FROM {table} WHERE {where}")[0][0]


def table_dump(path):
    """Every table's rows, sorted: equal for equal stores."""
    con = duckdb.connect(str(path / "wiki.duckdb"), read_only=True)
    try:
        # source_file names the input, which differs between equivalent inputs.
        return {
            t: con.execute(
                f"SELECT * {'EXCLUDE (source_file)' if t == 'pages' else ''} FROM {t} ORDER BY ALL"
            ).fetchall()
            for t in TABLES
        }
    finally:
        con.close()


def split_dump(xml: str, parts: int) -> list[str]:
    """A dump split at page boundaries into ``parts`` valid dumps (header repeated)."""
    head_end = xml.index("<page>")
    head, body = xml[:head_end], xml[head_end : xml.rindex("</mediawiki>")]
    pages = re.findall(r"<page>.*?</page>\s*", body, flags=re.S)
    size = -(-len(pages) // parts)
    return [head + "".join(pages[i : i + size]) + "</mediawiki>\n" for i in range(0, len(pages), size)]


@pytest.fixture(scope="module")
def gensim_xml() -> str:
    return bz2.decompress(GENSIM_DUMP.read_bytes()).decode("utf-8")


def test_namespace_filter_on_a_complete_small_wiki(tmp_path):
    raw = bz2.decompress(LTG.read_bytes()).decode("utf-8")
    per_ns = {}
    for ns in re.findall(r"<ns>(-?\d+)</ns>", raw):
        per_ns[int(ns)] = per_ns.get(int(ns), 0) + 1
    assert sum(per_ns.values()) == 2004
    wanted = (0, 4, 14)
    out = tmp_path / "ltg"
    manifest = build_index([LTG], out, indexes=(), namespaces=wanted)
    got = dict(
        query(
            out,
            "SELECT namespace, count(*) FROM (SELECT namespace FROM pages UNION ALL "
            "SELECT namespace FROM redirects) GROUP BY 1",
        )
    )
    assert set(got) <= set(wanted)
    skipped = manifest["pages_skipped_empty"] + manifest["pages_failed"]
    for ns in wanted:
        assert per_ns[ns] - skipped <= got.get(ns, 0) <= per_ns[ns]
    assert sum(got.values()) + skipped == sum(per_ns[ns] for ns in wanted)
    assert manifest["inputs"][0]["pages_read"] == 2004
    assert manifest["inputs"][0]["siteinfo"]["dbname"] == "ltgwiki"
    # Titles outside the main namespace keep their prefix.
    assert count(out, "pages", "namespace = 14 AND title NOT LIKE '%:%'") == 0
    assert manifest["parameters"]["namespaces"] == [0, 4, 14]


def test_plain_xml_export_0_8(tmp_path):
    out = tmp_path / "wb"
    manifest = build_index([WIKIBRAIN], out, indexes=(), workers=1)
    assert manifest["inputs"][0]["format"] == "mediawiki-xml"
    assert count(out, "redirects") == 11
    assert count(out, "pages", "is_disambiguation") == 2
    assert count(out, "pages") + count(out, "redirects") == 44
    assert query(out, "SELECT count(DISTINCT page_id) FROM see_also")[0][0] >= 24


def test_plain_xml_see_also_count(tmp_path):
    # 26 pages have a "See also" section; on two of them every link sits inside a layout template
    # ({{columns}}, {{aircontent}}), whose links must be collected too.
    raw = WIKIBRAIN.read_text(encoding="utf-8")
    assert len(re.findall(r"^==\s*See also\s*==", raw, flags=re.M | re.I)) == 26
    out = tmp_path / "wb"
    build_index([WIKIBRAIN], out, indexes=(), workers=1)
    assert query(out, "SELECT count(DISTINCT page_id) FROM see_also")[0][0] == 26


def test_gzip_and_multistream_bz2_equal_the_original(tmp_path, gensim_xml, gensim_store):
    original = table_dump(gensim_store)
    gz = tmp_path / "dump.xml.gz"
    gz.write_bytes(gzip.compress(gensim_xml.encode()))
    # Multistream: the same XML cut in two byte ranges, each its own bz2 stream, concatenated.
    data = gensim_xml.encode()
    multi = tmp_path / "dump-multistream.xml.bz2"
    multi.write_bytes(bz2.compress(data[: len(data) // 2]) + bz2.compress(data[len(data) // 2 :]))
    for path in (gz, multi):
        out = tmp_path / path.name.split(".")[0]
        manifest = build_index([path], out, indexes=(), workers=1)
        assert manifest["inputs"][0]["format"] == "mediawiki-xml"
        assert table_dump(out) == original


def test_several_inputs_and_folder_of_numbered_parts(tmp_path, gensim_xml, gensim_store):
    folder = tmp_path / "parts"
    folder.mkdir()
    parts = split_dump(gensim_xml, 3)
    names = [
        "enwiki-pages-articles1.xml-p1p300.bz2",
        "enwiki-pages-articles2.xml-p301p600.bz2",
        "enwiki-pages-articles10.xml-p601p900.bz2",
    ]
    for name, part in zip(names, parts):
        (folder / name).write_bytes(bz2.compress(part.encode()))
    (folder / "README.txt").write_text("not an input")
    out = tmp_path / "folder"
    manifest = build_index([folder], out, indexes=())
    assert [i["name"] for i in manifest["inputs"]] == names  # natural order: 1, 2, 10
    assert table_dump(out) == table_dump(gensim_store)
    # Two different dumps at once: counts add up.
    both = tmp_path / "both"
    manifest = build_index([WIKIBRAIN, W2V], both, indexes=(), workers=1)
    assert len(manifest["inputs"]) == 2
    assert count(both, "pages") == manifest["inputs"][0]["pages_kept"] + manifest["inputs"][1]["pages_kept"] - count(
        both, "redirects"
    )
    assert {r[0] for r in query(both, "SELECT DISTINCT source_file FROM pages")} == {WIKIBRAIN.name, W2V.name}


def test_determinism_across_worker_counts(tmp_path, gensim_store):
    out = tmp_path / "w1"
    build_index([GENSIM_DUMP], out, indexes=(), workers=1)
    two = tmp_path / "w2"
    build_index([GENSIM_DUMP], two, indexes=(), workers=2)
    reference = table_dump(gensim_store)
    assert table_dump(out) == reference
    assert table_dump(two) == reference
    # Row order matters too: passage ids are dense in build order.
    assert query(out, "SELECT passage_id, page_id FROM passages") == query(
        two, "SELECT passage_id, page_id FROM passages"
    )


def _hotpot_records(n=40):
    with HOTPOT.open(encoding="utf-8") as f:
        return [json.loads(next(f)) for _ in range(n)]


def test_jsonl_hotpotqa_abstracts(tmp_path, caplog):
    records = _hotpot_records()
    src = tmp_path / "abstracts.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "hp"
    with caplog.at_level(logging.INFO, logger="indexer"):
        manifest = build_index([src], out, indexes=(), workers=1)
    assert "detected JSONL format: hotpotqa-abstracts" in caplog.text
    assert manifest["inputs"][0]["format"] == "jsonl:hotpotqa-abstracts"
    assert count(out, "pages") == len(records)
    assert count(out, "sentences") == sum(len(r["sentences"]) for r in records)
    for record in records[:10]:
        rows = query(
            out,
            """SELECT s.page_sentence_index, s.text FROM sentences s JOIN passages p USING (passage_id)
                             JOIN pages g USING (page_id) WHERE g.title = ? ORDER BY 1""",
            record["title"],
        )
        assert [r[1] for r in rows] == [s.strip() for s in record["sentences"]]
        assert [r[0] for r in rows] == list(range(len(record["sentences"])))
    lead = query(out, "SELECT lead FROM pages WHERE title = ?", records[1]["title"])[0][0]
    assert lead.startswith(records[1]["sentences"][0].strip())
    ids = [r[0] for r in query(out, "SELECT page_id FROM pages ORDER BY page_id")]
    assert ids == list(range(1, len(records) + 1))


def test_jsonl_fever_wiki_pages_keep_sentence_ids(tmp_path):
    records = _hotpot_records(20)
    src = tmp_path / "wiki-001.jsonl.bz2"
    lines = []
    for r in records:
        # FEVER keeps empty lines as ids with no text: drop sentence 1 to get a gap in the ids.
        sents = [s.strip() for s in r["sentences"]]
        rows = [f"{i}\t{'' if i == 1 else s}\tlink" for i, s in enumerate(sents)]
        lines.append(
            json.dumps({"id": r["title"].replace(" ", "_"), "text": " ".join(sents), "lines": "\n".join(rows)})
        )
    src.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))
    out = tmp_path / "fever"
    manifest = build_index([src], out, indexes=(), workers=1)
    assert manifest["inputs"][0]["format"] == "jsonl:fever-wiki-pages"
    multi = next(r for r in records if len(r["sentences"]) >= 3)
    ids = [
        r[0]
        for r in query(
            out,
            """SELECT s.page_sentence_index FROM sentences s JOIN passages USING (passage_id)
                                       JOIN pages g USING (page_id) WHERE g.title = ? ORDER BY 1""",
            multi["title"],
        )
    ]
    assert ids == [0] + list(range(2, len(multi["sentences"])))


def test_jsonl_kilt_and_title_text_and_json_object(tmp_path):
    vital = json.loads(VITAL.read_text(encoding="utf-8"))
    items = list(vital.values())[:25]
    kilt = tmp_path / "kilt.jsonl"
    with kilt.open("w") as f:
        for i, v in enumerate(items):
            paragraphs = [p for p in v["extract"].split(". ") if p]
            half = max(1, len(paragraphs) // 2)
            text = [
                v["title"] + "\n",
                ". ".join(paragraphs[:half]) + ".\n",
                "Section::::Overview.\n",
                ". ".join(paragraphs[half:]) + "\n",
            ]
            f.write(json.dumps({"wikipedia_id": str(1000 + i), "wikipedia_title": v["title"], "text": text}) + "\n")
    out = tmp_path / "kilt"
    manifest = build_index([kilt], out, indexes=(), workers=1)
    assert manifest["inputs"][0]["format"] == "jsonl:kilt"
    assert count(out, "pages") == 25
    assert query(out, "SELECT min(page_id), max(page_id) FROM pages")[0] == (1000, 1024)
    assert count(out, "sections", "heading = 'Overview'") >= 20
    assert count(out, "passages", "heading_path = 'Overview'") >= 20

    tt = tmp_path / "title-text.jsonl.gz"
    tt.write_bytes(
        gzip.compress("".join(json.dumps({"title": v["title"], "text": v["extract"]}) + "\n" for v in items).encode())
    )
    obj = tmp_path / "vital.json"
    obj.write_text(json.dumps({v["title"]: v for v in items[:10]}))
    out2 = tmp_path / "tt"
    manifest = build_index([tt, obj], out2, indexes=(), workers=1, namespaces=[0])
    assert [i["format"] for i in manifest["inputs"]] == ["jsonl:title-text", "json-object"]
    assert count(out2, "pages") == 35
    # Synthetic ids run on across inputs, so the two files do not collide.
    assert query(out2, "SELECT min(page_id), max(page_id) FROM pages")[0] == (1, 35)
    first = items[0]
    assert query(out2, "SELECT lead FROM pages WHERE page_id = 1")[0][0] == first["extract"].split("\n\n")[0].strip()


def test_cli_build(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "build",
            "--dump",
            str(W2V),
            "--dump",
            str(WIKIBRAIN),
            "--out",
            str(out),
            "--indexes",
            "none",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "detected MediaWiki XML dump" in proc.stderr
    assert "pages" in proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == [W2V.name, WIKIBRAIN.name]
    assert not list(tmp_path.glob(".cli.tmp-*"))
    # Rebuilding replaces the folder atomically.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "build",
            "--dump",
            str(W2V),
            "--out",
            str(out),
            "--indexes",
            "none",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert [i["name"] for i in json.loads((out / "manifest.json").read_text())["inputs"]] == [W2V.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli"]


def test_see_also_links_inside_layout_templates():
    from indexer.wikitext import parse_wikitext

    page = parse_wikitext(
        "Lead.\n== See also ==\n* [[Alpha]]\n{{Some layout|col1=\n* [[Beta]]\n"
        "* [[File:X.png|thumb]]\n|col2={{nested|[[gamma ray|Gamma]]}}}}\n"
        "=== More ===\n{{Box|[[Delta]]}}\n== References ==\n{{Other|[[Not this]]}}\n"
    )
    assert page.see_also == ("Alpha", "Beta", "Gamma ray", "Delta")


def test_multistream_bz2_decompressed_by_the_pool_equals_the_original(tmp_path, gensim_xml, gensim_store):
    # enwiki's multistream layout: the header, then 20 pages per bz2 stream, then </mediawiki>.
    head_end = gensim_xml.index("<page>")
    tail_at = gensim_xml.rindex("</mediawiki>")
    pages = re.findall(r"<page>.*?</page>\s*", gensim_xml[head_end:tail_at], flags=re.S)
    streams = [gensim_xml[:head_end]] + ["".join(pages[i : i + 20]) for i in range(0, len(pages), 20)]
    multi = tmp_path / "enwiki-multistream.xml.bz2"
    multi.write_bytes(b"".join(bz2.compress(s.encode()) for s in streams + [gensim_xml[tail_at:]]))
    out = tmp_path / "multi"
    manifest = build_index([multi], out, indexes=(), workers=2)
    assert table_dump(out) == table_dump(gensim_store)
    assert (manifest["inputs"][0]["pages_read"], manifest["inputs"][0]["pages_kept"]) == (206, 205)
    assert manifest["inputs"][0]["siteinfo"]["dbname"] == "enwiki"
    # A damaged stream in the middle names the file and the stream's compressed offset.
    data = bytearray(multi.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    bad = tmp_path / "bad-multistream.xml.bz2"
    bad.write_bytes(bytes(data))
    from wikiground.errors import InputError

    with pytest.raises(InputError) as info:
        build_index([bad], tmp_path / "bad", indexes=(), workers=2)
    assert bad.name in str(info.value) and "(compressed)" in info.value.where
    cut = tmp_path / "cut-multistream.xml.bz2"
    cut.write_bytes(multi.read_bytes()[:-20_000])
    with pytest.raises(InputError) as info:
        build_index([cut], tmp_path / "cut", indexes=(), workers=2)
    assert cut.name in str(info.value) and "truncated" in str(info.value)


@pytest.mark.parametrize("chunk_bytes", [1, 20_000, 300_000])
def test_xml_chunks_report_errors_at_the_original_line(tmp_path, gensim_xml, chunk_bytes):
    from indexer.readers import InputReader, XmlChunk, parse_xml_chunk
    from wikiground.errors import InputError

    good = InputReader(GENSIM_DUMP)
    titles = []
    for item in good.items(chunk_bytes=chunk_bytes):
        assert isinstance(item, XmlChunk)
        chunk = parse_xml_chunk(item)
        good.add_chunk_stats(chunk)
        titles += [p.title for p in chunk.pages]
    assert len(titles) == good.stats.pages_kept == 205 and good.stats.pages_read == 206
    broken = gensim_xml.replace("<title>Aristotle</title>", "<title>Aristotle</titel>", 1)
    src = tmp_path / "broken.xml"
    src.write_text(broken)
    line = broken[: broken.index("</titel>")].count("\n") + 1
    before = titles[titles.index("Aristotle") - 1]
    with pytest.raises(InputError) as info:
        for item in InputReader(src).items(chunk_bytes=chunk_bytes):
            parse_xml_chunk(item)
    assert info.value.where.startswith(f"line {line}, column ")
    assert f"after page {before!r}" in info.value.where
