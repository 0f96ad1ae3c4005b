"""Streaming readers: MediaWiki XML dumps (via mwxml) and JSON-lines corpora, as :class:`RawPage` records.

Compression is detected from magic bytes (bz2 incl. multistream, gzip, plain), the format from the
first bytes / first record. Every read error becomes an :class:`~wikiground.errors.InputError` naming
the file and the place (compressed byte offset, line, last good page).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import itertools
import json
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from wikiground.errors import InputError

logger = logging.getLogger(__name__)

# Suffixes picked up when a folder is given as input.
INPUT_SUFFIXES = (".xml", ".bz2", ".gz", ".jsonl", ".ndjson", ".json")
SNIFF_BYTES = 1 << 16
CHUNK_BYTES = 1 << 21  # XML bytes per worker task: whole pages, ~100 enwiki articles
READ_BYTES = 1 << 20  # decompressed bytes per read
COMPRESSED_BYTES = 1 << 18  # compressed bytes per read of a bz2 file (its blocks are found in them)
STREAM_GROUP_BYTES = 1 << 20  # compressed bytes of whole bz2 streams per decompression task
MULTISTREAM_PROBE = 1 << 22  # a second bz2 stream must start within this many bytes to count as multistream
HEADER_LIMIT = 1 << 24  # bytes searched for the first <page> before falling back to in-process parsing
#: A page's ``<text>`` is cut to about this many characters while the XML is read, and the rest dropped unread, so a
#: page never takes more memory than that, whatever a dump expands to. It is the store writer's page limit
#: (``store_writer.DEFAULT_MAX_PAGE_CHARS``, in a layer above; tests/test_pathological_pages.py holds the two
#: together) and a margin: the writer still sees such a page as too long and cuts it at a line break, as before.
TEXT_READ_CHARS = 4_000_000 + 1024
#: The XML of one page outside its (cut) texts may take this many bytes: a revision's text cut to TEXT_READ_CHARS
#: takes at most ten bytes a character ("&#1114111;"), and the rest of a page is a few KB. A page past it is no
#: Wikipedia page (many revisions, or a huge element outside <text>): an error, not memory without bound.
MAX_PAGE_BYTES = 64 << 20
#: Decompressed bytes of one group of bz2 streams (STREAM_GROUP_BYTES compressed) of a multistream dump: wikitext
#: compresses about fivefold, so real groups stay far below; a group past it is an error (it is decompressed whole in
#: a worker before its texts can be cut).
MAX_GROUP_BYTES = 512 << 20
_BZ2_STREAM_START = re.compile(rb"BZh[1-9]1AY&SY")  # stream header followed by the first block's magic
_PAGE_END = b"</page>"
XML_FORMAT = "mediawiki-xml"
JSON_OBJECT_FORMAT = "json-object"
JSONL_SHAPES = ("hotpotqa-abstracts", "fever-wiki-pages", "kilt", "title-text")
_KILT_SECTION = re.compile(r"^Section::::(.*?)\.?\s*$")


@dataclass(slots=True)
class RawPage:
    """One page as read from an input, before cleaning.

    ``kind`` says what ``text`` holds: 'wikitext' (XML dumps, to be parsed), 'text' (clean prose in
    ``sections``) or 'sentences' (clean, pre-split sentences with their given ids).
    """

    page_id: int
    title: str
    namespace: int
    kind: str
    text: str = ""
    rev_id: int | None = None
    rev_timestamp: str | None = None
    redirect: str | None = None  # <redirect title="..."> of the dump
    sections: tuple[tuple[str, str], ...] = ()  # kind 'text': (heading, text); "" = lead
    sentences: tuple[tuple[int, str], ...] = ()  # kind 'sentences': (page_sentence_index, text)
    source_file: str = ""
    base_url: str | None = None  # siteinfo <base>, for pages.url


@dataclass(slots=True)
class InputStats:
    """What the build learns about one input file while reading it (goes into the manifest)."""

    path: Path
    size: int
    format: str = ""
    siteinfo: dict[str, Any] = field(default_factory=dict)
    pages_read: int = 0
    pages_kept: int = 0
    newest_rev_timestamp: str | None = None
    sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.path.name,
            "path": str(self.path),
            "size": self.size,
            "sha256": self.sha256,
            "format": self.format,
            "siteinfo": self.siteinfo,
            "pages_read": self.pages_read,
            "pages_kept": self.pages_kept,
            "newest_rev_timestamp": self.newest_rev_timestamp,
        }


@dataclass(slots=True)
class XmlChunk:
    """Whole ``<page>`` elements cut from a dump's byte stream, parsed with mwxml in a worker.

    The worker parses ``header + data (+ </mediawiki>)``; ``first_line``/``first_column`` place
    ``data[0]`` in the original XML so errors name the real line; ``after`` labels the page before it.
    """

    path: str
    header: bytes  # <mediawiki ...><siteinfo>...</siteinfo> and whitespace up to the first <page
    data: bytes
    final: bool  # the last chunk holds the document's end (</mediawiki>)
    first_line: int
    first_column: int
    after: str
    namespaces: frozenset[int]
    base_url: str | None
    # (line of data, newlines dropped there) per text cut while read (_TextCutter), for the lines of errors
    dropped_lines: tuple[tuple[int, int], ...] = ()


@dataclass(slots=True)
class ChunkPages:
    """What a worker read from one :class:`XmlChunk`: the kept pages and the input stats they add."""

    pages: list[RawPage]
    pages_read: int = 0
    pages_kept: int = 0
    newest_rev_timestamp: str | None = None


# ``decompress(groups, path, size)``: compressed bz2 stream groups ``(offset, bytes)`` of file ``path``
# (``size`` bytes) to their decompressed bytes, in order; a worker pool runs :func:`decompress_group`.
GroupDecompressor = Callable[[Iterator[tuple[int, bytes]], str, int], Iterator[bytes]]


class _HashingReader(io.RawIOBase):
    """Raw file wrapper counting and hashing the (compressed) bytes as they stream by."""

    def __init__(self, raw: BinaryIO):
        self._raw = raw
        self.bytes_read = 0
        self._sha = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer)
        if n:
            self._sha.update(memoryview(buffer)[:n])
            self.bytes_read += n
        return n

    def hexdigest(self) -> str:
        # Hash whatever the parser left unread (e.g. bytes after </mediawiki>) so it covers the file.
        while chunk := self._raw.read(1 << 20):
            self._sha.update(chunk)
            self.bytes_read += len(chunk)
        return self._sha.hexdigest()

    def close(self) -> None:
        self._raw.close()
        super().close()


class _PrefixedReader(io.RawIOBase):
    """Serve ``head`` bytes first, then the rest of ``stream`` (used to re-feed sniffed bytes)."""

    def __init__(self, head: bytes, stream: BinaryIO):
        self._head = memoryview(head)
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _PrefetchReader(io.RawIOBase):
    """Decompress in a background thread (bz2/zlib release the GIL), so it overlaps XML parsing."""

    _CHUNK = 1 << 20
    _DEPTH = 8  # chunks read ahead: bounded memory

    def __init__(self, stream: BinaryIO):
        import queue
        import threading

        self._queue: queue.Queue = queue.Queue(maxsize=self._DEPTH)
        # Hold the decompressor: if collected, its buffered file would close the raw file under the hasher.
        self._source = stream
        self._pending = memoryview(b"")
        self._done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(stream,), name="decompress", daemon=True)
        self._thread.start()

    def _fill(self, stream: BinaryIO) -> None:
        try:
            while not self._stop.is_set():
                chunk = stream.read(self._CHUNK)
                self._queue.put(chunk)
                if not chunk:
                    return
        except BaseException as exc:  # handed to the reading thread, raised there
            self._queue.put(exc)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._pending and not self._done:
            item = self._queue.get()
            if isinstance(item, BaseException):
                self._done = True
                raise item
            if not item:
                self._done = True
            self._pending = memoryview(item)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except Exception:  # noqa: BLE001 - queue.Empty
                self._thread.join(0.01)
        super().close()


class _BlockReader(io.RawIOBase):
    """A readable stream over an iterator of byte blocks."""

    def __init__(self, blocks: Iterable[bytes]):
        self._blocks = iter(blocks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            block = next(self._blocks, None)
            if block is None:
                return 0
            self._pending = memoryview(block)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _bz2_stream_groups(
    probe: bytes, rest: BinaryIO, *, group_bytes: int = STREAM_GROUP_BYTES
) -> Iterator[tuple[int, bytes]]:
    """Whole bz2 streams of a multistream file, grouped to about ``group_bytes``: ``(offset, bytes)``.

    A stream starts at ``BZh<level>`` followed by the block magic; a false match inside compressed
    data (odds about 2**-80 per byte) would only make that group fail to decompress.
    """
    buf = bytearray(probe)
    offset = 0  # file offset of buf[0]
    scanned = group_bytes  # no stream start in buf[group_bytes:scanned]
    while True:
        match = _BZ2_STREAM_START.search(buf, scanned)
        if match is not None:
            cut = match.start()
            yield offset, bytes(buf[:cut])
            del buf[:cut]
            offset += cut
            scanned = group_bytes
            continue
        scanned = max(group_bytes, len(buf) - 9)
        more = rest.read(group_bytes)
        if not more:
            if buf:
                yield offset, bytes(buf)
            return
        buf += more


def decompress_group(path: str, offset: int, data: bytes, size: int) -> bytes:
    """Worker side of multistream decompression: one group of whole bz2 streams.

    Stream by stream rather than ``bz2.decompress``, which silently drops a damaged stream that
    follows a good one; an error names its block. A group that expands past :data:`MAX_GROUP_BYTES` is an error,
    not memory without bound.
    """
    out: list[bytes] = []
    total = 0
    for piece in bz2_decompress([data], path=path, size=size, offset=offset):
        total += len(piece)
        if total > MAX_GROUP_BYTES:
            raise InputError(
                f"bz2 streams expand past {MAX_GROUP_BYTES >> 20} MB: not a dump's (its streams hold 100 pages each)",
                path=path,
                where=f"the bz2 streams from byte {offset} of {size} (compressed)",
            )
        out.append(piece)
    return b"".join(out)


def _bz2_block_patterns() -> list[tuple[bytes, int, int, int, int]]:
    """The bz2 block magic (48 bits, at any bit offset) as a 5-byte needle per bit shift, with the masks and
    values of the partial bytes before and after it: ``(needle, mask0, value0, mask6, value6)``."""
    out = []
    for shift in range(8):
        window = (_BZ2_BLOCK_MAGIC << (8 - shift)).to_bytes(7, "big")
        mask = (((1 << 48) - 1) << (8 - shift)).to_bytes(7, "big")
        out.append((window[1:6], mask[0], window[0], mask[6], window[6]))
    return out


_BZ2_BLOCK_MAGIC = 0x314159265359  # pi: starts every bz2 block, not byte-aligned
_BZ2_BLOCK_PATTERNS = _bz2_block_patterns()


def _next_bz2_block(buf: bytearray) -> int:
    """Index (>= 1) of the byte holding the first bit of the first whole bz2 block magic in ``buf``, or -1.

    A false match in compressed data (odds about 2**-48 per bit) only splits what is fed at once."""
    best = -1
    for needle, mask0, value0, mask6, value6 in _BZ2_BLOCK_PATTERNS:
        at = buf.find(needle, 2)
        while at >= 0 and (best < 0 or at - 1 < best):
            i = at - 1
            if i + 6 < len(buf) and buf[i] & mask0 == value0 and buf[i + 6] & mask6 == value6:
                best = i
                break
            at = buf.find(needle, at + 1)
    return best


class _Bz2Feeder:
    """One bz2 decompressor after another (multistream); errors name the block being fed."""

    def __init__(self, path: str, size: int, offset: int, out_bytes: int):
        self.path, self.size, self.out_bytes = path, size, out_bytes
        self.block_at = offset  # compressed offset of the block (or stream header) being fed
        self.fed = offset  # compressed bytes fed so far, as a file offset
        self._dec = bz2.BZ2Decompressor()
        self._open = False  # the current stream has had input and has not ended

    def where(self) -> str:
        return f"bz2 block at byte {self.block_at} of {self.size} (compressed)"

    def feed(self, data: bytes) -> Iterator[bytes]:
        self.fed += len(data)
        while data:
            self._open = True
            try:
                out = self._dec.decompress(data, self.out_bytes)
                while True:
                    if out:
                        yield out
                    if self._dec.eof or self._dec.needs_input:
                        break
                    out = self._dec.decompress(b"", self.out_bytes)
            except OSError as exc:
                raise InputError(f"corrupt compressed data ({exc})", path=self.path, where=self.where()) from exc
            if not self._dec.eof:
                return
            data = self._dec.unused_data  # the next stream (multistream), if any
            self.block_at = self.fed - len(data)
            self._dec = bz2.BZ2Decompressor()
            self._open = False

    def end(self) -> None:
        if self._open:
            raise InputError(
                "truncated compressed file (bz2 stream ends early)",
                path=self.path,
                where=f"byte {self.fed} of {self.size} (compressed), in the {self.where()}",
            )


_BZ2_HOLD = 12  # bytes kept back from feeding: a block magic (7 bytes with its partial ones) may start in them


def bz2_decompress(
    chunks: Iterable[bytes], *, path: str, size: int, offset: int = 0, out_bytes: int = READ_BYTES
) -> Iterator[bytes]:
    """Decompressed bytes of bz2 data (one stream or many) read in ``chunks`` from file offset ``offset``.

    The decompressor is fed one block at a time (blocks found by their magic, at any bit offset), so corrupt
    data is reported as soon as it is reached, with the compressed byte offset of its block; output comes in
    pieces of at most ``out_bytes``, so memory stays bounded however well the data compresses.
    """
    feeder = _Bz2Feeder(path, size, offset, out_bytes)
    buf = bytearray()
    at = offset  # file offset of buf[0]
    for chunk in chunks:
        buf += chunk
        while len(buf) > _BZ2_HOLD:
            cut = _next_bz2_block(buf)
            end = cut + 1 if cut >= 0 else len(buf) - _BZ2_HOLD
            yield from feeder.feed(bytes(buf[:end]))
            del buf[:end]
            if cut >= 0:
                feeder.block_at = at + cut  # the next bytes fed belong to this block
            at += end
            if cut < 0:
                break
    if buf:
        yield from feeder.feed(bytes(buf))
    feeder.end()


def _compressed_chunks(stream: BinaryIO, size: int = COMPRESSED_BYTES) -> Iterator[bytes]:
    while chunk := stream.read(size):
        yield chunk


def _last_page_label(data: bytes) -> str | None:
    """``after page 'T' (id N)`` for the last page in ``data`` (title and id found with rfind/find)."""
    label = _page_label(data)
    return None if label is None else f"after {label}"


def _page_label(data: bytes) -> str | None:
    """``page 'T' (id N)`` for the last page in ``data`` (title and id found with rfind/find)."""
    from xml.sax.saxutils import unescape

    at = data.rfind(b"<title>")
    if at < 0:
        return None
    end = data.find(b"</title>", at)
    id_at = data.find(b"<id>", end)
    id_end = data.find(b"</id>", id_at)
    if end < 0 or id_at < 0 or id_end < 0:
        return None
    title = unescape(data[at + 7 : end].decode("utf-8", "replace"), {"&quot;": '"', "&apos;": "'"})
    return f"page {title!r} (id {data[id_at + 4 : id_end].decode('ascii', 'replace').strip()})"


_XML_REFERENCE = re.compile(rb"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z]+);")
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


def _xml_chars(data: bytes) -> int:
    """Characters (or fewer) that XML character data ``data`` holds once parsed: ``data`` in whole UTF-8 characters
    and references; each reference is one, a "\\r" none (a parser makes "\\r\\n" one "\\n")."""
    n = len(data) - data.count(b"\r")
    if not data.isascii():
        n -= len(data) - len(data.translate(None, _UTF8_CONTINUATION))
    if b"&" in data:
        n -= sum(len(ref) - 1 for ref in _XML_REFERENCE.findall(data))
    return n


def _char_boundary(data: bytes, at: int) -> int:
    """The first offset from ``at`` on that is inside no UTF-8 character and no reference (``data`` ends so)."""
    while at < len(data) and 0x80 <= data[at] < 0xC0:
        at += 1
    amp = data.rfind(b"&", max(0, at - 12), at)
    if amp >= 0 and data.find(b";", amp, at) < 0:
        semicolon = data.find(b";", at)
        at = semicolon + 1 if semicolon >= 0 else len(data)
    return at


@dataclass(slots=True)
class _ChunkPlace:
    """Where the next chunk of a dump starts: its line and column in the original XML, its offset in the cut
    stream, and the page before it."""

    line: int
    column: int
    offset: int
    after: str = "before the first page"

    def advance(self, data: bytes, dropped: tuple[tuple[int, int], ...]) -> None:
        """Move past chunk ``data``, in which ``dropped`` newlines were dropped (see XmlChunk.dropped_lines)."""
        newlines = data.count(b"\n")
        self.column = len(data) - data.rfind(b"\n") - 1 if newlines else self.column + len(data)
        self.offset += len(data)
        self.line += newlines + sum(n for _, n in dropped)
        self.after = _last_page_label(data) or self.after


class _TextCutter:
    """Cuts each ``<text>`` of a MediaWiki XML byte stream to about ``max_chars`` characters as the bytes go by.

    :meth:`cut` passes the stream on, a text's bytes past the limit dropped as they come (and logged, naming the
    page); only ``bytes.find`` runs over the bytes, and a text is counted in characters only past ``max_chars``
    bytes. ``dropped_lines`` lists ``(offset in the output, newlines dropped there)`` for the line numbers of errors.
    """

    _HOLD = 16  # bytes held back at a block's end: a tag, character or reference may go on in the next block
    _MAX_TAG = 1 << 16  # a <text ...> start tag longer than this is no dump's

    def __init__(self, path: str, max_chars: int | None = None):
        self.path, self.max_chars = path, TEXT_READ_CHARS if max_chars is None else max_chars
        self.dropped_lines: list[tuple[int, int]] = []
        self._in_text = False
        self._out = 0  # bytes passed on before the current block's
        self._kept = 0  # bytes of the current text passed on
        self._chars = -1  # characters in them, counted once _kept passes max_chars (-1: not yet)
        self._pieces: list[bytes] = []  # the current text's pieces passed on, until counted
        self._cut_at = -1  # output offset where the current text was cut (-1: not cut)
        self._dropped = self._newlines = 0  # bytes and newlines dropped of the current text
        self._head: list[bytes] = []  # markup before the current text (its page's title and id)

    def cut(self, blocks: Iterable[bytes]) -> Iterator[bytes]:
        tail = b""
        for block in blocks:
            data = tail + block if tail else block
            out: list[bytes] = []
            pos = 0
            while pos >= 0:
                pos, tail = self._text(data, pos, out) if self._in_text else self._markup(data, pos, out)
            if out:
                joined = b"".join(out)
                self._out += len(joined)
                yield joined
        if tail:
            yield tail  # an unfinished tag or text: the XML parser reports it

    def _markup(self, data: bytes, pos: int, out: list[bytes]) -> tuple[int, bytes]:
        """Pass markup on up to the next ``<text ...>`` start tag (included); ``(-1, tail)`` at the block's end."""
        at = data.find(b"<text", pos)
        if at < 0:
            keep = max(pos, len(data) - 4)  # "<tex" may end the block
            self._pass(data[pos:keep], out)
            return -1, data[keep:]
        close = data.find(b">", at)
        if close < 0:
            if len(data) - at > self._MAX_TAG:
                raise InputError(f"<text> start tag over {self._MAX_TAG} bytes", path=self.path)
            self._pass(data[pos:at], out)
            return -1, data[at:]
        if data[at + 5 : at + 6] not in (b" ", b"\t", b"\n", b"\r", b">", b"/"):  # <textarea ...>: not ours
            self._pass(data[pos : at + 5], out)
            return at + 5, b""
        self._pass(data[pos : close + 1], out)
        if data[close - 1 : close] != b"/":  # not <text ... />
            self._in_text = True
            self._kept, self._chars, self._pieces, self._cut_at = 0, -1, [], -1
            self._dropped = self._newlines = 0
        return close + 1, b""

    def _pass(self, markup: bytes, out: list[bytes]) -> None:
        out.append(markup)
        self._head.append(markup)
        if len(self._head) > 4:
            del self._head[0]

    def _text(self, data: bytes, pos: int, out: list[bytes]) -> tuple[int, bytes]:
        """A text's bytes up to its end tag (excluded) or the block's end (less a tail held back)."""
        end = data.find(b"</text", pos)
        stop = end if end >= 0 else max(pos, len(data) - self._HOLD)
        if end < 0:
            amp = data.rfind(b"&", max(pos, stop - 12), stop)
            if amp >= 0 and data.find(b";", amp, stop) < 0:
                stop = amp  # a reference goes on past stop
            while stop > pos and 0x80 <= data[stop] < 0xC0:
                stop -= 1  # so does a character
        if stop > pos:
            self._text_piece(data[pos:stop], out)
        if end < 0:
            return -1, data[stop:]
        self._in_text = False
        if self._cut_at >= 0:
            self._report()
        self._head = []
        return end, b""

    def _text_piece(self, piece: bytes, out: list[bytes]) -> None:
        """Pass on what of a text's ``piece`` (whole characters and references) is within the limit."""
        if self._cut_at >= 0:
            self._dropped += len(piece)
            self._newlines += piece.count(b"\n")
            return
        if self._chars < 0:
            if self._kept + len(piece) <= self.max_chars:  # a byte is at most one character: no count needed yet
                out.append(piece)
                self._pieces.append(piece)
                self._kept += len(piece)
                return
            self._chars = sum(map(_xml_chars, self._pieces))
            self._pieces = []
        chars = _xml_chars(piece)
        if self._chars + chars < self.max_chars:
            out.append(piece)
            self._chars += chars
            self._kept += len(piece)
            return
        cut = _cut_point(piece, self.max_chars - self._chars)
        out.append(piece[:cut])
        self._kept += cut
        self._cut_at = self._out + sum(map(len, out))
        self._dropped = len(piece) - cut
        self._newlines = piece.count(b"\n", cut)

    def _report(self) -> None:
        label = _page_label(b"".join(self._head)) or "a page"
        logger.warning(
            "%s: %s: text cut to %d characters while read (%d more bytes of XML dropped)",
            self.path,
            label,
            self.max_chars,
            self._dropped,
        )
        if self._newlines:
            self.dropped_lines.append((self._cut_at, self._newlines))

    def lines_dropped(self, data: bytes, offset: int) -> tuple[tuple[int, int], ...]:
        """``(line of data, newlines dropped there)`` for the cuts in ``data``, which starts at output ``offset``
        (and follows the data asked about before)."""
        found = []
        while self.dropped_lines and self.dropped_lines[0][0] < offset + len(data):
            at, n = self.dropped_lines.pop(0)
            found.append((data.count(b"\n", 0, at - offset), n))
        return tuple(found)


