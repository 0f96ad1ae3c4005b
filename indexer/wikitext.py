"""Fast wikitext -> structured clean text (sections, links, categories, infoboxes, tables).

A hand-written scanner, not a full MediaWiki parser: each stage is one linear pass
driven by compiled regexes and ``str.find`` (no backtracking-prone patterns), so
the cost stays proportional to the page and far below ``mwparserfromhell``.

Stages, in the order MediaWiki itself resolves them:
  1. comments and extension tags (``<ref>``, ``<math>``, ``<gallery>``, ...) removed;
  2. templates resolved innermost-first with a brace stack: a few inline templates
     are rendered (``{{convert}}``, ``{{lang}}``, ``{{nowrap}}``, dates, lists), infoboxes
     and disambiguation markers are recorded, everything else is dropped;
  3. tables (``{| ... |}``, nested) cut out of the prose and parsed into rows;
  4. the remainder split into sections at headings, and each section rendered:
     links (with files and categories), external links, HTML tags, bold/italic,
     lists as one sentence per line, entities, whitespace.
"""

from __future__ import annotations

import html
import itertools
import logging
import math
import re
import time
from collections.abc import Iterator

from indexer.parsed import ParsedLink, ParsedPage, ParsedSection
from wikiground.text import canonical_title

log = logging.getLogger(__name__)

DEFAULT_MAX_CHARS = 5_000_000

#: Seconds that cleaning one page may take. Every stage is linear in the page's size (tests/test_pathological_pages.py
#: doubles each malformed pattern known), so no article comes near it: it is there for a pattern no test knows, so
#: that one page cannot stall a build of many hours. A page past it keeps the clean text of its beginning: the cleaner
#: starts again on the text cut where it got to, within as long again in all, and gives up (an empty page) only
#: when that is spent too; each time with a warning naming the page.
PAGE_TIME_LIMIT_S = 20.0
#: Templates and links nested deeper than this in the page's source show nothing (nor do the links inside them):
#: each level's text holds the levels inside it, so cleaning them costs the depth times the page. MediaWiki stops at
#: a depth of 40 too (``$wgMaxPPExpandDepth`` until 1.38, now 100, and it counts the templates' own nesting as well).
MAX_NESTING = 40
# At most this many warnings are kept per page (a malformed page may have one per character).
_MAX_WARNINGS = 20

#: Normalised (casefolded, single-spaced) names of templates that mark a disambiguation page.
#: ``{{set index article}}``, ``{{surname}}`` and ``{{given name}}`` are set indexes, not
#: disambiguation pages; ``{{disambiguation needed}}`` is an inline cleanup tag.
DISAMBIGUATION_TEMPLATES: frozenset[str] = frozenset(
    {
        "disambiguation",
        "disambig",
        "disamb",
        "dab",
        "dis",
        "disambiguation page",
        "hndis",
        "human name disambiguation",
        "geodis",
        "place name disambiguation",
        "numberdis",
        "number disambiguation",
        "letter disambiguation",
        "letter-number combination disambiguation",
        "letter-numbercombdisambig",
        "school disambiguation",
        "schooldis",
        "hospital disambiguation",
        "hospitaldis",
        "mathematical disambiguation",
        "mathdab",
        "math dab",
        "species latin name disambiguation",
        "genus disambiguation",
        "taxonomy disambiguation",
        "road disambiguation",
        "call sign disambiguation",
        "airport disambiguation",
        "chinese title disambiguation",
        "disambiguation cleanup",
        "disambig-cleanup",
        "dab cleanup",
        "disambig cleanup",
        "church disambiguation",
        "caselaw disambiguation",
        "biology disambiguation",
    }
)
#: The behaviour switch that marks a disambiguation page without a template.
DISAMBIGUATION_MAGIC_WORD = "__DISAMBIG__"

# Infobox-like templates whose name does not start with "Infobox".
_INFOBOX_LIKE = frozenset(
    {
        "taxobox",
        "automatic taxobox",
        "speciesbox",
        "subspeciesbox",
        "chembox",
        "drugbox",
        "geobox",
        "mineral",
        "planetbox",
    }
)

# ---------------------------------------------------------------------------------------------
# Stage 1: comments and extension tags

# Tags whose content never shows as article prose.
_DROP_TAGS = (
    "ref",
    "references",
    "math",
    "gallery",
    "timeline",
    "score",
    "syntaxhighlight",
    "source",
    "chem",
    "ce",
    "graph",
    "mapframe",
    "maplink",
    "imagemap",
    "templatedata",
    "inputbox",
    "categorytree",
    "includeonly",
    "noinclude",
    "hiero",
    "charinsert",
    "indicator",
    "section",
    "templatestyles",
    "langconvert",
    "phonos",
    "pre",
)
# The attributes run to the first ">"; the tag is self-closing when a "/" ends them. The lookahead lets a "<" before
# no letter fail at once, before the names are tried one by one.
_DROP_TAG_OPEN = re.compile(r"<(?=[a-zA-Z])(" + "|".join(_DROP_TAGS) + r")\b[^<>]*>", re.IGNORECASE)
_CLOSE_TAG = {name: re.compile(r"</" + name + r"\s*>", re.IGNORECASE) for name in _DROP_TAGS}
_NOWIKI_OPEN = re.compile(r"<nowiki\s*(/?)>", re.IGNORECASE)
_NOWIKI_CLOSE = re.compile(r"</nowiki\s*>", re.IGNORECASE)
# Markup characters inside <nowiki> become entities, decoded only at the very end.
_NOWIKI_ESCAPE = str.maketrans(
    {
        "[": "&#91;",
        "]": "&#93;",
        "{": "&#123;",
        "}": "&#125;",
        "|": "&#124;",
        "<": "&lt;",
        ">": "&gt;",
        "'": "&#39;",
        "=": "&#61;",
        "*": "&#42;",
        "#": "&#35;",
        ":": "&#58;",
    }
)


class _OutOfTime(Exception):
    """The page's time is up; ``reached`` is the share of the running stage's text done (0 to 1)."""

    def __init__(self, reached: float) -> None:
        super().__init__(reached)
        self.reached = reached


class _Deadline:
    """When the page's cleaning must stop: the stages' loops call :meth:`check` with the offset they are at."""

    __slots__ = ("end",)

    def __init__(self, end: float) -> None:
        self.end = end

    def check(self, pos: int, size: int) -> None:
        if time.monotonic() > self.end:
            raise _OutOfTime(pos / size if size else 0.0)


_NO_DEADLINE = _Deadline(math.inf)


def _strip_comments(text: str, warnings: list[str], deadline: _Deadline = _NO_DEADLINE) -> str:
    out: list[str] = []
    pos = 0
    while (start := text.find("<!--", pos)) >= 0:
        deadline.check(start, len(text))
        out.append(text[pos:start])
        end = text.find("-->", start + 4)
        if end < 0:
            # MediaWiki hides an unclosed comment to the end of the page; so do we.
            warnings.append(f"unclosed comment at offset {start}")
            return "".join(out)
        pos = end + 3
    out.append(text[pos:])
    return "".join(out)


