"""The WebShop purchase reward, term by term, with hand-computed values."""

from __future__ import annotations

import math

import pytest
from agentrl.envs.webshop.reward import (
    attribute_matches,
    compute_reward,
    option_matches,
    type_reward,
)
from agentrl.envs.webshop.text import content_words, normalize_color, search_tokens
from hypothesis import given, settings
from hypothesis import strategies as st

PATH = "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos"


def product(**kw):
    base = {
        "asin": "B000000001",
        "name": "Luvora Sulfate Free Argan Oil Shampoo",
        "Title": "Luvora Sulfate Free Argan Oil Shampoo",
        "Description": "A gentle shampoo for every day.",
        "BulletPoints": ["Made for dry hair"],
        "Attributes": ["sulfate free", "argan oil", "dry hair"],
        "query": "shampoo",
        "product_category": PATH,
        "price": 12.99,
        "options": {"size": ["8 fl oz", "16.9 fl oz"], "scent": ["lavender", "coconut"]},
    }
    base.update(kw)
    base.setdefault("name", base["Title"])
    return base


def goal(**kw):
    base = {
        "query": "shampoo",
        "product_category": PATH,
        "name": "Luvora Sulfate Free Argan Oil Shampoo",
        "attributes": ["sulfate free", "argan oil"],
        "goal_options": {"size": "8 fl oz", "scent": "lavender"},
        "price_upper": 20.0,
    }
    base.update(kw)
    return base


# -- the formula ---------------------------------------------------------------------------------
def test_perfect_purchase_scores_one():
    r = compute_reward(product(), goal(), 12.99, {"size": "8 fl oz", "scent": "lavender"})
    # (2 attributes + 2 options + 1 price) / (2 + 2 + 1), r_type 1
    assert r.total == 1.0 and r.r_type == 1.0
    assert (r.attribute_matches, r.option_matches, r.price_ok) == (2, 2, True)


def test_each_term_counts_one_over_the_denominator():
    # wrong scent: (2 + 1 + 1) / 5
    r = compute_reward(product(), goal(), 12.99, {"size": "8 fl oz", "scent": "coconut"})
    assert r.total == pytest.approx(4 / 5)
    # no option chosen: (2 + 0 + 1) / 5
    assert compute_reward(product(), goal(), 12.99, {}).total == pytest.approx(3 / 5)
    # over budget: (2 + 2 + 0) / 5
    r = compute_reward(
        product(), goal(price_upper=10.0), 12.99, {"size": "8 fl oz", "scent": "lavender"}
    )
    assert r.total == pytest.approx(4 / 5) and not r.price_ok
    # a goal attribute the product lacks (not in its attributes nor its text): (1 + 2 + 1) / 5
    lacking = product(
        Attributes=["sulfate free"],
        Title="Luvora Sulfate Free Shampoo",
        name="Luvora Sulfate Free Argan Oil Shampoo",
    )
    r = compute_reward(lacking, goal(), 12.99, {"size": "8 fl oz", "scent": "lavender"})
    assert r.attribute_matches == 1 and r.total == pytest.approx(4 / 5)


def test_price_equal_to_the_ceiling_is_within_budget():
    r = compute_reward(
        product(), goal(price_upper=12.99), 12.99, {"size": "8 fl oz", "scent": "lavender"}
    )
    assert r.price_ok and r.total == 1.0


def test_goal_without_options_or_attributes_matched():
    # (0 attributes of 1 + 0 options + 1 price) / (1 + 0 + 1) = 0.5
    g = goal(attributes=["tea tree"], goal_options={})
    r = compute_reward(product(), g, 12.99, {})
    assert r.total == pytest.approx(0.5)


def test_r_type_multiplies_the_sum():
    # different type (query, category path and title all differ): title overlap 0 -> r_type 0
    other = product(
        name="Kaproqu Wood Slats Bed Frame",
        Title="Kaproqu Wood Slats Bed Frame",
        query="queen bed frame",
        product_category="Home & Kitchen › Furniture › Beds",
    )
    r = compute_reward(other, goal(), 12.99, {})
    assert r.r_type == 0.0 and r.total == 0.0


# -- r_type --------------------------------------------------------------------------------------
def test_type_reward_exact_match():
    assert type_reward(product(), goal()) == (1.0, True, True, 1.0)


