"""The WebShop pages as text: the reference's ``text`` and ``text_rich`` observation modes.

The reference renders HTML and turns its visible text nodes into an observation; we produce the
same text nodes, in the same order, from the page state (each node tagged as plain text, a
button, an option label or a product link) and apply the reference's two conversions:

- ``text``: the nodes, stripped, joined with ``" [SEP] "``;
- ``text_rich``: one line per node: ``[button] X [button_]`` for buttons, ``  [button] X
  [button_]`` for option labels (``  [clicked button] X [clicked button_]`` when selected, and
  then ``You have clicked X.`` is put first), ``\n[button] ASIN [button_]`` for product links
  (``[clicked button]`` once opened since the last search page), other text as it is.

Clickables are the buttons, product links and option values of the page, lower-cased as in the
reference (an agent writes ``click[<clickable>]``). The pages follow the reference's templates:
``Next >`` is on every results page (past the last result it shows an empty page, as there);
the ``Attributes`` sub-page is offered with ``show_attrs``; the done page is the reference's
text-mode done page (the purchase and score; its target-goal fields render empty, as the text
env passes no goal: the instruction is not repeated there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..commands import command_lower

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
SUB_PAGES = {
    "description": "Description",
    "features": "Features",
    "reviews": "Reviews",
    "attributes": "Attributes",
}
SEARCH_TEMPLATE = "search[<your query>]"


@dataclass(frozen=True)
class Page:
    """What is on screen: the page kind and the ids it shows (an immutable value).

    ``kind`` is one of ``search``, ``results``, ``item``, ``description``, ``features``,
    ``reviews``, ``attributes``, ``done``. ``results`` is the ranked hit list of the last search (product
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

    def has_more(self) -> bool:
        """Whether results remain after this page (``Next >`` is shown either way)."""
        return self.kind == "results" and self.page_no * PRODUCT_WINDOW < len(self.results)


#: A text node: ``(kind, text)`` with kind ``text``, ``button``, ``label`` or ``link``.
Node = tuple[str, str]


def _done_nodes(page: Page, product_of) -> list[Node]:
    """The reference's done page as its text env renders it: the purchase fields are filled,
    every target/goal field is None or undefined (the text env passes none of them)."""
    options = json.dumps(dict(page.options), sort_keys=True)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        options = options.replace(ch, esc)  # Flask's tojson is HTML-safe
    texts = [
        "Thank you for shopping with us!", "Your code: ", "None",
        " (Paste it in your MTurk interface.)", "Purchased", "asin", product_of(page.item)["asin"],
        "options", options, "attrs", "None", "category", "None", "query", "None",
        "product category", "None", "Target", "asin", "options", "attrs", "price upper",
        "instuction text", "category", "product category", "query", "Goal ", "None", "Reward",
        "Your score (min 0.0, max 1.0)", f"{page.score}", "Reward Details ", "None",
    ]  # fmt: skip
    return [("text", t) for t in texts]


def render(
    page: Page,
    instruction: str,
    product_of,
    mode: str = "text",
    visited: frozenset[str] = frozenset(),
    show_attrs: bool = False,
) -> tuple[str, dict[str, tuple[str, Any]]]:
    """``(observation text, clickables)``; clickables map a lower-cased label to an action
    ``(what, arg)``: ``("back", None)``, ``("next", None)``, ``("prev", None)``,
    ``("item", index)``, ``("option", (type, value))``, ``("sub", kind)``, ``("buy", None)``.
    ``visited``: ASINs opened since the last search page (``text_rich`` marks them)."""
    nodes, clicks = page_nodes(page, instruction, product_of, show_attrs)
    if mode == "text":
        return SEP.join(t.strip() for _, t in nodes if t.strip()), clicks
    if mode == "text_rich":
        return rich_text(nodes, page, visited), clicks
    raise ValueError(f"observation mode must be 'text' or 'text_rich', got {mode!r}")


def rich_text(nodes: list[Node], page: Page, visited: frozenset[str]) -> str:
    """The reference's ``text_rich`` conversion of a page's nodes."""
    # Where the reference looks for '"<value>"': the item page's URL (query words and options).
    url = "+".join(page.query.split(" ")) + "/" + json.dumps(dict(page.options))
    out = ""
    for kind, t in nodes:
        if kind == "button":
            line = f"[button] {t} [button_]"
        elif kind == "label":
            if f'"{t}"' in url:
                line = f"  [clicked button] {t} [clicked button_]"
                out = f"You have clicked {t}.\n" + out
            else:
                line = f"  [button] {t} [button_]"
        elif kind == "link":
            tag = "clicked button" if t in visited else "button"
            line = f"\n[{tag}] {t} [{tag}_]"
        else:
            line = t
        out += line + "\n"
    return out


def page_nodes(
    page: Page, instruction: str, product_of, show_attrs: bool = False
) -> tuple[list[Node], dict[str, tuple[str, Any]]]:
    """The page's visible text nodes, in document order, and its clickables."""
    clicks: dict[str, tuple[str, Any]] = {}
    head: list[Node] = [("text", "Instruction:"), ("text", instruction)]
    nav: list[Node] = [("button", "Back to Search"), ("button", "< Prev")]
    if page.kind == "search":
        return [("text", "WebShop"), ("text", "Instruction: "), ("text", instruction),
                ("button", "Search")], clicks  # fmt: skip
    if page.kind == "done":
        return _done_nodes(page, product_of), clicks
    clicks[BACK_TO_SEARCH] = ("back", None)
    if page.kind == "results":
        nodes = [*head, ("button", "Back to Search")]
        nodes.append(("text", f"Page {page.page_no} (Total results: {len(page.results)})"))
        if page.page_no > 1:
            nodes.append(("button", "< Prev"))
            clicks[PREV_PAGE] = ("prev", None)
        nodes.append(("button", "Next >"))  # on every results page, as the reference
        clicks[NEXT_PAGE] = ("next", None)
        for i in page.shown():
            p = product_of(i)
            nodes += [("link", p["asin"]), ("text", p["Title"]), ("text", p["Price"])]
            clicks[command_lower(p["asin"])] = ("item", i)
        return nodes, clicks
    p = product_of(page.item)
    nodes = [*head, *nav]
    clicks[PREV_PAGE] = ("prev", None)
    if page.kind == "item":
        option_clicks = {}
        for name, values in p["options"].items():
            nodes.append(("text", name))
            for v in values:
                nodes.append(("label", v))
                option_clicks[command_lower(v)] = ("option", (name, v))
        nodes += [
            ("text", p["Title"]),
            ("text", f"Price: {p['Price']}"),
            ("text", f"Rating: {p['Rating']}"),
            ("button", "Description"),
            ("button", "Features"),
            ("button", "Reviews"),
        ]
        if show_attrs:
            nodes.append(("button", "Attributes"))
        nodes.append(("button", "Buy Now"))
        clicks.update({k: v for k, v in option_clicks.items() if k not in clicks})
        clicks.update({k: ("sub", k) for k in SUB_PAGES if k != "attributes" or show_attrs})
        clicks[BUY_NOW] = ("buy", None)
    elif page.kind == "description":
        nodes.append(("text", p["Description"]))
    elif page.kind == "features":
        nodes += [("text", f" {b}") for b in p["BulletPoints"]]
    elif page.kind == "reviews":
        for r in p["Reviews"]:
            nodes += [("text", f'"{r["title"]}"'), ("text", str(r["score"])), ("text", r["body"])]
    elif page.kind == "attributes":
        nodes += [("text", f" {a}") for a in p["Attributes"]]
        nodes += [("text", p["category"]), ("text", p["query"]), ("text", p["product_category"])]
    else:  # pragma: no cover - Page kinds are closed
        raise ValueError(f"unknown page kind {page.kind!r}")
    return nodes, clicks