def _unwrap_nowiki(text: str) -> str:
    """``<nowiki>x</nowiki>`` -> x with its markup characters escaped; ``<nowiki/>`` -> ''; an unclosed
    ``<nowiki>`` stays as it is.

    In one pass: each open tag takes the first close tag after it, and once no close tag is left none is
    searched for again (a lazy regex "<nowiki>(.*?)</nowiki>" would rescan to the end of the page for
    every unclosed tag: quadratic).
    """
    out: list[str] = []
    pos = 0
    closes = True  # a close tag may follow
    while (m := _NOWIKI_OPEN.search(text, pos)) is not None:
        if m.group(1):  # <nowiki/>
            out.append(text[pos : m.start()])
            pos = m.end()
            continue
        close = _NOWIKI_CLOSE.search(text, m.end()) if closes else None
        if close is None:  # unclosed: kept
            closes = False
            out.append(text[pos : m.end()])
            pos = m.end()
        else:
            out.append(text[pos : m.start()])
            out.append(text[m.end() : close.start()].translate(_NOWIKI_ESCAPE))
            pos = close.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _strip_tags_with_content(text: str, warnings: list[str], deadline: _Deadline = _NO_DEADLINE) -> str:
    if "<nowiki" in text or "<NOWIKI" in text:
        text = _unwrap_nowiki(text)
    out: list[str] = []
    pos = 0
    search = _DROP_TAG_OPEN.search
    # Tags with no close tag after the current offset: their close tag is not searched for again (each search
    # would run to the end of the page: quadratic in the unclosed tags).
    unclosed: set[str] = set()
    for i in itertools.count():
        m = search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        if not i & 63:
            deadline.check(m.start(), len(text))
        out.append(text[pos : m.start()])
        if text[m.end() - 2] == "/":  # self-closing: <ref name="x" />
            pos = m.end()
            continue
        name = m.group(1).lower()
        close = None if name in unclosed else _CLOSE_TAG[name].search(text, m.end())
        if close is None:
            # Dropping only the stray opening tag keeps the rest of the page.
            unclosed.add(name)
            warnings.append(f"unclosed <{name}> at offset {m.start()}")
            pos = m.end()
        else:
            pos = close.end()
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Stage 2: templates

# Two scans, for opening and for closing runs, merged: each has a literal first character for the regex
# engine to scan for, which the alternation "\{\{+|\}\}+" lacks.
_OPEN_BRACES = re.compile(r"\{\{+")
_CLOSE_BRACES = re.compile(r"\}\}+")
_PIPE_OR_LINK = re.compile(r"\[\[|\]\]|\|")
_PH_PIPE = "\ue000"  # {{!}}: a pipe that must not split template arguments
_PH_EQUALS = "\ue001"  # {{=}}
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _merged(first: Iterator[re.Match[str]], second: Iterator[re.Match[str]]) -> Iterator[re.Match[str]]:
    """The matches of two ``finditer`` scans in text order (ties: ``first``'s match first)."""
    a, b = next(first, None), next(second, None)
    while b is not None:
        if a is not None and a.start() <= b.start():
            yield a
            a = next(first, None)
        else:
            yield b
            b = next(second, None)
    if a is not None:
        yield a
        yield from first


def _split_args(body: str) -> list[str]:
    """Split a template body at top-level pipes (pipes inside [[links]] do not split)."""
    parts: list[str] = []
    depth = 0
    last = 0
    for m in _PIPE_OR_LINK.finditer(body):
        tok = m.group()
        if tok == "[[":
            depth += 1
        elif tok == "]]":
            if depth:
                depth -= 1
        elif depth == 0:
            parts.append(body[last : m.start()])
            last = m.end()
    parts.append(body[last:])
    return parts


def _norm_name(raw: str) -> str:
    name = " ".join(raw.replace("_", " ").split()).lower()
    if name.startswith(("template:", "subst:", "safesubst:", "msgnw:")):
        name = name.split(":", 1)[1].strip()
    return name


def _positional_and_named(args: list[str]) -> tuple[list[str], dict[str, str]]:
    pos: list[str] = []
    named: dict[str, str] = {}
    for a in args:
        eq = a.find("=")
        if eq > 0 and "[[" not in a[:eq] and "<" not in a[:eq]:
            named[a[:eq].strip().lower()] = a[eq + 1 :].strip()
        else:
            pos.append(a.strip())
    return pos, named


def _render_date(pos: list[str], named: dict[str, str]) -> str:
    nums = [p for p in pos if p.isdigit()][:3]
    if not nums:
        return pos[0] if pos else ""
    year = nums[0]
    if len(nums) >= 2 and 1 <= int(nums[1]) <= 12:
        month = _MONTHS[int(nums[1]) - 1]
        if len(nums) == 3:
            if named.get("df", "").lower() in ("y", "yes", "1", "true"):
                return f"{int(nums[2])} {month} {year}"
            return f"{month} {int(nums[2])}, {year}"
        return f"{month} {year}"
    return year


_UNWRAP_FIRST = frozenset(
    {
        "nowrap",
        "nobr",
        "small",
        "smaller",
        "big",
        "larger",
        "nobold",
        "noitalic",
        "sc",
        "smallcaps",
        "small caps",
        "em",
        "strong",
        "var",
        "abbr",
        "vanchor",
        "visible anchor",
        "sic",
        "val",
        "nihongo",
        "keypress",
        "mvar",
        "math",
        "nowrap begin",
        "resize",
        "serif",
        "highlight",
        "flag",
        "flagcountry",
        "flagu",
        "flag country",
        "flaglink",
        "country",
        "lower",
        "upper",
        "ucfirst",
        "lcfirst",
        "quote",
        "cquote",
        "quotation",
        "blockquote",
        "centered pull quote",
        "pull quote",
        "rquote",
        "ill",
        "interlanguage link",
        "interlanguage link multi",
        "illm",
        "ill-wd",
        "braces",
        "tooltip",
        "hover title",
        "shy",
        "lang-en",
        "script",
    }
)
_UNWRAP_LAST = frozenset(
    {
        "lang",
        "transl",
        "transliteration",
        "longitem",
        "nowrap end",
        "columns-list",
        "col-list",
        "colbegin",
        "div col list",
    }
)
_LIST_TEMPLATES = frozenset(
    {
        "unbulleted list",
        "ubl",
        "ubil",
        "unbulleted indent list",
        "hlist",
        "bulleted list",
        "bulleted",
        "flatlist",
        "flat list",
        "plainlist",
        "plain list",
        "collapsible list",
        "cslist",
        "comma separated entries",
        "enum",
        "ordered list",
        "ol",
        "ul",
    }
)
_LITERAL = {
    "!": _PH_PIPE,
    "=": _PH_EQUALS,
    "'": "'",
    '"': '"',
    "ndash": "\u2013",
    "mdash": "\u2014",
    "snd": " \u2013 ",
    "spaced ndash": " \u2013 ",
    "spaced en dash": " \u2013 ",
    "nbsp": " ",
    "·": " \u00b7 ",
    "dot": " \u00b7 ",
    "middot": "\u00b7",
    "bull": " \u2022 ",
    "'s": "'s",
    "en dash": "\u2013",
    "em dash": "\u2014",
    "-": "",
    "sp": " ",
    "space": " ",
    "pipe": _PH_PIPE,
    "colon": ":",
    "!!": _PH_PIPE * 2,
    "break": " ",
    "br": " ",
    "clear": "",
    '-"': "",
    "^": "",
}
_DATE_TEMPLATES = frozenset(
    {
        "birth date",
        "death date",
        "birth date and age",
        "death date and age",
        "start date",
        "end date",
        "dob",
        "bda",
        "dda",
        "birth-date",
        "death-date",
        "start date and age",
        "end date and age",
        "film date",
        "release date",
        "date",
        "birth year and age",
        "death year and age",
        "birth year",
        "death year",
    }
)