def _cut_point(data: bytes, chars: int) -> int:
    """The first whole-character offset of ``data`` before which it holds ``chars`` characters (by _xml_chars)."""
    have = at = 0
    while have < chars and at < len(data):
        nxt = _char_boundary(data, min(len(data), at + chars - have))  # a byte is at most one character
        have += _xml_chars(data[at:nxt])
        at = nxt
    return at


def _dump_pages(
    dump: Any, *, namespaces: Any, path: str, base_url: str | None, counts: Any
) -> Iterator[tuple[str, RawPage | None]]:
    """mwxml pages as RawPages (None outside ``namespaces``), each with the "after page ..." place for errors.

    Updates ``counts`` (pages_read, pages_kept, newest_rev_timestamp): the worker's ChunkPages or the
    reader's stats, so both read paths count alike.
    """
    for page in dump.pages:
        revision = None
        for revision in page:  # noqa: B007 - pages-articles has one revision; keep the last
            pass
        counts.pages_read += 1
        last = f"after page {page.title!r} (id {page.id})"
        if page.namespace not in namespaces:
            yield last, None
            continue
        timestamp = revision.timestamp.long_format() if revision is not None and revision.timestamp else None
        if timestamp and (counts.newest_rev_timestamp is None or timestamp > counts.newest_rev_timestamp):
            counts.newest_rev_timestamp = timestamp
        if page.id is None:
            raise InputError("page without <id>", path=path, where=f"page {page.title!r}")
        counts.pages_kept += 1
        yield (
            last,
            RawPage(
                page_id=page.id,
                title=page.title,
                namespace=page.namespace,
                kind="wikitext",
                text=(revision.text or "") if revision is not None else "",
                rev_id=revision.id if revision is not None else None,
                rev_timestamp=timestamp,
                redirect=page.redirect,
                source_file=Path(path).name,
                base_url=base_url,
            ),
        )


