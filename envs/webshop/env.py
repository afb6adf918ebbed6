"""``agentrl/WebShop-v0``: the WebShop text environment (Yao et al., 2022) in pure Python."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import fuzz, utils

from ..base import TextEnv, make_info
from ..commands import ascii_lower, command_lower
from ..tools import fresh, tool, tool_info
from .pages import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, SEARCH_TEMPLATE, Page, render
from .reward import (
    FUZZY_THRESHOLD,
    Reward,
    RewardSettings,
    announce,
    attribute_matches,
    compute_reward,
    goal_option_values,
    option_matches,
    type_reward,
)
from .sources import generated_catalogue, original_catalogue
from .store import Catalogue
from .text import normalize_color

__all__ = ["MILESTONES", "WebShopEnv"]

#: The verb in ASCII letters, any case ("ſearch", "clıck" are no verb: envs.commands).
_ACTION_RE = re.compile(r"^\s*(?ai:(search|click))\[([^\[\]]*)\]\s*$")

#: The four phases of a purchase, in order (``info["milestones"]``).
MILESTONES = ("match_in_results", "match_opened", "options_chosen", "purchased")

#: The two commands as tools for the tool-call action format (reset info).
TOOLS = tool_info(
    [
        tool("search", "Search the shop (on the search page).", query="the search words"),
        tool(
            "click",
            "Click a button, a product or an option shown on the page.",
            element="its label",
        ),
    ],
    {"search": "search[{query}]", "click": "click[{element}]"},
)


class WebShopEnv(TextEnv):
    """WebShop: find and buy the product an instruction describes, by searching and clicking.

    - Catalogue: by default a generated one (``num_products`` products, 1,000 unless given;
      ``seed``), built once and
      cached on disk; or the reference's files (``product_file``, ``attribute_file``,
      ``human_instruction_file``). Every env of a process shares one memory-mapped catalogue and
      search index (see ``envs/webshop/store.py``).
    - Tasks: the catalogue's instructions in a fixed order; ``task_ids("test")`` are the first
      500 (as the reference), ``task_ids("train")`` the rest. ``reset(seed=s)`` picks a training
      instruction from ``s``; ``reset(options={"task_id": "17"})`` instruction 17.
    - Observations: ``observation_mode`` ``"text"`` (default) or ``"text_rich"``, the reference's
      two text modes (``pages.py``); ``show_attrs`` adds the item page's ``Attributes`` sub-page.
    - Actions: ``search[query]`` on the search page, ``click[label]`` for a clickable of the
      page (case-insensitive). Anything else (unknown label, empty query, brackets inside,
      over ``max_action_chars`` characters, a search box that is not shown) is invalid: the page
      is unchanged and the step still counts.
    - Reward: the paper's purchase reward at ``click[buy now]`` (``reward.py``), 0 otherwise. The
      episode terminates at the purchase and is truncated after ``max_steps`` steps. ``reward``
      = ``{"type_words": "auto" | "spacy" | "content_words", "options_match": "value" |
      "original"}`` (see ``reward.RewardSettings``; which type words a run used is in
      ``info["reward_info"]["type_words"]``).
    - ``info``: ``score`` = the purchase reward (0 before), ``won`` = (score == 1), ``category``
      = the goal product's category, ``state_key`` = the page kind and the ids it shows,
      ``milestones`` from :data:`MILESTONES`; extra keys ``goal_asin``, ``steps``, and after a
      purchase ``reward_info`` (the reward's terms).
    """

    def __init__(
        self,
        num_products: int | None = None,
        seed: int = 0,
        num_goals: int | None = None,
        product_file: str | None = None,
        attribute_file: str | None = None,
        human_instruction_file: str | None = None,
        human_goals: bool = True,
        test_size: int = 500,
        max_steps: int = 15,
        max_action_chars: int = 1000,
        cache_dir: str | None = None,
        render_mode: str | None = None,
        reward: dict[str, Any] | None = None,
        observation_mode: str = "text",
        show_attrs: bool = False,
    ):
        super().__init__(render_mode, max_text_length=100_000)
        if observation_mode not in ("text", "text_rich"):
            raise ValueError(
                f"observation_mode must be 'text' or 'text_rich', got {observation_mode!r}"
            )
        self.observation_mode = observation_mode
        self.show_attrs = bool(show_attrs)
        self._visited: set[str] = set()
        self.reward_settings = RewardSettings.from_dict(reward)
        self._title_words = self.reward_settings.title_words()
        announce(self.reward_settings)
        if int(max_steps) < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = int(max_steps)
        self.max_action_chars = int(max_action_chars)
        if product_file is not None:
            if not Path(product_file).exists():
                raise FileNotFoundError(f"WebShop product_file {product_file!r} does not exist")
            self.catalogue: Catalogue = original_catalogue(
                product_file,
                attribute_file,
                human_instruction_file,
                human_goals=human_goals,
                num_products=num_products,
                seed=seed,
                test_size=test_size,
                cache_dir=cache_dir,
            )
        else:
            n = 1000 if num_products is None else int(num_products)
            self.catalogue = generated_catalogue(n, seed, num_goals, test_size, cache_dir)
        self._goal: dict[str, Any] | None = None
        self._goal_options: list[str] = []
        self._task_id = ""
        self._page = Page()
        self._text = ""
        self._clicks: dict[str, tuple[str, Any]] = {}
        self._steps = 0
        self._milestones: list[str] = []
        self._matching: dict[int, bool] = {}
        self._reward: Reward | None = None

    # -- tasks -----------------------------------------------------------------------------------
    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        """``"test"``: goals ``0 .. num_test-1`` (the reference's first 500); ``"train"``: the
        rest; ``"all"``: every goal. Ids are goal positions as strings."""
        cat = self.catalogue
        ranges = {
            "test": (0, cat.num_test),
            "train": (cat.num_test, cat.num_goals),
            "all": (0, cat.num_goals),
        }
        if split not in ranges:
            raise ValueError(f"WebShop has splits 'train', 'test' and 'all', not {split!r}")
        lo, hi = ranges[split]
        if limit is not None:
            hi = min(hi, lo + int(limit))
        return [str(j) for j in range(lo, hi)]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        cat = self.catalogue
        n_train = cat.num_goals - cat.num_test
        if "task_id" in options:
            try:
                j = int(options["task_id"])
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"WebShop task_id must be a goal number, got {options['task_id']!r}"
                ) from exc
            if not 0 <= j < cat.num_goals:
                raise ValueError(f"WebShop task_id {j} out of range (0..{cat.num_goals - 1})")
        elif seed is not None:
            j = cat.num_test + int(np.random.default_rng(int(seed)).integers(n_train))
        else:
            j = cat.num_test + int(self.np_random.integers(n_train))
        self._goal = cat.goal(j)
        self._goal_options = goal_option_values(self._goal["goal_options"])
        self._task_id = str(j)
        self._steps = 0
        self._milestones = []
        self._matching = {}
        self._reward = None
        self._visited = set()
        self._show(Page())
        return self._text, {**self._info(True), **fresh(TOOLS)}

    # -- stepping --------------------------------------------------------------------------------
    def step(self, action: str):
        if self._goal is None:
            raise RuntimeError("call reset() before step()")
        self._steps += 1
        valid = False
        reward = 0.0
        if self._page.kind != "done":
            parsed = self._parse(action)
            if parsed is not None:
                valid, reward = self._apply(*parsed)
        terminated = self._page.kind == "done"
        truncated = not terminated and self._steps >= self.max_steps
        return self._text, float(reward), terminated, truncated, self._info(valid)

    def _parse(self, action: Any) -> tuple[str, str] | None:
        if not isinstance(action, str) or len(action) > self.max_action_chars:
            return None
        m = _ACTION_RE.match(action)
        if m is None:
            return None
        verb, arg = ascii_lower(m.group(1)), command_lower(m.group(2).strip())
        return (verb, arg) if arg else None

    def _apply(self, verb: str, arg: str) -> tuple[bool, float]:
        page = self._page
        if verb == "search":
            if page.kind != "search":
                return False, 0.0
            self._show(Page("results", query=arg, results=tuple(self.catalogue.search(arg))))
            return True, 0.0
        if arg not in self._clicks:
            return False, 0.0
        what, value = self._clicks[arg]
        if what == "back":
            self._visited = set()  # the reference starts a fresh session state at the search page
            self._show(Page())
        elif what == "next":
            self._show(Page("results", page.query, page.results, page.page_no + 1))
        elif what == "prev" and page.kind == "results":
            self._show(Page("results", page.query, page.results, page.page_no - 1))
        elif what == "prev" and page.kind == "item":
            self._show(Page("results", page.query, page.results, page.page_no))
        elif what == "prev":  # from a sub-page back to its item
            self._show(
                Page("item", page.query, page.results, page.page_no, page.item, page.options)
            )
        elif what == "item":
            self._visited.add(self.catalogue.product(value)["asin"].upper())
            self._show(Page("item", page.query, page.results, page.page_no, value))
        elif what == "option":
            opts = dict(page.options)
            opts[value[0]] = value[1]
            self._show(
                Page(
                    "item",
                    page.query,
                    page.results,
                    page.page_no,
                    page.item,
                    tuple(sorted(opts.items())),
                )
            )
        elif what == "sub":
            self._show(Page(value, page.query, page.results, page.page_no, page.item, page.options))
        elif what == "buy":
            product = self.catalogue.product(page.item)
            self._reward = compute_reward(
                product, self._goal, product["price"], dict(page.options), self.reward_settings
            )
            score = self._reward.total
            self._show(
                Page("done", page.query, page.results, page.page_no, page.item, page.options, score)
            )
            return True, score
        return True, 0.0

    def _show(self, page: Page) -> None:
        self._page = page
        self._text, self._clicks = render(
            page,
            self._goal["instruction_text"],
            self.catalogue.product,
            self.observation_mode,
            frozenset(self._visited),
            self.show_attrs,
        )
        self._update_milestones()

    # -- milestones ------------------------------------------------------------------------------
    def _matches(self, index: int) -> bool:
        """Whether product ``index`` can satisfy the goal: right type, every goal attribute,
        within budget, and every goal option on offer."""
        hit = self._matching.get(index)
        if hit is None:
            goal = self._goal
            p = self.catalogue.product(index)
            offered = [v for vs in p["options"].values() for v in vs]
            hit = index == goal["product_index"] or (
                type_reward(p, goal, self._title_words)[0] == 1.0
                and p["price"] <= goal["price_upper"]
                and attribute_matches(p, goal["attributes"]) == len(goal["attributes"])
                and option_matches(offered, self._goal_options) == len(self._goal_options)
            )
            self._matching[index] = hit
        return hit

    def _update_milestones(self) -> None:
        page, reached = self._page, []
        if page.kind == "results" and any(self._matches(i) for i in page.shown()):
            reached.append("match_in_results")
        if page.kind in ("item", "done") and self._matches(page.item):
            reached.append("match_opened")
            chosen = [v for _, v in page.options]
            if option_matches(chosen, self._goal_options) == len(self._goal_options):
                reached.append("options_chosen")
        if page.kind == "done":
            reached.append("purchased")
        for m in reached:
            if m not in self._milestones:
                self._milestones.append(m)

    # -- info, observation, expert ---------------------------------------------------------------
    def _state_key(self) -> tuple:
        page = self._page
        if page.kind == "search":
            return ("search",)
        if page.kind == "results":
            return (
                "results",
                page.page_no,
                tuple(self.catalogue.product(i)["asin"] for i in page.shown()),
            )
        return (page.kind, self.catalogue.product(page.item)["asin"], page.options)

    def admissible_actions(self) -> list[str]:
        if self._page.kind == "search":
            return [SEARCH_TEMPLATE]
        return [f"click[{c}]" for c in self._clicks]

    def _info(self, action_valid: bool) -> dict[str, Any]:
        score = self._reward.total if self._reward is not None else 0.0
        extra: dict[str, Any] = {"goal_asin": self._goal["asin"], "steps": self._steps}
        if self._reward is not None:
            extra["reward_info"] = self._reward.as_dict()
        return make_info(
            instruction=self._goal["instruction_text"],
            task_id=self._task_id,
            category=self._goal["category"],
            admissible_actions=self.admissible_actions(),
            state_key=self._state_key(),
            action_valid=action_valid,
            won=score >= 1.0 - 1e-9,
            score=min(max(score, 0.0), 1.0),
            milestones=self._milestones,
            **extra,
        )

    def current_observation(self) -> str:
        if self._goal is None:
            raise RuntimeError("call reset() first")
        return self._text

    def expert_action(self) -> str:
        """Buy the goal product with the goal options: search its title, page to it, open it,
        choose each goal option, buy. Recovers from any page (sub-pages, other products)."""
        if self._goal is None:
            raise RuntimeError("call reset() before expert_action()")
        page, goal = self._page, self._goal
        target = goal["product_index"]
        if page.kind == "search":
            return f"search[{self.catalogue.product(target)['Title'].lower()}]"
        if page.kind in ("description", "features", "reviews", "attributes"):
            return f"click[{PREV_PAGE}]"
        if page.kind == "results":
            if target in page.shown():
                return f"click[{command_lower(self.catalogue.product(target)['asin'])}]"
            if target in page.results[page.page_no * 10 :] and page.has_more():
                return f"click[{NEXT_PAGE}]"
            if target in page.results[: (page.page_no - 1) * 10]:
                return f"click[{PREV_PAGE}]"
            return f"click[{BACK_TO_SEARCH}]"
        if page.kind == "item":
            if page.item != target:
                return f"click[{PREV_PAGE}]"
            chosen = dict(page.options)
            product = self.catalogue.product(target)
            for want in self._goal_options_by_type(product):
                name, value = want
                if chosen.get(name) != value:
                    return f"click[{command_lower(value)}]"
            return f"click[{BUY_NOW}]"
        return f"click[{BUY_NOW}]"  # done: nothing left to do

    def _goal_options_by_type(self, product: dict[str, Any]) -> list[tuple[str, str]]:
        """The product's (type, value) pairs that realise the goal options (best fuzzy match)."""
        goal_opts = self._goal["goal_options"]
        if isinstance(goal_opts, dict):
            return [(k, v) for k, v in goal_opts.items() if v in product["options"].get(k, ())]
        out = []
        for g in goal_opts:
            best, best_score = None, FUZZY_THRESHOLD
            for name, values in product["options"].items():
                for v in values:
                    s = fuzz.token_set_ratio(
                        normalize_color(v), normalize_color(g), processor=utils.default_process
                    )
                    if s > best_score:
                        best, best_score = (name, v), s
            if best is not None and best not in out:
                out.append(best)
        return out