def _render_template(name: str, args: list[str]) -> str:
    """Text (still wikitext: links allowed) that the template shows in the prose."""
    if name in _LITERAL:
        return _LITERAL[name]
    if name in _UNWRAP_FIRST:
        pos, named = _positional_and_named(args)
        if pos:
            return pos[0]
        return named.get("text", named.get("1", named.get("quote", "")))
    if name in _UNWRAP_LAST or name.startswith("lang-"):
        pos, named = _positional_and_named(args)
        if name == "columns-list" or name == "col-list":
            return pos[-1] if pos else named.get("content", "")
        return pos[-1] if pos else named.get("content", named.get("text", ""))
    if name == "div col":
        _, named = _positional_and_named(args)
        return named.get("content", "")
    if name in _LIST_TEMPLATES:
        pos, named = _positional_and_named(args)
        items = [p for p in pos if p] or [v for k, v in named.items() if k.isdigit() and v]
        if len(items) == 1 and "\n" in items[0]:
            return items[0]  # {{plainlist|\n* a\n* b}}: the body is itself a list
        return ", ".join(items)
    if name in ("convert", "cvt"):
        pos, _ = _positional_and_named(args)
        if len(pos) >= 4 and pos[1] in ("-", "to", "and", "\u2013", "x", "by", "or", "+", "&"):
            return f"{pos[0]} {pos[1]} {pos[2]} {pos[3]}"
        return " ".join(pos[:2])
    if name in _DATE_TEMPLATES:
        pos, named = _positional_and_named(args)
        return _render_date(pos, named)
    if name in ("circa", "c."):
        pos, _ = _positional_and_named(args)
        return "c. " + pos[0] if pos else "c."
    if name in ("frac", "fraction"):
        pos, _ = _positional_and_named(args)
        if len(pos) == 3:
            return f"{pos[0]} {pos[1]}/{pos[2]}"
        return "/".join(pos)
    if name in ("sortname",):
        pos, _ = _positional_and_named(args)
        return " ".join(pos[:2])
    if name in ("sort", "sorted"):
        pos, _ = _positional_and_named(args)
        return pos[-1] if pos else ""
    if name in ("isbn", "issn"):
        pos, _ = _positional_and_named(args)
        return f"{name.upper()} {pos[0]}" if pos else ""
    if name in ("us$", "usd"):
        pos, _ = _positional_and_named(args)
        return "US$" + pos[0] if pos else "US$"
    if name in ("as of",):
        pos, _ = _positional_and_named(args)
        return "As of " + _render_date(pos, {}) if pos else ""
    return ""


# Every name _render_template shows something for (besides "lang-..."): the rest are dropped unsplit.
# A template rendered there must be named here too (test_every_rendered_template_is_listed checks).
_RENDERED = frozenset(
    {
        *_LITERAL,
        *_UNWRAP_FIRST,
        *_UNWRAP_LAST,
        "div col",
        *_LIST_TEMPLATES,
        "convert",
        "cvt",
        *_DATE_TEMPLATES,
        "circa",
        "c.",
        "frac",
        "fraction",
        "sortname",
        "sort",
        "sorted",
        "isbn",
        "issn",
        "us$",
        "usd",
        "as of",
    }
)


def _is_infobox(name: str) -> str | None:
    if name.startswith("infobox"):
        return name[7:].strip(" _-") or "infobox"
    if name in _INFOBOX_LIKE:
        return name
    return None


class _TemplateState:
    __slots__ = ("infoboxes", "infobox_links", "disambiguation", "unclosed")

    def __init__(self) -> None:
        self.infoboxes: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.infobox_links: list[tuple[str, str]] = []  # (key, value wikitext) of the values holding links
        self.disambiguation = False
        self.unclosed = 0  # "{{" never closed: their text up to the line's end is dropped (_close_unclosed)


def _handle_template(body: str, state: _TemplateState) -> str:
    if body[:1] == "#":  # parser function ({{#if:...}}, {{#tag:ref|...}})
        return ""
    # The name first: most templates (citations, navboxes) are dropped, and their arguments never split.
    bar = body.find("|")
    raw_name = body if bar < 0 else body[:bar]
    if "[[" in raw_name:
        raw_name = _split_args(body)[0]  # a link's pipes do not end the name
    name = _norm_name(raw_name)
    if ":" in name and not name.startswith("lang-"):
        return ""  # DEFAULTSORT:x, lc:x, PAGENAME-style magic with arguments
    if name in DISAMBIGUATION_TEMPLATES:
        state.disambiguation = True
        return ""
    box_type = _is_infobox(name)
    if box_type is not None:
        raw_type = " ".join(raw_name.replace("_", " ").split())
        if raw_type.lower().startswith("template:"):
            raw_type = raw_type[9:].strip()
        if raw_type.lower().startswith("infobox"):
            raw_type = raw_type[7:].strip(" -") or "infobox"
        keys: list[str] = []
        raw_values: list[str] = []
        for a in _split_args(body)[1:]:
            eq = a.find("=")
            if eq > 0:
                keys.append(a[:eq].strip())
                raw_values.append(a[eq + 1 :])
        values = _inline_many(raw_values, br=", ")
        pairs = [(k, v) for k, v in zip(keys, values) if k and v]
        state.infoboxes.append((raw_type, tuple(pairs)))
        # The knowledge graph takes a value's links from its wikitext: the clean value has lost them.
        state.infobox_links.extend((k, raw) for k, raw in zip(keys, raw_values) if k and "[[" in raw)
        return ""
    if name not in _RENDERED and not name.startswith("lang-"):
        return ""
    return _render_template(name, _split_args(body)[1:])