def parse_xml_chunk(chunk: XmlChunk) -> ChunkPages:
    """Worker side: parse a chunk's pages with mwxml (streaming), keeping those in the chosen namespaces."""
    import mwxml
    from mwxml.errors import MalformedXML

    document = chunk.header + chunk.data + (b"" if chunk.final else b"</mediawiki>")
    result = ChunkPages(pages=[])
    last = chunk.after
    try:
        dump = mwxml.Dump.from_file(io.BytesIO(document))
        for last, raw in _dump_pages(  # noqa: B007 - `last` is read after the loop
            dump, namespaces=chunk.namespaces, path=chunk.path, base_url=chunk.base_url, counts=result
        ):
            if raw is not None:
                result.pages.append(raw)
    except InputError:
        raise
    except ET.ParseError as exc:
        line, column = getattr(exc, "position", (None, None))
        if line is not None:
            # Map the position in header + data back to the original document.
            header_lines = chunk.header.count(b"\n")
            if line == header_lines + 1 and column is not None:
                column = column - (len(chunk.header) - chunk.header.rfind(b"\n") - 1) + chunk.first_column
            line -= header_lines + 1  # the line in data, from 0
            line += chunk.first_line + sum(n for at, n in chunk.dropped_lines if at <= line)
        raise InputError(
            f"malformed XML ({str(exc).split(':')[0]})",
            path=chunk.path,
            where=f"line {line}, column {column} of the XML, {last}",
        ) from exc
    except (MalformedXML, AssertionError, ValueError) as exc:
        detail = str(exc) or "unexpected XML structure"
        raise InputError(f"not a MediaWiki XML export ({detail})", path=chunk.path, where=last) from exc
    return result


