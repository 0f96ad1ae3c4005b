"""Bad inputs give clear errors naming the file and the place; failed builds leave nothing behind."""

from __future__ import annotations

import bz2
import logging
import os
import subprocess
import sys

import pytest

from indexer.build import build_index
from tests.conftest import DUMPS, GENSIM_DUMP, ROOT
from wikiground.errors import ConfigError, InputError

W2V = DUMPS / "wikipedia2vec-enwiki-pages-articles-sample.xml.bz2"


@pytest.fixture(scope="module")
def xml() -> str:
    return bz2.decompress(GENSIM_DUMP.read_bytes()).decode("utf-8")


def header(xml: str) -> str:
    return xml[: xml.index("<page>")]


def page_xml(xml: str, title: str) -> str:
    start = xml.index(f"<title>{title}</title>")
    return xml[xml.rindex("<page>", 0, start) : xml.index("</page>", start) + len("</page>")] + "\n"


def fails(inputs, out, **kw) -> InputError:
    with pytest.raises(InputError) as info:
        build_index(inputs, out, indexes=(), workers=1, **kw)
    return info.value


def leftovers(folder):
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_missing_file(tmp_path):
    err = fails([tmp_path / "nope.xml.bz2"], tmp_path / "out")
    assert "nope.xml.bz2" in str(err) and "no such file" in str(err)
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads chmod-000 files")
def test_unreadable_file(tmp_path):
    src = tmp_path / "dump.xml.bz2"
    src.write_bytes(GENSIM_DUMP.read_bytes())
    src.chmod(0)
    err = fails([src], tmp_path / "out")
    assert "dump.xml.bz2" in str(err) and "cannot open" in str(err)


def test_folder_without_inputs_and_dangling_symlink(tmp_path):
    # Root ignores permissions, so exercise the other unreadable cases.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no dump" in str(fails([empty], tmp_path / "out"))
    link = tmp_path / "gone.xml"
    link.symlink_to(tmp_path / "deleted.xml")
    assert "gone.xml: no such file" in str(fails([link], tmp_path / "out"))


def test_not_xml(tmp_path):
    src = tmp_path / "notes.xml"
    src.write_text("These are notes, not a dump.\n")
    err = fails([src], tmp_path / "out")
    assert "notes.xml" in str(err) and "not a MediaWiki XML dump nor JSON lines" in str(err)
    html = tmp_path / "page.xml"
    html.write_text("<html><body><p>hello</p></body></html>")
    err = fails([html], tmp_path / "out")
    assert "page.xml" in str(err) and "not a MediaWiki XML export" in str(err)