def test_type_reward_category_match_needs_two_shared_levels_in_any_order():
    g = goal(query="q1", product_category="a › b › c")
    assert type_reward(product(query="q2", product_category="b › c › a"), g)[2] is True
    assert type_reward(product(query="q2", product_category="a › d › b"), g)[2] is True
    assert type_reward(product(query="q2", product_category="a › a › d"), g)[2] is False


def test_type_reward_thresholds():
    # desired content words: {luvora, sulfate, free, argan, oil, shampoo} (6)
    g = goal(query="q1", product_category="x › y › z")
    far = dict(query="q2", product_category="u › v › w")
    # 2 of 6 shared (shampoo, oil) -> 0.333 > 0.2 -> r_type 1 without query/category match
    r = type_reward(product(name="Other Coconut Oil Shampoo", **far), g)
    assert r[3] == pytest.approx(2 / 6) and r[0] == 1.0
    # 1 of 6 shared -> 0.167: no query, category or title match -> 0.5
    r = type_reward(product(name="Coconut Shampoo Bar", **far), g)
    assert r[3] == pytest.approx(1 / 6) and r[0] == 0.5
    # 1 of 11 shared -> 0.0909 < 0.1 -> 0.1, even when the query matches
    g11 = goal(name="Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa Shampoo")
    assert len(content_words(g11["name"])) == 11
    r = type_reward(product(name="Coconut Shampoo Bar"), g11)
    assert r[3] == pytest.approx(1 / 11) and r[0] == 0.1
    # nothing shared -> 0
    assert type_reward(product(name="Wooden Bookshelf"), goal())[0] == 0.0


def test_type_reward_title_without_content_words_counts_0_2():
    r = type_reward(product(name="Anything"), goal(name="the best one"))
    assert r[3] == 0.2 and r[0] == 1.0  # query matches; 0.2 is neither < 0.1 nor 0


# -- attributes ----------------------------------------------------------------------------------
def test_attribute_fuzzy_match_and_text_fallback():
    goal_attrs = ["tea tree", "essential oils", "natural ingredients"]
    p = product(Attributes=["tea tree", "essential oil", "natural ingredients"])
    assert attribute_matches(p, goal_attrs) == 3  # "essential oil" ~ "essential oils" (ratio 96)
    p = product(
        Attributes=[],
        Title="",
        BulletPoints=["This shampoo has essential oils"],
        Description="made with natural ingredients",
    )
    assert attribute_matches(p, goal_attrs) == 2  # found in features and description
    p = product(
        Attributes=["tea bag", "earl gray"],
        Title="English tea",
        BulletPoints=["Soothing"],
        Description="Best tea",
    )
    assert attribute_matches(p, goal_attrs) == 0


