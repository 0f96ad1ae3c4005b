"""Entity mentions of a claim: n-grams matched against local titles and redirects, plus capitalised spans.

A mention that resolves to a local page feeds the title channel; a capitalised span that resolves to
nothing is a *missing* entity, the only thing the live fallback may look up.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backends.spelling import misspelt_name
from wikiground.text import is_disambiguation_title, normalize_title, words

if TYPE_CHECKING:
    from indexer.store import Resolution, Store

_TOKEN = re.compile(r"\w+(?:[’'.\-&]\w+)*", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s?$")

STOPWORDS = frozenset(
    """a an the and or but nor of in on at to for from by with without into onto over under about as is
    are was were be been being has have had do does did not no yes it its it's this that these those he
    she they them his her their him we us our you your i me my mine who whom whose which what when where
    why how than then there here also only just very more most less least some any all each every both
    either neither one can could may might must shall should will would after before during while since
    until upon within among between through against along across behind beyond near off out up down so
    such same other another own if else s several many few various numerous""".split()
)
_ARTICLES = frozenset({"the", "a", "an"})
_AUXILIARIES = frozenset(
    "is are was were has have had can could will would does do did may might must should shall".split()
)
# Connectors allowed inside a capitalised span: "Alexander the Great", "Bank of America", "Roe v. Wade" (a case).
_CONNECTORS = frozenset({"of", "the", "de", "la", "le", "von", "van", "der", "du", "da", "di", "&", "y", "del", "v"})


@dataclass(frozen=True, slots=True)
class Mention:
    text: str
    start: int  # character offsets in the claim
    end: int
    resolution: Resolution | None = None
    quoted: bool = False  # a title in quotes ("Stop, Look and Listen"): one name, never split into pieces

    @property
    def resolved(self) -> bool:
        return self.resolution is not None


def _tokens(claim: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(claim)]


# A number made an adjective ("17-year-old", "20th-century", "3-time"): a modifier, not the start of a name.
_NUMBER_ADJECTIVE = re.compile(r"\d[\d,.]*(?:st|nd|rd|th)?-[a-z]")


def _is_cap(tok: str) -> bool:
    return tok[:1].isupper() or (tok[:1].isdigit() and not _NUMBER_ADJECTIVE.match(tok))


def _candidate_spans(toks: list[tuple[str, int, int]], max_ngram: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    n = len(toks)
    for i in range(n):
        first = toks[i][0]
        if first.lower() in STOPWORDS and not _is_cap(first):
            continue
        for j in range(i + 1, min(n, i + max_ngram) + 1):
            last = toks[j - 1][0]
            if last.lower() in STOPWORDS and not (j - i == 1 and _is_cap(last) and i > 0):
                continue
            words_ = [t[0] for t in toks[i:j]]
            if j - i == 1:
                # A single word must look like a name: capitalised mid-sentence, or any capitalised/digit word
                # that is not a sentence-initial function word ("The", "In").
                if not _is_cap(first) or first.lower() in STOPWORDS:
                    continue
            elif not any(_is_cap(w) for w in words_) and (j - i) < 2:
                continue
            spans.append((i, j))
    return spans


MAX_SPELLED = 4  # unresolved names of a claim looked up for a misspelling


def find_mentions(claim: str, store: Store, *, max_ngram: int = 8) -> list[Mention]:
    """Non-overlapping entity mentions, longest first; unresolved capitalised spans included."""
    toks = _tokens(claim)
    if not toks:
        return []
    spans = _candidate_spans(toks, max_ngram)
    texts = {(i, j): _span_variants(claim, toks, i, j) for i, j in spans}
    quoted = quoted_titles(claim, toks)
    for i, j, title in quoted:  # the title as quoted, punctuation and all, first; any length
        texts[(i, j)] = list(dict.fromkeys([title, *texts.get((i, j), [])]))
    quoted_at = {(i, j): title for i, j, title in quoted}
    resolved = store.resolve_titles([v for vs in texts.values() for v in vs])

    chosen: list[tuple[int, int, Resolution]] = []
    taken = [False] * len(toks)
    # Quoted titles first, then the longest span; exact matches before loose ones; then leftmost.
    order = sorted(
        ((i, j, res) for (i, j), vs in texts.items() for v in vs if (res := resolved.get(v)) is not None),
        key=lambda x: ((x[0], x[1]) not in quoted_at, -(x[1] - x[0]), not x[2].exact, x[0]),
    )
    for i, j, res in order:
        if any(taken[i:j]):
            continue
        # Loose single lowercase-initial matches are too noisy to keep ("may" -> "MAY").
        if j - i == 1 and not res.exact and not _is_cap(toks[i][0]):
            continue
        chosen.append((i, j, res))
        for t in range(i, j):
            taken[t] = True

    mentions = []
    for i, j, res in chosen:
        text = quoted_at.get((i, j)) or claim[toks[i][1] : toks[j - 1][2]]  # "Livin' (And ... Love)" keeps its ")"
        mentions.append(Mention(text, toks[i][1], toks[i][1] + len(text), res))
    # A quoted title that resolves to nothing is one missing name, in place of the capitalised runs inside it
    # ("Salt and Pepper Hill", not "Salt" and "Pepper Hill").
    unresolved = [(i, j) for i, j, _ in quoted if not all(taken[i:j])]
    mentions += [
        Mention(quoted_at[(i, j)], toks[i][1], toks[i][1] + len(quoted_at[(i, j)]), None, quoted=True)
        for i, j in unresolved
    ]
    mentions = _add_unresolved(
        claim, toks, _outside(capitalised_spans(toks), unresolved, len(toks)), taken, mentions, store
    )
    mentions.sort(key=lambda m: (m.start, -m.end))
    return mentions


def _add_unresolved(
    claim: str,
    toks: Sequence[tuple[str, int, int]],
    spans: list[tuple[int, int]],
    taken: list[bool],
    mentions: list[Mention],
    store: Store,
) -> list[Mention]:
    """``mentions`` with the capitalised spans no mention covers: each a missing name, or, when it is a misspelt
    title (``backends.spelling``), that page's mention in place of the pieces of it that matched titles alone."""
    spelt = 0  # names tried for a misspelling: a long input's first few only
    for i, j in spans:
        text = claim[toks[i][1] : toks[j - 1][2]]
        key = normalize_title(_POSSESSIVE.sub("", text))
        if any(m.resolution is not None and normalize_title(m.text) == key for m in mentions):
            continue
        if all(taken[i:j]) or _is_demonym_modifier(toks, i, j):
            continue
        name = _POSSESSIVE.sub("", text)
        res = misspelt_name(name, store) if j - i >= 2 and spelt < MAX_SPELLED else None
        spelt += j - i >= 2
        start, end = toks[i][1], toks[j - 1][2]
        if res is not None:
            mentions = [m for m in mentions if not (start <= m.start and m.end <= end)]
        mentions.append(Mention(name, start, end, res))
    return mentions


