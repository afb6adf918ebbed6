"""The WebShop pages as text, close to the reference's ``text`` observation mode.

The reference renders HTML and joins its visible strings with ``" [SEP] "``; we render the same
strings in the same order directly. Clickables are the buttons, product links and option values
of the page, lower-cased as in the reference (an agent writes ``click[<clickable>]``).

Differences from the reference's pages:

- ``Next >`` is shown only when there is a next page (the reference always shows it and renders
  an empty page past the last result).
- The done page shows the purchase and the score only; the reference's done page also prints the
  target goal and the reward details (hidden in the browser, visible in its text observation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BACK_TO_SEARCH",
    "BUY_NOW",
    "NEXT_PAGE",
    "PREV_PAGE",
    "PRODUCT_WINDOW",
    "SEARCH_TEMPLATE",
    "SUB_PAGES",
    "Page",
    "render",
]

SEP = " [SEP] "
PRODUCT_WINDOW = 10
BACK_TO_SEARCH = "back to search"
NEXT_PAGE = "next >"
PREV_PAGE = "< prev"
BUY_NOW = "buy now"
SUB_PAGES = {"description": "Description", "features": "Features", "reviews": "Reviews"}
SEARCH_TEMPLATE = "search[<your query>]"


@dataclass(frozen=True)
class Page:
    """What is on screen: the page kind and the ids it shows (an immutable value).

    ``kind`` is one of ``search``, ``results``, ``item``, ``description``, ``features``,
    ``reviews``, ``done``. ``results`` is the ranked hit list of the last search (product
    indices); ``page_no`` the results page; ``item`` the open product; ``options`` the selected
    options as sorted ``(type, value)`` pairs.
    """

    kind: str = "search"
    query: str = ""
    results: tuple[int, ...] = ()
    page_no: int = 1
    item: int = -1
    options: tuple[tuple[str, str], ...] = ()
    score: float = 0.0

    def shown(self) -> tuple[int, ...]:
        """Product indices listed on a results page."""
        if self.kind != "results":
            return ()
        start = (self.page_no - 1) * PRODUCT_WINDOW
        return self.results[start : start + PRODUCT_WINDOW]

    def has_next(self) -> bool:
        return self.kind == "results" and self.page_no * PRODUCT_WINDOW < len(self.results)


def render(page: Page, instruction: str, product_of) -> tuple[str, dict[str, tuple[str, Any]]]:
    """``(observation text, clickables)``; clickables map a lower-cased label to an action
    ``(what, arg)``: ``("back", None)``, ``("next", None)``, ``("prev", None)``,
    ``("item", index)``, ``("option", (type, value))``, ``("sub", kind)``, ``("buy", None)``."""
    head = ["Instruction:", instruction]
    clicks: dict[str, tuple[str, Any]] = {}
    if page.kind == "search":
        parts = ["WebShop", *head, "Search"]
    elif page.kind == "done":
        parts = [
            "Thank you for shopping with us!",
            "Purchased",
            "asin",
            product_of(page.item)["asin"],
            "options",
            json.dumps(dict(page.options)),
            "Your score (min 0.0, max 1.0)",
            f"{page.score}",
        ]
    elif page.kind == "results":
        parts = [
            *head,
            "Back to Search",
            f"Page {page.page_no} (Total results: {len(page.results)})",
        ]
        clicks[BACK_TO_SEARCH] = ("back", None)
        if page.page_no > 1:
            parts.append("< Prev")
            clicks[PREV_PAGE] = ("prev", None)
        if page.has_next():
            parts.append("Next >")
            clicks[NEXT_PAGE] = ("next", None)
        for i in page.shown():
            p = product_of(i)
            parts += [p["asin"], p["Title"], p["Price"]]
            clicks[p["asin"].lower()] = ("item", i)
    else:
        p = product_of(page.item)
        parts = [*head, "Back to Search", "< Prev"]
        clicks[BACK_TO_SEARCH] = ("back", None)
        clicks[PREV_PAGE] = ("prev", None)
        if page.kind == "item":
            option_clicks = {}
            for name, values in p["options"].items():
                parts.append(name)
                for v in values:
                    parts.append(v)
                    option_clicks[v.lower()] = ("option", (name, v))
            parts += [
                p["Title"],
                f"Price: {p['Price']}",
                f"Rating: {p['Rating']}",
                "Description",
                "Features",
                "Reviews",
                "Buy Now",
            ]
            clicks.update({k: v for k, v in option_clicks.items() if k not in clicks})
            clicks.update({k: ("sub", k) for k in SUB_PAGES})
            clicks[BUY_NOW] = ("buy", None)
        elif page.kind == "description":
            parts.append(p["Description"])
        elif page.kind == "features":
            parts += p["BulletPoints"]
        elif page.kind == "reviews":
            for r in p["Reviews"]:
                parts += [f'"{r["title"]}"', str(r["score"]), r["body"]]
        else:  # pragma: no cover - Page kinds are closed
            raise ValueError(f"unknown page kind {page.kind!r}")
    text = SEP.join(s.strip() for s in parts if s and s.strip())
    return text, clicks