def expand_inputs(inputs: Sequence[str | Path] | str | Path) -> list[Path]:
    """Input paths with folders expanded to their dump/JSONL files (natural sort: part 2 before part 10)."""
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    paths: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = [p for p in path.iterdir() if p.is_file() and _is_input_name(p.name)]
            if not found:
                raise InputError("folder holds no dump or JSONL files", path=str(path))
            paths.extend(sorted(found, key=_natural_key))
        elif not path.exists():
            raise InputError("no such file", path=str(path))
        elif not path.is_file():  # a FIFO with no writer would hold the build for ever; a device never ends
            raise InputError("not a regular file (a FIFO, device or socket): give the dump as a file", path=str(path))
        else:
            paths.append(path)
    if not paths:
        raise InputError("no input files given")
    return paths


def _is_input_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(INPUT_SUFFIXES)


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


class InputReader:
    """Streams the pages of one input file; ``stats`` fills in as it goes.

    Usage: ``reader = InputReader(path, namespaces={0}); for page in reader: ...`` parses everything in
    this process. The build uses :meth:`items` instead: MediaWiki XML comes out as :class:`XmlChunk`
    byte ranges cut at ``</page>`` (cheap) for worker processes to parse with mwxml; those workers'
    counts come back through :meth:`add_chunk_stats`.
    ``next_page_id`` numbers JSONL pages that carry no numeric id (a running counter per build).
    """

    def __init__(self, path: Path, *, namespaces: Iterable[int] = (0,), next_page_id: int = 1):
        self.path = Path(path)
        self.namespaces = frozenset(namespaces)
        self.next_page_id = next_page_id
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=str(self.path)) from exc
        self.stats = InputStats(path=self.path, size=size)
        self.multistream = False
        self._hasher: _HashingReader | None = None
        self._prefetch: _PrefetchReader | None = None
        self._buffered: BinaryIO | None = None
        self._buffered_probe: BinaryIO | None = None

    @property
    def bytes_read(self) -> int:
        """Bytes of the file (compressed) consumed so far: drives the progress bar."""
        return self._hasher.bytes_read if self._hasher else 0

    def __iter__(self) -> Iterator[RawPage]:
        for item in self.items():
            if isinstance(item, XmlChunk):
                chunk = parse_xml_chunk(item)
                self.add_chunk_stats(chunk)
                yield from chunk.pages
            else:
                yield item

    def add_chunk_stats(self, chunk: ChunkPages) -> None:
        """Count what a worker read from one of this input's chunks."""
        self.stats.pages_read += chunk.pages_read
        self.stats.pages_kept += chunk.pages_kept
        newest = chunk.newest_rev_timestamp
        if newest and (self.stats.newest_rev_timestamp is None or newest > self.stats.newest_rev_timestamp):
            self.stats.newest_rev_timestamp = newest

    def items(
        self, *, decompress: GroupDecompressor | None = None, chunk_bytes: int = CHUNK_BYTES
    ) -> Iterator[RawPage | XmlChunk]:
        """Pages (JSONL) or page chunks (XML dumps) in input order.

        ``decompress``: decompresses groups of bz2 streams elsewhere (a worker pool), used when the
        file is multistream bz2; otherwise a background thread decompresses.
        """
        where = str(self.path)
        if self.path.is_dir():
            raise InputError("is a directory, expected a dump or JSONL file", path=where)
        try:
            raw = open(self.path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=where) from exc
        self._hasher = _HashingReader(raw)
        try:
            blocks = self._blocks(self._hasher, decompress)
            head = self._read_head(blocks)
            stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
            if not stripped:
                raise InputError("empty file: no pages found", path=where)
            if stripped.startswith(b"<"):
                self.stats.format = XML_FORMAT
                yield from self._xml_items(head, blocks, chunk_bytes=chunk_bytes)
            elif stripped.startswith(b"{"):
                body = io.BufferedReader(_PrefixedReader(head, _BlockReader(blocks)), buffer_size=READ_BYTES)
                yield from self._json_pages(body)
            else:
                raise InputError(f"not a MediaWiki XML dump nor JSON lines (starts with {stripped[:40]!r})", path=where)
            self.stats.sha256 = self._hasher.hexdigest()
        finally:
            if self._prefetch is not None:
                self._prefetch.close()
            self._hasher.close()

    # -- compression -----------------------------------------------------------------------------

    def _blocks(self, hasher: _HashingReader, decompress: GroupDecompressor | None) -> Iterator[bytes]:
        """Decompressed bytes of the file in blocks; compression errors become :class:`InputError`."""
        buffered = io.BufferedReader(hasher, buffer_size=READ_BYTES)
        # Held here: a collected BufferedReader would close the file under the hasher.
        self._buffered = buffered
        magic = buffered.peek(3)[:3]
        if magic == b"BZh" and decompress is not None:
            probe = buffered.read(MULTISTREAM_PROBE)
            if _BZ2_STREAM_START.search(probe, 1):
                self.multistream = True
                logger.info("%s: multistream bz2, streams decompressed in parallel", self.path.name)
                return decompress(_bz2_stream_groups(probe, buffered), str(self.path), self.stats.size)
            buffered = io.BufferedReader(_PrefixedReader(probe, buffered), buffer_size=READ_BYTES)
            self._buffered_probe = buffered
        if magic == b"BZh":
            data = bz2_decompress(_compressed_chunks(buffered), path=str(self.path), size=self.stats.size)
            self._prefetch = _PrefetchReader(_BlockReader(data))  # reads multistream bz2 too
        elif magic[:2] == b"\x1f\x8b":
            self._prefetch = _PrefetchReader(gzip.GzipFile(fileobj=buffered))
        return self._read_blocks(self._prefetch or buffered)

    def _read_blocks(self, stream: BinaryIO) -> Iterator[bytes]:
        while True:
            try:
                block = stream.read(READ_BYTES)
            except (EOFError, OSError) as exc:
                raise self._compression_error(exc) from exc
            if not block:
                return
            yield block

    def _read_head(self, blocks: Iterator[bytes]) -> bytes:
        head = b""
        for block in blocks:
            head += block
            if len(head) >= SNIFF_BYTES:
                break
        return head

    def _compression_error(self, exc: BaseException) -> InputError:
        what = "truncated compressed file" if isinstance(exc, EOFError) else "corrupt compressed data"
        return InputError(
            f"{what} ({exc})",
            path=str(self.path),
            where=f"byte {self.bytes_read} of {self.stats.size} (compressed)",
        )

    # -- MediaWiki XML: cut at </page>, parse in workers -------------------------------------------

    def _xml_items(self, head: bytes, blocks: Iterator[bytes], *, chunk_bytes: int) -> Iterator[RawPage | XmlChunk]:
        """Header once, then runs of whole pages; ``bytes.find`` only, so the main process stays light. Each page's
        text is cut to :data:`TEXT_READ_CHARS` as the bytes come (:class:`_TextCutter`)."""
        cutter = _TextCutter(str(self.path))
        blocks = cutter.cut(itertools.chain((head,), blocks))
        buf = bytearray()
        page_at = -1
        while page_at < 0 and len(buf) < HEADER_LIMIT:
            block = next(blocks, None)
            if block is None:
                break
            buf += block
            page_at = buf.find(b"<page")
        if page_at < 0:
            # No page at all (or a giant header): let mwxml report on the whole stream in-process.
            body = io.BufferedReader(_PrefixedReader(bytes(buf), _BlockReader(blocks)), buffer_size=READ_BYTES)
            yield from self._xml_pages(body, bytes(buf[:SNIFF_BYTES]))
            return
        original_header = bytes(buf[:page_at])
        header, base_url = self._xml_header(original_header)
        del buf[:page_at]
        place = _ChunkPlace(
            line=original_header.count(b"\n") + 1,
            column=len(original_header) - original_header.rfind(b"\n") - 1,
            offset=page_at,
        )

        def chunk(data: bytes, final: bool) -> XmlChunk:
            return XmlChunk(
                path=str(self.path),
                header=header,
                data=data,
                final=final,
                first_line=place.line,
                first_column=place.column,
                after=place.after,
                namespaces=self.namespaces,
                base_url=base_url,
                dropped_lines=cutter.lines_dropped(data, place.offset),
            )

        for data in self._page_runs(buf, blocks, place, cutter, chunk_bytes):
            item = chunk(data, False)
            yield item
            place.advance(data, item.dropped_lines)
        yield chunk(bytes(buf), True)

    def _page_runs(
        self, buf: bytearray, blocks: Iterator[bytes], place: _ChunkPlace, cutter: _TextCutter, chunk_bytes: int
    ) -> Iterator[bytes]:
        """Runs of whole pages of about ``chunk_bytes`` cut from the front of ``buf`` as ``blocks`` fill it.

        Only the bytes added since the last look are searched for ``</page>`` (a page of many blocks would make
        searching it all each time quadratic); a page that grows past :data:`MAX_PAGE_BYTES` is an error.
        """
        clean = 0  # buf[:clean] holds no "</page>"
        for block in blocks:
            buf += block
            if len(buf) < chunk_bytes:
                continue
            end = buf.rfind(_PAGE_END, max(0, clean - len(_PAGE_END) + 1))
            if end < 0:
                clean = len(buf)
                if clean > chunk_bytes + MAX_PAGE_BYTES:
                    raise InputError(
                        f"a page takes over {MAX_PAGE_BYTES >> 20} MB of XML besides its text (cut while read)",
                        path=str(self.path),
                        where=f"from line {place.line} of the XML, {place.after}",
                    )
                continue
            end += len(_PAGE_END)
            with memoryview(buf) as view:  # one copy (a bytearray slice would be a second)
                data = bytes(view[:end])
            del buf[:end]
            clean = len(buf)
            yield data

    def _xml_header(self, header: bytes) -> tuple[bytes, str | None]:
        """Validate the dump's header with mwxml (siteinfo into stats); returns it ready for the chunks."""
        import mwxml
        from mwxml.errors import MalformedXML

        if header.find(b"<siteinfo") < 0:
            # mwxml insists on <siteinfo>; some exports (single-page exports, test files) lack it.
            root_end = header.find(b">", header.find(b"<mediawiki"))
            if header.find(b"<mediawiki") >= 0 and root_end >= 0:
                header = header[: root_end + 1] + b"<siteinfo></siteinfo>" + header[root_end + 1 :]
        try:
            info = mwxml.Dump.from_file(io.BytesIO(header + b"</mediawiki>")).site_info
        except ET.ParseError as exc:
            line, column = getattr(exc, "position", (None, None))
            raise InputError(
                f"malformed XML ({str(exc).split(':')[0]})",
                path=str(self.path),
                where=f"line {line}, column {column} of the XML, before the first page",
            ) from exc
        except (MalformedXML, AssertionError, ValueError) as exc:
            detail = str(exc) or "root element is not <mediawiki>"
            raise InputError(
                f"not a MediaWiki XML export ({detail})", path=str(self.path), where="before the first page"
            ) from exc
        self.stats.siteinfo = {
            "sitename": info.name,
            "dbname": info.dbname,
            "base": info.base,
            "generator": info.generator,
            "case": info.case,
        }
        logger.info("%s: detected MediaWiki XML dump (%s)", self.path.name, info.dbname or info.name or "no siteinfo")
        return header, info.base

    # -- MediaWiki XML parsed in-process (documents with no <page>) --------------------------------

    def _xml_pages(self, body: BinaryIO, head: bytes) -> Iterator[RawPage]:
        import mwxml
        from mwxml.errors import MalformedXML

        self.stats.format = XML_FORMAT
        siteinfo_at, page_at = head.find(b"<siteinfo"), head.find(b"<page")
        if page_at >= 0 and (siteinfo_at < 0 or siteinfo_at > page_at):
            # mwxml insists on <siteinfo>; some exports (single-page exports, test files) lack it.
            body = io.BufferedReader(_PrefixedReader(self._with_empty_siteinfo(head, body), body))
        last = "before the first page"
        try:
            dump = mwxml.Dump.from_file(body)
            info = dump.site_info
            self.stats.siteinfo = {
                "sitename": info.name,
                "dbname": info.dbname,
                "base": info.base,
                "generator": info.generator,
                "case": info.case,
            }
            logger.info(
                "%s: detected MediaWiki XML dump (%s)", self.path.name, info.dbname or info.name or "no siteinfo"
            )
            for last, raw in _dump_pages(  # noqa: B007 - `last` is read after the loop
                dump, namespaces=self.namespaces, path=str(self.path), base_url=info.base, counts=self.stats
            ):
                if raw is not None:
                    yield raw
        except InputError:
            raise
        except (EOFError, OSError) as exc:
            raise self._compression_error(exc) from exc
        except ET.ParseError as exc:
            line, column = getattr(exc, "position", (None, None))
            raise InputError(
                f"malformed XML ({str(exc).split(':')[0]})",
                path=str(self.path),
                where=f"line {line}, column {column} of the XML, {last}",
            ) from exc
        except (MalformedXML, AssertionError, ValueError) as exc:
            # mwxml asserts the root is <mediawiki> and raises MalformedXML on unexpected tags.
            detail = str(exc) or "root element is not <mediawiki>"
            raise InputError(f"not a MediaWiki XML export ({detail})", path=str(self.path), where=last) from exc
        if self.stats.pages_read == 0:
            raise InputError("no pages found", path=str(self.path))

    @staticmethod
    def _with_empty_siteinfo(head: bytes, body: BinaryIO) -> bytes:
        """Consume the root start tag from ``body`` and return it followed by an empty <siteinfo/>."""
        root_end = head.find(b">", head.find(b"<mediawiki"))
        if head.find(b"<mediawiki") < 0 or root_end < 0:
            return b""
        start = body.read(root_end + 1)
        return start + b"<siteinfo></siteinfo>"

    # -- JSON lines / JSON object ----------------------------------------------------------------

    def _json_pages(self, body: BinaryIO) -> Iterator[RawPage]:
        text = io.TextIOWrapper(body, encoding="utf-8", errors="strict", newline=None)
        line_no = 0
        shape: str | None = None
        try:
            first = text.readline()
            line_no = 1
            try:
                record = json.loads(first)
            except RecursionError as exc:
                raise InputError("JSON nested too deeply", path=str(self.path), where="line 1") from exc
            except json.JSONDecodeError as exc:
                # Not one object per line: a single JSON document such as {title: {title, extract}}, read whole;
                # unless the line is bad JSON in itself, or the next line is a record: a JSONL file whose first
                # line is bad, reported now rather than after reading the whole file.
                second = self._check_first_line(first, exc, text)
                yield from self._json_object_pages(first + second + text.read())
                return
            if _looks_like_title_map(record):
                # A one-line {title: {title, extract}} document, not a JSONL record.
                yield from self._json_object_pages(first + text.read())
                return
            shape = self._detect_shape(record, line_no)
            self.stats.format = f"jsonl:{shape}"
            logger.info("%s: detected JSONL format: %s", self.path.name, shape)
            page = self._jsonl_page(shape, record, line_no)
            if page is not None:
                yield page
            for line in text:
                line_no += 1
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(
                        f"invalid JSON ({exc.msg}, column {exc.colno})", path=str(self.path), where=f"line {line_no}"
                    ) from exc
                except RecursionError as exc:
                    raise InputError("JSON nested too deeply", path=str(self.path), where=f"line {line_no}") from exc
                page = self._jsonl_page(shape, record, line_no)
                if page is not None:
                    yield page
        except UnicodeDecodeError as exc:
            raise InputError(f"invalid UTF-8 ({exc.reason})", path=str(self.path), where=f"line {line_no + 1}") from exc
        except (EOFError, OSError) as exc:
            raise self._compression_error(exc) from exc
        if self.stats.pages_read == 0:
            raise InputError("no pages found", path=str(self.path))

    def _check_first_line(self, first: str, exc: json.JSONDecodeError, text: io.TextIOBase) -> str:
        """The second line, after checking that a first line that is not JSON may start a JSON document."""
        bad = InputError(f"invalid JSON ({exc.msg}, column {exc.colno})", path=str(self.path), where="line 1")
        if exc.pos < len(first.rstrip()):
            raise bad from exc  # the error is inside the line: no document starts so
        second = text.readline()
        try:
            record = json.loads(second)
        except (json.JSONDecodeError, RecursionError):
            return second
        if isinstance(record, dict):
            raise bad from exc
        return second

    def _detect_shape(self, record: Any, line_no: int) -> str:
        keys = sorted(record) if isinstance(record, dict) else []
        if isinstance(record, dict):
            if "wikipedia_title" in record and isinstance(record.get("text"), list):
                return "kilt"
            if "lines" in record and "id" in record:
                return "fever-wiki-pages"
            if "title" in record and isinstance(record.get("sentences"), list):
                return "hotpotqa-abstracts"
            if "title" in record and isinstance(record.get("text"), str):
                return "title-text"
        raise InputError(
            f"unknown JSONL record shape (keys seen: {keys or type(record).__name__}); expected "
            "{title, text}, {title, sentences[]}, {id, text, lines} or {wikipedia_id, wikipedia_title, text[]}",
            path=str(self.path),
            where=f"line {line_no}",
        )

    def _new_id(self, given: Any = None, where: str | None = None) -> int:
        if isinstance(given, str) and given.isascii() and given.isdigit():
            given = int(given)
        if isinstance(given, int) and not isinstance(given, bool):
            if 0 < given < 1 << 63:
                return given
            # A number out of range is a given id all the same: a fresh id in its place would collide with a
            # later page's own id, and the build would fail there, far from the cause.
            raise InputError(
                f"page id {str(given)[:40]} is out of range (a page id is a whole number from 1 to 2^63-1)",
                path=str(self.path),
                where=where,
            )
        page_id = self.next_page_id
        self.next_page_id += 1
        return page_id

    def _jsonl_page(self, shape: str, record: Any, line_no: int) -> RawPage | None:
        where = f"line {line_no}"
        if not isinstance(record, dict):
            raise InputError(f"expected a JSON object, got {type(record).__name__}", path=str(self.path), where=where)
        self.stats.pages_read += 1
        try:
            if shape == "hotpotqa-abstracts":
                # Titles stay as given (HotpotQA keeps "&amp;"): gold titles of its claims use the same form.
                title = record["title"]
                sentences = tuple((i, s.strip()) for i, s in enumerate(record["sentences"]) if isinstance(s, str))
                page = RawPage(self._new_id(), title, 0, "sentences", sentences=tuple(s for s in sentences if s[1]))
            elif shape == "fever-wiki-pages":
                title = record["id"].replace("_", " ")
                title = title.replace("-LRB-", "(").replace("-RRB-", ")").replace("-COLON-", ":")
                page = RawPage(
                    self._new_id(), title, 0, "sentences", sentences=tuple(_fever_lines(record.get("lines") or ""))
                )
                if not page.sentences and record.get("text"):
                    page = RawPage(page.page_id, title, 0, "text", sections=(("", record["text"]),))
            elif shape == "kilt":
                page = RawPage(
                    self._new_id(record.get("wikipedia_id"), where),
                    record["wikipedia_title"],
                    0,
                    "text",
                    sections=tuple(_kilt_sections(record["text"])),
                )
            else:
                page = RawPage(
                    self._new_id(record.get("id"), where), record["title"], 0, "text", sections=(("", record["text"]),)
                )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(
                f"record does not match the {shape} shape detected on line 1 (keys seen: {sorted(record)})",
                path=str(self.path),
                where=where,
            ) from exc
        page.source_file = self.path.name
        self.stats.pages_kept += 1
        return page

    def _json_object_pages(self, document: str) -> Iterator[RawPage]:
        try:
            data = json.loads(document)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"invalid JSON ({exc.msg})", path=str(self.path), where=f"line {exc.lineno}, column {exc.colno}"
            ) from exc
        except RecursionError as exc:
            raise InputError("JSON nested too deeply", path=str(self.path)) from exc
        values = list(data.values()) if isinstance(data, dict) else None
        if not _looks_like_title_map(data):
            keys = sorted(values[0])[:10] if values and isinstance(values[0], dict) else []
            raise InputError(
                f"unknown JSON document shape (expected {{title: {{title, extract}}}}; keys seen: {keys})",
                path=str(self.path),
            )
        self.stats.format = JSON_OBJECT_FORMAT
        logger.info("%s: detected JSON object format: title -> {title, extract}", self.path.name)
        for key, value in data.items():
            if not isinstance(value, dict):
                raise InputError(f"entry {key!r} is not an object", path=str(self.path))
            self.stats.pages_read += 1
            text = value.get("extract", value.get("text")) or ""
            page = RawPage(
                self._new_id(), value.get("title") or key, 0, "text", sections=(("", text),), source_file=self.path.name
            )
            self.stats.pages_kept += 1
            yield page


