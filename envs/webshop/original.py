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
seeded with ``seed``, so a task replays exactly. Reviews and ratings are read from a product's
``Reviews``/``average_rating`` when present (the reference leaves them empty / ``"N.A."``).

A malformed file raises :class:`CatalogueError` naming the file and the record.
"""

from __future__ import annotations

import itertools
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .generate import NO_CEILING, goal_record, price_ceiling

__all__ = ["CatalogueError", "load_original"]

GOAL_SHUFFLE_SEED = 233


class CatalogueError(ValueError):
    """A catalogue or instruction file that cannot be used; the message names file and record."""


def _read_json(path: Path, kind: type) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError as exc:
        raise CatalogueError(f"{path}: file not found") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CatalogueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, kind):
        raise CatalogueError(f"{path}: expected a JSON {kind.__name__}, got {type(data).__name__}")
    return data


def _parse_pricing(raw: Any) -> tuple[list[float], str]:
    if not raw:
        return [100.0], "$100.0"
    if not isinstance(raw, str):
        raise ValueError(f"'pricing' must be a string, got {type(raw).__name__}")
    try:
        prices = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in raw.split("$")[1:]]
    except InvalidOperation as exc:
        raise ValueError(f"cannot parse 'pricing' {raw!r}") from exc
    if not prices:
        raise ValueError(f"cannot parse 'pricing' {raw!r}")
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
    bullets = raw.get("small_description", "")
    bullets = [str(b) for b in bullets] if isinstance(bullets, list) else [str(bullets or "")]
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
            isinstance(c, dict) and "value" in c for c in contents
        ):
            raise ValueError(f"option {opt_name!r} must be a list of objects with a 'value'")
        options[opt_name.lower()] = [
            str(c["value"]).strip().replace("/", " | ").lower() for c in contents
        ]
    info = attributes.get(asin) or {}
    attrs = info.get("attributes") if isinstance(info, dict) else None
    reviews = raw.get("Reviews") or []
    reviews = [
        {
            "title": str(r.get("title", "")),
            "score": r.get("score", r.get("stars", "")),
            "body": str(r.get("body", r.get("review", ""))),
        }
        for r in reviews
        if isinstance(r, dict)
    ]
    return {
        "asin": asin,
        "name": raw["name"],
        "Title": raw["name"],
        "Description": str(raw.get("full_description") or ""),
        "BulletPoints": bullets,
        "Reviews": reviews,
        "Rating": str(raw.get("average_rating") or "N.A."),
        "Price": price_tag,
        "pricing": pricing,
        "price": float(price),
        "options": options,
        "Attributes": [str(a) for a in attrs]
        if isinstance(attrs, list) and attrs
        else ["DUMMY_ATTR"],
        "category": raw["category"],
        "query": raw["query"].lower().strip(),
        "product_category": raw["product_category"],
    }


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
    for i, raw in enumerate(raw_products):
        asin = raw.get("asin") if isinstance(raw, dict) else None
        if isinstance(asin, str) and (asin == "nan" or len(asin) > 10 or asin in seen):
            continue
        try:
            products.append(_product(raw, attributes, rng))
        except ValueError as exc:
            raise CatalogueError(f"{product_file}: record {i} (asin {asin!r}): {exc}") from exc
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
                if not isinstance(attrs, list) or not isinstance(opts, list):
                    raise CatalogueError(
                        f"{where}: 'instruction_attributes'/'instruction_options' must be lists"
                    )
                if not attrs:
                    continue
                ceiling = price_ceiling(rng, p["price"])
                text = ins["instruction"].strip(".") + _price_text(ceiling)
                goals.append(
                    goal_record(
                        p, index, text, [str(a) for a in attrs], [str(o) for o in opts], ceiling
                    )
                )
        else:
            info = attributes.get(asin)
            if not isinstance(info, dict) or not info.get("instruction"):
                continue
            attrs = info.get("instruction_attributes") or []
            if not isinstance(attrs, list) or not attrs:
                raise CatalogueError(
                    f"{attribute_file}: record {asin!r}: an instruction needs 'instruction_attributes'"
                )
            ceiling = price_ceiling(rng, p["price"])
            names = sorted(p["options"])
            for combo in itertools.product(*(p["options"][n] for n in names)):
                opts = dict(zip(names, combo))
                opt_text = ", and ".join(f"{k}: {v}" for k, v in opts.items())
                text = f"{info['instruction']}{' with ' + opt_text if opt_text else ''}{_price_text(ceiling)}"
                goals.append(goal_record(p, index, text, [str(a) for a in attrs], opts, ceiling))
    if not products:
        raise CatalogueError(f"{product_file}: no usable product records")
    if not goals:
        source = human_instruction_file if human_goals else attribute_file
        raise CatalogueError(
            f"{source}: no usable instruction for any of the {len(products)} products"
        )
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return products, goals