MAX_CONCEPT_WORDS = 16  # a long input's first content words only


def concept_words(claim: str, mentions: Sequence[Mention]) -> list[tuple[int, list[str]]]:
    """The claim's lowercase content words outside its mentions, each with the titles that may be its page:
    ``(offset, [word, singular])``. Wikipedia has a page for most common nouns ("Heart", "Exercise"), and a
    claim about one often names it in lower case ("The heart beats at ..."), which ``find_mentions`` leaves
    alone as too noisy to be a name. No numbers, no words of fewer than 3 letters, no function words."""
    taken = [(m.start, m.end) for m in mentions]
    out: list[tuple[int, list[str]]] = []
    for tok, start, _ in _tokens(claim):
        if len(out) == MAX_CONCEPT_WORDS:
            break
        word = _POSSESSIVE.sub("", tok)  # "the heart's rate"
        if _is_cap(word) or not word.isalpha() or len(word) < 3 or word.casefold() in STOPWORDS:
            continue
        if any(a <= start < b for a, b in taken):
            continue
        out.append((start, list(dict.fromkeys([word, fold_plural(word)]))))
    return out


def _span_variants(claim: str, toks: Sequence[tuple[str, int, int]], i: int, j: int) -> list[str]:
    """The titles tokens ``i:j`` may be written as: as in the claim, without a possessive, in the singular."""
    s = claim[toks[i][1] : toks[j - 1][2]]
    variants = [s]
    stripped = _POSSESSIVE.sub("", s)
    if stripped and stripped != s:
        variants.append(stripped)
    last = toks[j - 1][0]
    if (not _is_cap(last) or (i == 0 and j == 1)) and fold_plural(last) != last:
        # Titles are singular ("Polar bear", "Touchscreen"): a plural common noun ends the span, or opens the
        # sentence alone; tried after the span as written.
        variants.append(claim[toks[i][1] : toks[j - 1][1]] + fold_plural(last))
    return variants


