"""Lucene 8's English analysis chain and BM25 length norms, in pure Python.

What the reference's search index does to text (pyserini's ``DefaultEnglishAnalyzer`` = Lucene's
``EnglishAnalyzer``): ``StandardTokenizer`` (Unicode UAX #29 word boundaries, as Lucene's JFlex
grammar applies them) -> ``EnglishPossessiveFilter`` (drops a trailing ``'s``) ->
``LowerCaseFilter`` -> ``StopFilter`` (Lucene's 33 English stop words) -> ``PorterStemFilter``.
:func:`analyze` reproduces that chain token for token; :func:`int_to_byte4` /
:func:`byte4_to_int` are Lucene's ``SmallFloat`` one-byte length encoding that BM25 scores with.

The tokenizer maps every character to its word-break class (one letter, see ``_classify``), runs
one regular expression over the class string and cuts the tokens out of the text:

- letters, digits and ``_`` join; ``.``, ``'`` and ``:`` join two letters (``i'm``, ``a.b``),
  ``.``, ``'``, ``,`` and ``;`` two digits (``16.9``, ``3,000``); combining marks and format
  characters stick to the character before them (rule WB4);
- each Han ideograph and each Hiragana character is a token; Katakana runs, runs of Thai, Lao,
  Myanmar and Khmer letters, and emoji (with modifiers, ZWJ sequences, flag pairs) are tokens;
- tokens longer than 255 characters are cut into 255-character pieces (Lucene's
  ``maxTokenLength``); everything else (spaces, punctuation, symbols) separates tokens.

Differences: classes come from Python's ``unicodedata`` (Unicode 14) and a few listed ranges,
where Lucene 8's grammar uses Unicode 9 word-break tables, so rare characters outside Latin,
Greek, Cyrillic, CJK and the listed scripts can split differently; ``scripts/compare_lucene.py``
measures the agreement code point by code point. Lower-casing is per character (Java's
``Character.toLowerCase``), not Python's context-dependent ``str.lower``.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from .porter import porter_stem

__all__ = [
    "LUCENE_STOP_WORDS",
    "MAX_TOKEN_LENGTH",
    "analyze",
    "byte4_to_int",
    "int_to_byte4",
    "lowercase",
    "possessive",
    "tokenize",
]

#: ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (Lucene 8).
LUCENE_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    ]
)

#: ``StandardTokenizer``'s default ``maxTokenLength``: longer tokens are cut into pieces.
MAX_TOKEN_LENGTH = 255

# ---------------------------------------------------------------------------------------------
# Character classes (one letter each):
#   L letter, Q Hebrew letter, N digit, E connector (``_``), M mid-letter-or-number (``.`` and
#   curly apostrophes), Y the ASCII apostrophe, D the double quote, C mid-letter (``:``),
#   U mid-number (``,`` ``;``), X extend/format (sticks to the previous character), Z the
#   zero-width joiner, K Katakana, I Han ideograph, H Hiragana, S Thai/Lao/Myanmar/Khmer letter,
#   T a mark of those scripts (extends like X, or starts a run), P emoji (Extended_Pictographic),
#   F emoji skin-tone modifier, R regional indicator, O anything else.
_MID_NUM_LET = "\u002e\u2018\u2019\u2024\ufe52\uff07\uff0e"
_MID_LETTER = "\u003a\u00b7\u0387\u05f4\u2027\ufe13\ufe55\uff1a"
_MID_NUM = (
    "\u002c\u003b\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b"
)
_KATAKANA_EXTRA = "\u3031\u3032\u3033\u3034\u3035\u309b\u309c\u30a0\u30fc\uff70"
_IDEOGRAPHIC_EXTRA = "\u3007\u3021\u3022\u3023\u3024\u3025\u3026\u3027\u3028\u3029"
_IDEOGRAPHIC_EXTRA += "\u3038\u3039\u303a"
# Letters (Alphabetic) whose general category is a symbol: circled and squared Latin letters.
_ALETTER_EXTRA = [(0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189)]
# Circled and squared Katakana (symbols that Lucene's grammar reads as Katakana).
_KATAKANA_RANGES = [(0x32D0, 0x32FE), (0x3300, 0x3357)]
# Line_Break=Complex_Context scripts (their letters and marks run together into one token).
_COMPLEX_CONTEXT = [
    (0x0E00, 0x0EFF),
    (0x1000, 0x109F),
    (0x1780, 0x17FF),
    (0x1950, 0x19DF),
    (0x19E0, 0x19FF),
    (0x1A20, 0x1AAF),
    (0x11700, 0x1174F),
    (0xA9E0, 0xA9FF),
    (0xAA60, 0xAAFF),
]
# Extended_Pictographic (emoji-data), the ranges that hold assigned characters.
_PICTOGRAPHIC = [
    (0x00A9, 0x00A9), (0x00AE, 0x00AE), (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122),
    (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA), (0x231A, 0x231B), (0x2328, 0x2328),
    (0x2388, 0x2388), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2),
    (0x25AA, 0x25AB), (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2605),
    (0x2607, 0x2612), (0x2614, 0x2685), (0x2690, 0x2705), (0x2708, 0x2712), (0x2714, 0x2714),
    (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721), (0x2728, 0x2728), (0x2733, 0x2734),
    (0x2744, 0x2744), (0x2747, 0x2747), (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755),
    (0x2757, 0x2757), (0x2763, 0x2767), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0),
    (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50),
    (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299),
    (0x1F000, 0x1F0FF), (0x1F10D, 0x1F10F), (0x1F12F, 0x1F12F), (0x1F16C, 0x1F171),
    (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1AD, 0x1F1E5),
    (0x1F201, 0x1F20F), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A),
    (0x1F23C, 0x1F23F), (0x1F249, 0x1F3FA), (0x1F400, 0x1F53D), (0x1F546, 0x1F64F),
    (0x1F680, 0x1F6FF), (0x1F774, 0x1F77F), (0x1F7D5, 0x1F7FF), (0x1F80C, 0x1F80F),
    (0x1F848, 0x1F84F), (0x1F85A, 0x1F85F), (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8FF),
    (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945), (0x1F947, 0x1FAFF), (0x1FB00, 0x1FBFF), (0x1FC00, 0x1FFFD),
]  # fmt: skip


def _in(cp: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _classify(ch: str) -> str:
    """The word-break class letter of one character (see the table above)."""
    cp = ord(ch)
    if ch == "'":
        return "Y"
    if ch == '"':
        return "D"
    if ch in _MID_NUM_LET:
        return "M"
    if ch in _MID_LETTER:
        return "C"
    if ch in _MID_NUM:
        return "U"
    if cp == 0x200D:
        return "Z"
    if cp == 0x202F:
        return "E"
    if 0x1F1E6 <= cp <= 0x1F1FF:
        return "R"
    if 0x1F3FB <= cp <= 0x1F3FF:
        return "F"
    cat = unicodedata.category(ch)
    if _in(cp, _COMPLEX_CONTEXT) and cat != "Nd" and cat[0] not in "PZC":
        return "T" if cat[0] == "M" else "S"
    if cp in (0x200C, 0xFF9E, 0xFF9F) or cat in ("Mn", "Me", "Mc"):
        return "X"
    if cat == "Cf":
        return "O" if cp == 0x200B else "X"
    name = unicodedata.name(ch, "")
    if cp in (0x30FB, 0xFF65):
        return "O"
    if (
        ch in _KATAKANA_EXTRA
        or _in(cp, _KATAKANA_RANGES)
        or name.startswith(("KATAKANA", "HALFWIDTH KATAKANA"))
    ):
        return "K"
    if name.startswith("HIRAGANA"):
        return "H"
    if ch in _IDEOGRAPHIC_EXTRA or name.startswith(
        ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH", "CJK RADICAL", "KANGXI RADICAL")
    ):
        return "I"
    if 0x1FB00 <= cp <= 0x1FBFF:
        return "P"
    if cat == "Pc":
        return "E"
    if cat == "Nd":
        return "N"
    if cat[0] == "L" or cat == "Nl" or _in(cp, _ALETTER_EXTRA):
        return "Q" if name.startswith("HEBREW LETTER") else "L"
    if _in(cp, _PICTOGRAPHIC):
        return "P"
    return "O"


class _ClassTable(dict):
    """``str.translate`` table: code point -> class letter, filled on first sight."""

    def __missing__(self, cp: int) -> str:
        cls = self[cp] = _classify(chr(cp))
        return cls


_CLASSES = _ClassTable()
for _cp in range(128):
    _CLASSES[_cp]  # noqa: B018 - pre-fill the ASCII part

_X = "[XZFT]*"
_UNIT = (
    rf"(?:QX*(?:D{_X}(?=Q)|Y{_X}(?![LQ]))"  # WB7a-c: Hebrew letter + quotes
    rf"|[LQ]{_X}(?:[MCY]{_X}(?=[LQ]))?"  # WB5-7: letters, joined across one mid-letter
    rf"|N{_X}(?:[MUY]{_X}(?=N))?)"  # WB8, WB11-12: digits, joined across one mid-number
)
_KATA = rf"K{_X}(?:(?:E{_X})*K{_X})*"
_RUN = rf"(?:{_UNIT}(?:(?:E{_X})*{_UNIT})*|{_KATA})"
_TOKEN_RE = re.compile(
    rf"(?:E{_X})*{_RUN}(?:(?:E{_X})+{_RUN})*(?:E{_X})*"  # words and numbers (WB9-10, WB13a-b)
    rf"|[IH]{_X}"  # one ideograph / hiragana per token
    rf"|[ST]{_X}(?:S{_X})*"  # complex-context runs
    rf"|[PF]{_X}(?:(?<=Z)P{_X})*"  # emoji (with modifiers), ZWJ sequences
    rf"|R{_X}R{_X}"  # flags: a pair of regional indicators
)


def tokenize(text: str) -> list[str]:
    """``StandardTokenizer``'s tokens of ``text`` (original case)."""
    classes = text.translate(_CLASSES)
    out = []
    for m in _TOKEN_RE.finditer(classes):
        start, end = m.span()
        while end - start > MAX_TOKEN_LENGTH:
            out.append(text[start : start + MAX_TOKEN_LENGTH])
            start += MAX_TOKEN_LENGTH
        out.append(text[start:end])
    return out


