"""Seeded generator of WebShop catalogues and instructions.

Product ``i`` of a catalogue is a pure function of ``(seed, i)``: a catalogue of 1,000 products is
the first 1,000 products of the 100,000-product one with the same seed, and products can be
re-created on demand without holding the catalogue in memory. Records use the field names of the
reference's loaded products (``Title``, ``Description``, ``BulletPoints``, ``Reviews``, ``Rating``,
``Price``, ``options``, ``Attributes``, ``category``, ``query``, ``product_category``, ``name``).

Instructions follow the reference's synthetic goals: a product is drawn, then 1-3 of its
attributes, one value of each of its option types, and a price ceiling drawn the reference's way
(two of the first four multiples of $10 above the price, the larger one kept); the text reads
``"<lead> <type> with <attributes> with <type>: <value>, and ..., and price lower than X dollars"``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from rapidfuzz import fuzz, utils

from .text import normalize_color
from .vocab import (
    BRAND_SYLLABLES,
    CATEGORIES,
    DESCRIPTION_ATTRIBUTE,
    DESCRIPTION_CLOSERS,
    DESCRIPTION_OPENERS,
    FEATURE_TEMPLATES,
    FILLER_FEATURES,
    INSTRUCTION_LEADS,
    PRODUCT_TYPES,
    REVIEW_BODIES,
    REVIEW_TITLES,
    ProductType,
)

__all__ = [
    "PRICE_RANGE",
    "generate_goal",
    "generate_product",
    "iter_products",
    "make_asin",
    "price_ceiling",
]

#: Price ceilings an instruction may state (the reference's list).
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_CEILING = 1_000_000.0

_TYPES_BY_CATEGORY = {c: [t for t in PRODUCT_TYPES if t.category == c] for c in CATEGORIES}
_ASIN_SPACE = 36**8
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def make_asin(seed: int, i: int) -> str:
    """A 10-character, Amazon-like id, distinct for distinct ``i`` (an affine bijection mod 36^8)."""
    a = 2_654_435_761 + 12 * (seed % 1_000_003)  # odd and not a multiple of 3: invertible mod 36^8
    x = (a * (i + 1) + 7_919 * seed) % _ASIN_SPACE
    chars = []
    for _ in range(8):
        x, r = divmod(x, 36)
        chars.append(_ALPHABET[r])
    return "B0" + "".join(reversed(chars))


def _collide(a: str, b: str) -> bool:
    """Whether two option values would count as the same under the reward's option rule."""
    a, b = normalize_color(a), normalize_color(b)
    return fuzz.token_set_ratio(a, b, processor=utils.default_process) > 85


def _distinct_values(
    rng: random.Random, pool: tuple[str, ...], k: int, taken: list[str]
) -> list[str]:
    """Up to ``k`` values of ``pool`` that no two (nor any in ``taken``) collide, in pool order."""
    chosen: list[str] = []
    for v in rng.sample(pool, len(pool)):
        if len(chosen) == k:
            break
        if not any(_collide(v, c) for c in chosen) and not any(_collide(v, t) for t in taken):
            chosen.append(v)
    return sorted(chosen, key=pool.index)


def _brand(rng: random.Random) -> str:
    return "".join(rng.choice(BRAND_SYLLABLES) for _ in range(rng.choice((2, 2, 3)))).capitalize()


def _cap(s: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in s.split())