def _looks_like_title_map(record: Any) -> bool:
    """{title: {title?, extract|text}} as in vital_articles_summaries.json."""
    if not isinstance(record, dict) or not record:
        return False
    sample = list(record.values())[:10]
    return all(isinstance(v, dict) and ("extract" in v or "text" in v) for v in sample)


def _fever_lines(lines: str) -> Iterator[tuple[int, str]]:
    """FEVER wiki-pages ``lines``: "0\\tsentence\\tlink...\\n1\\t..."; keeps the given sentence ids."""
    for row in lines.split("\n"):
        parts = row.split("\t")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].strip():
            yield int(parts[0]), parts[1].strip()


def _kilt_sections(paragraphs: list[str]) -> Iterator[tuple[str, str]]:
    """KILT paragraphs (the first is the title; "Section::::History." starts a section) as (heading, text)."""
    heading, texts = "", []
    for paragraph in paragraphs[1:]:
        match = _KILT_SECTION.match(paragraph.strip())
        if match:
            if texts or heading == "":
                yield heading, "\n".join(texts)
            heading, texts = match.group(1).replace(":::", " > ").strip(), []
        elif paragraph.strip() and not paragraph.startswith("BULLET::::"):
            texts.append(paragraph.strip())
        elif paragraph.startswith("BULLET::::"):
            texts.append(paragraph[len("BULLET::::") :].lstrip("- ").strip())
    if texts or heading == "":
        yield heading, "\n".join(texts)