def _expand_templates(text: str, state: _TemplateState, deadline: _Deadline = _NO_DEADLINE) -> str:
    """Resolve every ``{{...}}`` innermost-first in one pass with a stack of open frames."""
    if "{{" not in text:
        return text.replace("}}", "") if "}}" in text else text  # stray closing pairs only
    # Each frame: [kind (2 = template, 3 = parameter), pieces of its body so far].
    root: list[str] = []
    stack: list[tuple[int, list[str]]] = []
    pieces = root
    last = 0
    # The runs' spans in text order (an opening and a closing run never start at the same offset).
    runs = [m.span() for m in _OPEN_BRACES.finditer(text)]
    runs += [m.span() for m in _CLOSE_BRACES.finditer(text)]
    runs.sort()
    for i, (start, end) in enumerate(runs):
        if not i & 127:
            deadline.check(start, len(text))
        pieces.append(text[last:start])
        last = end
        n = end - start
        if text[start] == "{":
            if n == 3:
                stack.append((3, []))
            else:
                if n % 2:
                    pieces.append("{")  # {{{{{ ... : an odd brace is literal
                for _ in range(n // 2):
                    stack.append((2, []))
            pieces = stack[-1][1]
            continue
        # A run of closing braces closes frames from the innermost outwards.
        while n >= 2 and stack:
            kind, body_parts = stack[-1]
            if kind == 3 and n < 3:
                # "}}" cannot close a {{{parameter}}}: treat it as a template opened as "{{" + "{".
                kind = 2
                body_parts.insert(0, "{")
            stack.pop()
            n -= kind
            pieces = stack[-1][1] if stack else root
            pieces.append(_close_frame(kind, body_parts, state) if len(stack) < MAX_NESTING else "")
        # Closing braces left over with nothing open are dropped (they would only show as noise).
    pieces.append(text[last:])
    _close_unclosed(root, stack, state)
    return "".join(root)


# Where an unclosed template's own text ends: the first line that is not one of its parameter lines ("| key = v").
_UNCLOSED_END = re.compile(r"\n(?![ \t]*[|}])")


def _close_unclosed(root: list[str], stack: list[tuple[int, list[str]]], state: _TemplateState) -> None:
    """The text of the frames left open appended to ``root``, outermost first. MediaWiki prints an unclosed
    ``{{name|a|b`` literally; its name and arguments are markup, not prose (a page's broken infobox would be indexed
    as its raw parameters), so each open frame's text up to the end of its line and of the parameter lines after
    it is dropped; the lines after those are the page's own and are kept. A frame gets no pieces while one inside it
    is open, so each frame's pieces are its own text (joined frame by frame, nothing is copied twice)."""
    for _, body_parts in stack:
        body = "".join(body_parts)
        end = _UNCLOSED_END.search(body)
        root.append(body[end.start() :] if end else "")
    state.unclosed += len(stack)


def _close_frame(kind: int, body_parts: list[str], state: _TemplateState) -> str:
    """What a closed ``{{template}}`` (kind 2) or ``{{{parameter}}}`` (kind 3) shows."""
    body = "".join(body_parts)
    if kind == 3:
        # {{{name|default}}}: only the default can show in an article.
        bar = body.find("|")
        return body[bar + 1 :] if bar >= 0 else ""
    return _handle_template(body, state)


# ---------------------------------------------------------------------------------------------
# Stage 3: tables

# Two scans, each for a literal first character the regex engine finds fast, merged (see _table_tokens).
_TABLE_OPEN = re.compile(r"\{(?=\|)\|")
_TABLE_CLOSE = re.compile(r"\|(?=\})\}")
_HEADING_LINE = re.compile(r"^=[^\n]*=[ \t]*$", re.MULTILINE)
_CELL_SPLIT = re.compile(r"\|\||!!")
_NOT_INDENT = re.compile(r"[^ \t:]")


def _cell_content(cell: str) -> str:
    """Drop a cell's attributes: ``style="x" | content`` -> ``content``."""
    bar = cell.find("|")
    if bar < 0:
        return cell
    link = cell.find("[[")
    if link >= 0 and link < bar:
        return cell
    return cell[bar + 1 :]


def _parse_table(body: str) -> tuple[str, ...]:
    """Rows of a table body (without ``{|`` and ``|}``): cleaned cells joined with " | "."""
    rows: list[list[str]] = []
    cur: list[str] | None = None
    cells: list[str] = []  # raw cells of the current row, last one may continue on next lines
    more: list[str] = []  # the lines continuing the last cell, joined to it once (adding each copies the cell)
    lines = body.split("\n")
    for line in lines[1:]:  # line 0 holds the table's attributes
        s = line.lstrip()
        head = s[:2]
        if more and (head == "|-" or head[:1] == "|" or head[:1] == "!"):
            cells[-1] += "".join(more)
            more.clear()
        if head == "|-":
            if cur is not None or cells:
                rows.append(cells)
            cells = []
            cur = cells
            continue
        if head == "|+":
            continue  # caption
        if head[:1] == "|" or head[:1] == "!":
            cur = cells
            rest = s[1:]
            cells.extend(_cell_content(c) for c in _CELL_SPLIT.split(rest))
            continue
        if cells:
            more.append("\n" + line)
    if more:
        cells[-1] += "".join(more)
    if cells:
        rows.append(cells)
    flat = _inline_many([c for raw_cells in rows for c in raw_cells], br=" ")
    out: list[str] = []
    pos = 0
    for raw_cells in rows:
        clean = [c for c in flat[pos : pos + len(raw_cells)] if c]  # empty/spacer cells dropped
        pos += len(raw_cells)
        if clean:
            out.append(" | ".join(clean))
    return tuple(out)


def _extract_tables(
    text: str, tables: list[tuple[int, tuple[str, ...]]], warnings: list[str], deadline: _Deadline = _NO_DEADLINE
) -> str:
    if "{|" not in text:
        return text
    out: list[str] = []
    stack: list[int] = []  # start offsets of the open tables
    inner_spans: list[list[tuple[int, int]]] = []  # per open table: spans of nested tables
    last = 0  # end of the last text copied to the prose
    for line_start, at, tok in _table_tokens(text):
        deadline.check(at, len(text))
        if tok == "{|":
            if not stack:
                out.append(text[last:line_start])
            stack.append(at)
            inner_spans.append([])
            continue
        if not stack:
            continue  # a stray "|}" line
        start = stack.pop()
        spans = inner_spans.pop()
        body = _cut(text, start + 2, at, spans)
        rows = _parse_table(body)
        if rows:
            tables.append((start, rows))
        if stack:
            inner_spans[-1].append((start, at + 2))
        else:
            out.append("\n")
            last = at + 2
    if stack:
        # Unclosed table: close it at the next heading rather than swallow the rest of the page.
        start = stack[0]
        warnings.append(f"unclosed table at offset {start}")
        h = _HEADING_LINE.search(text, start)
        end = h.start() if h else len(text)
        rows = _parse_table(_cut(text, start + 2, end, inner_spans[0] if inner_spans else []))
        if rows:
            tables.append((start, rows))
        out.append("\n")
        last = end
    out.append(text[last:])
    return "".join(out)


def _table_tokens(text: str) -> Iterator[tuple[int, int, str]]:
    """``(line start, offset, token)`` of each ``{|`` / ``|}`` that starts a line (after spaces, tabs
    and ``:`` indents).

    Each token found is checked against its line: "^[ \t:]*" with MULTILINE gives the regex engine no
    literal to scan for, and it would try the pattern at every offset of the page. The line's start and its first
    character that is not an indent are found once per line, not once per token (many tokens on a line would
    make that quadratic).
    """
    end = 0
    line_start, first = 0, -1  # the current line's start and its first character that is no indent (-1: not found yet)
    scanned = 0  # no newline in text[line_start:scanned]
    for m in _merged(_TABLE_OPEN.finditer(text), _TABLE_CLOSE.finditer(text)):
        at = m.start()
        if at < end:
            continue  # "{|}": one scan for either token would resume after the "{|"
        end = m.end()
        newline = text.rfind("\n", scanned, at)
        scanned = at
        if newline >= 0 or first < 0:
            line_start = newline + 1
            indent = _NOT_INDENT.search(text, line_start, at)
            first = indent.start() if indent else at
        if first == at:
            yield line_start, at, m.group()


def _cut(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text[start:end]
    parts = []
    pos = start
    for s, e in spans:
        parts.append(text[pos:s])
        pos = e
    parts.append(text[pos:end])
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# Stage 4: links and inline markup

_BRACKETS = re.compile(r"\[\[+|\]\]+")
_LINK_TRAIL = re.compile(r"[a-z]+")
_FLAT_LINK = re.compile(r"\[\[([^\[\]|\n]*)(?:\|([^\[\]\n]*))?\]\]([a-z]*)")
_FILE_OPEN = re.compile(r"\[\[[ \t]*(?:file|image)[ \t]*:", re.IGNORECASE)
_FILE_NS = frozenset({"file", "image", "media"})
_OTHER_NS = frozenset(
    {
        "category",
        "template",
        "wikipedia",
        "wp",
        "project",
        "help",
        "portal",
        "user",
        "special",
        "mediawiki",
        "module",
        "draft",
        "book",
        "timedtext",
        "talk",
        "wikt",
        "wiktionary",
        "commons",
        "wikisource",
        "wikiquote",
        "wikinews",
        "wikibooks",
        "wikiversity",
        "wikivoyage",
        "wikispecies",
        "species",
        "meta",
        "metawikipedia",
        "mw",
        "mediawikiwiki",
        "d",
        "wikidata",
        "s",
        "q",
        "n",
        "b",
        "v",
        "voy",
        "c",
        "m",
        "w",
        "foundation",
        "wmf",
        "phab",
        "gerrit",
        "doi",
        "google",
        "oeis",
        "iarchive",
        "rfc",
        "bugzilla",
        "imdbname",
        "imdbtitle",
        "arxiv",
        "en",
        "simple",
    }
)
_LANG_PREFIX = re.compile(r"[a-z]{2,3}(?:-[a-z]{2,8}){0,2}$|simple$|zh-min-nan$|be-x-old$|roa-rup$|map-bms$")
_EXT_LINK_START = re.compile(r"\[(?:https?:|ftp:|mailto:|irc:|news:|//)", re.IGNORECASE)
# Possessive: backtracking into the URL or the label finds no other match.
_EXT_LINK = re.compile(
    r"\[(?:https?:|ftp:|mailto:|irc:|news:|//)[^\s\]\[\ue002]*+(?:[ \t]([^\]\n\ue002]*+))?\]", re.IGNORECASE
)
_EXT_URL = re.compile(r"[^\s\]\[\ue002]*+")
_EXT_LABEL_END = re.compile(r"[\]\n\ue002]")
_HTML_TAG = re.compile(  # the lookahead as in _DROP_TAG_OPEN
    r"</?(?=[a-zA-Z])(?:span|div|small|big|sup|sub|center|font|b|i|u|s|strike|del|ins|code|tt|abbr|"
    r"blockquote|cite|p|hr|li|ul|ol|dl|dt|dd|table|tr|td|th|caption|em|strong|q|var|kbd|samp|"
    r"poem|onlyinclude|nowiki|wbr|bdi|bdo|mark|time|ruby|rt|rp|rb|data|dfn|h[1-6]|tbody|"
    r"thead|tfoot|references|ref|includeonly|noinclude|section|pre|gallery|math|chem|score|"
    r"templatestyles|syntaxhighlight|source|timeline|hiero|imagemap|graph|mapframe|maplink|"
    r"categorytree|inputbox|indicator)\b[^<>\ue002]*>",
    re.IGNORECASE,
)
_BR = re.compile(r"<br\s*/?\s*>|</br\s*>", re.IGNORECASE)
_MAGIC = re.compile(r"__[A-Z]+__")
_QUOTES = re.compile(r"''''+")  # runs of four or more apostrophes
_BOLD_ITALIC = re.compile(r"'''''|'''|''")
_LEFTOVER = re.compile(r"\{\{|\}\}|\[\[|\]\]|\{\||\|\}|<ref", re.IGNORECASE)
# Runs of spaces become one, and a space before punctuation goes, in one pass (see _spaces_repl).
# Matched: a run of two or more spaces, or one space before punctuation, with the rest of its run.
_SPACES = re.compile(r" (?=[ ,.;:!?)]) *")
_PUNCT = frozenset(",.;:!?)")
# "()" and "(; " left behind by removed pronunciation/reference templates.
_PAREN_JUNK = re.compile(r"\((?:[ ,;:]*\)|[ ,;:]+)")
# Not started inside a run of whitespace (it would scan the run's rest from each of its characters): a match that
# could start there starts where the run does.
_COMMAS = re.compile(r"(?<!\s)(?:\s*,){2,}")
_SEP = "\ue002"  # joins fragments rendered in one batch
_SECTION_SEP = "\n\ue002\n"
_LINE_END = (".", "!", "?", "\u3002", "\u2026")


def _quote_repl(m: re.Match[str]) -> str:
    # A run of four is an apostrophe then bold; longer runs keep one apostrophe.
    return "" if len(m.group()) == 5 else "'"


# Characters that make _anchor_text do more than collapse whitespace.
_ANCHOR_MARKUP = re.compile(r"''|[<&{}\[\]\ue000\ue001]")


class _LinkSink:
    """Collects links and categories of one page while sections are rendered."""

    __slots__ = ("links", "categories", "section_index", "category_set")

    def __init__(self) -> None:
        self.links: list[ParsedLink] = []
        self.categories: list[str] = []
        self.category_set: set[str] = set()  # the categories' names, looked up in constant time
        self.section_index = 0


def _render_flat_links(text: str, sink: _LinkSink | None) -> str:
    """``text`` with its un-nested links replaced by their visible text, recorded in order in ``sink``.

    Most links are plain (no namespace, fragment, "_", entity or run of whitespace in the title, no markup in
    the visible text): those are rendered here, with _render_link's result but without its namespace and
    markup passes.
    """
    parts = _FLAT_LINK.split(text)
    if len(parts) == 1:
        return text
    links = sink.links if sink is not None else None
    section = sink.section_index if sink is not None else 0
    pieces = iter(parts)
    out = [next(pieces)]
    # split() gives, per link, its three groups and then the text up to the next link.
    for target, label, trail, after in zip(pieces, pieces, pieces, pieces):
        t = target.strip()
        # Letters and digits with single spaces (most titles and anchors) pass all the checks at once: one isalnum().
        plain = "  " not in t and t.replace(" ", "").isalnum()
        if plain or (
            t and ":" not in t and "#" not in t and "_" not in t and "&" not in t and "  " not in t and "\t" not in t
        ):
            if label is not None:
                anchor = label.strip()
                plain = "  " not in anchor and anchor.replace(" ", "").isalnum()
            else:
                anchor = t
            if plain or (anchor and not _ANCHOR_MARKUP.search(anchor)):
                if trail:
                    anchor += trail
                if links is not None:
                    # The stored anchor has its whitespace collapsed: already so when the (stripped) anchor
                    # has no double space and no whitespace but spaces (the rest is unprintable).
                    if not plain and ("  " in anchor or not anchor.isprintable()):
                        stored = " ".join(anchor.split())
                    else:
                        stored = anchor
                    # tuple.__new__: a namedtuple's own __new__ is a Python-level function.
                    links.append(_new_tuple(ParsedLink, (t[:1].upper() + t[1:], stored, section)))
                out.append(anchor)
                out.append(after)
                continue
        out.append(_render_link(target, label, trail, sink))
        out.append(after)
    return "".join(out)


_new_tuple = tuple.__new__


def _namespace(target: str) -> tuple[str, str]:
    """(lower-cased prefix, rest) if ``target`` has a namespace or interwiki prefix."""
    colon = target.find(":")
    if colon <= 0:
        return "", target
    prefix = target[:colon].strip().lower().replace("_", " ")
    if prefix in _FILE_NS or prefix in _OTHER_NS or prefix.endswith(" talk"):
        return prefix, target[colon + 1 :]
    if _LANG_PREFIX.match(prefix):
        return prefix, target[colon + 1 :]
    return "", target


def _canonical(title: str) -> str:
    """``canonical_title`` of a link target; one with no "_", entity or run of whitespace is only stripped and
    capitalised (other whitespace, such as no-break spaces, is kept as written)."""
    if "_" in title or "  " in title or "\n" in title or "\t" in title or "&" in title:
        return canonical_title(html.unescape(title))
    t = title.strip()
    return t[:1].upper() + t[1:]


def _render_link(target: str, label: str | None, trail: str, sink: _LinkSink | None) -> str:
    """Visible text of ``[[target|label]]trail``; records ns-0 links and categories in ``sink``."""
    target = target.strip()
    leading_colon = target[:1] == ":"
    if leading_colon:
        target = target[1:].lstrip()
    if ":" in target:
        prefix, rest = _namespace(target)
        if prefix:
            if prefix in _FILE_NS:
                if prefix == "media":
                    return (label if label is not None else rest) + trail
                return ""
            if prefix == "category" and not leading_colon:
                if sink is not None:
                    name = _canonical(rest.split("|", 1)[0])
                    if name and name not in sink.category_set:
                        sink.category_set.add(name)
                        sink.categories.append(name)
                return ""
            if not leading_colon and prefix not in _OTHER_NS:
                return ""  # interlanguage link: shown in the sidebar, not in the text
            if label is None:
                return target + trail
            return (label.strip() or rest) + trail
    if label is None:
        anchor = target
    else:
        anchor = label.strip()
        if not anchor:  # pipe trick: [[Paris (France)|]] shows "Paris"
            anchor = target.split(" (", 1)[0].strip()
    if trail:
        anchor += trail
    if sink is not None:
        hash_ = target.find("#")
        page = target[:hash_] if hash_ >= 0 else target
        if page:
            sink.links.append(ParsedLink(_canonical(page), _anchor_text(anchor), sink.section_index))
    return anchor


def _anchor_text(text: str) -> str:
    """A link's visible text as stored: no markup or entities, whitespace collapsed."""
    text = _BOLD_ITALIC.sub("", _QUOTES.sub(_quote_repl, text))
    text = _HTML_TAG.sub("", text)
    text = html.unescape(text)
    text = text.replace(_PH_PIPE, "|").replace(_PH_EQUALS, "=")
    text = _LEFTOVER.sub(" ", text)
    return " ".join(text.split())


def _drop_files(text: str, deadline: _Deadline = _NO_DEADLINE) -> str:
    """Remove ``[[File:...]]``/``[[Image:...]]`` with the links nested in their captions."""
    out: list[str] = []
    pos = 0
    ends: dict[int, int] | None = None  # once a file link is unclosed: where every link ends (see _link_ends)
    while True:
        m = _FILE_OPEN.search(text, pos)
        if m is None:
            break
        deadline.check(m.start(), len(text))
        out.append(text[pos : m.start()])
        end = _link_end(text, m.end()) if ends is None else ends.get(m.start() + 2, -1)
        if end < 0 and ends is None:
            ends = _link_ends(text)  # the scans of the next unclosed ones would run to the end of the page again
        if end < 0:
            # Unclosed: MediaWiki would show it literally; drop the rest of its line.
            nl = text.find("\n", m.end())
            end = len(text) if nl < 0 else nl
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _link_end(text: str, start: int) -> int:
    """Where the link opened just before ``start`` ends ("]]" included), or -1 if it does not."""
    depth = 1
    for b in _BRACKETS.finditer(text, start):
        n = len(b.group()) // 2
        if b.group()[0] == "[":
            depth += n
        else:
            depth -= n
            if depth <= 0:
                return b.end() + 2 * depth  # a longer "]]]]" run may close more than needed
    return -1


def _link_ends(text: str) -> dict[int, int]:
    """Where the link opened by the last "[[" of each run of "[" ends ("]]" included), by the offset where the run
    ends; unclosed ones are left out.

    One pass with a stack of the open "[[" pairs over all the page's runs (a run of n brackets opens or closes n // 2
    pairs), rather than a scan from each file link to its end: a page of unclosed file links would make that
    quadratic. A closing run that closes k pairs of its n // 2 ends the i-th of them (from 1) 2 * (n // 2 - i)
    characters before its end: the odd bracket of a run goes with its first pair.
    """
    ends: dict[int, int] = {}
    stack: list[int] = []  # per open pair: the end of its run if it is the run's last pair, else -1
    for b in _BRACKETS.finditer(text):
        n = (b.end() - b.start()) // 2
        if text[b.start()] == "[":
            stack.extend([-1] * (n - 1))
            stack.append(b.end())
            continue
        for i in range(1, min(n, len(stack)) + 1):
            opened = stack.pop()
            if opened >= 0:
                ends[opened] = b.end() - 2 * (n - i)
    return ends


def _render_links(text: str, sink: _LinkSink | None, deadline: _Deadline = _NO_DEADLINE) -> str:
    """Replace ``[[...]]`` with their visible text (files, categories, interwiki dropped)."""
    if "[[" not in text:
        return text
    text = _drop_files(text, deadline)
    text = _render_flat_links(text, sink)
    if "[[" in text:
        text = _render_links_nested(text, sink, deadline)  # links nested in labels: rare, malformed
    return text


def _render_links_nested(text: str, sink: _LinkSink | None, deadline: _Deadline = _NO_DEADLINE) -> str:
    """Stack-based fallback for ``[[...]]`` nested inside other links; links nested deeper than
    :data:`MAX_NESTING` show nothing."""
    root: list[str] = []
    # Frame: (pieces, links collected inside it, is a file/category link)
    stack: list[tuple[list[str], int]] = []
    pieces = root
    last = 0
    for i, m in enumerate(_BRACKETS.finditer(text)):
        if not i & 127:
            deadline.check(m.start(), len(text))
        tok = m.group()
        pieces.append(text[last : m.start()])
        last = m.end()
        n = len(tok)
        if tok[0] == "[":
            if n > 2:
                pieces.append("[" * (n - 2))
            stack.append(([], len(sink.links) if sink is not None else 0))
            pieces = stack[-1][0]
            continue
        while n >= 2 and stack:
            body_parts, n_links = stack.pop()
            n -= 2
            trail = ""
            if n == 0:
                t = _LINK_TRAIL.match(text, last)
                if t:
                    trail = t.group()
                    last = t.end()
            out = _close_link(body_parts, trail, sink) if len(stack) < MAX_NESTING else ""
            if not out and sink is not None and len(sink.links) > n_links:
                del sink.links[n_links:]  # links inside a dropped file caption
            pieces = stack[-1][0] if stack else root
            pieces.append(out)
        if n:
            pieces.append("]" * n)
    pieces.append(text[last:])
    # Unclosed links keep their text, joined once as in _expand_templates.
    for body_parts, _ in stack:
        root.extend(body_parts)
    return "".join(root)


def _close_link(body_parts: list[str], trail: str, sink: _LinkSink | None) -> str:
    inner = "".join(body_parts)
    bar = inner.find("|")
    if bar >= 0:
        return _render_link(inner[:bar], inner[bar + 1 :], trail, sink)
    return _render_link(inner, None, trail, sink)


def _inline_markup(text: str, *, br: str) -> str:
    """External links, HTML tags, magic words, bold/italic (links already rendered)."""
    # Each pass only where its markup's first character occurs: most texts skip most regex passes.
    if "[" in text:
        text = _ext_links(text)
    if "<" in text:
        text = _BR.sub(br, text)
        text = _HTML_TAG.sub("", text)
    if "_" in text and "__" in text:  # the one-character scan first: most pages have no "_"
        text = _MAGIC.sub("", text)
    if "''" in text:
        if "''''" in text:
            text = _QUOTES.sub(_quote_repl, text)  # rare runs of 4 or more
        text = _BOLD_ITALIC.sub("", text)
    return text


def _ext_links(text: str) -> str:
    """External links ``[url label]`` -> their labels ("" if none).

    As ``_EXT_LINK.sub`` would, but a label runs to the first "]" of its line: when a label finds none, no link
    that starts before the end of that line can close either, and those are skipped (each tried would scan to the
    end of the line again: quadratic in a line of unclosed links).
    """
    out: list[str] = []
    pos = 0  # text[:pos] is in out
    dead = 0  # no link that starts before this offset can close
    for start in _EXT_LINK_START.finditer(text):
        at = start.start()
        if at < pos or at < dead:
            continue
        m = _EXT_LINK.match(text, at)
        if m is None:
            url_end = _EXT_URL.match(text, start.end()).end()
            if text[url_end : url_end + 1] in (" ", "\t"):  # a label that met no "]"
                stop = _EXT_LABEL_END.search(text, url_end + 1)
                dead = stop.start() if stop else len(text)
            continue
        out.append(text[pos:at])
        out.append(m.group(1) or "")
        pos = m.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _finish(text: str) -> str:
    """Entities, placeholders, leftover markup and spacing; newlines are kept."""
    text = html.unescape(text)
    text = text.replace(_PH_PIPE, "|").replace(_PH_EQUALS, "=")
    # Most texts have no markup left over: a substring check skips the regex pass.
    if "{" in text or "}" in text or "<" in text or "[[" in text or "]]" in text:
        text = _LEFTOVER.sub(" ", text)
    text = _PAREN_JUNK.sub(_paren_junk_repl, text)
    text = text.replace("\t", " ").replace("\xa0", " ")
    return _SPACES.sub(_spaces_repl, text)


def _spaces_repl(m: re.Match[str]) -> str:
    end = m.end()
    return "" if m.string[end : end + 1] in _PUNCT else " "


def _paren_junk_repl(m: re.Match[str]) -> str:
    return "" if m.group()[-1] == ")" else "("


def _flatten(text: str) -> str:
    """A rendered fragment on one line: list items and line breaks become ", "."""
    if "\n" in text:
        items = []
        for line in text.split("\n"):
            s = line.strip()
            s = s.lstrip("*#:; ")
            if s:
                items.append(s)
        text = ", ".join(items)
    if ",," in text or ", ," in text:
        text = _COMMAS.sub(",", text)
    text = text.replace(".,", ".")
    return text.strip().strip(",").strip()


def _inline_many(parts: list[str], *, br: str = " ") -> list[str]:
    """Wikitext fragments (templates expanded) -> one line of plain text each.

    The fragments are joined with a separator so each regex pass runs once per batch, not once per
    fragment (infobox values and table cells are many and short); if markup crossed a separator (an
    unclosed link), they are redone one by one.
    """
    if not parts:
        return []
    text = _finish(_inline_markup(_render_links(_SEP.join(parts), None), br=br))
    out = text.split(_SEP)
    if len(out) != len(parts):
        out = [_finish(_inline_markup(_render_links(p, None), br=br)).replace(_SEP, " ") for p in parts]
    return [_flatten(o) for o in out]


def _inline(text: str, *, br: str = " ") -> str:
    """One wikitext fragment (templates expanded) -> one line of plain text."""
    return _inline_many([text], br=br)[0]


def _paragraphs(text: str) -> str:
    """Rendered lines -> paragraphs joined by newlines; each list item a line ending in a period."""
    out: list[str] = []
    para: list[str] = []
    for s in map(str.strip, text.split("\n")):
        if not s:
            if para:
                out.append(" ".join(para))
                para = []
            continue
        first = s[0]
        if first in "*#:;":
            if para:
                out.append(" ".join(para))
                para = []
            rest = s.lstrip("*#:;")  # after the list marks
            item = rest.strip()
            if ";" in s[: len(s) - len(rest)] and ":" in item:
                term, _, definition = item.partition(":")
                item = f"{term.strip()}: {definition.strip()}"
            if item and item[-1] in ":;,":
                item = item[:-1].rstrip()
            if not item:
                continue
            if not item.endswith(_LINE_END):
                item += "."
            out.append(item)
        elif s.startswith("----"):
            continue
        else:
            para.append(s)
    if para:
        out.append(" ".join(para))
    return "\n".join(out)


def _render_sections(raws: list[str], sink: _LinkSink, deadline: _Deadline = _NO_DEADLINE) -> list[str]:
    """Each section's wikitext -> clean prose, links recorded with their section index."""
    rendered = []
    for i, raw in enumerate(raws):
        deadline.check(i, len(raws))
        sink.section_index = i
        rendered.append(_render_links(raw, sink, deadline))
    # One batch, as in _inline_many.
    text = _finish(_inline_markup(_SECTION_SEP.join(rendered), br=" "))
    parts = text.split(_SEP)
    if len(parts) != len(rendered):
        parts = [_finish(_inline_markup(r, br=" ")).replace(_SEP, " ") for r in rendered]
    return [_paragraphs(p) for p in parts]


# ---------------------------------------------------------------------------------------------
# Sections and the public API

# Searched from the "\n" before the line, a literal the regex engine scans for ("^" with MULTILINE gives
# it none, and the pattern is tried at every offset); the first line is checked on its own.
_HEADING = re.compile(r"\n=[^\n]*")
_REDIRECT = re.compile(r"\s*#\s*redirect\s*:?\s*\[\[([^\[\]|\n]*)", re.IGNORECASE)


def is_redirect(wikitext: str) -> tuple[str, str | None] | None:
    """``(canonical target, fragment or None)`` if the page is a ``#REDIRECT [[...]]``."""
    if not isinstance(wikitext, str):
        return None
    m = _REDIRECT.match(wikitext, 0, 4096)
    if m is None:
        return None
    target = html.unescape(m.group(1)).strip()
    if target.startswith(":"):
        target = target[1:]
    fragment: str | None = None
    hash_ = target.find("#")
    if hash_ >= 0:
        fragment = target[hash_ + 1 :].strip() or None
        target = target[:hash_]
    target = canonical_title(target)
    if not target:
        return None
    return target, fragment


def _split_sections(text: str) -> list[tuple[int, str, int, int]]:
    """``[(level, raw heading, body start, body end)]``; the lead has level 1 and heading ""."""
    out: list[tuple[int, str, int, int]] = []
    level, heading, start = 1, "", 0
    # A heading is a line starting and ending with "=".
    first = [(0, text.find("\n") if "\n" in text else len(text))] if text[:1] == "=" else []
    lines = first + [(m.start() + 1, m.end()) for m in _HEADING.finditer(text)]
    for line_start, line_end in lines:
        line = text[line_start:line_end].rstrip()
        left = len(line) - len(line.lstrip("="))
        right = len(line) - len(line.rstrip("="))
        if left == len(line) or right == 0:
            continue  # "====" alone, or no closing "="
        n = min(left, right, 6)
        inner = line[n : len(line) - n]
        if not inner.strip():
            continue
        out.append((level, heading, start, line_start))
        level, heading, start = n, inner, line_end
    out.append((level, heading, start, len(text)))
    return out


# Matched from the "\n" before the line, for the reason given at _HEADING; letter classes, not IGNORECASE,
# which would also match the long s "\u017f" for "s".
_SEE_ALSO_HEADING = re.compile(r"\n=+[ \t]*[sS][eE][eE][ \t]+[aA][lL][sS][oO][ \t]*:?[ \t]*=+[ \t]*(?=\n|$)")


def _see_also_template_links(text: str) -> list[str]:
    """Link targets inside templates of the "See also" section(s), before templates are expanded.

    See-also lists are often wrapped in layout templates ({{columns}}, {{div col}}, {{aircontent}}...)
    whose rendering drops their content; the links are collected from the raw section instead.
    """
    m = _SEE_ALSO_HEADING.match("\n" + text[: text.find("\n") + 1 or len(text)]) if text[:1] == "=" else None
    if m is None:
        m = _SEE_ALSO_HEADING.search(text)
        if m is None:
            return []
        text = text[m.start() + 1 :]  # sections before the first "See also" heading do not matter
    sink = _LinkSink()
    see_also_level = 0  # level of the "See also" heading we are under; 0 = not in one
    for level, heading, start, end in _split_sections(text):
        if see_also_level and level <= see_also_level:
            see_also_level = 0
        if " ".join(heading.split()).casefold().rstrip(":").strip() == "see also":
            see_also_level = level
        if not see_also_level or "{{" not in text[start:end]:
            continue
        for m in _FLAT_LINK.finditer(text, start, end):
            _render_link(m.group(1), m.group(2), m.group(3), sink)
    return list(dict.fromkeys(link.target_title for link in sink.links))


def parse_wikitext(
    wikitext: str, *, title: str = "", max_chars: int = DEFAULT_MAX_CHARS, page_id: int | None = None
) -> ParsedPage:
    """Parse one page's wikitext into clean sections, links, categories, infoboxes, tables.

    Never raises on a ``str``: malformed markup is cleaned as well as possible and noted in
    ``warnings``. ``title`` and ``page_id`` only name the page in log messages. A page whose cleaning runs past
    :data:`PAGE_TIME_LIMIT_S` keeps the clean text of its beginning (see there).
    """
    if not isinstance(wikitext, str):
        raise TypeError(f"wikitext must be str, not {type(wikitext).__name__}")
    label = f"page {title!r}" if page_id is None else f"page {title!r} (id {page_id})"
    warnings: list[str] = []
    if len(wikitext) > max_chars:
        warnings.append(f"truncated from {len(wikitext)} to {max_chars} characters")
        log.warning("%s truncated from %d to %d characters", label, len(wikitext), max_chars)
        wikitext = wikitext[:max_chars]
    try:
        return _parse_in_time(wikitext, warnings, label)
    except (RecursionError, ValueError, IndexError, KeyError) as exc:  # defensive: a scanner bug
        log.exception("%s could not be parsed", label)
        return ParsedPage(warnings=tuple(warnings) + (f"parse failed: {exc!r}",))


def _parse_in_time(text: str, warnings: list[str], label: str) -> ParsedPage:
    """:func:`_parse` within :data:`PAGE_TIME_LIMIT_S`; past it, again on the text cut where the cleaner got to, each
    time within half the time left of twice the limit (and at least a 64th of the limit).

    A cut keeps half the share of the stage's text the cleaner got through, between a 16th and a quarter of the
    text (at a line break), while the time halves: the tries get through in a few steps.
    """
    limit = PAGE_TIME_LIMIT_S
    start = time.monotonic()
    stop, end = start + 2 * limit, start + limit
    size = len(text)
    while True:
        try:
            return _parse(text, list(warnings), _Deadline(end))
        except _OutOfTime as exc:
            cut = int(len(text) * min(max(exc.reached, 0.125), 0.5) / 2)
            line = text.rfind("\n", 0, cut)
            cut = line if line > cut // 2 else cut
            if cut <= 0:
                note = f"cleaning ran past {limit:g} s (PAGE_TIME_LIMIT_S), and on parts of it: page left empty"
                log.warning("%s: %s", label, note)
                return ParsedPage(warnings=(*warnings, note))
            now = time.monotonic()
            end = now + max((stop - now) / 2, limit / 64)
            note = (
                f"cleaning ran past {limit:g} s (PAGE_TIME_LIMIT_S) at {exc.reached:.0%} of a stage: "
                f"cleaned again cut to the first {cut:,} of {size:,} characters"
            )
            log.warning("%s: %s", label, note)
            warnings.append(note)
            text = text[:cut]


def _see_also(links: list[ParsedLink], in_see_also: list[bool], templated: list[str]) -> list[str]:
    """The titles a "See also" section links to, then those of the page's {{See also}}-style templates."""
    see_also = dict.fromkeys(link.target_title for link in links if in_see_also[link.section_index])
    see_also.update(dict.fromkeys(templated))
    return list(see_also)


def _parse(text: str, warnings: list[str], deadline: _Deadline = _NO_DEADLINE) -> ParsedPage:
    redirect = is_redirect(text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    is_disambiguation = DISAMBIGUATION_MAGIC_WORD in text
    text = _strip_comments(text, warnings, deadline)
    text = _strip_tags_with_content(text, warnings, deadline)
    templated_see_also = _see_also_template_links(text)
    state = _TemplateState()
    text = _expand_templates(text, state, deadline)
    if state.unclosed:
        warnings.append(f"{state.unclosed} unclosed {{{{: each one's text to the end of its line dropped")
    tables: list[tuple[int, tuple[str, ...]]] = []
    text = _extract_tables(text, tables, warnings, deadline)
    tables.sort(key=lambda t: t[0])

    spans = _split_sections(text)
    headings = _inline_many([h for _, h, _, _ in spans[1:]])
    sink = _LinkSink()
    bodies = _render_sections([text[start:end] for _, _, start, end in spans], sink, deadline)
    sections, in_see_also = _sections([level for level, _, _, _ in spans], headings, bodies)
    see_also = _see_also(sink.links, in_see_also, templated_see_also)
    if len(warnings) > _MAX_WARNINGS:
        warnings[_MAX_WARNINGS:] = [f"and {len(warnings) - _MAX_WARNINGS:,} more warnings"]
    return ParsedPage(
        redirect_target=redirect[0] if redirect else None,
        redirect_fragment=redirect[1] if redirect else None,
        is_disambiguation=is_disambiguation or state.disambiguation,
        sections=tuple(sections),
        links=tuple(sink.links),
        categories=tuple(sink.categories),
        see_also=tuple(see_also),
        infoboxes=tuple(state.infoboxes),
        infobox_links=tuple(state.infobox_links),
        tables=tuple(rows for _, rows in tables),
        warnings=tuple(warnings),
    )


def _sections(levels: list[int], headings: list[str], bodies: list[str]) -> tuple[list[ParsedSection], list[bool]]:
    """The sections with their parents and heading paths, and whether each is (under) a "See also" section.

    A section's parent is the nearest section before it of a lower level (the lead if none): found with a stack of
    the candidates, lowest level first, rather than by a scan back from each section (quadratic in siblings).
    """
    sections: list[ParsedSection] = []
    in_see_also: list[bool] = []
    paths: list[str] = []
    stack: list[int] = []  # sections after the lead that may parent the next one, their levels rising
    for i, level in enumerate(levels):
        heading = headings[i - 1] if i else ""
        parent: int | None = None
        path = ""
        if i:
            while stack and levels[stack[-1]] >= level:
                stack.pop()
            parent = stack[-1] if stack else 0
            path = f"{paths[parent]} > {heading}" if parent else heading
            stack.append(i)
        paths.append(path)
        # A "See also" section, with any subsections it has.
        in_see_also.append(
            bool(i) and (heading.casefold().rstrip(":") == "see also" or (parent is not None and in_see_also[parent]))
        )
        sections.append(
            ParsedSection(index=i, level=level, heading=heading, parent_index=parent, heading_path=path, text=bodies[i])
        )
    return sections, in_see_also
