"""WebShop data: the seeded generator, the catalogue store, search, and the original-file loader."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from agentrl.envs.webshop import (
    CatalogueError,
    WebShopEnv,
    generated_catalogue,
    load_original,
    original_catalogue,
)
from agentrl.envs.webshop.generate import generate_goal, generate_product, make_asin
from agentrl.envs.webshop.reward import FUZZY_THRESHOLD, _fuzzy, attribute_matches, compute_reward
from agentrl.envs.webshop.store import ensure_catalogue
from agentrl.envs.webshop.vocab import CATEGORIES, PRODUCT_TYPES


# -- generator -----------------------------------------------------------------------------------
def test_products_are_a_pure_function_of_seed_and_index():
    assert generate_product(3, 17) == generate_product(3, 17)
    assert generate_product(3, 17) != generate_product(4, 17)
    asins = {make_asin(0, i) for i in range(20_000)}
    assert len(asins) == 20_000 and all(len(a) == 10 and a.startswith("B0") for a in asins)


def test_every_category_and_field_is_generated():
    products = [generate_product(0, i) for i in range(400)]
    assert {p["category"] for p in products} == set(CATEGORIES)
    for p in products:
        assert p["Title"] and p["Description"] and p["BulletPoints"] and p["Attributes"]
        assert p["Price"] == f"${p['price']:.2f}" and p["price"] > 0
        assert p["Rating"] == "N.A." if not p["Reviews"] else 1.0 <= float(p["Rating"]) <= 5.0
        values = [v for vs in p["options"].values() for v in vs]
        assert len(values) == len(set(values))  # option values are unique within a product


def test_attributes_of_a_type_never_match_each_other():
    for t in PRODUCT_TYPES:
        for a, b in itertools.combinations(t.attributes, 2):
            assert _fuzzy(a, b) <= FUZZY_THRESHOLD, (t.noun, a, b)
            assert a not in b and b not in a, (t.noun, a, b)


def test_a_product_only_matches_its_own_attributes():
    for i in range(300):
        p = generate_product(1, i)
        t = next(t for t in PRODUCT_TYPES if t.query == p["query"])
        others = [a for a in t.attributes if a not in p["Attributes"]]
        assert attribute_matches(p, others) == 0, (p["Title"], others)


def test_goals_describe_their_product_and_its_purchase_scores_one():
    for j in range(200):
        g = generate_goal(0, j, 500)
        p = generate_product(0, g["product_index"])
        assert g["asin"] == p["asin"] and set(g["attributes"]) <= set(p["Attributes"])
        assert set(g["goal_options"]) == set(p["options"])
        assert all(v in p["options"][k] for k, v in g["goal_options"].items())
        assert p["price"] < g["price_upper"]
        assert f"price lower than {g['price_upper']:.2f} dollars" in g["instruction_text"]
        assert compute_reward(p, g, p["price"], g["goal_options"]).total == 1.0


def test_price_ceiling_follows_the_reference_rule():
    # two of the first four multiples of 10 above the price, the larger one kept: 30, 40 or 50
    ceilings = {
        generate_goal(0, j, 500)["price_upper"]
        - generate_product(0, generate_goal(0, j, 500)["product_index"])["price"]
        for j in range(50)
    }
    assert all(0 < c <= 50 for c in ceilings)


# -- store, split, search ------------------------------------------------------------------------
def test_catalogue_is_built_once_and_is_a_prefix_of_a_larger_one(tmp_path):
    small = generated_catalogue(100, seed=5, cache_dir=tmp_path)
    again = generated_catalogue(100, seed=5, cache_dir=tmp_path)
    assert small is again
    big = generated_catalogue(300, seed=5, cache_dir=tmp_path)
    assert [small.product(i) for i in range(100)] == [big.product(i) for i in range(100)]
    assert (small.num_products, small.num_goals, small.num_test) == (100, 2000, 500)


def test_ensure_catalogue_does_not_rebuild_an_existing_one(tmp_path):
    generated_catalogue(100, seed=6, cache_dir=tmp_path)
    path = next(p for p in tmp_path.iterdir() if p.is_dir())
    calls = []
    cat = ensure_catalogue(path, calls.append)
    assert calls == [] and cat.num_products == 100


def test_search_ranks_an_exact_title_first(tmp_path):
    cat = generated_catalogue(300, seed=0, cache_dir=tmp_path)
    hits = [cat.search(cat.product(i)["Title"])[0] for i in range(0, 300, 7)]
    assert sum(h == i for h, i in zip(hits, range(0, 300, 7))) >= 0.95 * len(hits)
    assert cat.search("zzqx qqzz") == [] and cat.search("") == []
    assert len(cat.search("quality")) == 50


def test_bad_settings_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="num_products"):
        generated_catalogue(0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="max_steps"):
        WebShopEnv(num_products=100, cache_dir=tmp_path, max_steps=0)
    with pytest.raises(FileNotFoundError, match="product_file"):
        WebShopEnv(product_file=str(tmp_path / "missing.json"), cache_dir=tmp_path)


# -- the reference's files -----------------------------------------------------------------------
def raw_item(asin, name, query, category="beauty", pricing="$12.99", options=None):
    return {
        "asin": asin,
        "name": name,
        "full_description": f"All about {name}.",
        "small_description": [f"{name} feature one", "feature two"],
        "pricing": pricing,
        "images": ["https://example.invalid/a.jpg"],
        "product_category": "Beauty & Personal Care › Hair Care › Shampoos",
        "query": query.upper() + " ",
        "category": category,
        "customization_options": options,
        "brand": "Acme",
        "average_rating": "",
    }


@pytest.fixture
def original_files(tmp_path):
    items = [
        raw_item(
            "B000000001",
            "Acme Tea Tree Shampoo",
            "shampoo",
            options={
                "Size": [{"value": "8 fl oz", "image": None}, {"value": "16 fl oz", "image": None}],
                "Color": [{"value": "Navy/Blue", "image": "x"}],
                "Scent": None,
            },
        ),
        raw_item(
            "B000000002", "Acme Argan Oil Conditioner", "conditioner", pricing="$10.00 - $20.00"
        ),
        raw_item("nan", "skipped", "x"),
        raw_item("B0000000010000", "skipped: id too long", "x"),
        raw_item("B000000001", "skipped: duplicate", "x"),
        raw_item("B000000003", "Acme Body Lotion", "body lotion", pricing=""),
    ]
    ins = {
        "B000000001": {
            "attributes": ["tea tree", "sulfate free"],
            "instruction": "i want a tea tree shampoo",
            "instruction_attributes": ["tea tree"],
        },
        "B000000002": {
            "attributes": ["argan oil"],
            "instruction": "i need argan oil conditioner",
            "instruction_attributes": ["argan oil"],
        },
    }
    human = {
        "B000000001": [
            {
                "asin": "B000000001",
                "instruction": "i need a sulfate free tea tree shampoo in 16 fl oz.",
                "instruction_attributes": ["tea tree", "sulfate free"],
                "instruction_options": ["16 fl oz", "navy blue"],
            },
            {
                "asin": "B000000001",
                "instruction": "no attributes: skipped",
                "instruction_attributes": [],
                "instruction_options": [],
            },
        ],
        "B000000003": [
            {
                "asin": "B000000003",
                "instruction": "body lotion please",
                "instruction_attributes": ["lotion"],
                "instruction_options": [],
            },
        ],
    }
    paths = {}
    for name, data in (
        ("items_shuffle_1000.json", items),
        ("items_ins_v2_1000.json", ins),
        ("items_human_ins.json", human),
    ):
        paths[name] = tmp_path / name
        paths[name].write_text(json.dumps(data))
    return (
        paths["items_shuffle_1000.json"],
        paths["items_ins_v2_1000.json"],
        paths["items_human_ins.json"],
    )


def test_loader_reads_products_as_the_reference(original_files):
    products, goals = load_original(*original_files)
    assert [p["asin"] for p in products] == ["B000000001", "B000000002", "B000000003"]
    p1, p2, p3 = products
    assert p1["Title"] == "Acme Tea Tree Shampoo" and p1["query"] == "shampoo"
    assert p1["options"] == {"size": ["8 fl oz", "16 fl oz"], "color": ["navy | blue"]}
    assert p1["Attributes"] == ["tea tree", "sulfate free"] and p3["Attributes"] == ["DUMMY_ATTR"]
    assert p1["BulletPoints"][0] == "Acme Tea Tree Shampoo feature one" and p1["Rating"] == "N.A."
    assert (p1["Price"], p1["price"]) == ("$12.99", 12.99)
    assert p2["Price"] == "$10.0 to $20.0" and 10.0 <= p2["price"] <= 20.0
    assert (p3["Price"], p3["price"]) == ("$100.0", 100.0)


def test_loader_builds_human_goals_in_the_reference_order(original_files):
    _, goals = load_original(*original_files)
    assert len(goals) == 2  # the instruction without attributes is skipped
    unshuffled = ["B000000001", "B000000003"]
    random.seed(233)  # the reference: random.seed(233); random.shuffle(goals)
    random.shuffle(unshuffled)
    assert [g["asin"] for g in goals] == unshuffled
    g = next(g for g in goals if g["asin"] == "B000000001")
    assert g["instruction_text"].startswith(
        "i need a sulfate free tea tree shampoo in 16 fl oz, and price lower than"
    )
    assert g["price_upper"] in (30.0, 40.0, 50.0) and g["goal_options"] == ["16 fl oz", "navy blue"]


def test_loader_builds_synthetic_goals_per_option_combination(original_files):
    products, goals = load_original(*original_files, human_goals=False)
    texts = sorted(g["instruction_text"] for g in goals)
    assert len(goals) == 3  # 2 option combinations of B000000001 + 1 goal for B000000002
    assert any(
        t.startswith("i want a tea tree shampoo with color: navy | blue, and size: 16 fl oz")
        for t in texts
    )


def test_env_plays_the_original_files_and_the_expert_wins(original_files, tmp_path):
    env = WebShopEnv(
        product_file=str(original_files[0]),
        attribute_file=str(original_files[1]),
        human_instruction_file=str(original_files[2]),
        cache_dir=str(tmp_path / "cache"),
    )
    assert env.task_ids("test") == ["0"] and env.task_ids("train") == ["1"]
    for tid in ("0", "1"):
        env.reset(options={"task_id": tid})
        for _ in range(15):
            _, reward, term, trunc, info = env.step(env.expert_action())
            if term or trunc:
                break
        assert info["won"], info.get("reward_info")


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda f: f[0].write_text("[{not json"), r"items_shuffle_1000.json: not valid JSON"),
        (lambda f: f[0].write_text('{"a": 1}'), r"items_shuffle_1000.json: expected a JSON list"),
        (
            lambda f: f[0].write_text(
                json.dumps([raw_item("B1", "ok", "q"), {"asin": "B2", "query": "q"}])
            ),
            r"items_shuffle_1000.json: record 1 \(asin 'B2'\): missing or non-string 'name'",
        ),
        (
            lambda f: f[0].write_text(json.dumps([raw_item("B1", "ok", "q", pricing="$abc")])),
            r"record 0 \(asin 'B1'\): cannot parse 'pricing'",
        ),
        (
            lambda f: f[0].write_text(
                json.dumps([raw_item("B1", "ok", "q", options={"Size": "big"})])
            ),
            r"record 0 \(asin 'B1'\): option 'Size' must be a list",
        ),
        (
            lambda f: f[2].write_text(
                json.dumps({"B000000001": [{"instruction_attributes": ["x"]}]})
            ),
            r"items_human_ins.json: record 'B000000001', instruction 0: missing 'instruction'",
        ),
        (lambda f: f[1].unlink(), r"items_ins_v2_1000.json: file not found"),
        (
            lambda f: f[2].write_text("{}"),
            r"items_human_ins.json: no usable instruction for any of the 3 products",
        ),
    ],
)
def test_malformed_files_name_the_file_and_the_record(original_files, tmp_path, break_it, message):
    break_it(original_files)
    with pytest.raises(CatalogueError, match=message):
        original_catalogue(*original_files, cache_dir=tmp_path / "cache")