def _outside(spans: list[tuple[int, int]], cut: Sequence[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The token spans with the token ranges ``cut`` (quoted titles; ``n`` tokens in all) taken out:
    Martin Patterson "Pat" Hingle -> the two outer runs."""
    inside = [False] * n
    for i, j in cut:
        inside[i:j] = [True] * (j - i)
    out: list[tuple[int, int]] = []
    for i, j in spans:
        k = i
        while k < j:
            if inside[k]:
                k += 1
                continue
            start = k
            while k < j and not inside[k]:
                k += 1
            out.append((start, k))
    return out


# A title in straight or curly double quotes, on one line.
_QUOTED = re.compile(r'"([^"\n]{1,120})"|\u201c([^\u201d\n]{1,120})\u201d')
# Punctuation of the sentence that American style puts inside the quotes ("... in the Way?", "... a Cause,").
_QUOTE_TRAILING = re.compile(r"[\s?.,;:]+$")
MAX_QUOTED_TOKENS = 16


def quoted_titles(claim: str, toks: Sequence[tuple[str, int, int]] | None = None) -> list[tuple[int, int, str]]:
    """Titles of works the claim quotes, as ``(first token, end token, title)``.

    HotpotQA questions quote the films, songs and books they name, and such titles hold commas, colons and
    lowercase words ("Stop, Look and Listen", "Out of the Blue Room", "A Song Without a Name"). A quoted span counts
    as a title when it starts with a capital or a digit and at least half of its words other than function
    words are capitalised: "King of lanterns" is a name, "resting place of the old" is a phrase.
    """
    toks = _tokens(claim) if toks is None else toks
    out: list[tuple[int, int, str]] = []
    for m in _QUOTED.finditer(claim):
        group = 1 if m.group(1) is not None else 2
        raw = m.group(group)
        title = _QUOTE_TRAILING.sub("", raw.strip())
        start = m.start(group) + (len(raw) - len(raw.lstrip()))
        end = start + len(title)
        inner = [k for k, t in enumerate(toks) if t[1] >= start and t[2] <= end]
        if not title or not inner or len(inner) > MAX_QUOTED_TOKENS or toks[inner[0]][1] != start:
            continue
        content = [toks[k][0] for k in inner if toks[k][0].lower() not in STOPWORDS]
        if not _is_cap(toks[inner[0]][0]) or not content:
            continue
        if 2 * sum(_is_cap(w) for w in content) < len(content):
            continue
        out.append((inner[0], inner[-1] + 1, title))
    return out


_DEMONYM_ENDING = re.compile(r"(?:ican|ian|ean|ese|ish)$")
# Adjectives of nationality that end otherwise.
_DEMONYM_WORDS = frozenset(
    """german french dutch greek thai swiss welsh czech slovak soviet iraqi israeli pakistani
    saudi kuwaiti somali nepali bangladeshi afghan arab arabic norse""".split()
)
# Words that qualify a demonym in a two-word adjective ("South Korean", "Ancient Greek").
_DEMONYM_QUALIFIERS = frozenset(
    """north south east west northern southern eastern western central northeastern
    northwestern southeastern southwestern latin native new old ancient medieval modern classic classical early late
    contemporary traditional colonial imperial""".split()
)
# Nouns that make a demonym part of a name: "the Greek language", "the Yoruba people".
_NAMED_BY_DEMONYM = frozenset({"language", "languages", "people", "peoples"})
_ADVERB = re.compile(r"(?:al|ent|ant|at|ous|iv|ab|ib|ful|ed|ing|u|s|c|r|n)ly$", re.IGNORECASE)


def _is_demonym(tok: str) -> bool:
    return bool(_DEMONYM_ENDING.search(tok)) or tok.casefold() in _DEMONYM_WORDS


def _is_demonym_modifier(toks: Sequence[tuple[str, int, int]], i: int, j: int) -> bool:
    """ "American film actor", "Russian composer", "South Korean boy group": an adjective, not a name to look up
    ("the Greek language" names a page, though).

    Of two words, the first must qualify the adjective (a number, a compass point, "Latin", another demonym):
    "Aram Avakian directed" is a name, since many surnames end like demonyms (Avakian, Babajian)."""
    last = toks[j - 1][0]
    if not (
        j - i <= 2
        and j < len(toks)
        and _is_demonym(last)
        and not _is_cap(toks[j][0])
        and toks[j][0].lower() not in STOPWORDS
        and toks[j][0].lower() not in _NAMED_BY_DEMONYM
    ):
        return False
    if j - i == 1:
        return True
    first = toks[i][0]
    return first[:1].isdigit() or first.casefold() in _DEMONYM_QUALIFIERS or _is_demonym(first)


def _is_adverb(tok: str) -> bool:
    """Sentence-initial adverbs ("Often", "Probably") are not names; "Italy", "Emily", "Connolly" are."""
    return len(tok) > 5 and bool(_ADVERB.search(tok))


_NAME_SUFFIXES = frozenset({"Jr", "Sr", "Inc", "Ltd", "Bros", "Corp"})


def names_in(text: str) -> list[str]:
    """Capitalised names in a sentence, as ``find_mentions`` would see them unresolved: no dates or
    quantities, no adjectives of nationality, lists and quotes split (a "Town, Region" pair also kept
    whole), possessives dropped; each followed by the names inside it (see ``_name_variants``). A quoted title
    is one name (see ``quoted_titles``)."""
    toks = _tokens(text)
    quoted = quoted_titles(text, toks)
    found: list[tuple[int, list[str]]] = [(i, [title]) for i, _, title in quoted]  # (token index, names)
    for i, j in _outside(capitalised_spans(toks), [(i, j) for i, j, _ in quoted], len(toks)):
        if _is_demonym_modifier(toks, i, j):
            continue
        end = toks[j - 1][2]
        if toks[j - 1][0] in _NAME_SUFFIXES and text[end : end + 1] == ".":
            end += 1  # "Martin Luther King Jr.", "Apple Inc.": Wikipedia titles keep the period
        span = text[toks[i][1] : end]
        pieces = [_POSSESSIVE.sub("", p.strip()) for p in _PIECES.split(span)]
        names = [p for p in pieces if p and _name_words(p) and not is_quantity(p)]
        # Wikipedia titles places "Town, Region" ("Springfield, Illinois", "Bath, Somerset"):
        # the first two names with only a comma between them are offered joined as well, before each alone. A
        # longer run is a list ("Bryan Cranston, Heidi Gardner, Tucker Gilmore, ..."), whose pairs name nothing.
        joined = [f"{names[0]}, {names[1]}"] if 2 <= len(names) <= 3 and f"{names[0]}, {names[1]}" in span else []
        found.append((i, [*joined, *(v for n in names for v in _name_variants(n))]))
    out: list[str] = []
    for _, names in sorted(found, key=lambda x: x[0]):  # text order
        for name in names:
            if name not in out:
                out.append(name)
    return out


# Words of rank or office before a name: "King George V" is titled "George V", "Prime Minister Jane Ellery
# Doe" is "Jane Ellery Doe" (the live site may redirect the first; never the second).
_HONORIFICS = frozenset(
    """king queen emperor empress pope prince princess president sir dame lord lady saint
    st. general senator governor chancellor prime minister premier secretary vice foreign mayor ambassador
    admiral colonel captain commander bishop archbishop cardinal""".split()
)
_OF_SPLIT = re.compile(r"\s+of\s+")


def _name_variants(name: str) -> list[str]:
    """A name, then the names inside it: "Ann Moss of Acme Studios" -> "Ann Moss", "Acme Studios"
    (a person of an organisation: both sides two words or more), "King George V" -> "George V"."""
    out = [name]
    m = _OF_SPLIT.search(name)
    if m:
        left, right = name[: m.start()], name[m.end() :]
        if len(left.split()) >= 2 and len(right.split()) >= 2:
            out += [left, right]
    parts = name.split()
    lead = 0  # a title of office, perhaps after an adjective of nationality: "Italian Prime Minister"
    while lead < len(parts) and (parts[lead].casefold() in _HONORIFICS or (lead == 0 and _is_demonym(parts[0]))):
        lead += 1
    if lead and any(p.casefold() in _HONORIFICS for p in parts[:lead]) and len(parts) - lead >= 2:
        out.append(" ".join(parts[lead:]))
    return out


_PARTICIPLE = re.compile(r"(?:ing|ed)$")


def _is_participle_opening(toks: Sequence[tuple[str, int, int]]) -> bool:
    """ "According to ...", "Considered the strongest ...", "Born on 6 March 1937, ...": the first word is a
    participle when a function word other than an auxiliary follows it ("Beijing is", "Reading is" are names)."""
    first = toks[0][0]
    if len(toks) < 2 or not (first.casefold() == "born" or (len(first) > 4 and _PARTICIPLE.search(first))):
        return False
    nxt = toks[1][0]
    return nxt.islower() and nxt in STOPWORDS and nxt not in _AUXILIARIES


def capitalised_spans(toks: Sequence[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """Maximal runs of capitalised tokens, joined by connectors ("Alexander the Great")."""
    out: list[tuple[int, int]] = []
    i, n = 0, len(toks)
    while i < n:
        tok = toks[i][0]
        if not _is_cap(tok) or (i == 0 and tok.lower() in STOPWORDS):
            i += 1
            continue
        # "Frequently, French Indochina ...": a sentence-initial adverb set off by a comma is not part of a name.
        if i == 0 and n > 1 and _is_adverb(tok) and toks[1][1] - toks[0][2] > 1:
            i += 1
            continue
        j = i + 1
        while j < n:
            if _is_cap(toks[j][0]):
                j += 1
            elif toks[j][0].lower() in _CONNECTORS and j + 1 < n and _is_cap(toks[j + 1][0]):
                j += 2
            else:
                break
        # The claim's subject may be a name with a lowercase head noun: "Polar bears are ...", "Morse code is
        # ...", "The Greek language has ..."). Taken only when an auxiliary follows the head, so a verb is never
        # swallowed ("Tablet computers use ...", "Aristotle studied at ..." stay as they are).
        subject = i == 0 or (i == 1 and toks[0][0].lower() in _ARTICLES)
        if (
            subject
            and j + 1 < n
            and not _is_cap(toks[j][0])
            and toks[j][0].lower() not in STOPWORDS
            and not _is_adverb(toks[j][0])
            and toks[j + 1][0] in _AUXILIARIES  # "May" is a month
            and not _POSSESSIVE.search(toks[j - 1][0])
        ):
            j += 1
        # "Are both Ann Lee Moss and Tom Hale American?": an adjective of nationality ending the sentence is
        # said of the name before it, not part of it (a two-word run is left alone: "... by Tom Hale.").
        after = j
        if j - i >= 3 and j == n and _is_demonym(toks[j - 1][0]):
            j -= 1
        # A lone capitalised word at the start of the claim is usually just sentence case ("The", "Often",
        # "Part of the Hindu Kush ...": a name would continue with a capitalised word after "of"; "According to",
        # "Born on": a participle opening the sentence).
        if not (
            j - i == 1
            and i == 0
            and (
                toks[i][0].lower() in STOPWORDS
                or _is_adverb(toks[i][0])
                or (j < n and toks[j][0] == "of")
                or _is_participle_opening(toks)
            )
        ):
            if not (j - i == 1 and tok.isdigit()):
                out.append((i, j))
        i = after
    return out


# Dates and quantities ("June 3, 1901", "3103 BC", "8th", "1992-93") are capitalised spans, not entities.
_QUANTITY_TOKEN = re.compile(r"^\d[\d,.]*(?:st|nd|rd|th|s)?$")
_CALENDAR = frozenset(
    """january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec bc ad bce ce""".split()
)
# A capitalised run can swallow a list or a quotation ("England, Moonfall"): each piece is judged alone.
# Not split at a closing apostrophe: "Hundred Years' War" is one name.
_PIECES = re.compile(r"""[,;:"“”()]|\s['‘’](?=\w)|\s[–—]\s""")
COVER_DEPTH = 10  # how many top local evidence items may cover a mention
_DISAMBIGUATOR = re.compile(r"\s*\([^()]*\)\s*$")
_WORD_AT = re.compile(r"\w+", re.UNICODE)


def fold_plural(word: str) -> str:
    """Crude plural folding, enough for "Windmills" ~ "Windmill"."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def strip_disambiguator(title: str) -> str:
    """ "Blue Harbor (film)" -> "Blue Harbor"."""
    return _DISAMBIGUATOR.sub("", title)


def _name_words(text: str) -> set[str]:
    """A mention's identifying words: no function words, no dates or numbers, plurals folded. A name made only
    of function words, all capitalised ("The Who", "Off Or On"), is its words."""
    out = set()
    for w in words(text):
        if w in STOPWORDS or w in _CALENDAR or _QUANTITY_TOKEN.match(w):
            continue
        out.add(fold_plural(w))
    if not out:
        toks = _WORD_AT.findall(text)
        if len(toks) >= 2 and all(t[:1].isupper() for t in toks) and all(t.casefold() in STOPWORDS for t in toks):
            out = {t.casefold() for t in toks}
    return out


def is_quantity(text: str) -> bool:
    """True for dates, years, counts and ordinals: spans made only of numbers and calendar words."""
    toks = words(text)
    return bool(toks) and all(_QUANTITY_TOKEN.match(t) or t in _CALENDAR for t in toks)


def _base_words(title: str) -> tuple[str, ...]:
    """A title's words without its disambiguator, plurals folded: "Blue Harbor (film)" -> blue harbor."""
    return tuple(fold_plural(w) for w in words(strip_disambiguator(title)))


def _title_anchors(claim: str, titles: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans where a top evidence title (without disambiguator) occurs in the claim, word for word.

    "Windmills were common on old farms" names "Windmill"; "Mary II and William was ..." names "Mary II and
    William". A single word in lower case does not: "film scores composed by X" is about X, whose page the top
    evidence may lack while it holds "Film" (the title channel's page of a common noun).
    """
    found = list(_WORD_AT.finditer(claim))
    toks = [(fold_plural(m.group().casefold()), m.start(), m.end()) for m in found]
    stems = [t[0] for t in toks]
    out: list[tuple[int, int]] = []
    for title in titles:
        base = _base_words(title)
        if not base or (len(base) == 1 and base[0] in STOPWORDS):
            continue
        n = len(base)
        for i in range(len(stems) - n + 1):
            if n == 1 and not _is_cap(found[i].group()):
                continue
            if tuple(stems[i : i + n]) == base:
                out.append((toks[i][1], toks[i + n - 1][2]))
                break
    return out


# What stands between coordinated entities, quotes around titles included ('"Red Harbour" and "Blue Lake"').
_COORDINATION = re.compile(
    r"^[\s\"\u201c\u201d]*(?:,|;|&|and|or|nor|vs\.?|versus|as well as|,\s*and|,\s*or)?"
    r"[\s\"\u201c\u201d]*(?:the\s+)?$",
    re.IGNORECASE,
)
_QUESTION_WORDS = frozenset(
    "what which who whom whose when where why how is are was were do does did can could".split()
)


def is_question(text: str) -> bool:
    t = text.strip()
    return t.endswith("?") or (bool(t) and t.split(None, 1)[0].casefold().strip(",") in _QUESTION_WORDS)


def _title_key(text: str) -> frozenset[str]:
    """A name's words for matching a title: no function words, plurals folded, numbers kept
    ("1925 Town Fair" is not "1951 Town Fair")."""
    return frozenset(fold_plural(w) for w in words(text) if w not in STOPWORDS)


def _capitalised_function_words(text: str) -> set[str]:
    """Function words a name capitalises, so a title must have them too: "Time Out" is not "Time" (articles
    aside: "The Beatles" is "Beatles")."""
    return {
        w.casefold()
        for w in _WORD_AT.findall(text)
        if w[:1].isupper() and w.casefold() in STOPWORDS and w.casefold() not in _ARTICLES
    }


_Entity = tuple[int, int, bool, Any]  # (start, end, is local, mention or None)


def _coordinated_groups(claim: str, entities: list[_Entity]) -> list[list[_Entity]]:
    """Entities in claim order, grouped where they are coordinated: "Scott Derrickson and Ed Wood", "X or Y"."""
    groups: list[list[_Entity]] = []
    for ent in sorted(entities, key=lambda x: (x[0], -x[1])):  # at one start the longer span is the name
        if groups:
            last = groups[-1][-1]
            if ent[0] < last[1]:  # nested in or overlapping the last one ("Palace" in "Palace of Lights")
                continue
            if _COORDINATION.match(claim[last[1] : ent[0]]):
                groups[-1].append(ent)
                continue
        groups.append([ent])
    return groups


# Words that make a question compare the entities it coordinates ("Are X and Y both ...?"); "X or Y" always does.
_COMPARISON_CUES = re.compile(r"\b(?:both|same|share|shared|common|either|neither)\b", re.IGNORECASE)
_OR = re.compile(r"\b(?:or|nor)\b", re.IGNORECASE)


def _is_compared(claim: str, group: list[_Entity]) -> bool:
    """Whether a question compares the coordinated entities of ``group`` (two or more)."""
    if len(group) < 2 or not is_question(claim):
        return False
    joints = [claim[a[1] : b[0]] for a, b in zip(group, group[1:])]
    return any(_OR.search(j) for j in joints) or bool(_COMPARISON_CUES.search(claim))


def missing_entities(
    mentions: Sequence[Mention],
    *,
    claim: str = "",
    covered_text: str = "",
    covered: Sequence[tuple[str, str]] = (),
    depth: int = COVER_DEPTH,
    subject_first: bool = True,
) -> list[str]:
    """Unresolved names the local index has nothing for: the only names the live fallback may look up.

    ``covered`` is the top local evidence as (title, text) pairs, best first (``covered_text`` is one more
    text). An unresolved name is still *known locally*, and never looked up, when it is
    - a date or quantity, not an entity;
    - a top evidence title, up to its disambiguator and plurals;
    - or, if the claim is anchored locally (a mention resolves to a local page), present in one top evidence
      item's title and text. Without an anchor the local index knows none of the claim's entities, and a name
      merely mentioned in passing is not its page, so it is looked up.
    With ``subject_first`` the claim's subject is decided first (see :func:`_claim_subjects`): a local subject
    of a claim that is not a question means no lookup at all. A name that runs across a comma or quotes is
    judged, and returned, piece by piece; a quoted title (see ``quoted_titles``) is one name.
    """
    items = [(t or "", x or "") for t, x in list(covered)[:depth]]
    if covered_text:
        items.append(("", covered_text))
    titles = [t for t, _ in items if t and not is_disambiguation_title(t)]
    local = _TopTitles.of(titles, claim)
    named = [m for m in mentions if not all(is_quantity(p) or not _name_words(p) for p in _pieces(m))]
    subjects: set[int] = set()
    compared: set[int] = set()
    if subject_first and claim and items:
        decided = _claim_subjects(claim, named, titles, local)
        if decided is None:
            return []
        subjects, compared = decided
    known = _KnownLocally(items, local, anchored=any(m.resolved for m in named), subjects=subjects, compared=compared)
    return _names_to_look_up(claim, named, local, known)


def _pieces(m: Mention) -> list[str]:
    """The names a mention holds: split at commas and quotes, a suffix such as ", Inc" kept with its name."""
    if m.quoted:
        return [m.text]
    split = (p.strip() for p in _PIECES.split(m.text))
    return [p for p in split if p and p.rstrip(".") not in _NAME_SUFFIXES] or [m.text]


class _TopTitles:
    """The top evidence titles by their words without a disambiguator.

    ``own`` holds the titles a compared entity may match: those without a disambiguator, or with one the claim
    names (the kind of thing it compares, "Which band ..." for "X (band)"); a page of another thing of the same
    name ("X (album)" for the band) is not the entity's own.
    """

    def __init__(self, every: dict[frozenset[str], list[set[str]]], own: dict[frozenset[str], list[set[str]]]):
        self.every = every
        self.own = own

    @classmethod
    def of(cls, titles: Sequence[str], claim: str) -> _TopTitles:
        claim_words = {fold_plural(w) for w in words(claim)}
        every: dict[frozenset[str], list[set[str]]] = {}
        own: dict[frozenset[str], list[set[str]]] = {}
        for t in titles:
            base = strip_disambiguator(t)
            key, base_words = _title_key(base), set(words(base))
            every.setdefault(key, []).append(base_words)
            if base == t or {fold_plural(w) for w in words(t[len(base) :])} & claim_words:
                own.setdefault(key, []).append(base_words)
        return cls(every, own)

    def names(self, piece: str, *, own: bool = False) -> bool:
        """Whether ``piece`` is one of the titles (its capitalised function words included)."""
        among = self.own if own else self.every
        key = _title_key(piece)
        if not key or key not in among:
            return False
        caps = _capitalised_function_words(piece)
        return any(caps <= ws for ws in among[key])

    def covers(self, m: Mention) -> bool:
        return bool(m.resolved) or all(self.names(p) for p in _pieces(m))


def _claim_subjects(
    claim: str, named: Sequence[Mention], titles: Sequence[str], local: _TopTitles
) -> tuple[set[int], set[int]] | None:
    """The mentions the claim is about (``id``s): its subjects, and among them the entities it compares.

    None when nothing needs a lookup: the claim is not a question and its subject is local. A claim that is
    not a question is about its first entity, with those coordinated with it ("X and Y", "X or Y"): a local
    subject (resolved mentions, or top evidence titles named in the claim) means the other names are context.
    A missing subject is always looked up, even when other pages mention it. A question is not about its first
    entity alone, so every entity it compares ("X or Y", "Are X and Y both ...") is a subject too, wherever it
    stands, unless its own page is local: another page merely mentioning it is not its page.
    """
    groups = _coordinated_groups(
        claim,
        [(m.start, m.end, local.covers(m), m) for m in named]
        + [(s, e, True, None) for s, e in _title_anchors(claim, titles)],
    )
    if not groups:
        return None
    if not is_question(claim) and all(is_local for _, _, is_local, _ in groups[0]):
        return None
    subjects = {id(m) for _, _, is_local, m in groups[0] if not is_local}
    compared = {
        id(m)
        for group in groups
        if _is_compared(claim, group)
        for _, _, _, m in group
        if m is not None and not m.resolved and not all(local.names(p, own=True) for p in _pieces(m))
    }
    return subjects | compared, compared


class _KnownLocally:
    """Whether a piece of a mention is known to the local index (see :func:`missing_entities`)."""

    def __init__(
        self,
        items: Sequence[tuple[str, str]],
        local: _TopTitles,
        *,
        anchored: bool,
        subjects: set[int],
        compared: set[int],
    ):
        self.local = local
        self.anchored = anchored
        self.subjects = subjects
        self.compared = compared
        self.item_words = [{fold_plural(w) for w in words(t)} | {fold_plural(w) for w in words(x)} for t, x in items]
        self.lowered = [x.casefold() for _, x in items]

    def __call__(self, piece: str, m: Mention) -> bool:
        if is_quantity(piece) or not _name_words(piece) or self.local.names(piece, own=id(m) in self.compared):
            return True
        if id(m) in self.subjects:  # the claim is about it: other pages mentioning it are not its page
            return False
        if not self.anchored:
            return False
        # Numbers count here: a house number names another building than the one in the evidence.
        name = _title_key(piece) or frozenset(_name_words(piece))
        return any(name <= iw for iw in self.item_words) or any(piece.casefold() in low for low in self.lowered)


def _names_to_look_up(claim: str, named: Sequence[Mention], local: _TopTitles, known: _KnownLocally) -> list[str]:
    """The pieces of the unresolved mentions that are not known locally, in claim order, each once.

    Two words joined by "and" may be one name or two: when the joined name is a top title neither is looked up;
    otherwise both are asked for, the joined name first (the fallback keeps it when it has a page).
    """
    out: list[str] = []
    joined = _joined_pairs(claim, named)
    for m in named:
        if m.resolved:
            continue
        pair = joined.get(id(m))  # (the joined name, the other word's mention, whether m comes first)
        if pair is not None and local.names(pair[0]):
            continue
        names = [n for n in _pieces(m) if not known(n, m)]
        if pair is not None and pair[2] and names == [m.text] and not known(pair[1].text, pair[1]):
            names.insert(0, pair[0])
        for name in names:
            if name not in out:
                out.append(name)
    return out


# What joins the two words of a name that may be one name or two ("Salt and Pepper", "Tom & Jerry").
NAME_JOINTS = (" and ", " & ")


def _joined_pairs(claim: str, named: Sequence[Mention]) -> dict[int, tuple[str, Mention, bool]]:
    """Single-word names joined by "and" ("Salt and Pepper", "Moon and Sixpence", "Jack and Jill"), which may be one
    name or two: ``id(mention) -> (joined name, the other word's mention, whether this one comes first)``."""
    out: dict[int, tuple[str, Mention, bool]] = {}
    ordered = sorted((m for m in named if not m.quoted), key=lambda m: m.start)
    for a, b in zip(ordered, ordered[1:]):
        if claim[a.end : b.start] in NAME_JOINTS and len(a.text.split()) == 1 == len(b.text.split()):
            name = claim[a.start : b.end]
            out[id(a)] = (name, b, True)
            out[id(b)] = (name, a, False)
    return out