def possessive(token: str) -> str:
    """``EnglishPossessiveFilter``: drop a trailing ``'s`` (any of three apostrophes, s or S)."""
    if len(token) >= 2 and token[-1] in "sS" and token[-2] in "'\u2019\uff07":
        return token[:-2]
    return token


def lowercase(token: str) -> str:
    """``LowerCaseFilter``: Java's per-character ``Character.toLowerCase``."""
    if token.isascii():
        return token.lower()
    out = []
    for ch in token:
        low = ch.lower()
        out.append(low if len(low) == 1 else ch if ch != "\u0130" else "i")
    return "".join(out)


@lru_cache(maxsize=1 << 18)
def _term(token: str) -> str | None:
    term = lowercase(possessive(token))
    if term in LUCENE_STOP_WORDS:
        return None
    return porter_stem(term)


def analyze(text: str) -> list[str]:
    """The terms Lucene's ``EnglishAnalyzer`` indexes for ``text``, in order."""
    out = []
    for token in tokenize(text):
        term = _term(token)
        if term is not None:
            out.append(term)
    return out


# ---------------------------------------------------------------------------------------------
# SmallFloat: BM25 stores each document's length in one byte, exact up to 23, then with four
# significant bits (lengths are rounded down).
_MAX_INT4 = 231  # _long_to_int4(2**31 - 1)
_NUM_FREE_VALUES = 255 - _MAX_INT4


def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits = i & 0x07
    shift = (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


def int_to_byte4(i: int) -> int:
    """``SmallFloat.intToByte4`` as an unsigned byte (0..255)."""
    if i < 0:
        raise ValueError(f"a length cannot be negative, got {i}")
    if i < _NUM_FREE_VALUES:
        return i
    return _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    """``SmallFloat.byte4ToInt`` of an unsigned byte (0..255)."""
    if b < _NUM_FREE_VALUES:
        return b
    return min(_NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES), 2**31 - 1)