def generate_product(seed: int, i: int) -> dict[str, Any]:
    """Product ``i`` of the catalogue drawn with ``seed``."""
    rng = random.Random(f"webshop-product:{seed}:{i}")
    ptype: ProductType = rng.choice(_TYPES_BY_CATEGORY[rng.choice(CATEGORIES)])
    attrs = rng.sample(ptype.attributes, rng.randint(3, min(6, len(ptype.attributes))))
    brand = _brand(rng)
    in_title = attrs[: rng.randint(1, 2)]
    extra = f" {_cap(rng.choice(ptype.extras))}" if ptype.extras and rng.random() < 0.6 else ""
    title = f"{brand} {' '.join(_cap(a) for a in in_title)}{extra} {_cap(ptype.noun)}"
    rest = attrs[len(in_title) :]
    if rest and rng.random() < 0.5:
        title += f", {_cap(rest[0])}"

    sentences = [rng.choice(DESCRIPTION_OPENERS).format(noun=ptype.noun)]
    sentences += [
        rng.choice(DESCRIPTION_ATTRIBUTE).format(attr=a) for a in attrs if rng.random() < 0.7
    ]
    sentences.append(rng.choice(DESCRIPTION_CLOSERS))
    features = [rng.choice(FEATURE_TEMPLATES).format(attr=a, Attr=_cap(a)) for a in attrs]
    rng.shuffle(features)
    features = features[: rng.randint(2, len(features))] + rng.sample(
        FILLER_FEATURES, rng.randint(0, 2)
    )

    reviews = []
    for _ in range(rng.choice((0, 1, 2, 2, 3, 4))):
        score = rng.choices((5, 4, 3, 2, 1), weights=(5, 3, 1.5, 0.7, 0.5))[0]
        reviews.append(
            {
                "title": rng.choice(REVIEW_TITLES[score]),
                "score": score,
                "body": REVIEW_BODIES[score].format(noun=ptype.noun),
            }
        )
    rating = f"{sum(r['score'] for r in reviews) / len(reviews):.1f}" if reviews else "N.A."

    lo, hi = ptype.price
    price = max(1.0, round(rng.uniform(lo, hi))) - 0.01
    options: dict[str, list[str]] = {}
    taken: list[str] = []
    for name, pool in ptype.options.items():
        if rng.random() < 0.85:
            values = _distinct_values(rng, pool, rng.randint(2, 6), taken)
            if len(values) >= 2:
                options[name] = values
                taken += values
    return {
        "asin": make_asin(seed, i),
        "name": title,
        "Title": title,
        "Description": " ".join(sentences),
        "BulletPoints": features,
        "Reviews": reviews,
        "Rating": rating,
        "Price": f"${price:.2f}",
        "pricing": [price],
        "price": price,
        "options": options,
        "Attributes": attrs,
        "category": ptype.category,
        "query": ptype.query,
        "product_category": ptype.path,
    }


def iter_products(seed: int, n: int) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield generate_product(seed, i)


def price_ceiling(rng: random.Random, price: float) -> float:
    """The reference's ceiling: two of the first four listed prices above ``price``, the larger."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return NO_CEILING
    return max(rng.sample(above, 2))


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def goal_record(
    product: dict[str, Any], index: int, text: str, attrs: list[str], options, ceiling: float
) -> dict[str, Any]:
    """One goal in the catalogue's format: the target product, its instruction and constraints."""
    return {
        "asin": product["asin"],
        "product_index": index,
        "category": product["category"],
        "query": product["query"],
        "name": product["Title"],
        "product_category": product["product_category"],
        "instruction_text": text,
        "attributes": attrs,
        "price_upper": ceiling,
        "goal_options": options,
        "weight": 1.0,
    }


def generate_goal(
    seed: int, j: int, num_products: int, product_of=generate_product
) -> dict[str, Any]:
    """Instruction ``j`` for a catalogue of ``num_products`` products drawn with ``seed``."""
    rng = random.Random(f"webshop-goal:{seed}:{j}")
    index = rng.randrange(num_products)
    product = product_of(seed, index)
    ptype = next(t for t in PRODUCT_TYPES if t.query == product["query"])
    attrs = rng.sample(product["Attributes"], rng.randint(1, min(3, len(product["Attributes"]))))
    goal_options = {name: rng.choice(values) for name, values in sorted(product["options"].items())}
    ceiling = price_ceiling(rng, product["price"])
    lead = rng.choice(INSTRUCTION_LEADS)
    if rng.random() < 0.5:
        text = f"{lead} {ptype.noun} with {_join(attrs)}"
    else:
        text = f"{lead} {_join(attrs)} {ptype.noun}"
    if goal_options:
        text += " with " + ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
    if ceiling < NO_CEILING:
        text += f", and price lower than {ceiling:.2f} dollars"
    return goal_record(product, index, text, attrs, goal_options, ceiling)