def test_truncated_bz2(tmp_path):
    data = GENSIM_DUMP.read_bytes()
    src = tmp_path / "cut.xml.bz2"
    src.write_bytes(data[: len(data) // 2])
    err = fails([src], tmp_path / "out")
    assert "cut.xml.bz2" in str(err) and "truncated" in str(err)
    assert f"of {len(data) // 2} (compressed)" in err.where and err.where.startswith("byte ")


def test_corrupt_bz2_block(tmp_path):
    data = bytearray(GENSIM_DUMP.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    src = tmp_path / "bad.xml.bz2"
    src.write_bytes(bytes(data))
    err = fails([src], tmp_path / "out")
    assert "bad.xml.bz2" in str(err) and ("corrupt" in str(err) or "malformed" in str(err))


def test_malformed_xml_in_the_middle(tmp_path, xml):
    # Break the <title> closing tag of a page in the middle of the dump.
    broken = xml.replace("<title>Aristotle</title>", "<title>Aristotle</titel>", 1)
    src = tmp_path / "broken.xml.bz2"
    src.write_bytes(bz2.compress(broken.encode()))
    err = fails([src], tmp_path / "out")
    line = broken[: broken.index("</titel>")].count("\n") + 1
    assert "broken.xml.bz2" in str(err) and "malformed XML" in str(err)
    assert f"line {line}," in err.where
    assert "after page" in err.where and "(id " in err.where  # the last good page


def test_invalid_utf8(tmp_path, xml):
    raw = xml.encode()
    at = raw.index(b"<text", raw.index(b"<title>Aristotle</title>")) + 200
    src = tmp_path / "latin1.xml"
    src.write_bytes(raw[:at] + b"\xff\xfe bad bytes " + raw[at:])
    err = fails([src], tmp_path / "out")
    assert "latin1.xml" in str(err) and "line " in err.where and "after page" in err.where
    jl = tmp_path / "bad.jsonl"
    jl.write_bytes(b'{"title": "A", "text": "fine"}\n{"title": "B", "text": "caf\xe9"}\n')
    err = fails([jl], tmp_path / "out")
    assert "bad.jsonl" in str(err) and "UTF-8" in str(err)


def test_empty_inputs(tmp_path, xml):
    src = tmp_path / "nopages.xml"
    src.write_text(header(xml) + "</mediawiki>\n")
    assert "no pages found" in str(fails([src], tmp_path / "out"))
    zero = tmp_path / "zero.xml.bz2"
    zero.write_bytes(bz2.compress(b""))
    err = fails([zero], tmp_path / "out")
    assert "zero.xml.bz2" in str(err) and "empty file" in str(err)
    # Pages exist but none in the chosen namespaces.
    err = fails([GENSIM_DUMP], tmp_path / "out", namespaces=[14])
    assert "no pages found in namespace(s) [14]" in str(err)


def test_empty_page_is_skipped_with_a_warning(tmp_path, xml, caplog):
    empty = page_xml(xml, "Aristotle").replace("<title>Aristotle</title>", "<title>Blank page</title>")
    empty = empty.replace("<id>308</id>", "<id>999999</id>", 1)
    start = empty.index("<text")
    empty = empty[:start] + '<text xml:space="preserve" />' + empty[empty.index("</text>") + len("</text>") :]
    src = tmp_path / "with-empty.xml"
    src.write_text(header(xml) + empty + page_xml(xml, "Aristotle") + "</mediawiki>\n")
    with caplog.at_level(logging.WARNING):
        manifest = build_index([src], tmp_path / "out", indexes=(), workers=1)
    assert manifest["counts"]["pages"] == 1 and manifest["pages_skipped_empty"] == 1
    assert "'Blank page' (id 999999): empty text" in caplog.text


def test_enormous_page_is_truncated_with_a_warning(tmp_path, xml, caplog):
    src = tmp_path / "big.xml"
    src.write_text(header(xml) + page_xml(xml, "Anarchism") + page_xml(xml, "Albedo") + "</mediawiki>\n")
    with caplog.at_level(logging.WARNING):
        manifest = build_index([src], tmp_path / "out", indexes=(), workers=1, max_page_chars=50_000)
    assert manifest["counts"]["pages"] == 2 and manifest["pages_truncated"] == 1
    assert "'Anarchism' (id 12): text of" in caplog.text and "truncated" in caplog.text


def test_unknown_jsonl_shape(tmp_path):
    src = tmp_path / "odd.jsonl"
    src.write_text('{"name": "A", "body": "text"}\n')
    err = fails([src], tmp_path / "out")
    assert "odd.jsonl" in str(err) and err.where == "line 1"
    assert "unknown JSONL record shape" in str(err) and "['body', 'name']" in str(err)
    later = tmp_path / "later.jsonl"
    later.write_text('{"title": "A", "sentences": ["One."]}\n\n{"title": "B", "sentences": ["Two."]}\n{"title": "C"}\n')
    err = fails([later], tmp_path / "out")
    assert err.where == "line 4" and "keys seen: ['title']" in str(err)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"title": "A", "text": "x"}\n{"title": "B", "text": \n')
    err = fails([garbage], tmp_path / "out")
    assert err.where == "line 2" and "invalid JSON" in str(err)


def test_duplicate_page_ids_across_inputs(tmp_path):
    err = fails([W2V, W2V], tmp_path / "out")
    assert "duplicate page id" in str(err) and W2V.name in str(err)


def test_bad_options(tmp_path):
    with pytest.raises(ConfigError, match="unknown index"):
        build_index([W2V], tmp_path / "out", indexes=("bm26",))
    not_index = tmp_path / "home"
    not_index.mkdir()
    (not_index / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError, match="refusing to replace"):
        build_index([W2V], not_index, indexes=())
    assert (not_index / "thesis.tex").read_text() == "precious"


def test_failed_build_leaves_existing_index_untouched(tmp_path):
    out = tmp_path / "index"
    build_index([W2V], out, indexes=(), workers=1)
    before = _contents(out)
    data = GENSIM_DUMP.read_bytes()
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(data[: len(data) // 3])
    fails([cut], out)
    assert _contents(out) == before
    assert leftovers(tmp_path) == []
    # A failing index builder also rolls back (no such backend module here).
    with pytest.raises(ConfigError):
        build_index([W2V], out, indexes=("nope",))
    assert _contents(out) == before and leftovers(tmp_path) == []


def _contents(folder):
    """Every file under ``folder`` (relative path -> bytes)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_cli_reports_one_line_and_exit_code(tmp_path):
    data = GENSIM_DUMP.read_bytes()
    cut = tmp_path / "cut.xml.bz2"
    cut.write_bytes(data[:100_000])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "build",
            "--dump",
            str(cut),
            "--out",
            str(tmp_path / "out"),
            "--indexes",
            "none",
            "--quiet",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cut.xml.bz2" in lines[0]
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "indexer",
            "build",
            "--dump",
            str(tmp_path / "missing.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--verbose",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "missing.jsonl" in proc.stderr
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_script_without_main_guard_is_told_why_its_workers_died(tmp_path):
    """Worker processes import the caller's main module: a script calling build_index at top level kills them.
    The error says so (instead of a bare BrokenProcessPool), and nothing is left behind."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from indexer.build import build_index\n"
        f"build_index([{str(GENSIM_DUMP)!r}], {str(tmp_path / 'out')!r}, indexes=(), workers=2)\n",
        encoding="utf-8",
    )
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    assert "BrokenProcessPool" in proc.stderr and 'if __name__ == "__main__":' in proc.stderr
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


# Compressed byte offsets of the bz2 blocks of the gensim dump (each holds the 48-bit block magic 0x314159265359
# at some bit of that byte; checked in the test).
GENSIM_BLOCKS = [4, 244311, 487459, 744883, 993881, 1251107, 1502075]


def _has_block_magic(data: bytes, at: int) -> bool:
    window = int.from_bytes(data[at : at + 7], "big")
    return any((window >> (8 - shift)) & ((1 << 48) - 1) == 0x314159265359 for shift in range(8))


@pytest.mark.parametrize("workers", [1, 2])
def test_corrupt_bz2_is_reported_at_its_block_when_reached(tmp_path, workers):
    """It was reported at the end of what had been read (the whole file with a worker pool)."""
    from indexer.readers import InputReader, XmlChunk

    data = bytearray(GENSIM_DUMP.read_bytes())
    assert all(_has_block_magic(data, b) for b in GENSIM_BLOCKS)
    at = (GENSIM_BLOCKS[3] + GENSIM_BLOCKS[4]) // 2
    data[at : at + 64] = bytes(64)
    src = tmp_path / "bad.xml.bz2"
    src.write_bytes(bytes(data))
    with pytest.raises(InputError) as info:
        build_index([src], tmp_path / "out", indexes=(), workers=workers)
    err = info.value
    assert err.where == f"bz2 block at byte {GENSIM_BLOCKS[3]} of {len(data)} (compressed)"
    assert "corrupt compressed data" in str(err)
    # Reached in order: the pages of the blocks before it come out first.
    reader, chunks = InputReader(src), 0
    with pytest.raises(InputError, match=f"block at byte {GENSIM_BLOCKS[3]} "):
        for item in reader.items(chunk_bytes=1 << 18):
            chunks += isinstance(item, XmlChunk)
    assert chunks >= 3


def test_corrupt_second_stream_of_a_multistream_group_names_its_block(tmp_path, xml):
    from indexer.readers import decompress_group

    first, second = bz2.compress(xml[:100_000].encode()), bytearray(bz2.compress(xml[100_000:300_000].encode()))
    second[len(second) // 2] ^= 0xFF
    group = first + bytes(second)
    with pytest.raises(InputError) as info:
        decompress_group("multi.xml.bz2", 1000, group, 5000)
    assert info.value.where == f"bz2 block at byte {1000 + len(first) + 4} of 5000 (compressed)"
    assert decompress_group("multi.xml.bz2", 0, first, len(first)) == xml[:100_000].encode()


_PEAK_RSS = """
import resource, sys
from pathlib import Path
from indexer.readers import InputReader
from wikiground.errors import InputError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    for _ in InputReader(Path(sys.argv[1])):
        pass
except InputError as exc:
    print(exc.where)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("first", ['{"title": "Cut short", "sentences": ["It ends', '{"title": Unquoted}'])
def test_jsonl_with_a_bad_first_line_fails_at_once_in_bounded_memory(tmp_path, data_dir, first):
    """A 200 MB JSONL with a bad first line was read whole into memory (about 2.3x its size) before the error."""
    corpus = (data_dir / "corpora" / "hotpotqa2017_abstracts.jsonl").read_bytes()
    src = tmp_path / "big.jsonl"
    with src.open("wb") as fh:
        fh.write(first.encode() + b"\n")
        for _ in range(120 * 1024 * 1024 // len(corpus) + 1):
            fh.write(corpus)
    assert src.stat().st_size > 120 * 1024 * 1024
    p = subprocess.run([sys.executable, "-c", _PEAK_RSS, str(src)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    where, grown_mb = p.stdout.split("\n")[:2]
    assert where == "line 1"
    assert int(grown_mb) < 40, f"peak RSS grew by {grown_mb} MB"
