"""WebShop pages: the reference's ``text`` and ``text_rich`` conversions, its done page, ``Next >``
on every results page, the ``Attributes`` sub-page and ``click[search]``."""

from __future__ import annotations

import pytest
from agentrl.envs.webshop import WebShopEnv
from agentrl.envs.webshop.pages import Page, render

P = {
    0: {
        "asin": "B0AAAAAAA1",
        "Title": "Acme Shampoo",
        "Price": "$12.99",
        "Rating": "N.A.",
        "options": {"size": ["8 fl oz", "16 fl oz"]},
        "Description": "A shampoo.",
        "BulletPoints": ["one", "two"],
        "Reviews": [],
        "Attributes": ["tea tree"],
        "category": "beauty",
        "query": "shampoo",
        "product_category": "Beauty › Hair",
    },
    1: {
        "asin": "B0AAAAAAA2",
        "Title": "Acme Soap",
        "Price": "$3.0",
        "Rating": "4.5",
        "options": {},
        "Description": "",
        "BulletPoints": [],
        "Reviews": [{"title": "ok", "score": 4, "body": "fine"}],
        "Attributes": ["DUMMY_ATTR"],
        "category": "beauty",
        "query": "soap",
        "product_category": "Beauty › Bath",
    },
}
INS = "i need a shampoo"


def show(page, mode="text", visited=frozenset(), show_attrs=False):
    return render(page, INS, P.__getitem__, mode, visited, show_attrs)


def test_search_page_in_both_modes():
    text, clicks = show(Page())
    assert text == "WebShop [SEP] Instruction: [SEP] i need a shampoo [SEP] Search" and not clicks
    rich, _ = show(Page(), "text_rich")
    assert rich == "WebShop\nInstruction: \ni need a shampoo\n[button] Search [button_]\n"


def test_results_page_rich_marks_opened_products_and_next_is_always_there():
    page = Page("results", "shampoo", (0, 1), 1)
    text, clicks = show(page)
    assert text == (
        "Instruction: [SEP] i need a shampoo [SEP] Back to Search [SEP] Page 1 (Total results: 2)"
        " [SEP] Next > [SEP] B0AAAAAAA1 [SEP] Acme Shampoo [SEP] $12.99 [SEP] B0AAAAAAA2 [SEP]"
        " Acme Soap [SEP] $3.0"
    )
    assert set(clicks) == {"back to search", "next >", "b0aaaaaaa1", "b0aaaaaaa2"}
    rich, _ = show(page, "text_rich", frozenset({"B0AAAAAAA2"}))
    assert rich == (
        "Instruction:\ni need a shampoo\n[button] Back to Search [button_]\n"
        "Page 1 (Total results: 2)\n[button] Next > [button_]\n"
        "\n[button] B0AAAAAAA1 [button_]\nAcme Shampoo\n$12.99\n"
        "\n[clicked button] B0AAAAAAA2 [clicked button_]\nAcme Soap\n$3.0\n"
    )
    # past the last result: an empty page with both buttons, as the reference
    empty, clicks = show(Page("results", "shampoo", (0, 1), 2))
    assert empty.endswith("Page 2 (Total results: 2) [SEP] < Prev [SEP] Next >")
    assert {"< prev", "next >"} <= set(clicks)


def test_item_page_rich_shows_the_selected_option_first():
    page = Page("item", "shampoo", (0, 1), 1, 0, (("size", "16 fl oz"),))
    rich, clicks = show(page, "text_rich")
    assert rich == (
        "You have clicked 16 fl oz.\n"
        "Instruction:\ni need a shampoo\n[button] Back to Search [button_]\n[button] < Prev [button_]\n"
        "size\n  [button] 8 fl oz [button_]\n  [clicked button] 16 fl oz [clicked button_]\n"
        "Acme Shampoo\nPrice: $12.99\nRating: N.A.\n[button] Description [button_]\n"
        "[button] Features [button_]\n[button] Reviews [button_]\n[button] Buy Now [button_]\n"
    )
    assert "attributes" not in clicks
    text, clicks = show(page, show_attrs=True)
    assert "[SEP] Reviews [SEP] Attributes [SEP] Buy Now" in text and clicks["attributes"] == (
        "sub",
        "attributes",
    )


def test_sub_pages_keep_the_reference_whitespace_in_rich_mode():
    feats, _ = show(Page("features", "q", (0,), 1, 0), "text_rich")
    assert feats.endswith("[button] < Prev [button_]\n one\n two\n")
    attrs, _ = show(Page("attributes", "q", (0,), 1, 0))
    assert attrs.endswith("< Prev [SEP] tea tree [SEP] beauty [SEP] shampoo [SEP] Beauty › Hair")
    reviews, _ = show(Page("reviews", "q", (1,), 1, 1))
    assert reviews.endswith('< Prev [SEP] "ok" [SEP] 4 [SEP] fine')


def test_done_page_is_the_reference_text_env_done_page():
    page = Page("done", "q", (0,), 1, 0, (("size", "16 fl oz"),), 0.75)
    text, clicks = show(page)
    assert not clicks
    assert text == (
        "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk"
        " interface.) [SEP] Purchased [SEP] asin [SEP] B0AAAAAAA1 [SEP] options [SEP]"
        ' {"size": "16 fl oz"} [SEP] attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP]'
        " None [SEP] product category [SEP] None [SEP] Target [SEP] asin [SEP] options [SEP] attrs"
        " [SEP] price upper [SEP] instuction text [SEP] category [SEP] product category [SEP] query"
        " [SEP] Goal [SEP] None [SEP] Reward [SEP] Your score (min 0.0, max 1.0) [SEP] 0.75 [SEP]"
        " Reward Details [SEP] None"
    )
    assert INS not in text  # the text env passes no goal: nothing of it is shown
    # Flask's tojson escapes HTML characters
    quoted = show(Page("done", "q", (0,), 1, 0, (("size", "kid's <xl>"),), 1.0))[0]
    assert '{"size": "kid\\u0027s \\u003cxl\\u003e"}' in quoted


def test_mode_is_checked():
    with pytest.raises(ValueError, match="observation mode"):
        show(Page(), "html")


def test_env_rich_mode_attributes_and_click_search(tmp_path):
    env = WebShopEnv(
        num_products=60,
        num_goals=4,
        test_size=2,
        cache_dir=str(tmp_path),
        observation_mode="text_rich",
        show_attrs=True,
    )
    obs, info = env.reset(options={"task_id": "0"})
    assert obs.startswith("WebShop\nInstruction: \n")
    _, _, _, _, info = env.step("click[search]")  # invalid, as in the reference
    assert not info["action_valid"]
    obs, *_ = env.step(env.expert_action())  # search
    assert "\n[button] " in obs and "[clicked button]" not in obs
    while env._page.kind != "item":
        obs, *_ = env.step(env.expert_action())
    asin = env.catalogue.product(env._page.item)["asin"]
    _, _, _, _, info = env.step("click[attributes]")
    assert info["action_valid"] and info["state_key"][0] == "attributes"
    env.step("click[< prev]")
    obs, *_ = env.step("click[< prev]")  # back to the results: the opened product is marked
    assert f"[clicked button] {asin} [clicked button_]" in obs
    env.step("click[back to search]")
    obs, *_ = env.step(f"search[{env.catalogue.product(env._goal['product_index'])['Title']}]")
    assert f"[clicked button] {asin}" not in obs  # a new search page starts a new session
    with pytest.raises(ValueError, match="observation_mode"):
        WebShopEnv(num_products=60, num_goals=4, cache_dir=str(tmp_path), observation_mode="html")
