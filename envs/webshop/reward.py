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

Two settings (``RewardSettings``, the env's ``reward`` argument):

- ``type_words``: the reference measures title overlap on the nouns spaCy tags
  (``en_core_web_lg``: tokens with part of speech NOUN/PROPN, overlap over the goal's noun
  count). ``"auto"`` (default) does that when spaCy and an English pipeline
  (``en_core_web_lg``/``md``/``sm``/``trf``) are installed, else uses *content words*
  (lower-case alphabetic words minus stop words, units and common modifiers; final plural ``s``
  folded; :func:`agentrl.envs.webshop.text.content_words`); ``"spacy"`` requires spaCy,
  ``"content_words"`` never uses it. Which one a run used is ``RewardSettings.type_words_used``
  (the env logs it and reports it in ``info["reward_info"]["type_words"]``).
- ``options_match``: ``"value"`` (default) compares a synthetic goal's option values with the
  chosen values. ``"original"`` reproduces the reference code: a synthetic goal's options are
  passed as ``(name, value)`` pairs, so colour normalisation only ever changes the chosen side
  and the fuzzy ratio compares ``str(pair)`` (name tokens included) after thefuzz's default
  processing (``force_ascii``: characters U+0080..U+00FF dropped). The default is a deliberate
  fix: with pairs, a goal colour ``navy blue`` matches any chosen ``... blue``, and an option
  whose value tokens all occur in the name matches regardless of the value.

The fuzzy ratio is RapidFuzz's ``token_set_ratio`` with RapidFuzz's default processing (the
reference's thefuzz wraps RapidFuzz).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from rapidfuzz import fuzz, utils

from .text import content_words, normalize_color

__all__ = [
    "FUZZY_THRESHOLD",
    "SPACY_MODELS",
    "Reward",
    "RewardSettings",
    "attribute_matches",
    "compute_reward",
    "goal_option_values",
    "option_matches",
    "type_reward",
]

#: Fuzzy match threshold of the reference (strictly greater than).
FUZZY_THRESHOLD = 85.0


log = logging.getLogger(__name__)

#: English spaCy pipelines tried, in order (the reference loads ``en_core_web_lg``).
SPACY_MODELS = ("en_core_web_lg", "en_core_web_md", "en_core_web_sm", "en_core_web_trf")
_NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")  # the reference's list (PNOUN is not a spaCy tag)


def _fuzzy(a: str, b: str) -> float:
    return fuzz.token_set_ratio(a, b, processor=utils.default_process)


_LATIN1 = dict.fromkeys(range(128, 256))


def _thefuzz_process(s: Any) -> str:
    """thefuzz's default processing (``full_process`` with ``force_ascii``): ``str()`` of the
    value, characters U+0080..U+00FF removed, then RapidFuzz's default processing."""
    return utils.default_process(str(s).translate(_LATIN1))


def _fuzzy_original(a: Any, b: Any) -> float:
    return fuzz.token_set_ratio(a, b, processor=_thefuzz_process)


@lru_cache(maxsize=4)
def _spacy_pipeline(name: str):
    import spacy

    return spacy.load(name, disable=["parser", "ner", "lemmatizer"])


def _find_spacy_model() -> str | None:
    if importlib.util.find_spec("spacy") is None:
        return None
    import spacy.util

    return next((m for m in SPACY_MODELS if spacy.util.is_package(m)), None)


def spacy_nouns(model: str) -> Callable[[str], tuple[str, ...]]:
    """The reference's title parse: lower-cased tokens that ``model`` tags NOUN or PROPN."""
    nlp = _spacy_pipeline(model)

    @lru_cache(maxsize=65536)
    def nouns(title: str) -> tuple[str, ...]:
        return tuple(t.text.lower() for t in nlp(title) if t.pos_ in _NOUN_TAGS)

    return nouns


@dataclass(frozen=True)
class RewardSettings:
    """How the reward matches types and options (see the module docstring)."""

    type_words: str = "auto"
    options_match: str = "value"
    type_words_used: str = field(init=False, default="content_words")

    def __post_init__(self):
        if self.type_words not in ("auto", "spacy", "content_words"):
            raise ValueError(
                f"reward.type_words must be 'auto', 'spacy' or 'content_words', "
                f"got {self.type_words!r}"
            )
        if self.options_match not in ("value", "original"):
            raise ValueError(
                f"reward.options_match must be 'value' or 'original', got {self.options_match!r}"
            )
        used = "content_words"
        if self.type_words != "content_words":
            model = _find_spacy_model()
            if model is not None:
                used = f"spacy:{model}"
            elif self.type_words == "spacy":
                raise ValueError(
                    "reward.type_words='spacy' needs spaCy and an English pipeline "
                    f"(one of {', '.join(SPACY_MODELS)}); none is installed"
                )
        object.__setattr__(self, "type_words_used", used)

    @classmethod
    def from_dict(cls, options: Mapping[str, Any] | None) -> RewardSettings:
        options = dict(options or {})
        unknown = sorted(set(options) - {"type_words", "options_match"})
        if unknown:
            raise ValueError(
                f"unknown reward option(s) {unknown}: accepted are 'type_words', 'options_match'"
            )
        return cls(**options)

    def title_words(self) -> Callable[[str], Iterable[str]]:
        """The function that lists a title's type words under these settings."""
        if self.type_words_used.startswith("spacy:"):
            return spacy_nouns(self.type_words_used.split(":", 1)[1])
        return content_words


DEFAULT_SETTINGS = RewardSettings(type_words="content_words")


@cache
def announce(settings: RewardSettings) -> None:
    """Log, once per process and setting, which type words and option rule the reward uses."""
    log.info(
        "WebShop reward: r_type title words = %s, options_match = %s",
        settings.type_words_used,
        settings.options_match,
    )


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
    type_words: str = "content_words"
    options_match: str = "value"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def type_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    title_words: Callable[[str], Iterable[str]] = content_words,
) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)`` of buying ``product`` for ``goal``;
    ``title_words`` lists a title's type words (the overlap is counted over the goal's list)."""
    query_match = product["query"] == goal["query"]
    bought_path = {x.strip() for x in product["product_category"].split("›")}
    goal_path = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(bought_path & goal_path) >= 2
    desired = list(title_words(goal["name"]))
    bought = set(title_words(product["name"]))
    title_score = 0.2 if not desired else len(set(desired) & bought) / len(desired)
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


def option_matches(
    selected: Iterable[str], goal_options: Iterable[Any], rule: str = "value"
) -> int:
    """How many goal options are among the selected ones (colour-normalised fuzzy match).

    ``rule="original"``: the reference's comparison, where ``goal_options`` may hold ``(name,
    value)`` pairs (see :func:`goal_option_items`) and thefuzz's processing applies."""
    chosen = [normalize_color(o) for o in selected]
    ratio = _fuzzy_original if rule == "original" else _fuzzy
    n = 0
    for g_opt in goal_options:
        g = normalize_color(g_opt)  # on a pair: a colour only if one element *is* a colour
        if any(ratio(p, g) > FUZZY_THRESHOLD for p in chosen):
            n += 1
    return n


def goal_option_items(goal_options: Mapping[str, str] | Iterable[str], rule: str) -> list[Any]:
    """What the reward compares: values (``"value"``), or as the reference passes them
    (``"original"``: ``(name, value)`` pairs for a synthetic goal's mapping)."""
    if rule == "original" and isinstance(goal_options, Mapping):
        return list(goal_options.items())
    return goal_option_values(goal_options)


def compute_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    price: float,
    selected_options: Mapping[str, str],
    settings: RewardSettings = DEFAULT_SETTINGS,
) -> Reward:
    """The reward of buying ``product`` at ``price`` with ``selected_options`` for ``goal``."""
    r_type, query_match, category_match, title_score = type_reward(
        product, goal, settings.title_words()
    )
    attrs = list(goal["attributes"])
    goal_opts = goal_option_items(goal["goal_options"], settings.options_match)
    n_att = attribute_matches(product, attrs)
    n_opt = option_matches(selected_options.values(), goal_opts, settings.options_match)
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
        type_words=settings.type_words_used,
        options_match=settings.options_match,
    )
