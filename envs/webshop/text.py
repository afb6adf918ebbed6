"""Text processing shared by the search engine and the reward: tokens, stems, colours.

- Search tokens are the terms of the reference's Lucene (pyserini) English analyser
  (``lucene.py``: StandardTokenizer, possessive filter, lower case, stop words, Porter stems).
- ``normalize_color`` maps an option value to the first colour word it contains, as the
  reference does before comparing options (same colour list).
- ``content_words`` is our lexical stand-in for the reference's spacy noun extraction in the
  type reward (see ``reward.py``).
"""

from __future__ import annotations

import re
from functools import lru_cache

from .lucene import LUCENE_STOP_WORDS, MAX_TOKEN_LENGTH, analyze

__all__ = [
    "COLOR_SET",
    "LUCENE_STOP_WORDS",
    "MAX_TOKEN_CHARS",
    "content_words",
    "normalize_color",
    "search_tokens",
]

#: Longer tokens are cut into pieces by the tokenizer (Lucene's ``maxTokenLength``).
MAX_TOKEN_CHARS = MAX_TOKEN_LENGTH

_WORD_RE = re.compile(r"[^\W_]+")

#: Colour words, in the reference's order (the first one contained in a value wins).
COLOR_SET = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
]


def search_tokens(text: str) -> list[str]:
    """The terms the search index holds for ``text`` (Lucene's English analyser, see
    ``lucene.py``)."""
    return analyze(text)


def normalize_color(value: str) -> str:
    """The first colour word of :data:`COLOR_SET` found inside ``value``, else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


#: Words that never name a product type: stop words, sizes, units and common modifiers.
_NON_TYPE_WORDS = LUCENE_STOP_WORDS | frozenset(
    [
        "i",
        "im",
        "me",
        "my",
        "we",
        "you",
        "your",
        "our",
        "he",
        "she",
        "his",
        "her",
        "its",
        "all",
        "any",
        "some",
        "each",
        "every",
        "more",
        "most",
        "less",
        "very",
        "new",
        "best",
        "great",
        "good",
        "high",
        "quality",
        "premium",
        "pack",
        "set",
        "count",
        "ounce",
        "oz",
        "fl",
        "inch",
        "inches",
        "lb",
        "lbs",
        "mm",
        "cm",
        "ml",
        "g",
        "kg",
        "ft",
        "x",
        "xl",
        "xxl",
        "small",
        "medium",
        "large",
        "extra",
        "size",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "ten",
        "from",
        "up",
        "out",
        "over",
        "under",
        "without",
        "per",
        "than",
        "which",
        "who",
        "what",
        "when",
        "where",
        "how",
        "also",
        "only",
        "just",
        "other",
        "so",
        "can",
    ]
)


@lru_cache(maxsize=65536)
def content_words(title: str) -> frozenset[str]:
    """Lower-case alphabetic words of ``title`` that can name a product type (plural folded)."""
    out = set()
    for w in _WORD_RE.findall(title.lower()):
        if not w.isalpha() or len(w) < 2 or w in _NON_TYPE_WORDS:
            continue
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return frozenset(out)