# -- options -------------------------------------------------------------------------------------
def test_option_matches_exact_partial_fuzzy_and_colour_normalised():
    assert option_matches(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) == 3
    assert option_matches(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"]) == 2
    assert (
        option_matches(
            ["pack of 12", "powder snow", "XL"], ["cool powder snow", "XL", "pack of 12"]
        )
        == 3
    )
    # both normalise to "blue" (the first colour word contained), as in the reference
    assert (
        normalize_color("navy blue") == "blue"
        and option_matches(["light blue"], ["navy blue"]) == 1
    )
    assert option_matches(["goal 1"], []) == 0


# -- text ----------------------------------------------------------------------------------------
def test_search_tokens_drop_lucene_stop_words_and_stem():
    assert search_tokens("The Running Shoes for Men, with Arch-Support!") == [
        "run",
        "shoe",
        "men",
        "arch",
        "support",
    ]


@settings(max_examples=200, deadline=None)
@given(
    attrs=st.lists(
        st.sampled_from(["sulfate free", "argan oil", "dry hair", "tea tree", "vegan"]), max_size=3
    ),
    opts=st.dictionaries(
        st.sampled_from(["size", "scent"]),
        st.sampled_from(["8 fl oz", "lavender", "coconut", "x"]),
        max_size=2,
    ),
    chosen=st.dictionaries(
        st.sampled_from(["size", "scent"]),
        st.sampled_from(["8 fl oz", "lavender", "coconut"]),
        max_size=2,
    ),
    price=st.floats(0, 100),
    ceiling=st.floats(0, 100),
    name=st.sampled_from(["Luvora Argan Oil Shampoo", "Wooden Bookshelf", "Shampoo", ""]),
)
def test_reward_lies_in_unit_interval_and_matches_the_formula(
    attrs, opts, chosen, price, ceiling, name
):
    g = goal(attributes=attrs, goal_options=opts, price_upper=ceiling)
    r = compute_reward(product(name=name), g, price, chosen)
    assert 0.0 <= r.total <= 1.0
    expected = (
        r.r_type
        * (r.attribute_matches + r.option_matches + (price <= ceiling))
        / (len(attrs) + len(opts) + 1)
    )
    assert math.isclose(r.total, expected)


# -- reward settings: the reference's option rule, the type words -----------------------------------


def test_options_match_original_compares_name_value_pairs_as_the_reference():
    from agentrl.envs.webshop.reward import goal_option_items

    dict_goal = {"color": "black | white", "size": "large"}
    assert goal_option_items(dict_goal, "value") == ["black | white", "large"]
    assert goal_option_items(dict_goal, "original") == [
        ("color", "black | white"),
        ("size", "large"),
    ]
    # By value: 'black | white' normalises to 'black', which 'white' does not match.
    assert option_matches(["white", "large"], goal_option_items(dict_goal, "value")) == 1
    # The reference: str(('color', 'black | white')) -> 'color black white'; 'white' is a subset
    # of its tokens, token_set_ratio 100 > 85: it matches.
    assert (
        option_matches(["white", "large"], goal_option_items(dict_goal, "original"), "original")
        == 2
    )
    # Colour normalisation touches a pair only when an element *is* a colour word.
    assert option_matches(["bright red"], [("color", "red")], "original") == 1
    # thefuzz's force_ascii drops U+0080..U+00FF: 'café' -> 'caf', ratio('caf', 'cafe') = 85.7.
    assert option_matches(["cafe"], ["café"], "original") == 1
    assert option_matches(["cafe"], ["café"], "value") == 0
    # human goals (lists) are compared by value under both rules
    assert goal_option_items(["16 fl oz"], "original") == ["16 fl oz"]


def test_compute_reward_with_the_original_option_rule():
    from agentrl.envs.webshop.reward import RewardSettings

    g = goal(goal_options={"color": "black | white"})
    p = product(options={"color": ["black | white", "white"]})
    ours = compute_reward(p, g, 12.99, {"color": "white"})
    orig = compute_reward(
        p, g, 12.99, {"color": "white"}, RewardSettings("content_words", "original")
    )
    assert (ours.option_matches, orig.option_matches) == (0, 1)
    assert orig.options_match == "original" and orig.as_dict()["type_words"] == "content_words"


def test_reward_settings_are_checked_and_report_the_type_words_used():
    from agentrl.envs.webshop.reward import SPACY_MODELS, RewardSettings, _find_spacy_model

    with pytest.raises(ValueError, match="options_match must be 'value' or 'original'"):
        RewardSettings(options_match="pairs")
    with pytest.raises(ValueError, match="unknown reward option"):
        RewardSettings.from_dict({"option_match": "original"})
    model = _find_spacy_model()
    auto = RewardSettings()
    if model is None:  # this machine: spaCy without an English pipeline
        assert auto.type_words_used == "content_words"
        with pytest.raises(ValueError, match="needs spaCy and an English pipeline"):
            RewardSettings(type_words="spacy")
    else:
        assert auto.type_words_used == f"spacy:{model}" and model in SPACY_MODELS
    assert RewardSettings(type_words="content_words").type_words_used == "content_words"


def test_type_reward_counts_overlap_over_the_goal_word_list():
    # The reference divides by the goal's noun *list* (repeats count); any word function plugs in.
    def words(title):
        return [w for w in title.lower().split() if w != "the"]

    g = goal(name="Shampoo Shampoo Bar", query="q9", product_category="x › y")
    r = type_reward(product(name="Shampoo Soap", query="q1", product_category="a › b"), g, words)
    assert r[3] == pytest.approx(1 / 3) and r[0] == 1.0


def test_env_takes_reward_settings_and_reports_them(tmp_path):
    from agentrl.envs.webshop import WebShopEnv

    with pytest.raises(ValueError, match="unknown reward option"):
        WebShopEnv(
            num_products=50, num_goals=4, test_size=2, cache_dir=str(tmp_path), reward={"x": 1}
        )
    env = WebShopEnv(
        num_products=50,
        num_goals=4,
        test_size=2,
        cache_dir=str(tmp_path),
        reward={"options_match": "original", "type_words": "content_words"},
    )
    env.reset(options={"task_id": "0"})
    for _ in range(15):
        _, _, term, trunc, info = env.step(env.expert_action())
        if term or trunc:
            break
    assert info["reward_info"]["options_match"] == "original"
    assert info["reward_info"]["type_words"] == "content_words" and info["won"]
