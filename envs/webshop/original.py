"""Loader for the reference's data files (``items_shuffle*.json``, ``items_ins_v2*.json``,
``items_human_ins.json``), producing the same records and goals as the generator.

What it does, following the reference's ``load_products`` and ``get_goals``:

- products: ids ``"nan"`` or longer than 10 characters are skipped, duplicates keep the first;
  ``Title = name``, ``Description = full_description``, ``BulletPoints = small_description`` (a
  list); prices are parsed from the ``pricing`` string (``"$a"`` or a range ``"$a ... $b"``,
  $100 when missing); option names are lower-cased, values lower-cased with ``/`` -> ``" | "``;
  ``Attributes`` come from ``items_ins_v2`` (``["DUMMY_ATTR"]`` when absent).
- human goals (default): one goal per instruction of ``items_human_ins`` with non-empty
  attributes; synthetic goals: one per combination of option values of each product that has an
  ``instruction`` in ``items_ins_v2``.
- the goals are shuffled with ``random.Random(233)``, which gives the reference's order
  (``random.seed(233); random.shuffle(goals)``); test = the first 500.

Differences: the reference draws each product's purchase price (uniform over a price range) and
each goal's price ceiling with the unseeded global ``random``; here both come from a generator
seeded with ``seed``, so a task replays exactly. Reviews are empty and the rating ``N.A.``, as
the reference shows them with the released files (it reads them from a separate review file
that is not distributed; a product's own ``Reviews``/``average_rating`` keys are ignored, as
there).

Malformed input, the rule (``docs/envs/webshop.md``):

- a file that cannot be used (missing, a directory, unreadable, not UTF-8 JSON, nested deeper
  than Python's parser allows, the wrong top-level type) raises :class:`CatalogueError` naming
  the file;
- a malformed record (not an object; a required field missing or of the wrong type; a price
  that is not a finite, non-negative amount below ``MAX_PRICE``; an option list that is not a
  list of ``{"value": string}``; non-string attributes or instruction fields; more than
  ``MAX_GOALS_PER_PRODUCT`` option combinations) raises :class:`CatalogueError` naming the file
  and the record (its position and ASIN);
- records the reference skips are skipped (ASIN ``"nan"`` or longer than 10 characters, a
  repeated ASIN, a human instruction without attributes, a product without a synthetic
  instruction), and each kind is counted in one logged warning.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
from collections import Counter
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .generate import NO_CEILING, goal_record, price_ceiling

__all__ = ["MAX_GOALS_PER_PRODUCT", "MAX_PRICE", "CatalogueError", "load_original"]

GOAL_SHUFFLE_SEED = 233
#: Prices at or above this (or not finite) are rejected: they make a goal unwinnable.
MAX_PRICE = 1e9
#: A product whose option values combine into more synthetic goals than this is rejected.
MAX_GOALS_PER_PRODUCT = 100_000

log = logging.getLogger(__name__)


class CatalogueError(ValueError):
    """A catalogue or instruction file that cannot be used; the message names file and record."""


def _read_json(path: Path, kind: type) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError as exc:
        raise CatalogueError(f"{path}: file not found") from exc
    except IsADirectoryError as exc:
        raise CatalogueError(f"{path}: is a directory, expected a JSON file") from exc
    except OSError as exc:
        raise CatalogueError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CatalogueError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise CatalogueError(f"{path}: JSON nested too deeply to read") from exc
    if not isinstance(data, kind):
        raise CatalogueError(f"{path}: expected a JSON {kind.__name__}, got {type(data).__name__}")
    return data


def _parse_pricing(raw: Any) -> tuple[list[float], str]:
    """The reference's parse (each ``$`` part, non-digits other than ``.`` removed), rejecting
    what it would misread: a minus sign (``"$-5.00"`` is not 5.0), no digits, an amount that
    is not finite or not below :data:`MAX_PRICE`."""
    if not raw:
        return [100.0], "$100.0"
    if not isinstance(raw, str):
        raise ValueError(f"'pricing' must be a string, got {type(raw).__name__}")
    prices = []
    for part in raw.split("$")[1:]:
        if part.lstrip().startswith("-"):
            raise ValueError(f"negative price in 'pricing' {raw[:80]!r}")
        try:
            value = float(Decimal(re.sub(r"[^\d.]", "", part)))
        except InvalidOperation as exc:
            raise ValueError(f"cannot parse 'pricing' {raw[:80]!r}") from exc
        if not (math.isfinite(value) and 0.0 <= value < MAX_PRICE):
            raise ValueError(f"price out of range in 'pricing' {raw[:80]!r} (max {MAX_PRICE:g})")
        prices.append(value)
    if not prices:
        raise ValueError(f"cannot parse 'pricing' {raw[:80]!r}")
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


def _product(raw: Any, attributes: dict[str, Any], rng) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"expected an object, got {type(raw).__name__}")
    for key in ("asin", "name", "category", "query", "product_category"):
        if not isinstance(raw.get(key), str):
            raise ValueError(f"missing or non-string {key!r}")
    asin = raw["asin"]
    bullets = raw.get("small_description")
    if bullets is None:
        bullets = [""]
    elif isinstance(bullets, str):
        bullets = [bullets]
    elif not (isinstance(bullets, list) and all(isinstance(b, str) for b in bullets)):
        raise ValueError("'small_description' must be a string or a list of strings")
    description = raw.get("full_description")
    if description is None:
        description = ""
    elif not isinstance(description, str):
        raise ValueError("'full_description' must be a string")
    pricing, price_tag = _parse_pricing(raw.get("pricing"))
    price = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
    options: dict[str, list[str]] = {}
    custom = raw.get("customization_options") or {}
    if not isinstance(custom, dict):
        raise ValueError("'customization_options' must be an object")
    for opt_name, contents in custom.items():
        if contents is None:
            continue
        if not isinstance(contents, list) or not all(
            isinstance(c, dict) and isinstance(c.get("value"), str) for c in contents
        ):
            raise ValueError(
                f"option {opt_name[:80]!r} must be a list of objects with a string 'value'"
            )
        options[opt_name.lower()] = [
            c["value"].strip().replace("/", " | ").lower() for c in contents
        ]
    info = attributes.get(asin) or {}
    attrs = info.get("attributes") if isinstance(info, dict) else None
    if attrs is not None and not (
        isinstance(attrs, list) and all(isinstance(a, str) for a in attrs)
    ):
        raise _AttributeFileError(asin, "'attributes' must be a list of strings")
    return {
        "asin": asin,
        "name": raw["name"],
        "Title": raw["name"],
        "Description": description,
        "BulletPoints": bullets,
        "Reviews": [],
        "Rating": "N.A.",
        "Price": price_tag,
        "pricing": pricing,
        "price": float(price),
        "options": options,
        "Attributes": list(attrs) if attrs else ["DUMMY_ATTR"],
        "category": raw["category"],
        "query": raw["query"].lower().strip(),
        "product_category": raw["product_category"],
    }


class _AttributeFileError(ValueError):
    """A malformed record of the attribute file, met while reading a product."""

    def __init__(self, asin: str, message: str):
        super().__init__(message)
        self.asin = asin


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _price_text(ceiling: float) -> str:
    return f", and price lower than {ceiling:.2f} dollars" if ceiling < NO_CEILING else ""


def load_original(
    product_file: str | Path,
    attribute_file: str | Path | None = None,
    human_instruction_file: str | Path | None = None,
    *,
    human_goals: bool = True,
    num_products: int | None = None,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(products, goals)`` from the reference's files, goals in the reference's order."""
    import random

    product_file = Path(product_file)
    raw_products = _read_json(product_file, list)
    attributes = _read_json(Path(attribute_file), dict) if attribute_file else {}
    if human_goals and human_instruction_file is None:
        raise CatalogueError("human_goals=True needs human_instruction_file (items_human_ins.json)")
    human = _read_json(Path(human_instruction_file), dict) if human_goals else {}
    rng = random.Random(seed)

    if num_products is not None:
        raw_products = raw_products[:num_products]
    products: list[dict[str, Any]] = []
    seen: set[str] = set()
    skipped: Counter[str] = Counter()
    for i, raw in enumerate(raw_products):
        asin = raw.get("asin") if isinstance(raw, dict) else None
        if isinstance(asin, str) and (asin == "nan" or len(asin) > 10):
            skipped["product records with ASIN 'nan' or longer than 10 characters"] += 1
            continue
        if isinstance(asin, str) and asin in seen:
            skipped["product records repeating an earlier ASIN"] += 1
            continue
        try:
            products.append(_product(raw, attributes, rng))
        except _AttributeFileError as exc:
            raise CatalogueError(f"{attribute_file}: record {exc.asin!r}: {exc}") from exc
        except ValueError as exc:
            shown = asin if isinstance(asin, str) else None
            raise CatalogueError(f"{product_file}: record {i} (asin {shown!r}): {exc}") from exc
        seen.add(asin)

    goals: list[dict[str, Any]] = []
    for index, p in enumerate(products):
        asin = p["asin"]
        if human_goals:
            entries = human.get(asin) or []
            if not isinstance(entries, list):
                raise CatalogueError(
                    f"{human_instruction_file}: record {asin!r}: expected a list of instructions"
                )
            for k, ins in enumerate(entries):
                where = f"{human_instruction_file}: record {asin!r}, instruction {k}"
                if not isinstance(ins, dict) or not isinstance(ins.get("instruction"), str):
                    raise CatalogueError(f"{where}: missing 'instruction' text")
                attrs = ins.get("instruction_attributes") or []
                opts = ins.get("instruction_options") or []
                if not _strings(attrs) or not _strings(opts):
                    raise CatalogueError(
                        f"{where}: 'instruction_attributes'/'instruction_options' must be lists"
                        " of strings"
                    )
                if not attrs:
                    skipped["human instructions without attributes"] += 1
                    continue
                ceiling = price_ceiling(rng, p["price"])
                text = ins["instruction"].strip(".") + _price_text(ceiling)
                goals.append(goal_record(p, index, text, list(attrs), list(opts), ceiling))
        else:
            info = attributes.get(asin)
            if not isinstance(info, dict) or not info.get("instruction"):
                skipped["products without a synthetic instruction"] += 1
                continue
            if not isinstance(info["instruction"], str):
                raise CatalogueError(
                    f"{attribute_file}: record {asin!r}: 'instruction' not a string"
                )
            attrs = info.get("instruction_attributes") or []
            if not _strings(attrs) or not attrs:
                raise CatalogueError(
                    f"{attribute_file}: record {asin!r}: an instruction needs "
                    "'instruction_attributes' (a non-empty list of strings)"
                )
            ceiling = price_ceiling(rng, p["price"])
            names = sorted(p["options"])
            combos = math.prod(len(p["options"][n]) for n in names)
            if combos > MAX_GOALS_PER_PRODUCT:
                raise CatalogueError(
                    f"{product_file}: record (asin {asin!r}): {combos} option "
                    f"combinations, more than {MAX_GOALS_PER_PRODUCT:,} synthetic goals"
                )
            for combo in itertools.product(*(p["options"][n] for n in names)):
                opts = dict(zip(names, combo))
                opt_text = ", and ".join(f"{k}: {v}" for k, v in opts.items())
                text = f"{info['instruction']}{' with ' + opt_text if opt_text else ''}{_price_text(ceiling)}"
                goals.append(goal_record(p, index, text, list(attrs), opts, ceiling))
    if not products:
        raise CatalogueError(f"{product_file}: no usable product records")
    if not goals:
        source = human_instruction_file if human_goals else attribute_file
        raise CatalogueError(
            f"{source}: no usable instruction for any of the {len(products)} products"
        )
    for what, count in skipped.items():
        log.warning("WebShop %s: skipped %d %s (as the reference does)", product_file, count, what)
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return products, goals
