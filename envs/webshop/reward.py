"""The WebShop purchase reward (Yao et al., 2022, eq. 1), term by term.

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[price <= budget]) / (|U_att| + |U_opt| + 1)

``U`` is the goal (instruction), ``Y`` the purchased product with the options selected. What
counts as a match follows the reference implementation (``web_agent_site/engine/goal.py``):

- attribute: fuzzy ``token_set_ratio > 85`` against one of the product's attributes, or else the
  goal attribute appears verbatim in the title, the features or the description (lower-cased);
- option: after colour normalisation, fuzzy ``token_set_ratio > 85`` against a selected option;
- price: the purchase price is at most the goal's ceiling;
- r_type: 1 when the product is of the right type; 0.5 when neither the search query, nor two
  levels of the category path, nor enough of the title match; 0.1 when the title overlap is below
  0.1; 0 when the titles share nothing.

Difference from the reference, by necessity: the reference measures title overlap on the nouns
that spacy's ``en_core_web_sm`` tags (a model we cannot download). Here the overlap is computed on
*content words* (lower-case alphabetic words minus stop words, units and common modifiers; final
plural ``s`` folded; see :func:`agentrl.envs.webshop.text.content_words`). Thresholds are the
reference's. The fuzzy ratio is RapidFuzz's ``token_set_ratio`` with the same default
pre-processing as ``thefuzz`` (which wraps RapidFuzz), so that term matches exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz, utils

from .text import content_words, normalize_color

__all__ = [
    "FUZZY_THRESHOLD",
    "Reward",
    "attribute_matches",
    "compute_reward",
    "goal_option_values",
    "option_matches",
    "type_reward",
]

#: Fuzzy match threshold of the reference (strictly greater than).
FUZZY_THRESHOLD = 85.0


def _fuzzy(a: str, b: str) -> float:
    return fuzz.token_set_ratio(a, b, processor=utils.default_process)


@dataclass(frozen=True)
class Reward:
    """The reward and its terms (``total`` is the value returned by the env)."""

    total: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attribute_matches: int
    num_attributes: int
    option_matches: int
    num_options: int
    price_ok: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def type_reward(
    product: Mapping[str, Any], goal: Mapping[str, Any]
) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)`` of buying ``product`` for ``goal``."""
    query_match = product["query"] == goal["query"]
    bought_path = {x.strip() for x in product["product_category"].split("›")}
    goal_path = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_path & goal_path) >= 2
    desired = content_words(goal["name"])
    bought = content_words(product["name"])
    title_score = 0.2 if not desired else len(desired & bought) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(product: Mapping[str, Any], goal_attributes: Iterable[str]) -> int:
    """How many goal attributes the product has (see the module docstring)."""
    text = None
    n = 0
    for g_attr in goal_attributes:
        if any(_fuzzy(p_attr, g_attr) > FUZZY_THRESHOLD for p_attr in product["Attributes"]):
            n += 1
            continue
        if text is None:
            text = (
                product["Title"].lower(),
                " ".join(product["BulletPoints"]).lower(),
                product["Description"].lower(),
            )
        if any(g_attr in t for t in text):
            n += 1
    return n


def goal_option_values(goal_options: Mapping[str, str] | Iterable[str]) -> list[str]:
    """Goal options as a list of values (generated goals map option type -> value)."""
    if isinstance(goal_options, Mapping):
        return [str(v) for v in goal_options.values()]
    return [str(v) for v in goal_options]


def option_matches(selected: Iterable[str], goal_options: Iterable[str]) -> int:
    """How many goal options are among the selected ones (colour-normalised fuzzy match)."""
    chosen = [normalize_color(o) for o in selected]
    n = 0
    for g_opt in goal_options:
        g = normalize_color(g_opt)
        if any(_fuzzy(p, g) > FUZZY_THRESHOLD for p in chosen):
            n += 1
    return n


def compute_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    selected_options: Mapping[str, str],
) -> Reward:
    """The reward of buying ``product`` at ``price`` with ``selected_options`` for ``goal``."""
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    attrs = list(goal["attributes"])
    goal_opts = goal_option_values(goal["goal_options"])
    n_att = attribute_matches(product, attrs)
    n_opt = option_matches(selected_options.values(), goal_opts)
    price_ok = price <= goal["price_upper"]
    total = r_type * (n_att + n_opt + int(price_ok)) / (len(attrs) + len(goal_opts) + 1)
    return Reward(
        total=float(total),
        r_type=r_type,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
        attribute_matches=n_att,
        num_attributes=len(attrs),
        option_matches=n_opt,
        num_options=len(goal_opts),
        price_ok=bool(price_ok),
    )
